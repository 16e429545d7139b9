"""The communication plan of a derivative (AD-MESH-3): its collectives and their bytes.

:func:`communication_plan` lists, in program order, every collective op that a transform's
derivative pass recorded (the backward pass of ``grad``, ``value_and_grad`` or a ``vjp``
pullback):
the collective, its mesh axis, the operand type and the bytes each device sends, as the
simulated machine counts them (MESH-COLL: the local block for all_reduce, reduce_scatter,
all_to_all and permute; the gathered block for all_gather) — then the bytes per mesh axis.
Local slices (``shard_slice``) move nothing and are counted apart.
"""
from __future__ import annotations

import math

from ..dist.tensor import local_shape
from ..errors import AutodiffError
from ..numerics.packing import packed_nbytes

__all__ = ["communication_plan", "collectives"]

_MOVING = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "collective_permute")


def _local_bytes(t, mesh) -> int:
    n = math.prod(local_shape(t.shape, t.layout, mesh))
    kind = t.element_kind
    return n * kind.bits // 8 if kind is not None else packed_nbytes(n, t.format)


def collectives(program) -> list:
    """``(kind, axis, operand type, bytes per device, location)`` for each collective of the
    derivative of ``program`` (a :class:`~tessera_ref.autodiff.tracing.Program`), and the
    number of local slices as a last ``("shard_slice", None, None, 0, count)`` entry."""
    mesh = program.mesh
    out, slices = [], 0
    for op in program.func.regions[0].blocks[0]:
        if id(op) not in program.derivative_ops:
            continue
        kind = op.name.rsplit(".", 1)[-1]
        if kind == "shard_slice":
            slices += 1
        if kind not in _MOVING:
            continue
        axes = op.attributes["axis"]
        axis = "+".join(axes) if isinstance(axes, tuple) else axes
        t = op.operands[0].type
        nbytes = _local_bytes(t, mesh)
        if kind == "all_gather":
            nbytes *= mesh.axis_size(axis)
        out.append((kind, axis, t, nbytes, op.location))
    return out + [("shard_slice", None, None, 0, slices)]


def communication_plan(transformed) -> str:
    """The derivative's collectives of ``transformed`` (a ``grad``/``value_and_grad`` function or
    a ``vjp`` pullback, after a call on distributed tensors) as text, one line per
    collective, then the bytes per device by mesh axis."""
    program = getattr(transformed, "program", transformed)
    if program is None or not hasattr(program, "derivative_ops"):
        raise AutodiffError(f"communication_plan needs a transformed function that has run, got {transformed!r}",
                            fix="call the grad/vjp function once on distributed tensors first")
    if program.mesh is None:
        return "the derivative runs on one device: no communication"
    *calls, (_, _, _, _, slices) = collectives(program)
    lines = [f"backward communication plan on {program.mesh!r}:"]
    per_axis: dict = {}
    for kind, axis, t, nbytes, location in calls:
        lines.append(f"  {kind:<18} over {axis:<4} {str(t):<58} {nbytes:>14,} B per device   at {location}")
        per_axis[axis] = per_axis.get(axis, 0) + nbytes
    if not calls:
        lines.append("  (no collectives)")
    if slices:
        lines.append(f"  {slices} local slice(s) (shard_slice): no communication")
    total = ", ".join(f"{axis}: {n:,} B" for axis, n in sorted(per_axis.items()))
    lines.append(f"bytes per device by mesh axis: {total or 'none'}")
    return "\n".join(lines)
