"""Elementary-function ops (GRAPH-MATH-1, GRAPH-EXP-1 … GRAPH-POW-1).

References: NumPy / ``math`` in f64 (the host libm, independent of NUM-MATH) for values, and
``numerics_reference.ref_encode`` (an independent re-derivation of NUM-CVT) for the single
rounding into an accum format.
"""
import math

import ml_dtypes
import numpy as np
import pytest

import numerics_reference as R
import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_ref.interp import run_function
from tessera_ref.ir import parse_module
from tessera_ref.ops import bind, primitive

_erf = np.vectorize(math.erf)
_erfc = np.vectorize(math.erfc)
SQRT_HALF = math.sqrt(0.5)

#: f64 references (host libm; erfc form for gelu avoids the cancellation of 1 + erf).
REFERENCE = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh, "erf": _erf, "erfc": _erfc,
    "gelu": lambda x: 0.5 * x * _erfc(-x * SQRT_HALF),
    "silu": lambda x: x / (1.0 + np.exp(-x)), "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "sin": np.sin, "cos": np.cos,
}
#: Domains where the f64 reference itself is accurate to far below an f32 ulp.
DOMAIN = {"log": (1e-3, 50.0), "sqrt": (0.0, 100.0), "rsqrt": (1e-3, 100.0), "exp": (-20.0, 20.0),
          "erfc": (-3.0, 9.0)}
UNARY = sorted(REFERENCE)


def _inputs(name, n=257, seed=0):
    lo, hi = DOMAIN.get(name, (-8.0, 8.0))
    return np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float32)


def _ulp(ref, dtype) -> np.ndarray:
    """The spacing of ``dtype`` at |ref| (its smallest spacing below the normal range)."""
    info = ml_dtypes.finfo(dtype)
    e = np.floor(np.log2(np.maximum(np.abs(ref), float(info.smallest_normal))))
    return np.exp2(e - info.nmant)


def _bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("storage", [np.float32, ml_dtypes.bfloat16])
def test_agrees_with_f64_reference(name, storage):
    # Bound: the NUM-MATH result is within a few f64 ulps (≤ 4, xmath's stated bounds) — far
    # below storage precision — so after rounding into f32 (and, for bf16 storage, a second
    # rounding f32 -> bf16) the error is at most one ulp of the storage format at the result
    # (0.5 ulp each rounding, the f32 half-ulp < 2^-16 of a bf16 ulp) plus 2^-40 relative slack.
    x = _inputs(name).astype(storage)
    x64 = x.astype(np.float64)
    got = np.asarray(getattr(op, name)(tr.asarray(x))).astype(np.float64)
    ref = REFERENCE[name](x64)
    bound = _ulp(ref, storage) + 2.0 ** -40 * np.abs(ref)
    assert np.all(np.abs(got - ref) <= bound), name


def test_gelu_tanh_and_pow_agree_with_f64_reference():
    x = _inputs("gelu").astype(np.float64)
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    ref = x / (1.0 + np.exp(-2.0 * u))  # (1 + tanh u)/2 = 1/(1 + e^-2u): no cancellation
    got = np.asarray(op.gelu(tr.asarray(x.astype(np.float32)), approximate="tanh")).astype(np.float64)
    assert np.all(np.abs(got - ref) <= _ulp(ref, np.float32) + 1e-12 * np.abs(ref))
    # pow: |y·log x| ≤ 3·log(20) < 9, so NUM-MATH-12's error is below 20 f64 ulps; one f32 ulp.
    base = np.random.default_rng(1).uniform(0.05, 20.0, 64).astype(np.float32)
    expo = np.random.default_rng(2).uniform(-3.0, 3.0, 64).astype(np.float32)
    got = np.asarray(op.pow(tr.asarray(base), tr.asarray(expo))).astype(np.float64)
    ref = np.power(base.astype(np.float64), expo.astype(np.float64))
    assert np.all(np.abs(got - ref) <= _ulp(ref, np.float32))


def test_special_values():
    f = np.float32
    assert np.asarray(op.log(tr.asarray(f([0.0, -0.0, -1.0, np.inf])))).tolist()[:2] == [-np.inf, -np.inf]
    assert np.isnan(np.asarray(op.log(tr.asarray(f([-1.0]))))).all()
    s = np.asarray(op.sqrt(tr.asarray(f([-0.0, 4.0, -1.0]))))
    assert np.signbit(s[0]) and s[0] == 0 and s[1] == 2 and np.isnan(s[2])
    assert np.asarray(op.rsqrt(tr.asarray(f([0.0, -0.0, np.inf])))).tolist() == [np.inf, -np.inf, 0.0]
    g = np.asarray(op.gelu(tr.asarray(f([-np.inf, np.inf]))))
    assert g[1] == np.inf and g[0] == 0 and np.signbit(g[0])
    assert np.asarray(op.exp(tr.asarray(f([-np.inf, 100.0])))).tolist() == [0.0, np.inf]


