"""Elementwise arithmetic, selection and comparison ops (GRAPH-EW-*).

Arithmetic (``add sub mul div fma neg abs minimum maximum``) follows NUM-EW-1: operands of
one policy, broadcast (NumPy rules), converted exactly into the policy's ``accum`` format,
one IEEE-754 operation there, the result rounded once into storage with the policy's
rounding and overflow. ``fma`` is the single-rounding fused multiply-add (NUM-EW-2); there
is no implicit contraction, so ``a * b + c`` is two ops and two roundings. ``minimum`` and
``maximum`` are IEEE 754-2019 ``minimum``/``maximum`` (a NaN operand gives NaN; −0 < +0).

``add sub mul neg abs minimum maximum`` also take the integer kinds (``index``, ``i32``,
``ui8``), wrapping modulo 2^bits (GRAPH-EW-6). ``where(cond, a, b)`` selects without
rounding; comparisons give ``i1`` tensors with IEEE semantics (NaN is unordered: only
``not_equal`` is true; −0 == +0), integers compared exactly; the logical ops act on ``i1`` tensors.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ..errors import DTypeError
from ..ir import TensorType
from ..ir.types import BOOL, ElementKind
from ..numerics import accum_op
from ..numerics.arith import canonical_nan, to_accum
from .adjoint import constant, seed_of, sum_terms, unbroadcast
from .bind import bind
from .exact import ieee_extreme
from .primitive import NOT_DIFFERENTIABLE, define, primitive
from .sharding import elementwise_rule, linear_rule
from .values import asarray
from .typecheck import (SEED_ATTR, broadcast_shapes, broadcast_types, elementwise_cost, require_seed,
                        same_element, to_storage)

__all__ = ["add", "sub", "mul", "div", "fma", "neg", "abs", "minimum", "maximum", "where", "stop_gradient",
           "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
           "logical_and", "logical_or", "logical_not"]


#: Ops defined on the integer kinds too, wrapping modulo 2^bits (GRAPH-EW-6), by their NumPy form.
_INT_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "neg": np.negative, "abs": np.abs,
              "minimum": np.minimum, "maximum": np.maximum}


def _require_numeric(name: str, types) -> None:
    for t in types:
        if isinstance(t.policy, ElementKind) and not (t.policy.is_int and name in _INT_ARITH):
            ints = t.policy.is_int
            raise DTypeError(f"{name} computes on numbers of a format, got {t}"
                             + (f" (integers take only {', '.join(_INT_ARITH)}, GRAPH-EW-6)" if ints else ""),
                             fix="convert it with op.cast(x, 'f32')" + ("" if ints else
                                 " (an i1 mask: op.where(mask, 1.0, 0.0))"))


def arithmetic_infer(name: str):
    """``infer`` of a numeric elementwise op: one policy, broadcast shapes, a seed if stochastic."""
    def infer(attrs, *types):
        _require_numeric(name, types)
        out = broadcast_types(name, *types)
        require_seed(name, attrs, out)
        return out
    return infer


# operation in the accum format, per op: ("ieee", name of numerics op) or a NumPy function of
# accum arrays whose result is exact (sign operations, selections of an operand)
_ARITH = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "fma": "fma",
    "neg": np.negative, "abs": np.abs, "minimum": partial(ieee_extreme, op="min"),
    "maximum": partial(ieee_extreme, op="max"),
}
_FLOPS = {"fma": 2}
_ARITY = {"neg": 1, "abs": 1, "fma": 3, "logical_not": 1}  # operands; the others take 2


def _arith_impl(name: str):
    compute = _ARITH[name]

    def impl(call, *arrays):
        if isinstance(call.out_types[0].policy, ElementKind):  # integers: wrapping (GRAPH-EW-6)
            with np.errstate(over="ignore"):
                r = _INT_ARITH[name](*arrays)
            return np.broadcast_to(r, call.out_types[0].shape).astype(call.out_types[0].dtype)
        accum = call.out_types[0].policy.accum
        if isinstance(compute, str):
            r = accum_op(compute, *arrays, accum=accum)
        else:
            with np.errstate(invalid="ignore"):
                r = canonical_nan(compute(*(to_accum(a, accum) for a in arrays)))
            r = np.broadcast_to(r, call.out_types[0].shape)
        return to_storage(call, r)
    return impl


_SHARD = {"add": linear_rule("all"), "sub": linear_rule("all"), "neg": linear_rule("all"),
          "mul": linear_rule("one"), "div": linear_rule("first")}


# ---------------------------------------------------------------------------------------
# derivatives (AD-EW-1)
#
# An elementwise op's derivative with respect to operand i is the diagonal map
# ``v ↦ ∂ᵢf ⊙ v``; a *scale* is that map written with ops. Diagonal maps are their own
# transposes, so one scale per operand gives both rules: the vjp applies it to the cotangent
# and sums the result back over the operand's broadcast axes, the jvp applies it to the
# operand's tangent and adds the terms in operand order.

def elementwise_rules(scales):
    """``(vjp, jvp)`` from ``scales(attrs, primals, result) -> (scale per operand)``, each
    scale a function of a tensor (``None``: the operand has no derivative, e.g. a condition)."""
    def vjp(attrs, primals, results, cts):
        if isinstance(results[0].type.policy, ElementKind) and results[0].type.policy.is_int:
            return (None,) * len(primals)  # integer results have no derivative (GRAPH-EW-6)
        fs = scales(attrs, primals, results[0])
        return tuple(None if f is None else unbroadcast(f(cts[0]), p.shape) for f, p in zip(fs, primals))

    def jvp(attrs, primals, tangents, results):
        if isinstance(results[0].type.policy, ElementKind) and results[0].type.policy.is_int:
            return (None,)
        fs = scales(attrs, primals, results[0])
        (out,) = sum_terms([f(t) for f, t in zip(fs, tangents) if f is not None and t is not None], attrs)
        if out is not None and tuple(out.shape) != tuple(results[0].shape):
            out = bind(primitive("broadcast_to"), out, shape=tuple(results[0].shape))
        return (out,)
    return vjp, jvp


def _same(v):
    return v


def scalar(value: float, like):
    """``value`` as a 0-d constant of ``like``'s policy: rules write their constants this way,
    not as weak Python scalars, so they also run on stochastic-rounding policies (the exact
    values they use consume no random bits)."""
    policy = like.type.policy
    if isinstance(policy, ElementKind):  # complex<f32>
        return asarray(np.asarray(value, dtype=policy.dtype))
    return constant(value, policy)


def _sign_scale(x, seed: dict):
    """``v ↦ sign(x)·v`` with sign(±0) = sign(NaN) = 0: the derivative of |x| (0 at 0)."""
    zero = scalar(0.0, x)
    return lambda v: where(greater(x, zero), v, where(less(x, zero), neg(v, **seed), zero))


def _extreme_scales(pick):
    """minimum/maximum: the cotangent goes to the operand chosen, halved between equal operands."""
    def scales(attrs, primals, result):
        a, b = primals
        s, zero, half = seed_of(attrs), scalar(0.0, a), scalar(0.5, a)
        return (lambda v: where(pick(a, b), v, where(equal(a, b), mul(v, half, **s), zero)),
                lambda v: where(pick(b, a), v, where(equal(a, b), mul(v, half, **s), zero)))
    return scales


def _arith_scales(name: str):
    def scales(attrs, primals, y):
        s = seed_of(attrs)
        if name == "add":
            return _same, _same
        if name == "sub":
            return _same, lambda v: neg(v, **s)
        if name == "neg":
            return (lambda v: neg(v, **s),)
        if name == "abs":
            return (_sign_scale(primals[0], s),)
        a, b = primals[:2]
        if name == "mul":
            return (lambda v: mul(v, b, **s), lambda v: mul(v, a, **s))
        if name == "div":
            return (lambda v: div(v, b, **s), lambda v: neg(div(mul(v, y, **s), b, **s), **s))
        return (lambda v: mul(v, b, **s), lambda v: mul(v, a, **s), _same)  # fma
    return scales


_ARITH_SCALES = {"minimum": _extreme_scales(lambda p, q: less(p, q)),
                 "maximum": _extreme_scales(lambda p, q: greater(p, q))}


def _define_arith(name: str):
    vjp, jvp = elementwise_rules(_ARITH_SCALES.get(name) or _arith_scales(name))
    return define(name, infer=arithmetic_infer(name), impl=_arith_impl(name), shard=_SHARD.get(name, elementwise_rule),
                  cost=lambda call, n=_FLOPS.get(name, 1): elementwise_cost(call, n),
                  spec="GRAPH-EW-1" if name != "fma" else "GRAPH-EW-2", attrs=dict(SEED_ATTR), vjp=vjp, jvp=jvp,
                  arity=(_ARITY.get(name, 2),) * 2)


ADD, SUB, MUL, DIV, FMA, NEG, ABS, MINIMUM, MAXIMUM = (_define_arith(n) for n in _ARITH)


def add(a, b, *, seed=None):
    """``a + b`` (GRAPH-EW-1); ``seed`` keys stochastic rounding into storage."""
    return bind(ADD, a, b, seed=seed)


def sub(a, b, *, seed=None):
    """``a - b`` (GRAPH-EW-1)."""
    return bind(SUB, a, b, seed=seed)


def mul(a, b, *, seed=None):
    """``a * b`` (GRAPH-EW-1); ``mul`` then ``add`` is two roundings (no implicit contraction)."""
    return bind(MUL, a, b, seed=seed)


def div(a, b, *, seed=None):
    """``a / b`` (GRAPH-EW-1); ``x / 0`` is ±inf and ``0 / 0`` NaN, as IEEE."""
    return bind(DIV, a, b, seed=seed)


def fma(a, b, c, *, seed=None):
    """``a·b + c`` with one rounding into the accum format (GRAPH-EW-2, NUM-EW-2)."""
    return bind(FMA, a, b, c, seed=seed)


def neg(x, *, seed=None):
    """``-x`` (GRAPH-EW-1): exact; the result's sign bit is flipped, NaN stays canonical."""
    return bind(NEG, x, seed=seed)


