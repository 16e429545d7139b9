"""Applying a primitive: :func:`bind` runs it eagerly or records it into the active trace.

Every ``op.*`` function is a thin, documented wrapper around ``bind(PRIMITIVE, *operands,
**attributes)``. ``bind``

1. captures the user's source line (the first stack frame outside ``tessera_ref``);
2. checks the attributes against the primitive's schema;
3. turns operands into typed values — :class:`~tessera_ref.ops.values.Array` and NumPy data
   as they are, Python scalars by the weak-typing rule of :mod:`~tessera_ref.ops.values`;
4. infers the result types (errors name the line and every operand type);
5. eagerly: runs the op on the current backend (``impl`` on ``interp``) and returns Arrays; while tracing (some operand is a
   :class:`~tessera_ref.ops.values.Tracer`, or a trace is active): appends the op to the
   trace and returns Tracers.
"""
from __future__ import annotations

from .. import context
from ..errors import user_location
from ..ir.types import ElementKind
from .pricing import price
from .primitive import Call, Primitive
from .values import Array, Tracer, asarray, current_trace, is_weak_scalar

__all__ = ["bind", "weak_policy", "register_dispatch"]

#: Value types executed elsewhere: ``{type: apply(prim, operands, attrs, location)}``. The mesh
#: registers :class:`~tessera_ref.dist.DistTensor` here, so ops on distributed tensors run by
#: their sharding rules (imports flow downward: ops does not import dist).
_DISPATCH: dict = {}


_TRACE_HOOK: list = []


def register_dispatch(value_type: type, apply, trace_apply=None) -> None:
    """Route ops with an operand of ``value_type`` to ``apply``; while tracing, ops with an
    operand whose type has a layout go to ``trace_apply(prim, trace, values, attrs, location)``."""
    _DISPATCH[value_type] = apply
    if trace_apply is not None:
        _TRACE_HOOK[:] = [trace_apply]


def weak_policy(operands):
    """The policy Python scalars among ``operands`` take: the first numeric tensor operand's,
    else the first integer tensor's kind (GRAPH-TYPE-2, GRAPH-TYPE-4)."""
    ints = None
    for x in operands:
        if isinstance(x, (Array, Tracer)) or hasattr(x, "layout"):
            element = x.type.policy
        elif not is_weak_scalar(x) and not isinstance(x, bool):
            element = asarray(x).type.policy
        else:
            continue
        if not isinstance(element, ElementKind):
            return element
        if ints is None and element.is_int:
            ints = element
    return ints


def bind(prim: Primitive, *operands, **attrs):
    """Apply ``prim`` to ``operands`` with ``attrs``: one result, or a tuple of results."""
    location = user_location()
    attrs = prim.check_attrs(attrs)
    if _DISPATCH:
        for x in operands:
            apply = _DISPATCH.get(type(x))
            if apply is not None:
                return apply(prim, operands, attrs, location)
    trace = next((x.trace for x in operands if isinstance(x, Tracer)), None) or current_trace()
    weak = weak_policy(operands)
    if trace is None:
        arrays = [asarray(x, weak=weak) for x in operands]
        in_types = tuple(a.type for a in arrays)
        out_types = prim.infer_types(attrs, in_types, location)
        call = Call(prim, attrs, in_types, out_types, location)
        values = context.backend().run_op(call, *[a.data for a in arrays])
        price(call)
        results = [Array(v, t) for v, t in zip(values, out_types)]
    else:
        values = [trace.value_of(x, weak) for x in operands]
        in_types = tuple(v.type for v in values)
        if _TRACE_HOOK and any(getattr(t, "layout", None) is not None for t in in_types):
            return _TRACE_HOOK[0](prim, trace, values, attrs, location)
        out_types = prim.infer_types(attrs, in_types, location)
        op = trace.emit(prim.ir_name, values, out_types, attrs, location)
        results = [Tracer(r, trace) for r in op.results]
    return results[0] if len(results) == 1 else tuple(results)
