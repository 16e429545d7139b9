"""Exact elementwise arithmetic and fma (NUM-EW-1, NUM-EW-2).

References are independent of the implementation: an integer-arithmetic rounding of the exact
``a·b + c`` (checked itself against ``numerics_reference.fraction_encode``), Fractions for
f64, and NumPy's float16 / ml_dtypes' bfloat16 arithmetic (IEEE-correct for + − × ÷ √ since
they compute in f32, where double rounding is innocuous) for the elementwise ops.
"""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera_ref.errors import TesseraError
from tessera_ref.numerics import arith
from tessera_ref.numerics.arith import ArithError, accum_op, apply_elementwise, fma
from tessera_ref.numerics.policy import Policy

import numerics_reference as R

# (mantissa bits, emin, largest finite value) of the IEEE formats fma computes in
IEEE = {
    "f32": (23, -126, float(np.finfo(np.float32).max)),
    "f64": (52, -1022, float(np.finfo(np.float64).max)),
    "f16": (10, -14, 65504.0),
    "bf16": (7, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
}
DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _int_and_exp(x: float):
    n, d = float(x).as_integer_ratio()
    return n, -(d.bit_length() - 1)


def fma_ref(a: float, b: float, c: float, fmt: str) -> float:
    """Exact ``a·b + c`` rounded to nearest even into ``fmt``, by integer arithmetic, with
    IEEE's sign of zero. Finite operands only."""
    man, emin, fmax = IEEE[fmt]
    (na, ea), (nb, eb), (nc, ec) = _int_and_exp(a), _int_and_exp(b), _int_and_exp(c)
    E = min(ea + eb, ec)
    N = (na * nb << (ea + eb - E)) + (nc << (ec - E))
    if N == 0:
        product_negative = (math.copysign(1, a) * math.copysign(1, b)) < 0
        both_neg_zero = (a == 0 or b == 0) and c == 0 and product_negative and math.copysign(1, c) < 0
        return -0.0 if both_neg_zero else 0.0
    neg, M = N < 0, abs(N)
    e = M.bit_length() - 1 + E
    qexp = max(e, emin) - man
    shift = qexp - E
    if shift <= 0:
        q = M << -shift
    else:
        q, rem = M >> shift, M & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        q += rem > half or (rem == half and q & 1)
    try:
        v = math.ldexp(q, qexp)  # exact: q has at most man + 2 bits
    except OverflowError:
        v = math.inf
    v = math.inf if v > fmax else v
    return -v if neg else v


def bits_equal(x, y) -> np.ndarray:
    """Elementwise bit equality, every NaN equal to every NaN."""
    x, y = np.asarray(x), np.asarray(y)
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]
    nan = np.isnan(x.astype(np.float64)) & np.isnan(y.astype(np.float64))
    return nan | (x.view(width) == y.astype(x.dtype).view(width))


def random_floats(rng, n, fmt):
    """Random bit patterns of ``fmt`` (all binades, subnormals, no inf/NaN)."""
    dt = np.dtype(DTYPES[fmt])
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
    codes = rng.integers(0, np.iinfo(width).max, size=2 * n, dtype=np.uint64, endpoint=True)
    x = codes.astype(width).view(dt)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        return x[np.isfinite(x.astype(np.float64))][:n]


def near_midpoints(rng, n, fmt):
    """Operands with ``a·b + c`` on or within a hair of a midpoint of ``fmt``: ``b ≈ m/a``,
    ``c = RN(m − a·b)``, so ``a·b + c = m + (tiny rounding error of c)``."""
    dt = DTYPES[fmt]
    man = IEEE[fmt][0]
    r = np.abs(random_floats(rng, n, fmt).astype(np.float64))
    r = r[(r > 2.0 ** (IEEE[fmt][1] + 2)) & (r < IEEE[fmt][2] / 4)]
    m = r + np.ldexp(1.0, np.frexp(r)[1] - 1 - man - 1)  # r + ulp(r)/2, exact in f64
    a = np.abs(random_floats(rng, len(m), fmt).astype(np.float64))
    a = np.ldexp(np.frexp(a)[0], rng.integers(-3, 4, len(m)))  # within a few binades of 1
    with np.errstate(all="ignore"):
        b = (m / a).astype(dt).astype(np.float64)
        c = (m - a * b).astype(dt)
    keep = np.isfinite(b) & np.isfinite(c.astype(np.float64))
    sign = np.where(rng.random(keep.sum()) < 0.5, -1.0, 1.0)
    return ((a[keep] * sign).astype(dt), b[keep].astype(dt), (c[keep] * sign).astype(dt))