def abs(x, *, seed=None):  # noqa: A001 - the op's name
    """``|x|`` (GRAPH-EW-1): exact."""
    return bind(ABS, x, seed=seed)


def minimum(a, b, *, seed=None):
    """IEEE 754-2019 ``minimum(a, b)`` (GRAPH-EW-1): NaN if either is NaN, ``minimum(-0, +0) = -0``."""
    return bind(MINIMUM, a, b, seed=seed)


def maximum(a, b, *, seed=None):
    """IEEE 754-2019 ``maximum(a, b)`` (GRAPH-EW-1): NaN if either is NaN, ``maximum(-0, +0) = +0``."""
    return bind(MAXIMUM, a, b, seed=seed)


# ---------------------------------------------------------------------------------------
# where

def _where_infer(attrs, cond, a, b):
    if cond.policy is not BOOL:
        raise DTypeError(f"where: the condition must be an i1 tensor, got {cond}",
                         fix="build it with a comparison, e.g. op.greater(x, 0)")
    return TensorType(broadcast_shapes("where", cond, a, b), same_element("where", a, b))


def _where_impl(call, cond, a, b):
    return np.where(cond, a, b).astype(call.out_types[0].dtype)


def _where_scales(attrs, primals, result):
    """AD-EW-2: the condition gets none; ``a`` the cotangent where it was chosen, ``b`` elsewhere."""
    cond = primals[0]
    return None, lambda v: where(cond, v, scalar(0.0, v)), lambda v: where(cond, scalar(0.0, v), v)


