"""AD-EW-1, AD-EW-2, AD-MATH-1, AD-CAST-1: the diagonal maps of the elementwise, math and cast ops.
Expected cotangents and tangents are the clause's formulas evaluated op by op with NumPy's IEEE
arithmetic (correctly rounded like the ops' f64/f32 arithmetic; ml_dtypes' bf16 computes in f32
and rounds once, as NUM-EW-1's accumulation format does) on dyadic inputs and power-of-two
cotangents; the transcendental factors are the backend's own forward values (the clauses write
``f′`` with ops), and a float64 closed form with libm ties each one to calculus."""
import ml_dtypes
import numpy as np
import pytest
from scipy import special

from tessera_ref import op
from tessera_conformance import assert_bits, assert_close, clause, eager

from ._reference import dyadic, fd_jvp, grad_on, jvp_on, pow2, same_as_oracle, vjp_on

M_2_SQRTPI, M_SQRT2, M_1_SQRT2PI = 1.12837916709551257390, 1.41421356237309504880, 0.3989422804014326779399


def unb(g, shape):
    """``g`` summed over the axes broadcasting added or stretched to reach it from ``shape``."""
    g = np.asarray(g)
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    return (g.sum(axis=axes, keepdims=True) if axes else g).reshape(shape)


# -- AD-EW-1 -----------------------------------------------------------------------------------
def _ew_cases():
    a, b = dyadic((3, 4), 1), dyadic((3, 4), 2, lo=0.5, hi=4.0)
    ab, bb = dyadic((2, 1, 4), 3), dyadic((3, 1), 4)
    c = dyadic((3, 1), 5)
    eq = np.array([[1.0, 2.0, -0.0, 3.0], [0.5, 0.0, -1.0, 2.0]])
    eq2 = np.array([[1.0, -2.0, 0.0, 3.0], [0.75, -0.0, -1.0, 1.0]])
    zs = np.array([2.0, -3.0, 0.0, -0.0, np.nan, 0.5])
    return [
        # name, operands, vjp(u, ops, y) -> per operand (before unbroadcast), jvp(vs, ops, y)
        ("add", [ab, bb], lambda u, o, y: (u, u), lambda v, o, y: v[0] + v[1]),
        ("sub", [a, b], lambda u, o, y: (u, -u), lambda v, o, y: v[0] + -v[1]),
        ("sub", [ab, bb], lambda u, o, y: (u, -u), lambda v, o, y: v[0] + -v[1]),
        ("mul", [ab, bb], lambda u, o, y: (u * o[1], u * o[0]), lambda v, o, y: v[0] * o[1] + v[1] * o[0]),
        ("div", [a, b], lambda u, o, y: (u / o[1], -((u * y) / o[1])),
         lambda v, o, y: v[0] / o[1] + -((v[1] * y) / o[1])),
        ("fma", [a, dyadic((4,), 6), c], lambda u, o, y: (u * o[1], u * o[0], u),
         lambda v, o, y: (v[0] * o[1] + v[1] * o[0]) + v[2]),
        ("neg", [a], lambda u, o, y: (-u,), lambda v, o, y: -v[0]),
        ("abs", [zs], lambda u, o, y: (np.where(o[0] > 0, u, np.where(o[0] < 0, -u, 0.0)),),
         lambda v, o, y: np.where(o[0] > 0, v[0], np.where(o[0] < 0, -v[0], 0.0))),
        ("minimum", [eq, eq2], lambda u, o, y: (np.where(o[0] < o[1], u, np.where(o[0] == o[1], u * 0.5, 0.0)),
                                                np.where(o[1] < o[0], u, np.where(o[0] == o[1], u * 0.5, 0.0))), None),
        ("maximum", [eq, eq2], lambda u, o, y: (np.where(o[0] > o[1], u, np.where(o[0] == o[1], u * 0.5, 0.0)),
                                                np.where(o[1] > o[0], u, np.where(o[0] == o[1], u * 0.5, 0.0))), None),
        ("maximum", [ab, bb], lambda u, o, y: (np.where(o[0] > o[1], u, np.where(o[0] == o[1], u * 0.5, 0.0)),
                                               np.where(o[1] > o[0], u, np.where(o[0] == o[1], u * 0.5, 0.0))), None),
    ]


