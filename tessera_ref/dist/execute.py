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


def _laid(t: TensorType) -> TensorType:
    """A value's type as the mesh holds it: without a layout, replicated."""
    return t if t.layout is not None else t.with_layout(ShardLayout.replicated(t.rank))


def _rule(op: Operation, prim, mesh: Mesh) -> tuple:
    """``(operand types, rule)``: the types ``op``'s operands have on ``mesh`` and its
    :func:`~.propagate.rule_of` for them, derived once per op and mesh from the IR's types
    (BACKEND-RUN-2); ``TESSERA_CHECK_PLAN=1`` derives the rule again at every run and compares."""
    with _LOCK:
        hit = _RULES.get(op, {}).get(mesh)
    if hit is None or os.environ.get("TESSERA_CHECK_PLAN") == "1":
        types = tuple(_laid(v.type) for v in op.operands)
        rule = None if prim.shard is None or prim.shard is MESH_ONLY else \
            rule_of(prim, types, dict(op.attributes), op.location, mesh)
        if hit is not None and rule is not None and \
                (rule[0], rule[2], rule[1].operands) != (hit[1][0], hit[1][2], hit[1][1].operands):
            raise LayoutError(f"TESSERA_CHECK_PLAN: {op.name} derives another plan at run time "
                              f"({rule[1].operands} -> {rule[2]}) than the compiled one ({hit[1][1].operands} -> "
                              f"{hit[1][2]})", location=op.location, fix="report this as a bug")
        with _LOCK:
            hit = _RULES.setdefault(op, {}).setdefault(mesh, (types, rule))
    return hit


def sharded_step(op: Operation, values: list, mesh: Mesh, call: Call | None = None) -> tuple:
    """The results of ``op`` on the DistTensors ``values`` (the mesh interpreter's step); the
    sharding rule of an op is derived once (:func:`_rule`)."""
    call = call or call_of(op)
    prim = call.primitive
    if prim.name == "constant":
        return (_constant(call, mesh),)
    types, static = _rule(op, prim, mesh)
    if static is not None and not all(isinstance(v, DistTensor) and v.type == t for v, t in zip(values, types)):
        static = None  # values of other types than the IR's: derived for them
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
