"""Canonical reduction orders (NUM-RED-1, NUM-RED-2) and exact sums (NUM-RED-4).

References: a scalar Python transcription of the lane/butterfly definition using NumPy /
ml_dtypes scalars, an exact-fma chain on ``fractions.Fraction`` for matmul, and
``numerics_reference.fraction_encode`` / ``math.fsum`` for exact sums.
"""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determinism import digests_across_environments
from tessera_ref.numerics import exactsum, reduce
from tessera_ref.numerics.arith import ArithError
from tessera_ref.numerics.exactsum import ExactAccumulator, exact_dot, exact_dot_accumulator, exact_sum
from tessera_ref.numerics.reduce import (argmax_canonical, argmin_canonical, dot_canonical,
                                         dot_tiled, reduce_canonical)
from tessera_ref.numerics.rng import as_key, random_bits

import numerics_reference as R

SCALAR = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(UINT[x.dtype.itemsize])


def same_bits(x, y) -> bool:
    """Same dtype, shape and bits; any NaN matches any NaN (the references' NaNs come from the
    host's arithmetic; canonical NaN bits are tested on their own)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    nan = np.isnan(x.astype(np.float64)) & np.isnan(y.astype(np.float64))
    return bool((nan | (bits(x) == bits(y))).all())


# ---------------------------------------------------------------------------------------
# scalar references

def ieee_max(a, b):
    """IEEE 754-2019 maximum on scalars: NaN propagates, −0 < +0."""
    if math.isnan(float(a)) or math.isnan(float(b)):
        return type(a)(math.nan)
    if a == b:
        return b if math.copysign(1, float(a)) < 0 else a
    return a if a > b else b


def ieee_min(a, b):
    if math.isnan(float(a)) or math.isnan(float(b)):
        return type(a)(math.nan)
    if a == b:
        return a if math.copysign(1, float(a)) < 0 else b
    return a if a < b else b


def warp_reduce_ref(xs, op="sum", accum="f32"):
    """NUM-RED-2 written out: 32 lanes, lane l folds x_l, x_{l+32}, ... left to right from the
    identity, then p_l = p_l ⊕ p_{l xor o} for o = 16, 8, 4, 2, 1; lane 0."""
    t = SCALAR[accum]
    comb = {"sum": lambda p, q: t(p + q), "max": ieee_max, "min": ieee_min}[op]
    identity = {"sum": t(-0.0), "max": t(-math.inf), "min": t(math.inf)}[op]
    lanes = [identity] * 32
    with np.errstate(invalid="ignore", over="ignore"):  # inf − inf and overflow are IEEE's
        for i, x in enumerate(xs):
            lanes[i % 32] = comb(lanes[i % 32], t(x))
        for offset in (16, 8, 4, 2, 1):
            lanes = [comb(lanes[l], lanes[l ^ offset]) for l in range(32)]
    return lanes[0]


def fma_chain_ref(a_row, b_col, acc, fmt="f32"):
    """acc = RN(a_k·b_k + acc) for k ascending, by exact rational arithmetic."""
    t = SCALAR[fmt]
    acc = float(acc)
    for x, y in zip(a_row, b_col):
        x, y = float(x), float(y)
        exact = Fraction(x) * Fraction(y) + Fraction(acc)
        if exact == 0:
            neg_product = math.copysign(1, x) * math.copysign(1, y) < 0
            acc = -0.0 if (x * y == 0 and neg_product and math.copysign(1, acc) < 0) else 0.0
            continue
        code = R.fraction_encode(exact, fmt)
        acc = float(np.array(code, dtype=UINT[np.dtype(t).itemsize]).view(t))
    return t(acc)


# ---------------------------------------------------------------------------------------
# NUM-RED-2: axis reductions

@pytest.mark.parametrize("n", [0, 1, 5, 31, 32, 33, 64, 100, 1000])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reduce_matches_scalar_lane_butterfly(n, op):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))).astype(np.float32)
    assert same_bits(reduce_canonical(x, op=op), np.float32(warp_reduce_ref(x, op)))


def test_order_matters_and_ours_is_the_lane_order():
    rng = np.random.default_rng(11)
    differs_from_pairwise = differs_from_fold = 0
    for _ in range(50):
        x = (rng.standard_normal(777) * np.exp(rng.uniform(-12, 12, 777))).astype(np.float32)
        ours = reduce_canonical(x)
        assert same_bits(ours, np.float32(warp_reduce_ref(x)))
        fold = np.float32(-0.0)
        for v in x:
            fold = np.float32(fold + v)
        differs_from_fold += not same_bits(ours, fold)
        differs_from_pairwise += not same_bits(ours, np.sum(x))
    assert differs_from_fold > 0 and differs_from_pairwise > 0


def test_lane_order_example():
    x = np.ones(33, np.float32)
    x[0] = 1e8  # f32 spacing 8 at 1e8: a left fold never moves
    fold = np.float32(1e8)
    for v in x[1:]:
        fold = np.float32(fold + v)
    assert fold == np.float32(1e8)
    # lane 0 holds 1e8 + x_32 = 1e8; the butterfly adds partials 1, 2, 4 (lost: below or at
    # half the spacing, ties to the even 1e8), then 8 and 16
    assert reduce_canonical(x) == np.float32(1e8 + 24)


@pytest.mark.parametrize("accum", ["f16", "bf16", "f64"])
def test_reduce_in_narrow_and_wide_accum(accum):
    rng = np.random.default_rng(12)
    x = (rng.standard_normal(300) * 8).astype(SCALAR[accum])
    got = reduce_canonical(x, accum=accum)
    assert got.dtype == np.dtype(SCALAR[accum])
    assert same_bits(got, SCALAR[accum](warp_reduce_ref(x, "sum", accum)))


@pytest.mark.parametrize("accum", ["f32", "f16", "bf16"])
def test_short_axes_and_signed_zeros_match_the_32_lane_butterfly(accum):
    # Axes shorter than 32 leave lanes at −0; the fast path stores only the lanes that get a term.
    rng = np.random.default_rng(7)
    for n in range(0, 41):
        for trial in range(3):
            x = rng.choice(np.float32([0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 2.0 ** -20, 1e4]), n)
            got = reduce_canonical(x[None, :].repeat(2, axis=0), axis=1, accum=accum)
            want = warp_reduce_ref(x, "sum", accum)
            assert same_bits(got[0], SCALAR[accum](want)) and same_bits(got[1], got[0]), (n, x)


def test_empty_and_short_axes():
    empty = reduce_canonical(np.zeros(0, np.float32))
    assert empty == 0 and np.signbit(empty)  # all lanes hold −0; −0 + −0 = −0
    assert reduce_canonical(np.zeros(0, np.float32), op="max") == -np.inf
    assert reduce_canonical(np.zeros(0, np.float32), op="min") == np.inf
    assert np.isnan(reduce_canonical(np.zeros(0, np.float32), op="mean"))
    assert not np.signbit(reduce_canonical(np.float32([-0.0, 0.0])))
    assert np.signbit(reduce_canonical(np.float32([-0.0, -0.0])))


def test_specials_propagate_and_nan_is_canonical():
    x = np.float32([1, -np.inf, 2, np.inf])
    assert np.isnan(reduce_canonical(x))
    y = np.float32([1, 2, np.nan, 3]).copy()
    y.view(np.uint32)[2] |= 0x80000001  # a negative NaN with a payload
    for op in ("sum", "max", "min", "mean"):
        r = reduce_canonical(y, op=op)
        assert bits(r) == 0x7FC00000, op
    for zeros in ([-0.0, 0.0], [0.0, -0.0]):  # −0 < +0 whatever the operand order
        assert not np.signbit(reduce_canonical(np.float32(zeros), op="max"))
        assert np.signbit(reduce_canonical(np.float32(zeros), op="min"))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_reduce_any_axis_of_3d(axis):
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((5, 40, 7)) * 100).astype(np.float32)
    got = reduce_canonical(x, axis=axis)
    moved = np.moveaxis(x, axis, -1)
    want = np.array([[warp_reduce_ref(row) for row in plane] for plane in moved], np.float32)
    assert same_bits(got, want.reshape(got.shape))


def test_mean_divides_once_correctly_rounded():
    rng = np.random.default_rng(14)
    for n in (3, 7, 100, 333):
        x = rng.standard_normal(n).astype(np.float32)
        s = np.float32(warp_reduce_ref(x))
        want = R.fraction_encode(Fraction(float(s)) / n, "f32")
        assert int(bits(reduce_canonical(x, op="mean"))) == want


@pytest.mark.parametrize("accum", ["f32", "f16", "bf16"])
def test_division_by_counts_beyond_accum_precision(accum):
    rng = np.random.default_rng(15)
    t = SCALAR[accum]
    s = (rng.standard_normal(2000) * 1e3).astype(t)
    for n in (3, 2 ** 24 + 1, 3 ** 17, 2 ** 40 - 1):  # not representable in accum
        got = bits(reduce.divide_by_count(s, n, reduce.accum_format(accum)).astype(t))
        want = [R.fraction_encode(Fraction(float(v)) / n, accum) for v in s]
        assert (got == np.array(want)).all(), n


def near_midpoint_quotients(rng, man, count):
    """``(s, n)`` with ``s/n`` within a relative 2^-54 of a midpoint ``m = M·2^-(p+1)`` of a
    p-bit format but not on it: ``s·2^(p+1) = σ·2^52 = M·n ± 1`` with σ ≡ ±2^-52 (mod M).
    The f64 quotient then *is* the midpoint, and rounding it again may go the wrong way."""
    p, out = man + 1, []
    while len(out) < count:
        M = int(rng.integers(1 << p, 1 << (p + 1))) | 1
        sign = int(rng.choice([-1, 1]))
        sigma = (sign * pow(2, -52, M)) % M
        if 1 <= sigma < (1 << p):
            n = ((sigma << 52) - sign) // M
            out.append((math.ldexp(sigma, 52 - p - 1), n))
    return out


@pytest.mark.parametrize("accum, man", [("f32", 23), ("bf16", 7)])
def test_division_by_huge_counts_near_midpoints(accum, man):
    rng = np.random.default_rng(16)
    t = SCALAR[accum]
    cases = near_midpoint_quotients(rng, man, 200)
    naive_wrong = 0
    for s, n in cases:
        want = R.fraction_encode(Fraction(s) / n, accum)
        got = reduce.divide_by_count(np.array([s], t), n, reduce.accum_format(accum))
        assert int(bits(got)[0]) == want, (s, n)
        naive_wrong += int(bits(np.array([s / n]).astype(t))[0]) != want
    assert naive_wrong > 0  # teeth: the plain f64 quotient double-rounds on these


def test_argmax_argmin_ties_nan_and_zero_order():
    x = np.float32([1, 3, 3, -2, 3, -2])
    assert argmax_canonical(x) == 1 and argmin_canonical(x) == 3
    assert argmax_canonical(np.float32([1, np.nan, 5, np.nan])) == 1
    assert argmax_canonical(np.float32([-0.0, 0.0, -0.0])) == 1
    assert argmin_canonical(np.float32([0.0, -0.0, -0.0])) == 1
    big = np.zeros(100, np.float32)
    big[[40, 72, 99]] = 7
    assert argmax_canonical(big) == 40
    m = np.float32([[1, 9, 9], [4, 2, 4]])
    assert (argmax_canonical(m, axis=1) == [1, 0]).all()
    assert (argmax_canonical(m, axis=0) == [1, 0, 0]).all()


def test_reduce_errors():
    with pytest.raises(ArithError, match="unknown reduction"):
        reduce_canonical(np.ones(3), op="prod")
    with pytest.raises(ArithError, match="out of range"):
        reduce_canonical(np.ones((2, 3)), axis=2)
    with pytest.raises(ArithError, match="one axis"):
        reduce_canonical(np.ones((2, 3)), axis=(0, 1))
    with pytest.raises(ArithError, match="empty"):
        argmax_canonical(np.ones((2, 0)), axis=1)


@settings(max_examples=150)
@given(st.lists(st.floats(width=32, allow_nan=False), max_size=130),
       st.sampled_from(["sum", "max", "min"]))
def test_reduce_property(xs, op):
    x = np.array(xs, np.float32)
    assert same_bits(reduce_canonical(x, op=op), np.float32(warp_reduce_ref(x, op)))


# ---------------------------------------------------------------------------------------
# NUM-RED-1: dot products

def matmul_ref(a, b, fmt="f32", c=None):
    M, N = a.shape[0], b.shape[1]
    out = np.empty((M, N), SCALAR[fmt])
    for i in range(M):
        for j in range(N):
            out[i, j] = fma_chain_ref(a[i], b[:, j], 0.0 if c is None else c[i, j], fmt)
    return out


def adversarial_f32(rng, shape):
    """Products with bits far below the running sum, where one rounding differs from two."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))
    return x.astype(np.float32)


