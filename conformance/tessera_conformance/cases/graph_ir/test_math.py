"""GRAPH-MATH-1 and the elementary-function clauses: the NUM-MATH algorithm in f64 on the
exact accum value, rounded once into accum, then once into storage — against an independent
re-implementation of the algorithms (``_xmath``), never the host libm."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_conformance import clause, run

from . import _reference as R
from . import _xmath as X
from ._cases import check, grid, operand, policy, specials, values
from ._formats import round_values

#: op name -> (its clause, the reference algorithm, the domain of the random inputs)
UNARY = {
    "exp": ("GRAPH-EXP-1", X.exp, (-90, 90)),
    "expm1": ("GRAPH-EXPM1-1", X.expm1, (-3, 3)),
    "log": ("GRAPH-LOG-1", X.log, (1e-3, 1e3)),
    "rsqrt": ("GRAPH-RSQRT-1", X.rsqrt, (1e-3, 1e3)),
    "tanh": ("GRAPH-TANH-1", X.tanh, (-6, 6)),
    "erf": ("GRAPH-ERF-1", X.erf, (-4, 4)),
    "erfc": ("GRAPH-ERFC-1", X.erfc, (-3, 9)),
    "gelu": ("GRAPH-GELU-1", X.gelu, (-6, 6)),
    "gelu_tanh": ("GRAPH-GELU-1", X.gelu_tanh, (-6, 6)),
    "silu": ("GRAPH-SILU-1", X.silu, (-20, 20)),
    "sigmoid": ("GRAPH-SIGMOID-1", X.sigmoid, (-20, 20)),
    "sin": ("GRAPH-SIN-1", X.sin, (-100, 100)),
    "cos": ("GRAPH-COS-1", X.cos, (-100, 100)),
}


def _fn(name):
    if name == "gelu_tanh":
        return lambda x: op.gelu(x, approximate="tanh")
    return getattr(op, name)


def _params():
    return [pytest.param(n, marks=clause(c), id=n) for n, (c, _, _) in UNARY.items()]


def _inputs(name, fmt, n=384):
    """Random values over the op's domain, values at the branch points of the algorithms,
    and the format's special values."""
    lo, hi = UNARY[name][2]
    extra = [0.5, 0.84375, 1.25, 2.857, 6.0, 22.0, 28.0, -0.84375, -6.0, 709.0, -745.0, 2.0 ** -30]
    return values(operand(np.concatenate([grid(lo, hi, n, seed=len(name)), extra, specials(fmt)]), fmt))


def _expected(name, x, A, fmt, **cvt):
    """Steps 2–4: the algorithm in f64, RN into accum (canonical NaN), one conversion into storage."""
    with np.errstate(all="ignore"):
        r = UNARY[name][1](x)
    return round_values(R.acc(r, A), fmt, **cvt)


@clause("GRAPH-MATH-1")
@pytest.mark.parametrize("name", _params())
def test_f32_storage(backend, name):
    """f32 storage: RN32 of the f64 algorithm's result (where f32 libms differ)."""
    x = _inputs(name, "f32")
    check(backend, _fn(name), (round_values(x, "f32"),), _expected(name, x, "f32", "f32"), what=name)


@clause("GRAPH-MATH-1")
@pytest.mark.parametrize("name", _params())
def test_f64_storage_is_the_algorithm_itself(backend, name):
    """accum = f64: the NUM-MATH result itself, bit for bit (where the host libm differs)."""
    x = _inputs(name, "f64")
    check(backend, _fn(name), (tr.asarray(x, dtype="f64"),), _expected(name, x, "f64", "f64"), what=name)


@clause("GRAPH-MATH-1")
@pytest.mark.parametrize("name", [pytest.param(n, marks=clause(UNARY[n][0]), id=n) for n in ("exp", "tanh", "gelu")])
def test_narrow_storage_rounds_twice(backend, name):
    """bf16, fp8, fp6 and fp4 storage: RN into the f32 accum first, then into storage (two roundings)."""
    for fmt in ("bf16", "fp8_e4m3", "fp6_e2m3", "fp4_e2m1"):
        x = _inputs(name, fmt, 128)
        check(backend, _fn(name), (round_values(x, fmt),), _expected(name, x, "f32", fmt), what=f"{name} {fmt}")