def test_rounded_once_into_accum_then_storage():
    # f32 storage with accum=bf16: GRAPH-MATH-1 rounds the f64 result into bf16 (the accum)
    # and the f32 result holds that bf16 value. Reference: the host exp rounded into bf16 by
    # the independent NUM-CVT reference (both f64 results are within 2 ulps of e^x, so they
    # round alike unless e^x lies within ~2^-50 of a bf16 midpoint: not for these inputs).
    # The f32 operand is first rounded into the bf16 accum (NUM-EW-1).
    pol = tr.numerics.Policy("f32", accum="bf16")
    x = np.random.default_rng(3).uniform(-5, 5, 200).astype(np.float32)
    got = np.asarray(op.exp(tr.asarray(x, policy=pol)))
    x_acc = R.ref_encode(x, "bf16").astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    codes = R.ref_encode(np.exp(x_acc), "bf16").astype(np.uint16)
    want = codes.view(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(_bits(got), _bits(want))
    # accum=f16 overflows at 65504: exp(12) is inf there although bf16 storage could hold it
    pol16 = tr.numerics.Policy("bf16", accum="f16")
    assert np.asarray(op.exp(tr.asarray([12.0], policy=pol16))).astype(np.float32)[0] == np.inf
    assert np.asarray(op.exp(tr.asarray([12.0], dtype="bf16"))).astype(np.float32)[0] == 162816.0


def test_sqrt_is_one_ieee_operation():
    # f32 sqrt is correctly rounded: it equals the host's IEEE f32 square root bit for bit.
    x = np.random.default_rng(4).uniform(0, 1e6, 500).astype(np.float32)
    assert np.array_equal(_bits(op.sqrt(tr.asarray(x))), _bits(np.sqrt(x)))


def test_pow_broadcasts_and_weak_scalars():
    x = tr.asarray(np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    r = op.pow(x, tr.asarray(np.float32([1.0, 2.0, 0.5])))
    assert r.shape == (2, 3)
    assert np.asarray(x ** 2.0).tolist() == [[1, 4, 9], [16, 25, 36]]
    assert np.asarray(2.0 ** tr.asarray(np.float32([3.0]))).tolist() == [8.0]
    b = tr.asarray([4.0], dtype="bf16") ** 0.5
    assert b.type.format.name == "bf16" and float(np.asarray(b)[0]) == 2.0


def test_stochastic_rounding_needs_a_seed():
    pol = tr.numerics.Policy("bf16", rounding="stochastic")
    x = tr.asarray(np.linspace(0.1, 3, 64).astype(ml_dtypes.bfloat16), policy=pol)  # no rounding
    with pytest.raises(OpError, match="seed"):
        op.exp(x)
    a, b, c = op.exp(x, seed=1), op.exp(x, seed=1), op.exp(x, seed=2)
    assert np.array_equal(_bits(a), _bits(b)) and not np.array_equal(_bits(a), _bits(c))


def test_errors_name_types_and_the_user_line():
    with pytest.raises(DTypeError, match=r"tensor<3xindex>.*test_math\.py:"):
        op.exp(tr.asarray(np.arange(3)))
    with pytest.raises(DTypeError, match=r"int8.*test_math\.py:"):
        op.tanh(tr.asarray([1.0], dtype="int8"))
    with pytest.raises(ShapeError, match=r"tensor<3xf32>.*tensor<4xf32>.*test_math\.py:"):
        op.pow(tr.asarray(np.ones(3, np.float32)), tr.asarray(np.ones(4, np.float32)))
    with pytest.raises(DTypeError, match=r"bf16.*f32"):
        op.pow(tr.asarray([1.0], dtype="bf16"), tr.asarray([1.0], dtype="f32"))
    with pytest.raises(OpError, match="approximate"):
        op.gelu(tr.asarray([1.0]), approximate="fast")
    with pytest.raises(OpError, match="unknown attribute"):
        bind(primitive("exp"), tr.asarray([1.0]), base=2)


@pytest.mark.parametrize("name", UNARY + ["gelu_tanh", "pow"])
def test_eager_equals_jit(name):
    x = tr.asarray(_inputs(name, 33, seed=5))
    if name == "pow":
        fn = lambda a: op.pow(a, 1.5)  # noqa: E731
    elif name == "gelu_tanh":
        fn = lambda a: op.gelu(a, approximate="tanh")  # noqa: E731
    else:
        fn = getattr(op, name)
    assert np.array_equal(_bits(tr.jit(fn)(x)), _bits(fn(x)))


def test_module_round_trips_and_reruns():
    @tr.jit
    def f(a, b):
        return op.sin(op.mul(op.gelu(a, approximate="tanh"), op.exp(b))), op.pow(a, b), op.sqrt(a)

    a = tr.asarray(np.random.default_rng(6).uniform(0.1, 3, (4, 5)).astype(np.float32), dtype="bf16")
    b = tr.asarray(np.random.default_rng(7).uniform(-1, 1, (4, 5)).astype(np.float32), dtype="bf16")
    m = f.trace(a, b)
    text = str(m)
    assert str(parse_module(text)) == text
    rerun = run_function(parse_module(text).body.first_op, np.asarray(a), np.asarray(b))
    for got, want in zip(rerun, f(a, b)):
        assert np.array_equal(_bits(got), _bits(want))
