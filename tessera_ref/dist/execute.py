"""One op of a sharded Graph IR function on the simulated mesh (MESH-SHARD-2).

A function traced with distributed arguments carries layouts in its types and collective ops
where its ops needed other layouts (:func:`~tessera_ref.dist.propagate.trace_apply`). The
backends run it through the one execution loop (:func:`tessera_ref.ops.execute.evaluate`)
with :func:`sharded_step`: collective ops move data (:mod:`tessera_ref.dist.collectives`),
every other op runs by its sharding rule (:func:`~tessera_ref.dist.propagate.apply`, which
finds its operands already in place). Each result's layout is checked against the IR type,
so the text ``inspect_ir`` shows is exactly what ran.
"""
from __future__ import annotations

import os
import threading
import weakref
from dataclasses import replace

from .. import context
from ..errors import LayoutError, running_op_at
from ..ir import Operation, ShardLayout, TensorType
from ..ops.execute import call_of
from ..ops.collective import MESH_ONLY
from ..ops.primitive import Call
from .mesh import Mesh
from .propagate import apply, rule_of
from .tensor import DistTensor

__all__ = ["check_sharded_arguments", "sharded_step", "run_sharded"]


def check_sharded_arguments(func: Operation, mesh: Mesh, args) -> None:
    """A :class:`LayoutError` unless ``args`` are DistTensors of the parameter types on ``mesh``."""
    params = func.regions[0].entry.args
    name = func.attributes["sym_name"]
    if len(args) != len(params):
        raise LayoutError(f"@{name} takes {len(params)} argument(s), got {len(args)}",
                          fix="pass one distributed tensor per parameter")
    for i, (param, value) in enumerate(zip(params, args)):
        if not isinstance(value, DistTensor) or value.type != param.type or value.mesh != mesh:
            got = value.type if isinstance(value, DistTensor) else type(value).__name__
            raise LayoutError(f"@{name} argument {i}: expected {param.type} on {mesh!r}, got {got}",
                              fix="pass distributed tensors of the traced types (or call the function again to retrace)")


def _constant(call: Call, mesh: Mesh) -> DistTensor:
    ty: TensorType = call.out_types[0]
    (value,) = context.backend().run_op(replace(call, out_types=(ty.with_layout(None),)))
    layout = ty.layout or ShardLayout.replicated(ty.rank)
    return DistTensor(ty.with_layout(layout), mesh, value.reshape((1,) * mesh.ndim + value.shape))


_RULES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # op -> {mesh: rule_of(...)}
_LOCK = threading.Lock()


def _rule(op: Operation, prim, mesh: Mesh) -> tuple | None:
    """``op``'s :func:`~.propagate.rule_of` on ``mesh``, derived once per op and mesh from the IR's
    types (BACKEND-RUN-2); ``TESSERA_CHECK_PLAN=1`` derives it again at every run and compares."""
    if prim.shard is None or prim.shard is MESH_ONLY:
        return None
    with _LOCK:
        hit = _RULES.get(op, {}).get(mesh)
    if hit is None or os.environ.get("TESSERA_CHECK_PLAN") == "1":
        fresh = rule_of(prim, tuple(v.type for v in op.operands), dict(op.attributes), op.location, mesh)
        if hit is not None and (fresh[0], fresh[2], fresh[1].operands) != (hit[0], hit[2], hit[1].operands):
            raise LayoutError(f"TESSERA_CHECK_PLAN: {op.name} derives another plan at run time "
                              f"({fresh[1].operands} -> {fresh[2]}) than the compiled one ({hit[1].operands} -> "
                              f"{hit[2]})", location=op.location, fix="report this as a bug")
        with _LOCK:
            hit = _RULES.setdefault(op, {}).setdefault(mesh, fresh)
    return hit


def sharded_step(op: Operation, values: list, mesh: Mesh, call: Call | None = None) -> tuple:
    """The results of ``op`` on the DistTensors ``values`` (the mesh interpreter's step); the
    sharding rule of an op is derived once (:func:`_rule`)."""
    call = call or call_of(op)
    prim = call.primitive
    if prim.name == "constant":
        return (_constant(call, mesh),)
    static = _rule(op, prim, mesh) if all(isinstance(v, DistTensor) and v.type == t.type
                                          for v, t in zip(values, op.operands)) else None
    with running_op_at(op.location):
        out = apply(prim, values, dict(op.attributes), op.location, static)
    out = out if isinstance(out, tuple) else (out,)
    for result, value in zip(op.results, out):
        want = result.type.layout or ShardLayout.replicated(result.type.rank)
        if value.layout != want:
            raise AssertionError(f"{op.name} produced {value.type}, the IR says {result.type}")
    return out


def run_sharded(func: Operation, mesh: Mesh, *args: DistTensor) -> list:
    """Run the ``tessera.func`` ``func`` on distributed ``args`` with the current backend."""
    check_sharded_arguments(func, mesh, args)
    return context.backend().run_function(func, list(args))