EW = [pytest.param(*c, id=f"{c[0]}-{i}") for i, c in enumerate(_ew_cases())]


@clause("AD-EW-1")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, operands, vjp_ref, jvp_ref", EW)
def test_elementwise_arithmetic_rules(backend, name, operands, vjp_ref, jvp_ref, dtype):
    """Cotangents: the table's maps summed over broadcast axes; tangent: their sum in operand order (bits)."""
    operands = [o.astype(dtype) for o in operands]
    fn = getattr(op, name)
    with np.errstate(invalid="ignore"):
        y = getattr(np, {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "neg": "negative",
                         "abs": "abs", "minimum": "minimum", "maximum": "maximum"}.get(name, "add"))(*operands[:2]) \
            if name != "fma" else None
    shape = np.broadcast_shapes(*(o.shape for o in operands))
    u = pow2(shape, 7, dtype=dtype)
    if name == "sub":
        u.ravel()[0] = 0.0  # neg(+0) = -0: the rule's ops, not a multiplication by -1
    bars = vjp_on(backend, lambda *a: fn(*a), tuple(operands), u)
    want = [unb(w, o.shape).astype(dtype) for w, o in zip(vjp_ref(u, operands, y), operands)]
    assert_bits(bars, want, f"{name} cotangents")
    if jvp_ref is not None:
        vs = [pow2(o.shape, 8 + i, dtype=dtype) for i, o in enumerate(operands)]
        t = jvp_on(backend, lambda *a: fn(*a), tuple(operands), tuple(vs))
        assert_bits(t, np.broadcast_to(jvp_ref(vs, operands, y), shape).astype(dtype), f"{name} tangent")


# -- AD-EW-2 -----------------------------------------------------------------------------------
@clause("AD-EW-2")
def test_where_routes_the_cotangent_by_the_condition(backend):
    """where: ``a`` gets ``where(c, v, 0)``, ``b`` ``where(c, 0, v)``, ``c`` nothing; jvp ``where(c, ȧ, ḃ)``."""
    x = dyadic((3, 4), 11)
    a, b = dyadic((3, 4), 12), dyadic((4,), 13)
    cond = x > 0
    u = pow2((3, 4), 14)
    f = lambda x, a, b: op.where(op.greater(x, 0.0), a, b)  # noqa: E731
    gx, ga, gb = vjp_on(backend, f, (x, a, b), u)
    assert_bits(gx, np.zeros((3, 4)))  # through a comparison: nothing
    assert_bits(ga, np.where(cond, u, 0.0))
    assert_bits(gb, np.where(cond, 0.0, u).sum(axis=0))
    va, vb = pow2((3, 4), 15), pow2((4,), 16)
    t = jvp_on(backend, lambda a, b: op.where(op.greater(x, 0.0), a, b), (a, b), (va, vb))
    assert_bits(t, np.where(cond, va, vb))
    t = jvp_on(backend, lambda a: op.where(op.greater(x, 0.0), a, b), (a,), (va,))
    assert_bits(t, np.where(cond, va, 0.0))  # an absent tangent is +0


@clause("AD-EW-2")
def test_both_branches_are_differentiated(backend):
    """Both branches are differentiated: 0 ⊗ inf makes an unguarded sqrt's gradient NaN."""
    x = np.array([0.0, 4.0, 0.25])
    g = grad_on(backend, lambda a: op.sum(op.where(op.greater(a, 0.0), op.sqrt(a), 0.0)), x)
    assert np.isnan(g[0]) and g[1] == 0.25 and g[2] == 1.0
    g = grad_on(backend, lambda a: op.sum(op.sqrt(op.where(op.greater(a, 0.0), a, 1.0))), x)
    assert_bits(g, np.array([0.0, 0.25, 1.0]))
    mask = lambda a: op.logical_or(op.less(a, 1.0), op.logical_not(op.equal(a, 4.0)))  # noqa: E731
    g = grad_on(backend, lambda a: op.sum(op.where(mask(a), a, 2.0 * a)), x)
    assert_bits(g, np.array([1.0, 2.0, 1.0]))