def half_ulp_offsets(rng, n, fmt):
    """``c ± ulp(c)/2 · (1 or 1 ± 2^-man)``: ties and near-ties of every format (exact in
    ``fmt`` since ``a`` is a power of two and ``b`` a value next to 1)."""
    dt = DTYPES[fmt]
    man, emin, fmax = IEEE[fmt]
    c = random_floats(rng, n, fmt).astype(np.float64)
    c = c[(np.abs(c) > 2.0 ** (emin + man + 2)) & (np.abs(c) < fmax / 4)]
    a = np.ldexp(1.0, np.frexp(c)[1] - 1 - man - 1) * np.where(rng.random(len(c)) < 0.5, -1, 1)
    b = 1 + rng.choice([0.0, 2.0 ** -man, -(2.0 ** -man - 2.0 ** (-man - 1)), 2.0 ** (-man + 1)], len(c))
    return a.astype(dt), b.astype(dt), c.astype(dt)


def products_on_midpoints(rng, n, fmt):
    """``a·b`` exactly a midpoint of ``fmt`` (an odd integer of man + 2 bits, split into two
    odd factors that are ``fmt`` values), ``c = ±a·b·2^-(40…70)`` or ``±0``: one rounding gives
    the neighbour on ``c``'s side, while a 53-bit sum may round back onto the midpoint."""
    dt, man = DTYPES[fmt], IEEE[fmt][0]
    a, b, c = [], [], []
    while len(a) < n:
        bp = int(rng.integers(2, man + 2))  # bit lengths with bp + bq in {man + 2, man + 3}
        bq = min(man + 1, man + 2 - bp + int(rng.integers(0, 2)))
        p = int(rng.integers(1 << (bp - 1), 1 << bp)) | 1
        q = int(rng.integers(1 << (bq - 1), 1 << bq)) | 1
        if (p * q).bit_length() != man + 2:
            continue
        e1, e2 = (int(v) for v in rng.integers(-2 * man, 2 * man, 2))
        tiny = rng.choice([0.0, 1.0, -1.0]) * math.ldexp(p * q, e1 + e2 - int(rng.integers(40, 71)))
        a.append(math.ldexp(p, e1) * rng.choice([-1, 1]))
        b.append(math.ldexp(q, e2))
        c.append(tiny)
    a64, b64 = np.array(a), np.array(b)
    with np.errstate(over="ignore", under="ignore"):
        a, b, c = (np.array(v).astype(dt) for v in (a, b, c))
    keep = (a.astype(np.float64) == a64) & (b.astype(np.float64) == b64)  # representable factors
    return a[keep], b[keep], c[keep]


def check_against_ref(a, b, c, fmt):
    got = fma(a, b, c, fmt=fmt)
    ref = np.array([fma_ref(float(x), float(y), float(z), fmt) for x, y, z in zip(a, b, c)])
    ok = bits_equal(got, ref.astype(DTYPES[fmt]))
    assert ok.all(), [(a[i], b[i], c[i], got[i], ref[i]) for i in np.flatnonzero(~ok)[:5]]


# ---------------------------------------------------------------------------------------
# the reference itself

def test_integer_reference_agrees_with_fraction_encode():
    rng = np.random.default_rng(0)
    for fmt in ("f32", "f16", "bf16", "f64"):
        a, b, c = (random_floats(rng, 400, fmt) for _ in range(3))
        n = min(len(a), len(b), len(c))
        for x, y, z in zip(a[:n], b[:n], c[:n]):
            exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
            code = R.fraction_encode(exact, fmt)
            ref = np.array([fma_ref(float(x), float(y), float(z), fmt)]).astype(DTYPES[fmt])
            if exact != 0:  # fraction_encode has no IEEE sign rule for exact zeros
                assert int(ref.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[ref.itemsize])[0]) == code


# ---------------------------------------------------------------------------------------
# fma (NUM-EW-2)

def test_fma_f32_random_100k():
    rng = np.random.default_rng(1)
    a, b, c = (random_floats(rng, 120_000, "f32") for _ in range(3))
    n = min(len(a), len(b), len(c))
    assert n >= 100_000
    check_against_ref(a[:n], b[:n], c[:n], "f32")


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16", "f64"])
def test_fma_near_and_on_midpoints(fmt):
    rng = np.random.default_rng(2)
    a, b, c = half_ulp_offsets(rng, 20_000, fmt)
    check_against_ref(a, b, c, fmt)
    a, b, c = products_on_midpoints(rng, 5000, fmt)
    check_against_ref(a, b, c, fmt)
    if fmt in ("f32", "bf16"):  # teeth: the f64 sum rounded again is wrong on some of these
        naive = arith.round_f64_into(a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64),
                                     arith.accum_format(fmt))
        assert not bits_equal(naive, fma(a, b, c, fmt=fmt)).all()
    if fmt != "f64":
        check_against_ref(*near_midpoints(rng, 20_000, fmt), fmt)


