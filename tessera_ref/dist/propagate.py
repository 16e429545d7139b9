"""Running ops on distributed tensors (MESH-SHARD-1, MESH-SHARD-2).

``op.matmul(A, B)`` with a :class:`~tessera_ref.dist.DistTensor` operand comes here (through
:func:`tessera_ref.ops.bind.register_dispatch`):

1. every operand that is not distributed (NumPy data, a Python scalar) becomes a tensor
   replicated on the mesh (scalars keep the weak-typing rule);
2. the primitive's ``shard`` rule (:mod:`tessera_ref.ops.sharding`) names the layout each
   operand must be in and the layouts of the results;
3. each operand is moved there by :func:`~tessera_ref.dist.redistribute.redistribute` —
   the collectives the op needs are inserted here, and recorded on the simulated machine;
4. ``impl`` runs on the local blocks: once on the stacked arrays (mesh axes as leading batch
   axes) when the rule says so, else once per distinct block (replicated blocks once);
5. the results carry the rule's layouts. A sum over a split dimension leaves a pending
   partial sum; under ``reduction="exact"`` it is held exactly (an ExactAccumulator), so the
   later all_reduce rounds once and the bits equal the unsharded exact result on any mesh.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import MeshError, OpError, TraceError
from ..ir import ShardLayout, TensorType
from ..ir.redistribute import plan
from ..numerics import ExactAccumulator
from ..numerics.exactsum import exact_dot_accumulator
from ..ops.bind import bind, register_dispatch, weak_policy
from ..ops import collective as C
from ..ops.collective import MESH_ONLY
from ..ops.primitive import Call
from ..ops.sharding import planning_on
from ..ops.values import Array, Tracer, asarray, current_trace, is_weak_scalar
from .. import context
from . import events
from .redistribute import redistribute
from .tensor import DistTensor, local_shape, require_memory, stack_shape
from .world import placement

__all__ = ["apply", "rule_of"]


def _as_dist(x, mesh, weak) -> DistTensor:
    if isinstance(x, DistTensor):
        if x.mesh != mesh:
            raise MeshError(f"an op mixes tensors on different meshes: {x.mesh!r} and {mesh!r}",
                            fix="send the tensor to the other mesh (dist.send/recv) or build both on one mesh")
        return x
    a = asarray(x, weak=weak) if (is_weak_scalar(x) or not isinstance(x, Array)) else x
    local = a.data.reshape((1,) * mesh.ndim + a.data.shape)
    return DistTensor(TensorType(a.type.shape, a.type.policy, ShardLayout.replicated(a.type.rank)), mesh, local)


def _rule_type(t: TensorType) -> TensorType:
    """The operand type a sharding rule sees. Under ``reduction="exact"`` a pending sum is
    carried out (rounded once, NUM-RED-4) before an op uses it, so the op sees the value it
    sees on one device and exact sharded programs equal unsharded ones bit for bit
    (MESH-SHARD-1); the exact partial sums themselves never enter an op's ``impl``."""
    lay = t.layout
    if lay is not None and lay.partial and lay.partial_op == "sum" and getattr(t.policy, "reduction", None) == "exact":
        return t.with_layout(lay.replace(partial=()))
    return t


def _pad_rank(local: np.ndarray, m: int, rank: int) -> np.ndarray:
    """Stacked values with size-1 dimensions inserted after the mesh axes up to ``rank``."""
    extra = rank - (local.ndim - m)
    return local.reshape(local.shape[:m] + (1,) * extra + local.shape[m:]) if extra else local