# -- AD-MATH-1 ---------------------------------------------------------------------------------
def _fwd(backend, name, *args):
    return eager(backend, lambda *a: getattr(op, name)(*a), *args)


def _factor(backend, name, x, y):
    """``f′(x)`` by the clause's table (NumPy IEEE arithmetic, the backend's own forward values)."""
    def k(c):  # a constant of the operand's policy, rounded once from its f64 value
        return np.asarray(c).astype(x.dtype)
    if name == "exp":
        return y
    if name == "expm1":
        return y + k(1.0)
    if name == "log":
        return k(1.0) / x
    if name == "sqrt":
        return k(0.5) / y
    if name == "rsqrt":
        return -((y * k(0.5)) / x)
    if name == "tanh":
        return k(1.0) - y * y
    if name in ("erf", "erfc"):
        d = _fwd(backend, "exp", -(x * x)) * k(M_2_SQRTPI)
        return d if name == "erf" else -d
    if name == "sigmoid":
        return y * (k(1.0) - y)
    if name == "silu":
        s = _fwd(backend, "sigmoid", x)
        return s * (k(1.0) + x * (k(1.0) - s))
    if name == "sin":
        return _fwd(backend, "cos", x)
    if name == "cos":
        return -_fwd(backend, "sin", x)
    if name == "gelu":
        cdf = (k(1.0) + _fwd(backend, "erf", x / k(M_SQRT2))) * k(0.5)
        pdf = _fwd(backend, "exp", (x * x) * k(-0.5)) * k(M_1_SQRT2PI)
        return cdf + x * pdf
    raise AssertionError(name)


CALCULUS = {  # f′ in float64 with libm/scipy: the calculus the rules must agree with
    "exp": np.exp, "expm1": np.exp, "log": lambda x: 1 / x, "sqrt": lambda x: 0.5 / np.sqrt(x),
    "rsqrt": lambda x: -0.5 * x ** -1.5, "tanh": lambda x: 1 - np.tanh(x) ** 2,
    "erf": lambda x: M_2_SQRTPI * np.exp(-x * x), "erfc": lambda x: -M_2_SQRTPI * np.exp(-x * x),
    "sigmoid": lambda x: special.expit(x) * (1 - special.expit(x)),
    "silu": lambda x: special.expit(x) * (1 + x * (1 - special.expit(x))), "sin": np.cos, "cos": lambda x: -np.sin(x),
    "gelu": lambda x: 0.5 * (1 + special.erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi),
}
POSITIVE = ("log", "sqrt", "rsqrt")


@clause("AD-MATH-1")
@pytest.mark.parametrize("dtype", [np.float64, np.float32, ml_dtypes.bfloat16], ids=["f64", "f32", "bf16"])
@pytest.mark.parametrize("name", sorted(CALCULUS))
def test_math_rule_is_the_table_factor_times_the_cotangent(backend, name, dtype):
    """``x̄ = ḡ ⊗ f′(x)``, ``ẏ = ẋ ⊗ f′(x)`` with the table's ``f′`` (bits), near calculus."""
    x = (dyadic((12,), 21, lo=0.25, hi=3.0) if name in POSITIVE else dyadic((12,), 21, lo=-2.5, hi=2.5)).astype(dtype)
    y = _fwd(backend, name, x)
    d = np.asarray(_factor(backend, name, x, y), dtype=dtype)
    u = pow2((12,), 22, dtype=dtype)
    (bar,) = vjp_on(backend, getattr(op, name), (x,), u)
    assert_bits(bar, u * d, f"{name} cotangent")
    t = jvp_on(backend, getattr(op, name), (x,), (u,))
    assert_bits(t, u * d, f"{name} tangent")
    assert_close(bar, u * CALCULUS[name](x.astype(np.float64)), rel=64 * float(ml_dtypes.finfo(dtype).eps))
    same_as_oracle(backend, bar, lambda b: vjp_on(b, getattr(op, name), (x,), u)[0], f"{name} cotangent")


