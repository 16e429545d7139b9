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
from typing import NamedTuple

from ..dist.tensor import local_shape
from ..errors import AutodiffError
from ..numerics.packing import packed_nbytes

__all__ = ["communication_plan", "collectives", "CommunicationPlan", "PlannedCollective"]

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


class PlannedCollective(NamedTuple):
    """One collective of a derivative: its kind, mesh axis, operand type, bytes each device
    sends and the source line it came from."""

    kind: str
    axis: str
    type: object
    bytes_per_device: int
    location: str | None


def _bytes_per_axis(calls) -> dict:
    per_axis: dict = {}
    for c in calls:
        per_axis[c.axis] = per_axis.get(c.axis, 0) + c.bytes_per_device
    return per_axis


class CommunicationPlan(str):
    """The plan of :func:`communication_plan`: the text it prints (a ``str``, as before), with
    the numbers as attributes — ``collectives`` (:class:`PlannedCollective` s in program order),
    ``bytes_per_axis`` (``{axis: bytes per device}``), ``local_slices`` and ``mesh`` (None on
    one device) — and :meth:`as_dict`, its JSON form."""

    collectives: tuple
    bytes_per_axis: dict
    local_slices: int
    mesh: object

    def __new__(cls, text: str, mesh, collectives=(), local_slices: int = 0):
        plan = super().__new__(cls, text)
        plan.mesh, plan.collectives, plan.local_slices = mesh, tuple(collectives), local_slices
        plan.bytes_per_axis = _bytes_per_axis(plan.collectives)
        return plan

    def as_dict(self) -> dict:
        """Plain numbers and strings: the mesh's axes and sizes, each collective, the bytes per axis."""
        mesh = None if self.mesh is None else dict(zip(self.mesh.axes, self.mesh.shape))
        return {"mesh": mesh, "collectives": [{"kind": c.kind, "axis": c.axis, "type": str(c.type),
                                               "bytes_per_device": c.bytes_per_device, "location": c.location}
                                              for c in self.collectives],
                "bytes_per_axis": dict(sorted(self.bytes_per_axis.items())), "local_slices": self.local_slices}


def communication_plan(transformed) -> CommunicationPlan:
    """The derivative's collectives of ``transformed`` (a ``grad``/``value_and_grad`` function or
    a ``vjp`` pullback, after a call on distributed tensors): a :class:`CommunicationPlan`, whose
    text has one line per collective, then the bytes per device by mesh axis."""
    program = getattr(transformed, "program", transformed)
    if program is None or not hasattr(program, "derivative_ops"):
        raise AutodiffError(f"communication_plan needs a transformed function that has run, got {transformed!r}",
                            fix="call the grad/vjp function once on distributed tensors first")
    if program.mesh is None:
        return CommunicationPlan("the derivative runs on one device: no communication", None)
    *calls, (_, _, _, _, slices) = collectives(program)
    calls = [PlannedCollective(*c) for c in calls]
    lines = [f"backward communication plan on {program.mesh!r}:"]
    for kind, axis, t, nbytes, location in calls:
        lines.append(f"  {kind:<18} over {axis:<4} {str(t):<58} {nbytes:>14,} B per device   at {location}")
    if not calls:
        lines.append("  (no collectives)")
    if slices:
        lines.append(f"  {slices} local slice(s) (shard_slice): no communication")
    total = ", ".join(f"{axis}: {n:,} B" for axis, n in sorted(_bytes_per_axis(calls).items()))
    lines.append(f"bytes per device by mesh axis: {total or 'none'}")
    return CommunicationPlan("\n".join(lines), program.mesh, calls, slices)