def test_f32_dot_is_an_exact_fma_chain():
    rng = np.random.default_rng(20)
    a, b = adversarial_f32(rng, (5, 40)), adversarial_f32(rng, (40, 6))
    c = adversarial_f32(rng, (5, 6))
    got = dot_canonical(a, b, c=c)
    assert same_bits(got, matmul_ref(a, b, c=c))
    two_roundings = c.copy()  # teeth: multiply-then-add gives other bits here
    for k in range(40):
        two_roundings = two_roundings + a[:, k, None] * b[None, k, :]
    assert not same_bits(got, two_roundings)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn, np.int8])
def test_narrow_inputs_fast_path_equals_fma_path(dtype):
    rng = np.random.default_rng(21)
    a = (rng.standard_normal((6, 70)) * 4).astype(dtype)
    b = (rng.standard_normal((70, 5)) * 4).astype(dtype)
    got = dot_canonical(a, b)
    A, B = a.astype(np.float32), b.astype(np.float32)
    forced = reduce._accumulate(np.zeros((6, 5), np.float32), A, B, reduce.accum_format("f32"), exact=False)
    assert same_bits(got, forced)
    assert same_bits(got, matmul_ref(a, b))


def test_bf16_products_that_are_not_exact_in_f32_take_the_fma_path():
    # 2^-75 · 2^-75 = 2^-150 is half the smallest f32 subnormal: fl(a·b) ties to 0, so
    # multiply-then-add gives 2^-149, while the fma of 2^-150 + 2^-149 ties up to 2^-148
    a = np.array([[2.0 ** -75]], ml_dtypes.bfloat16)
    c = np.array([[2.0 ** -149]], np.float32)
    assert dot_canonical(a, a, c=c)[0, 0] == np.float32(2.0 ** -148)
    assert np.float32(np.float32(a[0, 0]) * np.float32(a[0, 0])) + c[0, 0] == np.float32(2.0 ** -149)