WHERE = define("where", infer=_where_infer, impl=_where_impl, cost=elementwise_cost, spec="GRAPH-EW-3",
               shard=elementwise_rule, **dict(zip(("vjp", "jvp"), elementwise_rules(_where_scales))))


def where(cond, a, b):
    """``a`` where ``cond`` (i1) is true, else ``b``, broadcast; values are not rounded (GRAPH-EW-3)."""
    return bind(WHERE, cond, a, b)


# ---------------------------------------------------------------------------------------
# stop_gradient

STOP_GRADIENT = define("stop_gradient", infer=lambda attrs, x: x, impl=lambda call, x: x.copy(),
                       cost=lambda call: elementwise_cost(call, 0), spec="GRAPH-STOPGRAD-1",
                       shard=linear_rule("all"), vjp=NOT_DIFFERENTIABLE, jvp=NOT_DIFFERENTIABLE)


def stop_gradient(x):
    """``x`` itself, bit for bit, whose derivative is zero: differentiation passes nothing
    through it (GRAPH-STOPGRAD-1)."""
    return bind(STOP_GRADIENT, x)


# ---------------------------------------------------------------------------------------
# comparisons and logic

_COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
            "greater": np.greater, "greater_equal": np.greater_equal}


def _compare_infer(name: str):
    def infer(attrs, a, b):
        element = same_element(name, a, b)
        if isinstance(element, ElementKind) and not element.is_int:
            raise DTypeError(f"{name} compares numbers or integers, got {a} and {b}",
                             fix="compare i1 masks with op.logical_* or op.equal on op.cast values")
        return TensorType(broadcast_shapes(name, a, b), BOOL)
    return infer