@clause("GRAPH-MATH-1", "GRAPH-EXP-1")
def test_accum_narrower_than_storage(backend):
    """f32 storage with bf16 accum rounds operand and result into bf16; f16 accum overflows."""
    x = grid(-5, 5, 200, seed=3)
    pol = policy("f32", "bf16")
    xa = values(round_values(x, "bf16"))
    want = round_values(R.acc(X.exp(xa), "bf16"), "f32")
    check(backend, op.exp, (tr.asarray(round_values(x, "f32"), policy=pol),), want)
    p16 = policy("bf16", "f16")
    got = run(backend, op.exp, tr.asarray(round_values(np.array([12.0, 2.0]), "bf16"), policy=p16))
    assert values(got)[0] == np.inf and values(got)[1] == values(round_values(X.exp(np.array(2.0)), "bf16"))


@clause("GRAPH-MATH-1", "GRAPH-TYPE-3")
def test_stochastic_rounding_into_storage(backend):
    """Stochastic storage rounding uses random_bits(seed, i); without a seed it is an error."""
    x = values(operand(grid(-3, 3, 96, seed=4).reshape(8, 12), "bf16"))
    pol = policy("bf16", rounding="stochastic")
    a = tr.asarray(round_values(x, "bf16"), policy=pol)
    u = R.random_bits(R.key_words(7), np.arange(x.size)).reshape(x.shape)
    want = round_values(R.acc(X.tanh(x), "f32"), "bf16", "stochastic", u=u)
    check(backend, lambda v: op.tanh(v, seed=7), (a,), want)
    with pytest.raises(OpError, match="seed"):
        run(backend, op.tanh, a)


@clause("GRAPH-MATH-1")
@pytest.mark.parametrize("name", ["exp", "sin", "gelu"])
def test_non_float_operands_are_dtype_errors(backend, name):
    """int8, index and i1 operands are a DTypeError."""
    for bad in (tr.asarray(np.ones(3), dtype="int8"), np.arange(3), np.array([True])):
        with pytest.raises(DTypeError):
            run(backend, _fn(name), bad)


@clause("GRAPH-LOG-1", "GRAPH-RSQRT-1", "GRAPH-SQRT-1", "GRAPH-EXP-1", "GRAPH-SILU-1", "GRAPH-GELU-1")
def test_stated_special_values(backend):
    """The special values the log, rsqrt, sqrt, exp, silu and gelu clauses state."""
    x = np.array([0.0, -0.0, -1.0, np.inf, -np.inf], np.float32)
    nan = np.float32(np.nan)
    check(backend, lambda v: (op.log(v), op.rsqrt(v), op.sqrt(v), op.exp(v), op.silu(v), op.gelu(v)), (x,),
          [np.array([-np.inf, -np.inf, nan, np.inf, nan], np.float32),
           np.array([np.inf, -np.inf, nan, 0.0, nan], np.float32),
           np.array([0.0, -0.0, nan, np.inf, nan], np.float32),
           np.array([1.0, 1.0, np.float32(X.exp(np.array(-1.0))), np.inf, 0.0], np.float32),
           np.array([0.0, -0.0, np.float32(X.silu(np.array(-1.0))), np.inf, -0.0], np.float32),
           np.array([0.0, -0.0, np.float32(X.gelu(np.array(-1.0))), np.inf, -0.0], np.float32)])


@clause("GRAPH-SQRT-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16", "f64"])
def test_sqrt_is_one_correctly_rounded_operation(backend, fmt):
    """sqrt: one IEEE operation in accum, then storage (not a NUM-MATH algorithm)."""
    x = values(operand(np.concatenate([grid(0, 1e6, 256, seed=5), grid(0, 1e-30, 32), specials(fmt)]), fmt))
    A = "f64" if fmt == "f64" else "f32"
    x_in = tr.asarray(x, dtype="f64") if fmt == "f64" else round_values(x, fmt)
    check(backend, op.sqrt, (x_in,), round_values(R.sqrt(A, x), fmt), what=fmt)