@pytest.mark.parametrize("accum", ["f16", "bf16"])
def test_narrow_accumulation(accum):
    rng = np.random.default_rng(22)
    a = rng.standard_normal((4, 30)).astype(np.float16)
    b = rng.standard_normal((30, 3)).astype(np.float16)
    got = dot_canonical(a, b, accum=accum)
    assert got.dtype == np.dtype(SCALAR[accum])
    want = matmul_ref(a.astype(SCALAR[accum]), b.astype(SCALAR[accum]), accum)
    assert same_bits(got, want)


def test_f64_dot_f64_and_f32_inputs():
    rng = np.random.default_rng(23)
    a = rng.standard_normal((3, 25)) * np.exp2(rng.integers(-40, 40, (3, 25)))
    b = rng.standard_normal((25, 4))
    assert same_bits(dot_canonical(a, b), matmul_ref(a, b, "f64"))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)  # products exact in f64
    assert same_bits(dot_canonical(a32, b32, accum="f64"), matmul_ref(a32, b32, "f64"))


def test_tiled_equals_untiled_with_ragged_tiles_and_batches():
    rng = np.random.default_rng(24)
    a = adversarial_f32(rng, (2, 1, 37, 53))
    b = adversarial_f32(rng, (3, 53, 29))
    c = adversarial_f32(rng, (37, 29))
    whole = dot_canonical(a, b, c=c)
    assert whole.shape == (2, 3, 37, 29)
    for tm, tn, tk in [(16, 16, 1), (8, 5, 7), (64, 64, 64), (16, 29, 17)]:
        assert same_bits(dot_tiled(a, b, c=c, tile_m=tm, tile_n=tn, tile_k=tk), whole)
    assert same_bits(whole[1, 2, :6, :5], matmul_ref(a[1, 0, :6], b[2, :, :5], c=c[:6, :5]))