def test_fma_f32_double_rounding_example():
    # a·b + c = 2^24 + 3 − 2^-30, just below the midpoint of 2^24 + 2 and 2^24 + 4; in f64
    # (spacing 2^-28 there) it is the midpoint itself, which then ties to the even 2^24 + 4
    a, b, c = np.float32(1 + 2.0 ** -15), np.float32(1 - 2.0 ** -15), np.float32(2.0 ** 24 + 2)
    assert fma(a, b, c) == np.float32(2.0 ** 24 + 2)
    assert np.float32(np.float64(a) * np.float64(b) + np.float64(c)) == np.float32(2.0 ** 24 + 4)


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16"])
def test_fma_subnormal_products_and_sums(fmt):
    rng = np.random.default_rng(3)
    man, emin, _ = IEEE[fmt]
    x = random_floats(rng, 30_000, fmt).astype(np.float64)
    small = np.ldexp(np.frexp(x)[0], rng.integers(emin // 2 - man, emin // 2 + 2, len(x)))
    a = small.astype(DTYPES[fmt])
    b = np.roll(small, 1).astype(DTYPES[fmt])
    c = np.ldexp(np.frexp(np.roll(x, 2))[0], rng.integers(emin - man, emin + 2, len(x))).astype(DTYPES[fmt])
    check_against_ref(a, b, c, fmt)


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16"])
def test_fma_overflow_and_cancellation_near_max(fmt):
    fmax = IEEE[fmt][2]
    dt = DTYPES[fmt]
    rng = np.random.default_rng(4)
    a = (rng.uniform(1, 2, 5000) * np.sqrt(fmax)).astype(dt)
    b = (rng.uniform(0.5, 1.5, 5000) * np.sqrt(fmax)).astype(dt)
    c = (-rng.uniform(0, 1, 5000) * fmax).astype(dt)
    check_against_ref(a, b, c, fmt)
    check_against_ref(a, b, -c, fmt)


def test_fma_f64_fraction_reference():
    rng = np.random.default_rng(5)
    n = 6000
    a, b, c = (random_floats(rng, n, "f64") for _ in range(3))
    # exponents spread so that every branch is taken: safe, extreme (exact fallback), tiny results
    with np.errstate(over="ignore"):
        a = np.ldexp(np.frexp(a)[0], rng.integers(-1100, 1030, n))
    b = np.ldexp(np.frexp(b)[0], rng.integers(-600, 600, n))
    with np.errstate(all="ignore"):
        cancel = -(a * b) * (1 + rng.standard_normal(n) * 2.0 ** -40)
    c = np.where(rng.random(n) < 0.5, c, cancel)
    keep = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    check_against_ref(a[keep], b[keep], c[keep], "f64")


def test_fma_f64_subnormal_results_and_exact_zero():
    a = np.array([2.0 ** -537, 3 * 2.0 ** -540, 1 + 2.0 ** -52, 2.0 ** 600, 1e-300])
    b = np.array([2.0 ** -537, 2.0 ** -537, 1 - 2.0 ** -52, 2.0 ** 500, 1e-300])
    c = np.array([2.0 ** -1074, -2.0 ** -1070, -1.0, -np.finfo(np.float64).max, 5e-324])
    check_against_ref(a, b, c, "f64")
    assert fma(np.float64(3.0), np.float64(5.0), np.float64(-15.0), fmt="f64") == 0.0
    assert not np.signbit(fma(np.float64(3.0), np.float64(5.0), np.float64(-15.0), fmt="f64"))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_fma_f64_needs_round_to_odd(sign):
    # a·b = 2^-53 − 2^-107 (ph = 2^-53, pl = −2^-107), c = 1 + 2^-52: the exact sum lies just
    # below the midpoint 1 + 1.5·2^-52; RN(e + pl) instead of RO would land on it and tie up
    a, b = np.float64(1 + 2.0 ** -27), np.float64((1 - 2.0 ** -27) * 2.0 ** -53)
    c = np.float64(1 + 2.0 ** -52)
    assert fma(sign * a, b, sign * c, fmt="f64") == sign * (1 + 2.0 ** -52)
    assert fma_ref(sign * a, b, sign * c, "f64") == sign * (1 + 2.0 ** -52)


@pytest.mark.parametrize("fmt", ["f32", "f64", "f16", "bf16"])
def test_fma_special_values(fmt):
    dt = DTYPES[fmt]
    inf, nan = float("inf"), float("nan")
    cases = [  # a, b, c, expected
        (inf, 0.0, 1.0, nan), (0.0, -inf, 1.0, nan), (inf, 1.0, -inf, nan), (nan, 1.0, 1.0, nan),
        (1.0, 1.0, nan, nan), (2.0, 3.0, inf, inf), (2.0, 3.0, -inf, -inf), (inf, -2.0, 1.0, -inf),
        (0.0, -5.0, 0.0, 0.0), (0.0, -5.0, -0.0, -0.0), (-0.0, -5.0, -0.0, 0.0), (0.0, 5.0, -0.0, 0.0),
        (-3.0, 2.0, 6.0, 0.0), (3.0, 2.0, -6.0, 0.0),
    ]
    a, b, c, expected = (np.array(col, dtype=np.float64).astype(dt) for col in zip(*cases))
    got = fma(a, b, c, fmt=fmt)
    assert got.dtype == np.dtype(dt)
    assert bits_equal(got, expected).all(), got
    nan_bits = got[np.isnan(got.astype(np.float64))]
    assert (np.signbit(nan_bits.astype(np.float64)) == 0).all()  # canonical NaN: sign clear


def test_fma_scalar_and_broadcast_shapes():
    assert fma(np.float32(2), np.float32(3), np.float32(1)).shape == ()
    out = fma(np.ones((3, 1), np.float32), np.ones(4, np.float32), np.float32(0.5))
    assert out.shape == (3, 4) and (out == 1.5).all()


def test_fma_rounds_wider_operands_into_fmt_first():
    x = np.float64(1 + 2.0 ** -40)  # rounds to 1.0 in f32 (NUM-EW-1), before the fma
    assert fma(x, np.float32(1), np.float32(-1)) == 0.0


def test_no_contraction_mul_then_add_rounds_twice():
    # NUM-EW-2: a*b + c as two ops differs from fma where the product is inexact
    a = np.float32(1 + 2.0 ** -12)
    pol = Policy("f32")
    two_ops = apply_elementwise("add", apply_elementwise("mul", a, a, policy=pol), np.float32(-1), policy=pol)
    assert two_ops != fma(a, a, np.float32(-1))
    assert fma(a, a, np.float32(-1)) == np.float32(2.0 ** -11 + 2.0 ** -24)


@settings(max_examples=300)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_fma_f32_property(a, b, c):
    got = fma(np.float32(a), np.float32(b), np.float32(c))
    assert bits_equal(got, np.float32(fma_ref(a, b, c, "f32")))


@settings(max_examples=300)
@given(st.floats(allow_nan=False, allow_infinity=False),
       st.floats(allow_nan=False, allow_infinity=False),
       st.floats(allow_nan=False, allow_infinity=False))
def test_fma_f64_property(a, b, c):
    got = fma(np.float64(a), np.float64(b), np.float64(c), fmt="f64")
    assert bits_equal(got, np.float64(fma_ref(a, b, c, "f64")))


# ---------------------------------------------------------------------------------------
# elementwise ops (NUM-EW-1)

NATIVE = {  # IEEE arithmetic of another implementation, per accumulation format
    "f16": (np.float16, {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                         "div": np.divide, "sqrt": np.sqrt}),
    "bf16": (ml_dtypes.bfloat16, {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                                  "div": np.divide, "sqrt": np.sqrt}),
}


@pytest.mark.parametrize("accum", ["f16", "bf16"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "sqrt"])
def test_narrow_accum_ops_match_ieee(accum, op):
    dt, ufuncs = NATIVE[accum]
    rng = np.random.default_rng(6)
    a = random_floats(rng, 60_000, accum)
    b = random_floats(rng, 60_000, accum)
    n = min(len(a), len(b))
    args = (np.abs(a[:n]),) if op == "sqrt" else (a[:n], b[:n])
    got = accum_op(op, *args, accum=accum)
    with np.errstate(all="ignore"):
        want = ufuncs[op](*args)
    assert got.dtype == np.dtype(dt)
    assert bits_equal(got, want).all()


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_f16_ops_fraction_reference(op):
    rng = np.random.default_rng(7)
    a = random_floats(rng, 2000, "f16")
    b = random_floats(rng, 2000, "f16")
    b = b[b != 0]
    n = min(len(a), len(b))
    got = accum_op(op, a[:n], b[:n], accum="f16").view(np.uint16)
    f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
         "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op]
    for i in range(n):
        exact = f(Fraction(float(a[i])), Fraction(float(b[i])))
        if exact != 0:
            assert int(got[i]) == R.fraction_encode(exact, "f16"), (a[i], b[i])


def test_sqrt_bf16_fraction_reference():
    rng = np.random.default_rng(8)
    x = np.abs(random_floats(rng, 3000, "bf16"))
    x = x[x != 0]
    got = accum_op("sqrt", x, accum="bf16").view(np.uint16)
    for i, v in enumerate(x):
        n, d = Fraction(float(v)).as_integer_ratio()
        scale = 200  # sqrt(n/d) = sqrt(n·d·4^scale)/(d·2^scale): floor plus a sticky half
        num = n * d * 4 ** scale
        root = math.isqrt(num)
        approx = Fraction(2 * root + (root * root != num), 2 * d * 2 ** scale)
        assert int(got[i]) == R.fraction_encode(approx, "bf16"), v


@pytest.mark.parametrize("storage", ["fp8_e4m3", "fp4_e2m1", "bf16", "f16"])
def test_policy_converts_once_into_storage(storage):
    fmt_dtype = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp4_e2m1": ml_dtypes.float4_e2m1fn,
                 "bf16": ml_dtypes.bfloat16, "f16": np.float16}[storage]
    rng = np.random.default_rng(9)
    a = (rng.standard_normal(5000) * 3).astype(fmt_dtype)
    b = (rng.standard_normal(5000) * 3).astype(fmt_dtype)
    got = arith.mul(a, b, policy=Policy(storage))  # accum f32 by default for narrow storage
    want = (a.astype(np.float32) * b.astype(np.float32)).astype(fmt_dtype)
    assert got.dtype == np.dtype(fmt_dtype)
    assert bits_equal(got, want).all()


def test_policy_rounding_and_overflow_apply_to_the_storage_conversion():
    a, b = np.float32(3.0), np.float32(0.25)  # 3.25 lies between fp4 values 3 and 4
    assert float(arith.add(a, b, policy=Policy("fp4", rounding="rup"))) == 4.0
    assert float(arith.add(a, b, policy=Policy("fp4", rounding="rtz"))) == 3.0
    big = np.float32(3e38)
    assert arith.add(big, big, policy=Policy("f32", overflow="saturate")) == np.finfo(np.float32).max
    assert np.isinf(arith.add(big, big, policy=Policy("f32")))


def test_stochastic_storage_rounding_is_keyed():
    x = np.full(1000, 1 + 2.0 ** -10, np.float32)
    pol = Policy("bf16", rounding="stochastic")
    r1 = arith.add(x, np.float32(0), policy=pol, key=5)
    assert bits_equal(r1, arith.add(x, np.float32(0), policy=pol, key=5)).all()
    assert 0 < (r1.astype(np.float32) > 1).sum() < 1000
    with pytest.raises(TesseraError):
        arith.add(x, x, policy=pol)


def test_f64_accum_and_wider_operands_rounded_into_accum():
    pol = Policy("f32", accum="f32")
    x = np.float64(1 + 2.0 ** -30)
    assert arith.sub(x, np.float32(1), policy=pol) == 0.0  # x became 1.0 in f32 first
    assert arith.sub(x, np.float32(1), policy=Policy("f64")) == 2.0 ** -30


def test_ieee_specials_in_elementwise_ops():
    pol = Policy("f32")
    assert np.isinf(arith.div(np.float32(1), np.float32(0), policy=pol))
    assert np.isnan(arith.div(np.float32(0), np.float32(0), policy=pol))
    s = arith.sqrt(np.float32(-0.0), policy=pol)
    assert s == 0 and np.signbit(s)
    assert np.isnan(arith.sqrt(np.float32(-1), policy=pol))


def test_errors_are_clear():
    with pytest.raises(ArithError, match="unknown elementwise operation"):
        apply_elementwise("pow", 1.0, 2.0, policy="f32")
    with pytest.raises(ArithError, match="takes 2 operand"):
        apply_elementwise("add", 1.0, policy="f32")
    with pytest.raises(ArithError, match=r"\(3,\), \(4,\)"):
        arith.add(np.ones(3, np.float32), np.ones(4, np.float32), policy="f32")
    with pytest.raises(ArithError, match="cannot be an accumulation format"):
        fma(1.0, 2.0, 3.0, fmt="fp8")
    with pytest.raises(TesseraError):
        arith.add(np.array(["a"]), np.array(["b"]), policy="f32")
    err = ArithError("x", fix="y")
    assert isinstance(err, ValueError) and "Fix: y" in str(err)