def _exact_partial(prim, attrs, xs, m):
    """The exact (unrounded) local results of a sum whose reduced dimension is split."""
    if prim.name == "matmul":
        a, b = xs[0], xs[1]
        a = np.swapaxes(a, -1, -2) if attrs["transpose_a"] else a
        b = np.swapaxes(b, -1, -2) if attrs["transpose_b"] else b
        return exact_dot_accumulator(a, b, c=xs[2] if len(xs) > 2 else None)
    if prim.name == "sum":
        x = xs[0]
        axes = tuple(m + a for a in attrs["axis"])
        domain = "f64" if x.dtype == np.float64 else "f32"  # as exact_sum picks (NUM-RED-4)
        acc = ExactAccumulator(tuple(n for i, n in enumerate(x.shape) if i not in axes), domain).add(x, axis=axes)
        if attrs.get("keepdims"):
            acc = acc.reshape(tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
        return acc
    return None


def _run_local(prim, attrs, moved, out_types, plan, location):
    """The stacked local results (``None`` entries for abstract runs)."""
    mesh = moved[0].mesh
    m = mesh.ndim
    if any(x.local is None for x in moved):
        return [None] * len(out_types)
    policies = [t.policy for t in out_types]
    new_partial = [lay.partial and not any(x.layout.partial for x in moved) for lay in plan_results(plan, out_types)]
    exact_partial = new_partial[0] and getattr(policies[0], "reduction", None) == "exact"
    if plan.device_attrs is None and (plan.stacked or exact_partial):
        rank = max(x.ndim for x in moved)
        xs = [_pad_rank(x.local, m, rank) if plan.stacked else x.local for x in moved]
        if exact_partial:
            acc = _exact_partial(prim, attrs, xs, m)
            if acc is not None:
                return [acc]
        if plan.stacked:
            types = [TensorType(v.shape, x.type.policy) for v, x in zip(xs, moved)]
            local_out = prim.infer_types(attrs, tuple(types), location)
            return list(context.backend().run_op(Call(prim, attrs, tuple(types), local_out, location), *xs))
    # a partial max/min (or another op with no exact partial sum) under reduction="exact": per device
    grid = np.broadcast_shapes(*[x.local.shape[:m] for x in moved])
    local_in = tuple(TensorType(x.local.shape[m:], x.type.policy) for x in moved)
    local_out = prim.infer_types(attrs, local_in, location)
    call = Call(prim, attrs, local_in, local_out, location)
    outs = [np.empty(grid + t.shape, dtype=t.dtype) for t in local_out]
    backend = context.backend()
    start = placement(mesh).start
    for index in np.ndindex(*grid):
        args = [x.local[tuple(i if s > 1 else 0 for i, s in zip(index, x.local.shape[:m]))] for x in moved]
        if plan.device_attrs is not None:  # attributes of this device (MESH-SHARD-1)
            coords = {a: s0 + i for a, s0, i in zip(mesh.axes, start, index)}
            call = Call(prim, plan.device_attrs(attrs, coords, mesh, local_in), local_in, local_out, location)
        for out, r in zip(outs, backend.run_op(call, *args)):
            out[index] = r
    return outs


def plan_results(plan, out_types) -> tuple:
    return plan.results if plan.results is not None else tuple(ShardLayout.replicated(t.rank) for t in out_types)


def _local_types(moved) -> tuple:
    """The operands' per-device types."""
    return tuple(TensorType(local_shape(x.shape, x.layout, x.mesh), x.type.policy) for x in moved)


def _record_compute(prim, attrs, moved, out_types, layouts, location) -> tuple:
    """Tell the listeners about the op; returns the ids of the values it writes (one per
    result), or () when nobody listens."""
    if not events.listeners():
        return ()
    mesh = moved[0].mesh
    local_in = _local_types(moved)
    local_out = tuple(TensorType(local_shape(t.shape, lay, mesh), t.policy) for t, lay in zip(out_types, layouts))
    cost = prim.cost(Call(prim, attrs, local_in, local_out, location))
    wrote = tuple(events.fresh_id() for _ in out_types)
    events.compute(mesh.devices, prim.name, cost, local_out[0].format.name
                   if local_out[0].element_kind is None else "f32", location=location,
                   reads=tuple(events.value_id(x) for x in moved), writes=wrote)
    return wrote


@functools.cache
def _movers() -> dict:
    """The data movement of each collective op (MESH-COLL-*), by primitive name."""
    from . import collectives as c
    return {"all_reduce": c.all_reduce, "reduce_scatter": c.reduce_scatter, "all_gather": c.all_gather,
            "all_to_all": c.all_to_all, "collective_permute": lambda x, axis, pairs: c.permute(x, axis, list(pairs)),
            "shard_slice": c.local_slice}


def _captured(prim, trace, operands, attrs):
    """An op in a traced function on a DistTensor from outside it (a closure): a trace that can
    capture (the autodiff transforms') makes the tensor a parameter; others cannot hold it."""
    capture = getattr(trace, "capture", None)
    if capture is None:
        raise TraceError(f"{prim.name} in the traced function {trace.name!r} uses a distributed tensor that is not "
                         "an argument of it", fix="pass the tensor as an argument of the traced function")
    return bind(prim, *[capture(x) if isinstance(x, DistTensor) else x for x in operands], **attrs)


def rule_of(prim, types: tuple, attrs, location, mesh) -> tuple:
    """``(result types, the sharding rule's plan, the results' layouts)`` of ``prim`` on operands
    of ``types`` (with their layouts) on ``mesh``: what steps 2 and 5 of the module docstring
    derive, a function of the types alone (a compiled function derives it once, BACKEND-RUN-2)."""
    out_types = prim.infer_types(attrs, tuple(t.with_layout(None) for t in types), location)
    with planning_on(mesh):
        plan = prim.shard(attrs, *[_rule_type(t) for t in types])
    return out_types, plan, plan_results(plan, out_types)


def apply(prim, operands, attrs, location, static: tuple | None = None):
    """Run ``prim`` on operands of which at least one is a DistTensor (see the module docstring);
    ``static``: its :func:`rule_of`, already derived for these operands' types."""
    trace = next((x.trace for x in operands if isinstance(x, Tracer)), None)
    if trace is not None or getattr(current_trace(), "capture", None) is not None:
        return _captured(prim, trace or current_trace(), operands, attrs)
    mesh = next(x.mesh for x in operands if isinstance(x, DistTensor))
    weak = weak_policy(operands)
    values = [_as_dist(x, mesh, weak) for x in operands]
    if prim.shard is MESH_ONLY:
        return _movers()[prim.name](*values, **attrs)
    if prim.shard is None:
        raise OpError(f"{prim.name} has no sharding rule yet, so it cannot run on distributed tensors "
                      f"({', '.join(str(v.type) for v in values)})",
                      fix="gather the operands (x.numpy()) and run it on one device")
    out_types, plan, layouts = static or rule_of(prim, tuple(v.type for v in values), attrs, location, mesh)
    if plan.expand is not None:  # the op runs as other ops, each by its own rule (MESH-SHARD-1)
        return plan.expand(attrs, *values)
    moved = [redistribute(v, lay) for v, lay in zip(values, plan.operands)]
    if plan.local_attrs is not None:  # attributes that speak of global sizes, per device
        attrs = plan.local_attrs(attrs, _local_types(moved))
    require_memory([t.with_layout(lay) for t, lay in zip(out_types, layouts)], mesh, location)
    wrote = _record_compute(prim, attrs, moved, out_types, layouts, location)
    locals_ = _run_local(prim, attrs, moved, out_types, plan, location)
    results = []
    for t, lay, local in zip(out_types, layouts, locals_):
        ttype = t.with_layout(lay)
        if isinstance(local, np.ndarray):
            want = stack_shape(lay, mesh)
            lshape = local_shape(t.shape, lay, mesh)
            if local.shape[mesh.ndim:] != lshape:
                local = local.reshape(local.shape[:mesh.ndim] + lshape)
            if local.shape[:mesh.ndim] != want:  # replicated along an axis an operand varied on
                local = local[tuple(slice(None) if w > 1 else slice(0, 1) for w in want)]
            local = np.ascontiguousarray(local)
        results.append(DistTensor(ttype, mesh, local))
    for out, vid in zip(results, wrote):
        events.bind(out, vid)
    return results[0] if len(results) == 1 else tuple(results)


def _emit(trace, prim, values, out_types, attrs, location):
    op = trace.emit(prim.ir_name, values, out_types, attrs, location)
    return [Tracer(r, trace) for r in op.results]


def _collective_steps(trace, value, layout, target, location):
    """Emit the collectives of MESH-REDIST-1 that move ``value`` from ``layout`` to ``target``."""
    for kind, axis, dim in plan(layout, target):
        if kind == "all_reduce":
            prim, attrs = C.ALL_REDUCE, {"axis": (axis,), "op": layout.partial_op}
        elif kind == "reduce_scatter":
            prim, attrs = C.REDUCE_SCATTER, {"axis": axis, "dim": dim, "op": layout.partial_op}
        elif kind == "all_gather":
            prim, attrs = C.ALL_GATHER, {"axis": axis}
        elif kind == "all_to_all":
            prim, attrs = C.ALL_TO_ALL, {"axis": axis, "split_dim": dim[0], "concat_dim": dim[1]}
        else:
            prim, attrs = C.SHARD_SLICE, {"axis": axis, "dim": dim}
        out = prim.infer_types(attrs, (value.type,), location)
        (tracer,) = _emit(trace, prim, (value,), out, attrs, location)
        value, layout = tracer.value, out[0].layout
    return value


def trace_apply(prim, trace, values, attrs, location):
    """Record ``prim`` in a traced function whose operands carry layouts: the sharding
    propagation of MESH-SHARD-1 at trace time. The collectives each operand needs are emitted
    before the op (so ``inspect_ir`` shows them) and the results' types carry the rule's
    layouts. Values without a layout (constants) are whole on every device."""
    types = tuple(v.type for v in values)
    if prim.shard is MESH_ONLY:
        out = prim.infer_types(attrs, types, location)
        tracers = _emit(trace, prim, values, out, attrs, location)
        return tracers[0] if len(tracers) == 1 else tuple(tracers)
    out = prim.infer_types(attrs, tuple(t.with_layout(None) for t in types), location)
    laid = [t if t.layout is not None else t.with_layout(ShardLayout.replicated(t.rank)) for t in types]
    rule = prim.shard(attrs, *[_rule_type(t) for t in laid])
    if rule.expand is not None:
        return rule.expand(attrs, *[Tracer(v, trace) for v in values])
    moved = [_collective_steps(trace, v, t.layout, lay, location) if t.layout != lay else v
             for v, t, lay in zip(values, laid, rule.operands)]
    out = tuple(t.with_layout(lay) for t, lay in zip(out, plan_results(rule, out)))
    tracers = _emit(trace, prim, moved, out, attrs, location)
    return tracers[0] if len(tracers) == 1 else tuple(tracers)


register_dispatch(DistTensor, apply, trace_apply)