@clause("GRAPH-SIN-1", "GRAPH-COS-1")
def test_sin_cos_exact_argument_reduction(backend):
    """Huge finite arguments are reduced exactly (no precision loss for |x| up to max)."""
    x = values(operand([1e30, -3.4e38, 2.0 ** 100, 1e10, 6.5e19, 12345678.0, 3.1415927, -1.5707964], "f32"))
    for name, ref in (("sin", X.sin), ("cos", X.cos)):
        check(backend, getattr(op, name), (round_values(x, "f32"),), round_values(R.acc(ref(x), "f32"), "f32"))
        check(backend, getattr(op, name), (tr.asarray(x, dtype="f64"),), R.acc(ref(x), "f64"))


POW_SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, np.inf, -np.inf, np.nan])


@clause("GRAPH-POW-1", "GRAPH-MATH-1")
@pytest.mark.parametrize("fmt", ["f32", "f64"])
def test_pow(backend, fmt):
    """pow: IEEE special cases, else exp(y ⊗ log|x|) in f64 (negated for x < 0, odd y)."""
    sx, sy = (v.ravel() for v in np.meshgrid(POW_SPECIALS, POW_SPECIALS))
    g = np.random.default_rng(6)
    x = np.concatenate([sx, g.uniform(0.05, 20, 200), -g.integers(1, 9, 40).astype(float)])
    y = np.concatenate([sy, g.uniform(-3, 3, 200), g.integers(-5, 6, 40).astype(float)])
    x, y = values(operand(x, fmt)), values(operand(y, fmt))
    A = "f64" if fmt == "f64" else "f32"
    arg = (lambda v: tr.asarray(v, dtype="f64")) if fmt == "f64" else (lambda v: round_values(v, "f32"))
    check(backend, op.pow, (arg(x), arg(y)), round_values(R.acc(X.pow(x, y), A), fmt), what=fmt)


@clause("GRAPH-POW-1", "GRAPH-TYPE-2")
def test_pow_broadcasts_and_weak_scalar_exponent(backend):
    """pow broadcasts; a Python exponent takes x's policy; pow(x, 2) is not x * x."""
    x = values(operand(grid(0.1, 9, 24, seed=8).reshape(4, 6), "bf16"))
    xb = round_values(x, "bf16")
    y = values(operand([[0.5, 1.5, -2.0, 3.0, 0.25, 2.0]], "bf16"))
    check(backend, op.pow, (xb, round_values(y, "bf16")), round_values(R.acc(X.pow(x, y), "f32"), "bf16"))
    check(backend, lambda v: op.pow(v, 2), (xb,), round_values(R.acc(X.pow(x, 2.0), "f32"), "bf16"))
    f64 = np.array([3.0, 7.0, 0.1, 1.1])
    want = X.pow(f64, 2.0)
    assert not np.array_equal(want, f64 * f64), "inputs do not separate pow(x, 2) from x * x"
    check(backend, lambda v: op.pow(v, 2.0), (tr.asarray(f64, dtype="f64"),), want)
    with pytest.raises(ShapeError):
        run(backend, op.pow, np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(DTypeError):
        run(backend, op.pow, xb, np.ones((4, 6), np.float32))


@clause("GRAPH-GELU-1")
def test_gelu_approximate_attribute(backend):
    """approximate is "none" (default, the erfc form) or "tanh"; anything else is an OpError."""
    x = values(operand(grid(-5, 5, 64, seed=9), "f32"))
    xs = round_values(x, "f32")
    check(backend, lambda v: (op.gelu(v), op.gelu(v, approximate="none"), op.gelu(v, approximate="tanh")), (xs,),
          [round_values(R.acc(X.gelu(x), "f32"), "f32")] * 2 + [round_values(R.acc(X.gelu_tanh(x), "f32"), "f32")])
    with pytest.raises(OpError, match="approximate"):
        run(backend, lambda v: op.gelu(v, approximate="fast"), xs)