def test_dot_specials_and_empty_k():
    a = np.float32([[np.inf, 1], [0, 1]])
    b = np.float32([[0, 1], [1, -np.inf]])
    out = dot_canonical(a, b)
    assert np.isnan(out[0, 0]) and np.isnan(out[0, 1]) and out[1, 0] == 1 and out[1, 1] == -np.inf
    assert bits(out[0, 0]) == 0x7FC00000
    z = dot_canonical(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32))
    assert z.shape == (2, 3) and (z == 0).all() and not np.signbit(z).any()


def test_dot_errors():
    with pytest.raises(ArithError, match="contraction sizes differ"):
        dot_canonical(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(ArithError, match=r"\[\.\.\., M, K\]"):
        dot_canonical(np.ones(3, np.float32), np.ones((3, 2), np.float32))
    with pytest.raises(ArithError, match="batch shapes"):
        dot_canonical(np.ones((2, 2, 3)), np.ones((3, 3, 2)))
    with pytest.raises(ArithError, match="does not broadcast"):
        dot_canonical(np.ones((2, 3)), np.ones((3, 2)), c=np.ones((3, 3)))
    with pytest.raises(ArithError, match="tile_k"):
        dot_tiled(np.ones((2, 3)), np.ones((3, 2)), tile_k=0)


@settings(max_examples=40)
@given(st.integers(1, 4), st.integers(0, 12), st.integers(1, 4), st.integers(0, 2 ** 32 - 1))
def test_dot_property(m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, b = adversarial_f32(rng, (m, k)), adversarial_f32(rng, (k, n))
    assert same_bits(dot_canonical(a, b), matmul_ref(a, b))


# ---------------------------------------------------------------------------------------
# determinism across processes and thread counts

_SCRIPT = """
import hashlib, numpy as np, ml_dtypes
from tessera_ref.numerics.reduce import dot_canonical, reduce_canonical
from tessera_ref.numerics.exactsum import exact_sum
rng = np.random.default_rng(0)
a = (rng.standard_normal((96, 80)) * np.exp2(rng.integers(-20, 20, (96, 80)))).astype(np.float32)
b = (rng.standard_normal((80, 72)) * np.exp2(rng.integers(-20, 20, (80, 72)))).astype(np.float32)
h = hashlib.sha256()
for r in (dot_canonical(a, b), dot_canonical(a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)),
          reduce_canonical(a, axis=0), reduce_canonical(a, axis=1, op="mean"), exact_sum(a, axis=1),
          exact_sum(a.astype(np.float64) * 1.1, out_fmt="f64")):
    h.update(np.ascontiguousarray(r).tobytes())
print(h.hexdigest())
"""


def test_bits_do_not_depend_on_thread_count_or_hash_seed():
    first, second = digests_across_environments(_SCRIPT)
    assert first == second


# ---------------------------------------------------------------------------------------
# NUM-RED-4: exact sums

def exact_fraction(values) -> Fraction:
    return sum((Fraction(float(v)) for v in np.ravel(values)), Fraction(0))


def spread(rng, n, dtype=np.float32, span=60):
    return (rng.standard_normal(n) * np.exp2(rng.integers(-span, span, n))).astype(dtype)


def test_exact_sum_matches_fsum():
    rng = np.random.default_rng(30)
    for dtype in (np.float32, np.float64):
        for n in (0, 1, 10, 1000, 100_000):
            x = spread(rng, n, dtype, 200 if dtype == np.float64 else 60)
            x = np.concatenate([x, -x[: n // 3]])  # massive cancellation
            rng.shuffle(x)
            assert exact_sum(x, out_fmt="f64") == math.fsum(x.astype(np.float64))


@pytest.mark.parametrize("fmt", ["f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3",
                                 "fp6_e3m2", "fp4_e2m1"])
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rup", "rdown", "stochastic"])
def test_exact_sum_rounds_once_in_every_mode(fmt, rounding):
    rng = np.random.default_rng(31)
    scale = {"f64": 2.0 ** 100, "f32": 1e30, "f16": 3e4, "bf16": 1e30}.get(fmt, 20.0)
    x = (rng.standard_normal((60, 9)) * scale / 4).astype(np.float64 if fmt == "f64" else np.float32)
    x[:, 0] *= 2.0 ** -rng.integers(0, 60, 60)  # terms far below the others
    got = exact_sum(x, axis=1, out_fmt=fmt, rounding=rounding, key=7)
    u = random_bits(as_key(7), np.arange(60)).astype(np.int64)
    for i in range(60):
        want = R.fraction_encode(exact_fraction(x[i]), fmt, rounding, "native", int(u[i]))
        assert int(bits(got[i])) == want, (i, x[i])


def test_exact_sum_ties_and_sticky_bits():
    one, half_ulp, tiny = 1.0, 2.0 ** -24, 2.0 ** -149
    cases = [([one, half_ulp], 1.0), ([one, half_ulp, tiny], 1 + 2.0 ** -23),
             ([one, half_ulp, -tiny], 1.0), ([one + 2.0 ** -23, half_ulp], 1 + 2.0 ** -22),
             ([1e38, 1.0, -1e38], 1.0), ([1e38, tiny, -1e38], tiny), ([tiny, tiny * -1], 0.0)]
    for terms, want in cases:
        got = exact_sum(np.float32(terms), out_fmt="f32")
        assert got == np.float32(want) and not np.signbit(got), terms
    assert exact_sum(np.float32([one, half_ulp, tiny]), rounding="rtz") == np.float32(1)
    assert exact_sum(np.float32([-one, -half_ulp, -tiny]), rounding="rup") == np.float32(-1)
    assert exact_sum(np.float32([-one, -tiny]), rounding="rdown") == np.float32(-(1 + 2.0 ** -23))
    under = exact_sum(np.float32([-tiny]), out_fmt="f16")  # a nonzero sum that rounds to −0
    assert under == 0 and np.signbit(under)


def test_exact_sum_overflow_and_specials():
    big = np.float32([3e38, 3e38])
    assert exact_sum(big) == np.inf
    assert exact_sum(big, rounding="rtz") == np.finfo(np.float32).max
    assert exact_sum(big, overflow="saturate") == np.finfo(np.float32).max
    assert exact_sum(-big, rounding="rup") == -np.finfo(np.float32).max
    assert np.isnan(exact_sum(big, out_fmt="fp8_e4m3").astype(np.float32))  # e4m3 overflows to NaN
    assert exact_sum(big, out_fmt="fp4_e2m1").astype(np.float32) == 6.0  # fp4: no special values
    inf, nan = np.inf, np.nan
    assert exact_sum(np.float32([1, inf, 2])) == inf
    assert exact_sum(np.float32([1, -inf])) == -inf
    assert np.isnan(exact_sum(np.float32([inf, -inf])))
    assert bits(exact_sum(np.float32([1, nan]))) == 0x7FC00000
    zero = exact_sum(np.float32([-0.0, -0.0]))
    assert zero == 0 and not np.signbit(zero)  # fixed point has no −0
    assert not np.signbit(exact_sum(np.zeros(0, np.float32)))


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16", "fp8_e4m3", "fp4_e2m1"])
@pytest.mark.parametrize("rounding", ["rne", "rup", "rdown"])
def test_f64_domain_sums_far_below_the_target_quantum_and_zero_sums(fmt, rounding):
    # The f64 domain's unit is 2^-1074; rounding such a sum into a narrow format looks at
    # bits far above the stored digits (regression: this read past the digit window).
    terms = np.float64([[2.0 ** -1000, 0], [-(2.0 ** -160), 0], [2.0 ** -151 * 3, 0], [0, 0],
                        [5e-300, -5e-300]])
    got = exact_sum(terms, axis=1, out_fmt=fmt, rounding=rounding)
    for i, row in enumerate(terms):
        assert int(bits(got[i])) == R.fraction_encode(exact_fraction(row), fmt, rounding, "native", 0), i
    empty = exact_dot_accumulator(np.ones((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert empty.domain == "f64" and not bits(empty.round(fmt, rounding=rounding)).any()


@pytest.mark.parametrize("chunks", [1, 2, 8, 9, 72])
def test_split_sums_merge_to_identical_bits(chunks):
    rng = np.random.default_rng(32)
    x = spread(rng, (4, 7200), span=120)
    whole = ExactAccumulator((4,)).add(x, axis=1)
    merged = ExactAccumulator((4,))
    for part in np.array_split(x, chunks, axis=1):  # ragged splits: 7200/72 = 100, 7200/9 = 800
        merged.merge(ExactAccumulator((4,)).add(part, axis=1))
    assert list(merged.as_fractions()) == [exact_fraction(r) for r in x]
    for fmt in ("f32", "bf16", "fp8"):
        assert same_bits(merged.round(fmt), whole.round(fmt))
        assert same_bits(merged.round(fmt), exact_sum(x, axis=1, out_fmt=fmt))


def test_split_merge_f64_domain_in_any_order():
    rng = np.random.default_rng(33)
    x = rng.standard_normal(5000) * np.exp2(rng.integers(-900, 900, 5000))
    parts = [ExactAccumulator((), "f64").add(p, axis=0) for p in np.array_split(x, 9)]
    fwd, rev = ExactAccumulator((), "f64"), ExactAccumulator((), "f64")
    for p in parts:
        fwd.merge(p)
    for p in reversed(parts):
        rev.merge(p.copy())
    assert fwd.as_fractions() == rev.as_fractions() == exact_fraction(x)
    assert fwd.round("f64") == math.fsum(x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bucketed_and_direct_deposits_agree(dtype, monkeypatch):
    rng = np.random.default_rng(34)
    x = (rng.standard_normal((3, 3000)) * np.exp2(rng.integers(-100, 100, (3, 3000)))).astype(dtype)
    x[0, :5] = [np.inf, 0.0, -0.0, 1e-45, -1e-45]
    if dtype == np.float64:  # subnormal and huge f64 terms, and significands of 53 bits
        x[2, :6] = [5e-324, -1e-310, 1.5e308, 2.2e-308, 1 - 2.0 ** -53, -(1 + 2.0 ** -52)]
    results = []
    for threshold in (1, 10 ** 9):  # everything bucketed / nothing bucketed
        monkeypatch.setitem(exactsum._BUCKET_ROW_MIN, dtype, threshold)
        acc = ExactAccumulator((3,), "f64" if dtype == np.float64 else "f32").add(x, axis=1)
        results.append(acc.as_fractions())
    assert list(results[0]) == list(results[1])
    assert results[0][0] == math.inf and results[0][1] == exact_fraction(x[1])
    assert results[0][2] == exact_fraction(x[2])


def test_accumulator_add_shapes_and_domains():
    acc = ExactAccumulator((2, 3))
    acc.add(np.ones((2, 3), np.float32))             # one term per output
    acc.add(np.float32(0.5))                          # broadcast
    acc.add(np.ones((4, 2, 3), np.float32), axis=0)   # summed axis
    acc.add(np.ones((2, 5, 3), np.float32), axis=1)
    assert (acc.round("f32") == 10.5).all()
    with pytest.raises(ArithError, match="leaves shape"):
        acc.add(np.ones((2, 3), np.float32), axis=0)
    with pytest.raises(ArithError, match="not f32 values"):
        acc.add(np.full((2, 3), 0.1))                # an f64 that is not an f32
    acc.add(np.full((2, 3), 0.5))                     # an f64 that is an f32 is fine
    with pytest.raises(ArithError, match="cannot merge"):
        acc.merge(ExactAccumulator((2, 3), "f64"))
    with pytest.raises(ArithError, match="unknown exact-sum domain"):
        ExactAccumulator((2,), "f16")
    with pytest.raises(ArithError, match="cannot be rounded into"):
        acc.round("int8")
    with pytest.raises(ArithError, match="names an axis twice"):
        exact_sum(np.ones((2, 2)), axis=(0, 0))


def test_stochastic_tie_of_the_32_fraction_bits_uses_the_sticky_bit():
    # the sum 1 + 2^-24 + 2^-149 (digits in units of 2^-149) rounded to f32: the 32 bits below
    # the kept ones are 0x80000000, the rest is the sticky bit; u equal to those 32 bits rounds
    # up exactly when something nonzero lies below them (u < f·2^32)
    for sticky in (0, 1):
        N = (1 << 149) + (1 << 125) + sticky
        digits = np.array([[(N >> (32 * i)) & 0xFFFFFFFF] for i in range(6)], dtype=np.int64)
        value = exactsum._rounded_values(digits, -149, reduce.accum_format("f32"), "stochastic",
                                         np.array([0x80000000], np.uint64))
        assert value[0] == (1 + 2.0 ** -23 if sticky else 1.0)


def test_accumulator_blocks_over_outputs_keep_the_window_consistent(monkeypatch):
    monkeypatch.setattr(exactsum, "_BLOCK", 8)  # many blocks of outputs per add
    rng = np.random.default_rng(36)
    acc = ExactAccumulator((10,))
    small = -np.abs(spread(rng, (10, 3), span=20))  # negative sums: a signed top digit low down
    large = spread(rng, (10, 50), span=120)         # raises the top digit in the first block
    large[8:] = 0  # the last block gets nothing: its sign must move up to the new top digit
    acc.add(small, axis=1).add(large, axis=1)
    want = [exact_fraction(a) + exact_fraction(b) for a, b in zip(small, large)]
    assert list(acc.as_fractions()) == want
    got = acc.round("f32")
    assert [int(v) for v in bits(got)] == [R.fraction_encode(w, "f32") for w in want]


def test_add_integers_fixed_point():
    acc = ExactAccumulator((3,))
    acc.add_integers(np.array([3, -(2 ** 62), 7]), -149)
    acc.add_integers(np.array([1, 2 ** 62, 0]), -149)
    assert list(acc.as_fractions()) == [Fraction(4, 2 ** 149), 0, Fraction(7, 2 ** 149)]
    with pytest.raises(ArithError, match="do not fit"):
        acc.add_integers(np.array([1, 1, 1]), -150)


@settings(max_examples=100)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=80),
       st.integers(1, 10))
def test_exact_sum_property(xs, parts):
    x = np.array(xs, np.float32)
    assert exact_sum(x, out_fmt="f64") == math.fsum(x.astype(np.float64))
    merged = ExactAccumulator(())
    for p in np.array_split(x, parts):
        merged.merge(ExactAccumulator(()).add(p, axis=0))
    assert same_bits(merged.round("f32"), exact_sum(x))


# exact dot products

@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn, np.int8,
                                   ml_dtypes.float8_e5m2, np.float16, ml_dtypes.bfloat16, np.float32])
def test_exact_dot_fraction_reference(dtype):
    rng = np.random.default_rng(35)
    a = (rng.standard_normal((2, 5, 40)) * np.exp2(rng.integers(-6, 6, (2, 5, 40)))).astype(dtype)
    b = (rng.standard_normal((40, 3)) * np.exp2(rng.integers(-6, 6, (40, 3)))).astype(dtype)
    got = exact_dot(a, b, out_fmt="f32")
    for i in np.ndindex(got.shape):
        exact = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[i[0], i[1]], b[:, i[2]])),
                    Fraction(0))
        assert int(bits(got[i])) == R.fraction_encode(exact, "f32")


def test_exact_dot_with_c_specials_and_errors():
    a = np.float32([[1, 2], [np.inf, 0]])
    b = np.float32([[3, 0], [4, 1]])
    c = np.float32([[0.5, 1], [1, 1]])
    got = exact_dot(a, b, c=c)
    assert got[0, 0] == 11.5 and got[0, 1] == 3 and np.isnan(got[1, 1]) and got[1, 0] == np.inf
    with pytest.raises(ArithError, match="64-bit"):
        exact_dot(np.ones((2, 2)), np.ones((2, 2), np.float32))
    fp4 = np.ones((3, 4), ml_dtypes.float4_e2m1fn)
    assert (exact_dot(fp4, fp4.T, out_fmt="fp8").astype(np.float32) == 4).all()
