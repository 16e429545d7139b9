"""Running a sharded Graph IR function on the simulated mesh (MESH-SHARD-2).

A function traced with distributed arguments carries layouts in its types and collective ops
where its ops needed other layouts (:func:`~tessera_ref.dist.propagate.trace_apply`). The
mesh interpreter runs it op by op on :class:`~tessera_ref.dist.DistTensor` values: collective
ops move data (:mod:`tessera_ref.dist.collectives`), every other op runs by its sharding rule
(:func:`~tessera_ref.dist.propagate.apply`, which finds its operands already in place). Each
result's layout is checked against the IR type, so the text ``inspect_ir`` shows is exactly
what ran.
"""
from __future__ import annotations

from ..errors import LayoutError, OpError, running_op_at
from ..ir import FUNC, RETURN, Operation, ShardLayout, TensorType
from ..ops.primitive import Call, primitive_of
from .collectives import mailbox_scope
from .mesh import Mesh
from .propagate import apply
from .tensor import DistTensor

__all__ = ["run_sharded"]


def _constant(op: Operation, mesh: Mesh) -> DistTensor:
    prim = primitive_of(op)
    ty: TensorType = op.results[0].type
    (value,) = prim.run(Call(prim, op.attributes, (), (ty.with_layout(None),), op.location))
    layout = ty.layout or ShardLayout.replicated(ty.rank)
    return DistTensor(ty.with_layout(layout), mesh, value.reshape((1,) * mesh.ndim + value.shape))


def run_sharded(func: Operation, mesh: Mesh, *args: DistTensor) -> list:
    """Run the ``tessera.func`` ``func`` on distributed ``args`` in a :func:`mailbox_scope` of
    its own; returns DistTensors."""
    with mailbox_scope():
        return _run(func, mesh, args)


def _run(func: Operation, mesh: Mesh, args: tuple) -> list:
    if func.name != FUNC:
        raise OpError(f"run_sharded runs a '{FUNC}', got '{func.name}'", fix="pass a function op")
    block = func.regions[0].blocks[0]
    if len(args) != len(block.args):
        raise OpError(f"@{func.attributes['sym_name']} takes {len(block.args)} argument(s), got {len(args)}")
    for i, (param, value) in enumerate(zip(block.args, args)):
        if not isinstance(value, DistTensor) or value.type != param.type or value.mesh != mesh:
            got = value.type if isinstance(value, DistTensor) else type(value).__name__
            raise LayoutError(f"@{func.attributes['sym_name']} argument {i}: expected {param.type} on {mesh!r}, got {got}",
                              fix="pass distributed tensors of the traced types (or call the function again to retrace)")
    env = {id(p): a for p, a in zip(block.args, args)}
    for op in block:
        if op.name == RETURN:
            return [env[id(v)] for v in op.operands]
        prim = primitive_of(op)
        if prim is None:
            raise OpError(f"the mesh interpreter has no rule for op '{op.name}' (at {op.location or 'unknown'})")
        if prim.name == "constant":
            env[id(op.results[0])] = _constant(op, mesh)
            continue
        with running_op_at(op.location):
            out = apply(prim, [env[id(v)] for v in op.operands], dict(op.attributes), op.location)
        out = out if isinstance(out, tuple) else (out,)
        for result, value in zip(op.results, out):
            want = result.type.layout or ShardLayout.replicated(result.type.rank)
            if value.layout != want:
                raise AssertionError(f"{op.name} produced {value.type}, the IR says {result.type}")
            env[id(result)] = value
    raise OpError(f"@{func.attributes['sym_name']} has no '{RETURN}'", fix="end the body with a return")


