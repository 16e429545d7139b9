"""Elementary functions (GRAPH-MATH-1 and one clause per op: GRAPH-EXP-1 … GRAPH-POW-1).

Every op here follows GRAPH-MATH-1: floating-point operands of one policy (``pow``
broadcasts its two operands, NumPy rules), each converted exactly into the policy's
``accum`` format (NUM-EW-1), the op's NUM-MATH algorithm applied in f64 to that accum value
(exact in f64), the f64 result rounded once to nearest even into ``accum``, and that value
converted once into storage with the policy's rounding and overflow (NUM-CVT). No host
``libm`` decides a bit (:func:`~tessera_ref.ops.exact.math_in_accum`).

``sqrt`` is the exception: it is one correctly rounded IEEE operation in ``accum``
(NUM-EW-1), not a NUM-MATH algorithm. ``rsqrt`` is NUM-MATH-11's ``1 ⊘ sqrt(x)`` in f64.
"""
from __future__ import annotations

import math as _pymath

import numpy as np

from ..numerics import accum_op
from . import elementwise as ew
from .adjoint import seed_of
from .bind import bind
from .exact import math_in_accum
from .primitive import Attr, define
from .sharding import elementwise_rule
from .typecheck import (SEED_ATTR, broadcast_types, check_str_choice, elementwise_cost, require_float,
                        require_seed, to_storage)

__all__ = ["exp", "expm1", "log", "sqrt", "rsqrt", "tanh", "erf", "erfc", "gelu", "silu", "sigmoid",
           "sin", "cos", "pow"]

#: Nominal FLOPs per element for the roofline: special-function evaluations plus the
#: arithmetic around them (not a count of the f64 reference's operations).
_FLOPS = {"sigmoid": 3, "silu": 4, "gelu": 5, "pow": 3}

_GELU_ATTRS = {"approximate": Attr("none", check_str_choice("none", "tanh"),
                                   "'none' (erf form, NUM-MATH-13) or 'tanh' (the tanh approximation)")}


def _infer(name: str):
    """``infer`` of a math op: float operands of one policy, broadcast, a seed if stochastic."""
    def infer(attrs, *types):
        require_float(name, *types)
        out = broadcast_types(name, *types)
        require_seed(name, attrs, out)
        return out
    return infer


def _impl(name: str):
    """GRAPH-MATH-1 for ``name``: the accum-format value, converted once into storage."""
    def impl(call, *arrays):
        accum = call.out_types[0].policy.accum
        if name == "sqrt":
            r = accum_op("sqrt", *arrays, accum=accum)
        else:
            fn = "gelu_tanh" if name == "gelu" and call.attrs["approximate"] == "tanh" else name
            with np.errstate(over="ignore"):  # overflow into accum gives inf: the defined result
                r = math_in_accum(fn, *arrays, accum=accum)
        return to_storage(call, r)
    return impl


# ---------------------------------------------------------------------------------------
# derivatives (AD-MATH-1): ``f'(x)`` as ops in the operand's policy, times the cotangent or
# tangent (elementwise_rules). Constants are Python floats, rounded into the policy's storage.

_SQRT_2 = 2.0 ** 0.5
_TWO_OVER_SQRT_PI = 2.0 / _pymath.sqrt(_pymath.pi)
_INV_SQRT_2PI = 1.0 / _pymath.sqrt(2.0 * _pymath.pi)
_SQRT_2_OVER_PI = _pymath.sqrt(2.0 / _pymath.pi)
_GELU_C = 0.044715


def _derivative(name: str, attrs, x, y):
    """``f'(x)`` for the unary op ``name`` with result ``y`` (NaN where f' is undefined)."""
    s = seed_of(attrs)

    def k(value):
        return ew.scalar(value, x)

    def mul(a, b):
        return ew.mul(a, b, **s)

    def add(a, b):
        return ew.add(a, b, **s)

    def sub(a, b):
        return ew.sub(a, b, **s)

    if name == "exp":
        return y
    if name == "expm1":
        return add(y, k(1.0))
    if name == "log":
        return ew.div(k(1.0), x, **s)
    if name == "sqrt":
        return ew.div(k(0.5), y, **s)
    if name == "rsqrt":
        return ew.neg(ew.div(mul(y, k(0.5)), x, **s), **s)
    if name == "tanh":
        return sub(k(1.0), mul(y, y))
    if name in ("erf", "erfc"):
        d = mul(exp(ew.neg(mul(x, x), **s), **s), k(_TWO_OVER_SQRT_PI))
        return d if name == "erf" else ew.neg(d, **s)
    if name == "sigmoid":
        return mul(y, sub(k(1.0), y))
    if name == "silu":
        sg = sigmoid(x, **s)
        return mul(sg, add(k(1.0), mul(x, sub(k(1.0), sg))))
    if name == "sin":
        return cos(x, **s)
    if name == "cos":
        return ew.neg(sin(x, **s), **s)
    if attrs["approximate"] == "none":  # gelu: Φ(x) + x·φ(x)
        cdf = mul(add(k(1.0), erf(ew.div(x, k(_SQRT_2), **s), **s)), k(0.5))
        pdf = mul(exp(mul(mul(x, x), k(-0.5)), **s), k(_INV_SQRT_2PI))
        return add(cdf, mul(x, pdf))
    x2 = mul(x, x)  # gelu, tanh form: ½(1 + t) + ½·x·(1 − t²)·c·(1 + 3·0.044715·x²)
    t = tanh(mul(add(x, mul(mul(x2, x), k(_GELU_C))), k(_SQRT_2_OVER_PI)), **s)
    inner = mul(mul(sub(k(1.0), mul(t, t)), k(_SQRT_2_OVER_PI)), add(k(1.0), mul(x2, k(3.0 * _GELU_C))))
    return add(mul(add(k(1.0), t), k(0.5)), mul(mul(x, inner), k(0.5)))