@clause("AD-MATH-1")
def test_gelu_tanh_rule_matches_its_formula(backend):
    """gelu(tanh)'s factor against its float64 formula and a finite difference."""
    x = dyadic((12,), 23, lo=-3.0, hi=3.0)
    c = np.sqrt(2 / np.pi)

    def f_np(x):
        return 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    want = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
    g = grad_on(backend, lambda a: op.sum(op.gelu(a, approximate="tanh")), x)
    assert_close(g, want, rel=1e-14)
    same_as_oracle(backend, g, lambda b: grad_on(b, lambda a: op.sum(op.gelu(a, approximate="tanh")), x))
    assert_close(g, fd_jvp(lambda a: f_np(a), [x], [np.ones(12)]), rel=1e-8)


@clause("AD-MATH-1")
def test_pow_rules_and_their_zero_guards(backend):
    """pow: ``y ⊗ pow(x, y ⊖ 1)`` (+0 where y = 0) and ``z ⊗ log x`` (+0 where x = 0)."""
    x = np.array([0.5, 2.0, 0.0, 3.0, 1.5, 0.0])
    y = np.array([2.0, 0.0, 3.0, -1.0, 0.5, 0.0])
    u = pow2((6,), 24)
    z = _fwd(backend, "pow", x, y)
    gx, gy = vjp_on(backend, lambda a, b: op.pow(a, b), (x, y), u)
    with np.errstate(invalid="ignore", divide="ignore"):
        dx = np.where(y == 0, 0.0, y * _fwd(backend, "pow", x, y - 1.0))
        dy = np.where(x == 0, 0.0, z * _fwd(backend, "log", x))
    assert_bits(gx, u * dx)
    assert_bits(gy, u * dy)
    assert np.isfinite(gy).all()


# -- AD-CAST-1 ---------------------------------------------------------------------------------
@clause("AD-CAST-1")
def test_cast_cotangent_is_cast_back_and_tangent_cast_like_the_value(backend):
    """cast: the cotangent is cast back into the operand's policy, the tangent cast like the value."""
    x = dyadic((8,), 31).astype(np.float32)
    w = np.array([0.1, 1 / 3, -2.7, 1e-3, 7.0, 2 ** -30, -1e10, 0.0])
    (bar,) = vjp_on(backend, lambda a: op.cast(a, "f64"), (x,), w)
    assert_bits(bar, w.astype(np.float32))
    v = np.array([0.1, 1 / 3, -2.7, 1e-3, 7.0, 2 ** -30, -1e10, 0.0], np.float32)
    t = jvp_on(backend, lambda a: op.cast(a, "bf16"), (x,), (v,))
    assert_bits(t, v.astype(ml_dtypes.bfloat16))
    u = v.astype(ml_dtypes.bfloat16)
    (bar,) = vjp_on(backend, lambda a: op.cast(a, "bf16"), (x,), u)
    assert_bits(bar, u.astype(np.float32))


@clause("AD-CAST-1")
@pytest.mark.parametrize("to", ["i1", "index"])
def test_cast_through_integers_passes_nothing(backend, to):
    """A cast into ``i1``/``index`` (and back) carries no derivative: +0."""
    x = np.array([1.5, -2.0, 0.25])
    g = grad_on(backend, lambda a: op.sum(op.cast(op.cast(a, to), "f64") * 3.0), x)
    assert_bits(g, np.zeros(3))
    t = jvp_on(backend, lambda a: op.cast(op.cast(a, to), "f64"), (x,), (np.ones(3),))
    assert_bits(t, np.zeros(3))