def _compare_impl(name: str):
    fn = _COMPARE[name]

    def impl(call, a, b):
        element = call.in_types[0].policy
        if not (isinstance(element, ElementKind) and element.is_int):  # exact widening; f64 holds every format
            a, b = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            return np.broadcast_to(fn(a, b), call.out_types[0].shape).copy()
    return impl


EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL = (
    define(n, infer=_compare_infer(n), impl=_compare_impl(n), cost=elementwise_cost, spec="GRAPH-EW-4",
           shard=elementwise_rule,
           vjp=NOT_DIFFERENTIABLE, jvp=NOT_DIFFERENTIABLE)
    for n in _COMPARE)


def equal(a, b):
    """``a == b`` as i1 (GRAPH-EW-4): IEEE (NaN equals nothing, −0 == +0)."""
    return bind(EQUAL, a, b)


def not_equal(a, b):
    """``a != b`` as i1 (GRAPH-EW-4): true when either is NaN."""
    return bind(NOT_EQUAL, a, b)


def less(a, b):
    """``a < b`` as i1 (GRAPH-EW-4)."""
    return bind(LESS, a, b)


def less_equal(a, b):
    """``a <= b`` as i1 (GRAPH-EW-4)."""
    return bind(LESS_EQUAL, a, b)


def greater(a, b):
    """``a > b`` as i1 (GRAPH-EW-4)."""
    return bind(GREATER, a, b)


def greater_equal(a, b):
    """``a >= b`` as i1 (GRAPH-EW-4)."""
    return bind(GREATER_EQUAL, a, b)


_LOGIC = {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_not": np.logical_not}


def _logic_infer(name: str):
    def infer(attrs, *types):
        for t in types:
            if t.policy is not BOOL:
                raise DTypeError(f"{name} needs i1 operands, got {t}",
                                 fix="make a mask with a comparison, e.g. op.not_equal(x, 0)")
        return TensorType(broadcast_shapes(name, *types), BOOL)
    return infer


def _logic_impl(name: str):
    fn = _LOGIC[name]
    return lambda call, *arrays: np.broadcast_to(fn(*arrays), call.out_types[0].shape).copy()


LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT = (
    define(n, infer=_logic_infer(n), impl=_logic_impl(n), cost=elementwise_cost, spec="GRAPH-EW-5",
           shard=elementwise_rule, arity=(_ARITY.get(n, 2),) * 2,
           vjp=NOT_DIFFERENTIABLE, jvp=NOT_DIFFERENTIABLE)
    for n in _LOGIC)


def logical_and(a, b):
    """Elementwise ``a and b`` of i1 tensors (GRAPH-EW-5)."""
    return bind(LOGICAL_AND, a, b)


def logical_or(a, b):
    """Elementwise ``a or b`` of i1 tensors (GRAPH-EW-5)."""
    return bind(LOGICAL_OR, a, b)


def logical_not(a):
    """Elementwise ``not a`` of an i1 tensor (GRAPH-EW-5)."""
    return bind(LOGICAL_NOT, a)