def _unary_scales(name: str):
    def scales(attrs, primals, y):
        d = _derivative(name, attrs, primals[0], y)
        return (lambda v: ew.mul(v, d, **seed_of(attrs)),)
    return scales


def _pow_scales(attrs, primals, z):
    """``∂x = y·x^(y−1)`` (0 where y = 0) and ``∂y = z·log x`` (0 where x = 0)."""
    x, y = primals
    s, zero = seed_of(attrs), ew.scalar(0.0, x)
    dx = ew.where(ew.equal(y, zero), zero, ew.mul(y, pow(x, ew.sub(y, ew.scalar(1.0, x), **s), **s), **s))
    dy = ew.where(ew.equal(x, zero), zero, ew.mul(z, log(x, **s), **s))
    return (lambda v: ew.mul(v, dx, **s), lambda v: ew.mul(v, dy, **s))


def _define(name: str):
    attrs = dict(SEED_ATTR, **(_GELU_ATTRS if name == "gelu" else {}))
    vjp, jvp = ew.elementwise_rules(_pow_scales if name == "pow" else _unary_scales(name))
    return define(name, infer=_infer(name), impl=_impl(name), shard=elementwise_rule,
                  cost=lambda call, n=_FLOPS.get(name, 1): elementwise_cost(call, n),
                  spec=f"GRAPH-{name.upper()}-1", attrs=attrs, vjp=vjp, jvp=jvp,
                  arity=(2, 2) if name == "pow" else (1, 1))


(EXP, EXPM1, LOG, SQRT, RSQRT, TANH, ERF, ERFC, GELU, SILU, SIGMOID, SIN, COS,
 POW) = (_define(n) for n in __all__)


def exp(x, *, seed=None):
    """``e^x`` (GRAPH-EXP-1: NUM-MATH-3 in accum, rounded once into storage)."""
    return bind(EXP, x, seed=seed)


def expm1(x, *, seed=None):
    """``e^x − 1``, accurate near 0 (GRAPH-EXPM1-1: NUM-MATH-7)."""
    return bind(EXPM1, x, seed=seed)


def log(x, *, seed=None):
    """Natural logarithm (GRAPH-LOG-1: NUM-MATH-2); ``log(±0) = −inf``, ``log(x < 0)`` is NaN."""
    return bind(LOG, x, seed=seed)


def sqrt(x, *, seed=None):
    """Square root, one correctly rounded IEEE operation in accum (GRAPH-SQRT-1, NUM-EW-1);
    ``sqrt(−0) = −0``, ``sqrt(x < 0)`` is NaN."""
    return bind(SQRT, x, seed=seed)


def rsqrt(x, *, seed=None):
    """``1/√x`` as ``1 ⊘ sqrt(x)`` in f64 (GRAPH-RSQRT-1: NUM-MATH-11); ``rsqrt(+0) = +inf``."""
    return bind(RSQRT, x, seed=seed)


def tanh(x, *, seed=None):
    """Hyperbolic tangent (GRAPH-TANH-1: NUM-MATH-8)."""
    return bind(TANH, x, seed=seed)


def erf(x, *, seed=None):
    """Error function (GRAPH-ERF-1: NUM-MATH-9)."""
    return bind(ERF, x, seed=seed)


def erfc(x, *, seed=None):
    """Complementary error function ``1 − erf(x)`` without cancellation (GRAPH-ERFC-1: NUM-MATH-9)."""
    return bind(ERFC, x, seed=seed)


def gelu(x, *, approximate="none", seed=None):
    """GELU (GRAPH-GELU-1: NUM-MATH-13): ``approximate="none"`` is ``0.5·x·(1 + erf(x/√2))``,
    ``"tanh"`` the tanh approximation ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``."""
    return bind(GELU, x, approximate=approximate, seed=seed)


def silu(x, *, seed=None):
    """``x·sigmoid(x)`` (GRAPH-SILU-1: NUM-MATH-10)."""
    return bind(SILU, x, seed=seed)


def sigmoid(x, *, seed=None):
    """``1 / (1 + e^−x)`` (GRAPH-SIGMOID-1: NUM-MATH-10)."""
    return bind(SIGMOID, x, seed=seed)


def sin(x, *, seed=None):
    """Sine of ``x`` radians, with exact argument reduction (GRAPH-SIN-1: NUM-MATH-6)."""
    return bind(SIN, x, seed=seed)


def cos(x, *, seed=None):
    """Cosine of ``x`` radians (GRAPH-COS-1: NUM-MATH-6)."""
    return bind(COS, x, seed=seed)


def pow(x, y, *, seed=None):  # noqa: A001 - the op's name
    """``x**y``, broadcast, IEEE-754 ``pow`` special cases (GRAPH-POW-1: NUM-MATH-12);
    ``pow(x, 2)`` is not ``x * x`` (use ``mul`` where those bits matter)."""
    return bind(POW, x, y, seed=seed)
