"""The tensor-core block-FMA models (NUM-TC-1…6) and the ``tc:`` policies.

Expected values are derived by hand in the comments (f32 bit patterns), or come from
``slow_tc``, an independent reference written differently from ``tessera_ref.numerics.tc``:
one output at a time, in exact rational arithmetic (``fractions.Fraction``), with exponents
from integer bit lengths instead of ``frexp`` and rounding by integer division.
"""
from __future__ import annotations

import math
import os
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import ArithError, LoweringError, PolicyError
from numerics_reference import round_f32

from tessera_ref.ir import TensorType, parse_type
from tessera_ref.numerics import Policy, accum, bf16, dot_canonical, tc

F16, BF16 = np.float16, ml_dtypes.bfloat16
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
# per format: (dtype, smallest normal exponent)
FORMATS = {"f16": (F16, -14), "bf16": (BF16, -126), "fp8_e4m3": (E4M3, -6), "fp8_e5m2": (E5M2, -14)}
# per model and format: (products per block, extra alignment bits) — restated from the spec table
PARAMS = {("tc:sm70", "f16"): (4, 0), ("tc:sm80", "f16"): (8, 1), ("tc:sm80", "bf16"): (8, 1),
          ("tc:sm90", "f16"): (16, 2), ("tc:sm90", "bf16"): (16, 2),
          ("tc:sm90", "fp8_e4m3"): (16, 2), ("tc:sm90", "fp8_e5m2"): (16, 2)}
# sm_90's fp8 m16n8k32 (NUM-TC-1): per 32 k, a block of the k with k mod 4 in {0, 1} from +0, then
# one of the rest onto it, the inputs' exponent floor f16's -14; then C + that by an f32 add
FP8_SM90 = {("tc:sm90", "fp8_e4m3"), ("tc:sm90", "fp8_e5m2")}


# ---------------------------------------------------------------------------------------
# the independent reference

def _log2_floor(q: Fraction) -> int:
    """⌊log2 q⌋ for q > 0, from bit lengths."""
    n, d = q.numerator, q.denominator
    e = n.bit_length() - d.bit_length()
    return e if Fraction(2) ** e <= q else e - 1


def _pow2(e: int) -> Fraction:
    return Fraction(2) ** e


def _chop(q: Fraction, unit: Fraction) -> Fraction:
    """q truncated toward zero to a multiple of unit."""
    m = abs(q) // unit
    return (m * unit) if q >= 0 else -(m * unit)


def _round_out(s: Fraction, bits: int, emin: int, emax: int, nearest: bool):
    if s == 0:
        return 0.0
    quantum = _pow2(max(_log2_floor(abs(s)), emin) - bits + 1)
    m, r = divmod(abs(s), quantum)  # m integer, 0 <= r < quantum
    if nearest and (2 * r > quantum or (2 * r == quantum and m % 2 == 1)):
        m += 1
    v = m * quantum
    if v >= _pow2(emax + 1):
        return math.copysign(math.inf, s)
    return math.copysign(float(v), s)  # float(v) is exact: v has few significant bits


def _slow_blocks(acc: float, groups, a_row, b_col, align: int, emin_in: int, out: str) -> float:
    """The block chain of NUM-TC-2/3 onto ``acc`` over ``groups`` (lists of k), finite values."""
    def expo(x: float, lo: int) -> int:
        return max(_log2_floor(abs(Fraction(x))), lo)

    for ks in groups:
        if math.isinf(acc):
            break  # an accumulator that overflowed stays infinite
        terms, exps = [], []
        for k in ks:
            x, y = float(a_row[k]), float(b_col[k])
            if x != 0 and y != 0:
                terms.append(Fraction(x) * Fraction(y))
                exps.append(expo(x, emin_in) + expo(y, emin_in))
        if acc != 0:
            terms.append(Fraction(acc))
            exps.append(expo(acc, -126))
        if not terms:
            acc = 0.0  # an all-zero block gives +0
            continue
        unit = _pow2(max(exps) - 23 - align)
        s = sum((_chop(t, unit) for t in terms), Fraction(0))
        if out == "f16":
            acc = _round_out(s, 11, -14, 15, nearest=True)
        else:
            acc = _round_out(s, 24 + min(align, 0), -126, 127, nearest=False)
    return acc


def _slow_specials(values):
    """NUM-TC-3's verdict on products and accumulator ``values``: NaN, ±inf, or None (all finite)."""
    if any(math.isnan(v) for v in values) or (math.inf in values and -math.inf in values):
        return math.nan
    if math.inf in values or -math.inf in values:
        return math.inf if math.inf in values else -math.inf
    return None


def _slow_f32_add(x: float, y: float) -> float:
    """IEEE f32 ``x + y`` of two f32 values: the exact sum rounded once to nearest even."""
    if not (math.isfinite(x) and math.isfinite(y)):
        return x + y  # Python's inf/NaN arithmetic is IEEE's
    exact = Fraction(x) + Fraction(y)
    if exact == 0:
        return -0.0 if math.copysign(1, x) < 0 and math.copysign(1, y) < 0 else 0.0
    with np.errstate(over="ignore"):
        return math.copysign(float(round_f32(abs(exact))), exact)  # >= 2^128 - 2^103 rounds to inf


def slow_tc(a_row, b_col, c, model: str, fmt: str, out: str = "f32") -> float:
    """One output of the block-FMA model (NUM-TC-2…4), as exact fractions."""
    n, align = PARAMS[(model, fmt)]
    with np.errstate(invalid="ignore", over="ignore"):  # f64 products, for the special values only
        prods = [float(np.float64(x) * np.float64(y)) for x, y in zip(a_row, b_col)]
    K = len(a_row)
    if (model, fmt) not in FP8_SM90:
        special = _slow_specials(prods + [float(c)])
        if special is not None:
            return special
        return _slow_blocks(float(c), [range(k0, min(k0 + n, K)) for k0 in range(0, K, n)], a_row, b_col, align,
                            FORMATS[fmt][1], out)
    acc = float(c)  # a float, so that a result rounded to -0 keeps its sign
    for i0 in range(0, K, 32):
        ks = range(i0, min(i0 + 32, K))
        groups = [[k for k in ks if k % 4 < 2], [k for k in ks if k % 4 >= 2]]
        part = _slow_specials([prods[k] for k in ks])
        if part is None:
            part = _slow_blocks(0.0, groups, a_row, b_col, align, -14, "f32")
        acc = _slow_f32_add(acc, part)
    return acc


def f32_bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


def run_one(a, b, c, model, fmt, out="f32"):
    """tc.mma on a single dot product given as Python floats; the f32 (f16) result."""
    dtype = FORMATS[fmt][0]
    A = np.array([a], dtype=np.float64).astype(dtype)
    B = np.array(b, dtype=np.float64).astype(dtype)[:, None]
    assert np.array_equal(A.astype(np.float64)[0], a) and np.array_equal(B.astype(np.float64)[:, 0], b)
    C = np.array([[c]], dtype=np.float32 if out == "f32" else np.float16)
    return tc.mma(A, B, C, model, out=out)[0, 0]


def fma_chain(a, b, c=0.0) -> float:
    """The IEEE sequential f32 fma chain (NUM-RED-1), exact fractions rounded once per step."""
    acc = np.float32(c)
    for x, y in zip(a, b):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(acc))
        acc = round_f32(exact) if exact != 0 else np.float32(float(x) * float(y) + float(acc))  # IEEE zero sign
    return float(acc)


# ---------------------------------------------------------------------------------------
# hand-computed vectors (sm80: 8 products per block, grid 2^(E-24); sm70: 4, 2^(E-23); sm90: 16, 2^(E-25))

T = 2.0 ** -12


@pytest.mark.parametrize("model, want", [("tc:sm70", 0x3F800000), ("tc:sm80", 0x3F800001),
                                         ("tc:sm90", 0x3F800001)])
def test_extra_alignment_bits(model, want):
    # products 2^-24, 2^-24, 1: E = 0. sm70 keeps multiples of 2^-23: both small products
    # vanish, 1.0 = 0x3F800000. sm80 keeps 2^-24: 1 + 2^-23 = 0x3F800001 (as sm90).
    got = run_one([T, T, 1.0], [T, T, 1.0], 0.0, model, "f16")
    assert f32_bits(got) == want
    assert f32_bits(fma_chain([T, T, 1.0], [T, T, 1.0])) == 0x3F800001


def test_alignment_truncation_loses_what_the_fma_chain_keeps():
    # products 2^-25 (x3) then 1: each 2^-25 is below sm80's grid 2^-24 and truncates to 0:
    # 1.0 = 0x3F800000. The fma chain adds the small ones first exactly (3·2^-25), then
    # 1 + 0.75 ulp rounds up to 1 + 2^-23 = 0x3F800001.
    a, b = [2.0 ** -13] * 3 + [1.0], [2.0 ** -12] * 3 + [1.0]
    assert f32_bits(run_one(a, b, 0.0, "tc:sm80", "f16")) == 0x3F800000
    assert f32_bits(fma_chain(a, b)) == 0x3F800001


@pytest.mark.parametrize("sign, want", [(1.0, 0x3F800001), (-1.0, 0xBF800001)])
def test_round_toward_zero_not_to_nearest(sign, want):
    # 1.5·2^-12 · 2^-11 = 3·2^-24 is a multiple of the grid 2^-24: kept. 1 + 1.5 ulp rounds
    # toward zero to 1 + 2^-23 (0x3F800001; negated: 0xBF800001). The fma chain rounds the
    # tie 1 + 1.5 ulp to even: 1 + 2^-22 = 0x3F800002.
    a, b = [sign * 1.5 * T, sign], [2.0 ** -11, 1.0]
    assert f32_bits(run_one(a, b, 0.0, "tc:sm80", "f16")) == want
    assert f32_bits(fma_chain(a, b)) == (want & 0x80000000) | 0x3F800002


def test_large_product_swamps_small_ones():
    # products 2^-15 (x4), 1, 1024: E = 10, grid 2^-14: the four 2^-15 vanish: 1025 =
    # 0x44802000. The chain keeps 4·2^-15 = 2^-13 = one ulp of 1024: 0x44802001.
    a, b = [2.0 ** -8] * 4 + [1.0, 32.0], [2.0 ** -7] * 4 + [1.0, 32.0]
    assert f32_bits(run_one(a, b, 0.0, "tc:sm80", "f16")) == 0x44802000
    assert f32_bits(fma_chain(a, b)) == 0x44802001


def test_cancellation_after_truncation():
    # products 1, -1, 2^-30: E = 0, 2^-30 truncates to 0, the sum is exactly 0: +0. The
    # chain gives 2^-30 = 0x30800000.
    a, b = [1.0, -1.0, 2.0 ** -15], [1.0, 1.0, 2.0 ** -15]
    assert f32_bits(run_one(a, b, 0.0, "tc:sm80", "f16")) == 0x00000000
    assert f32_bits(fma_chain(a, b)) == 0x30800000


def test_accumulator_is_aligned_with_the_products():
    # c = 2^23 dominates: E = 23, grid 2^-1; the products 0.5, 0.5 are kept: 2^23 + 1 =
    # 0x4B000001. The chain rounds each 2^23 + 0.5 tie to even: 2^23 = 0x4B000000.
    a, b = [0.5, 0.5], [1.0, 1.0]
    assert f32_bits(run_one(a, b, 2.0 ** 23, "tc:sm80", "f16")) == 0x4B000001
    assert f32_bits(fma_chain(a, b, 2.0 ** 23)) == 0x4B000000
    # the product 256 dominates: E = 8, grid 2^-16; c = 1.5·2^-16 truncates to 2^-16; 256 +
    # 2^-16 rounds toward zero to 256 = 0x43800000. The chain: 256 + 0.75 ulp -> 0x43800001.
    assert f32_bits(run_one([16.0], [16.0], 1.5 * 2.0 ** -16, "tc:sm80", "f16")) == 0x43800000
    assert f32_bits(fma_chain([16.0], [16.0], 1.5 * 2.0 ** -16)) == 0x43800001


def test_blocks_take_the_accumulator_in_order():
    # eight products 2^-26, then 1 at k = 8. sm80: block 1 sums the small ones exactly to
    # 2^-23; block 2 adds 1 + 2^-23 = 0x3F800001. sm90 holds all nine in one block (E = 0,
    # grid 2^-25): the 2^-26 vanish, 1.0 = 0x3F800000.
    a, b = [2.0 ** -13] * 8 + [1.0], [2.0 ** -13] * 8 + [1.0]
    assert f32_bits(run_one(a, b, 0.0, "tc:sm80", "f16")) == 0x3F800001
    assert f32_bits(run_one(a, b, 0.0, "tc:sm90", "f16")) == 0x3F800000


def test_signed_zeros():
    # every term zero: the sum is +0 even from c = -0 (the fma chain gives -0 + -0 = -0)
    assert f32_bits(run_one([-0.0], [1.0], -0.0, "tc:sm80", "f16")) == 0x00000000
    assert f32_bits(fma_chain([-0.0], [1.0], -0.0)) == 0x80000000
    # a nonzero sum that rounds to zero keeps its sign: -2^-133 · 2^-20 = -2^-153 -> -0
    assert f32_bits(run_one([-(2.0 ** -133)], [2.0 ** -20], 0.0, "tc:sm80", "bf16")) == 0x80000000


@pytest.mark.parametrize("a, b, c, want", [
    ([math.inf, 1.0], [0.0, 1.0], 0.0, "nan"),          # 0·inf
    ([math.inf, 1.0], [1.0, -math.inf], 0.0, "nan"),   # +inf and -inf products
    ([1.0, 2.0], [1.0, 1.0], math.inf, "inf"),         # c = +inf stays
    ([1.0, 2.0], [1.0, -math.inf], 5.0, "-inf"),
    ([1.0], [1.0], math.nan, "nan"),
])
def test_inf_and_nan(a, b, c, want):
    got = run_one(a, b, c, "tc:sm80", "f16")
    if want == "nan":
        assert f32_bits(got) == 0x7FC00000  # the canonical NaN (NUM-EW-1)
    else:
        assert got == float(want)


def test_overflow_gives_infinity_and_stays():
    # bf16 products 2^100·2^100 = 2^200 exceed f32: block 1 gives +inf; block 2's -1 keeps it
    a = [2.0 ** 100] + [0.0] * 7 + [1.0]
    b = [2.0 ** 100] + [0.0] * 7 + [-1.0]
    assert run_one(a, b, 0.0, "tc:sm80", "bf16") == math.inf
    # special inputs decide first: a -inf product gives -inf, whatever overflowed before
    assert run_one(a, b[:-1] + [-math.inf], 0.0, "tc:sm80", "bf16") == -math.inf


def test_subnormal_inputs_align_at_the_format_minimum_exponent():
    # a1 = 2^-24 is an f16 subnormal: its exponent is emin = -14, so a1·2^10 = 2^-14 has the
    # block exponent -14 + 10 = -4 and grid 2^-28. 1.5·2^-28 truncates to 2^-28:
    # 2^-14 + 2^-28 = 0x38800200 (true exponents would keep it: 0x38800300, the chain's).
    a, b = [2.0 ** -24, 2.0 ** -14], [2.0 ** 10, 1.5 * 2.0 ** -14]
    assert f32_bits(run_one(a, b, 0.0, "tc:sm80", "f16")) == 0x38800200
    assert f32_bits(fma_chain(a, b)) == 0x38800300


def test_f16_accumulation_rounds_to_nearest_even_per_block():
    # products 1, 2^-11, 2^-24 (all kept: grid 2^-24): 1 + 2^-11 + 2^-24 is above the f16
    # tie 1 + 2^-11, so RNE gives 1 + 2^-10 = 0x3C01 (toward zero would give 0x3C00)
    got = run_one([1.0, 2.0 ** -11, T], [1.0, 1.0, T], 0.0, "tc:sm80", "f16", out="f16")
    assert got.dtype == np.float16 and int(got.view(np.uint16)) == 0x3C01


# sm_90 fp8 (NUM-TC-1): per 32 k, block 1 = the k with k mod 4 in {0, 1} from +0, block 2 = the
# rest onto it (16 products, grid 2^(E-25), toward zero to 24 bits); then C + that, f32 to nearest.
S = 1.5 * 2.0 ** -13  # e5m2 (normal); S·2^-12 = 1.5·2^-25, below sm_90's grid 2^-25 next to a product 1


def _small_products_and_1(at):
    """Products 1.5·2^-25 at the k of ``at``, 1 at k = 2 (block 2: 2 mod 4 = 2)."""
    a, b = [0.0] * 20, [0.0] * 20
    a[2] = b[2] = 1.0
    for k in at:
        a[k], b[k] = S, 2.0 ** -12
    return a, b


def test_fp8_on_sm90_groups_k_mod_4():
    # eight products 1.5·2^-25 at k = 0, 1, 4, 5, 8, 9, 12, 13 (mod 4 in {0, 1}): block 1 sums
    # them exactly from +0 to 12·2^-25 = 3·2^-23; block 2 (the 1: E = 0, grid 2^-25) keeps that:
    # 1 + 3·2^-23 = 0x3F800003. Had k 0–15 formed block 1 (halves), or had the eight been at
    # k = 3, 6, 7, 10, 11, 14, 15, 18 (mod 4 in {2, 3}: the 1's block), each would be truncated
    # to 2^-25 beside the 1: 1 + 8·2^-25 = 1 + 2^-22 = 0x3F800002.
    first, second = (0, 1, 4, 5, 8, 9, 12, 13), (3, 6, 7, 10, 11, 14, 15, 18)
    assert f32_bits(run_one(*_small_products_and_1(first), 0.0, "tc:sm90", "fp8_e5m2")) == 0x3F800003
    assert f32_bits(run_one(*_small_products_and_1(second), 0.0, "tc:sm90", "fp8_e5m2")) == 0x3F800002


def test_fp8_on_sm90_adds_c_to_nearest_after_the_blocks():
    # one product 1.5·2^-12 · 2^-12 = 1.5·2^-24, c = 1: the blocks give 1.5·2^-24 exactly; the f32
    # add 1 + 0.75 ulp rounds to nearest: 1 + 2^-23 = 0x3F800001. With c in the block (grid
    # 2^-25 keeps 3·2^-25) the sum would be rounded toward zero: 1.0 = 0x3F800000.
    assert f32_bits(run_one([1.5 * 2.0 ** -12], [2.0 ** -12], 1.0, "tc:sm90", "fp8_e5m2")) == 0x3F800001
    assert f32_bits(run_one([1.5 * 2.0 ** -12], [2.0 ** -12], 1.0, "tc:sm90", "f16")) == 0x3F800000


def test_fp8_on_sm90_keeps_a_c_below_the_block_grid():
    # products 1 and -1 cancel (E = 0, grid 2^-25); c = 2^-30 lies below that grid and would be
    # truncated away in the block (+0): added after, it survives: 2^-30 = 0x30800000.
    assert f32_bits(run_one([1.0, -1.0], [1.0, 1.0], 2.0 ** -30, "tc:sm90", "fp8_e4m3")) == 0x30800000
    assert f32_bits(run_one([1.0, -1.0], [1.0, 1.0], 2.0 ** -30, "tc:sm90", "f16")) == 0x00000000
    # c = 1 + 2^-20 is f32, not 14-bit: it passes through unchanged (0x3F800008)
    assert f32_bits(run_one([0.0], [0.0], 1.0 + 2.0 ** -20, "tc:sm90", "fp8_e4m3")) == 0x3F800008


def test_fp8_on_sm90_instructions_add_one_after_another():
    # k 0 and k 32 lie in two instructions: c = 2^24 (0x4B800000); + 1 (k 0) is a tie, to even:
    # 2^24; + 1 (k 32) again: 2^24 = 0x4B800000. One add of the exact 2 would give 2^24 + 2.
    a = [1.0] + [0.0] * 31 + [1.0]
    assert f32_bits(run_one(a, a, 2.0 ** 24, "tc:sm90", "fp8_e4m3")) == 0x4B800000
    assert f32_bits(run_one(a[:1] + a[-1:], a[:1] + a[-1:], 2.0 ** 24, "tc:sm90", "fp8_e4m3")) == 0x4B800001


@pytest.mark.parametrize("a, b, c, want", [
    ([math.inf], [-1.0], 3.0, 0xFF800000),                                      # 3 + -inf
    ([math.inf] + [0.0] * 31 + [1.0], [1.0] + [0.0] * 31 + [-math.inf], 0.0, 0x7FC00000),  # +inf, then -inf
    ([1.0], [-math.inf], math.inf, 0x7FC00000),                                 # c = +inf, a -inf product
    ([1.0], [1.0], math.nan, 0x7FC00000),
])
def test_fp8_on_sm90_special_values(a, b, c, want):
    # the blocks' verdict (NUM-TC-3) per instruction, then IEEE's f32 add; NaN is the canonical one
    assert f32_bits(run_one(a, b, c, "tc:sm90", "fp8_e5m2")) == want


# ---------------------------------------------------------------------------------------
# against the independent reference

def _codes(fmt, draw, size):
    dtype = FORMATS[fmt][0]
    bits = 8 if fmt.startswith("fp8") else 16
    raw = np.array(draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=size, max_size=size)),
                   dtype=np.uint8 if bits == 8 else np.uint16)
    with np.errstate(invalid="ignore"):
        vals = raw.view(dtype).astype(np.float64)
    return vals if draw(st.booleans()) else np.where(np.isfinite(vals), vals, 0.0)


@st.composite
def _case(draw):
    model, fmt = draw(st.sampled_from(sorted(PARAMS)))
    out = draw(st.sampled_from(["f32", "f16"])) if (model, fmt) != ("tc:sm80", "bf16") and fmt == "f16" else "f32"
    m, n, k = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 40))
    a = _codes(fmt, draw, m * k).reshape(m, k)
    b = _codes(fmt, draw, k * n).reshape(k, n)
    scale = draw(st.sampled_from([1.0, 2.0 ** -20] + ([2.0 ** 20] if out == "f32" else [])))
    c = np.array(draw(st.lists(st.floats(-1e4, 1e4, width=32), min_size=m * n, max_size=m * n)))
    c = (c * scale).astype(np.float32 if out == "f32" else np.float16).reshape(m, n)
    return model, fmt, out, a, b, c


@settings(max_examples=int(os.environ.get('TC_EXAMPLES', 150)))
@given(_case())
def test_mma_matches_the_slow_reference(case):
    model, fmt, out, a, b, c = case
    got = tc.mma(a, b, c, model, fmt=fmt, out=out)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            want = slow_tc(a[i], b[:, j], c[i, j], model, fmt, out)
            assert np.array_equal(np.array(got[i, j], np.float64), np.array(want), equal_nan=True), \
                (i, j, float(got[i, j]), want)
            assert math.copysign(1, got[i, j]) == math.copysign(1, want)


def test_mma_broadcasts_batches_and_accepts_typed_arrays():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 20)).astype(BF16)
    b = rng.standard_normal((20, 4)).astype(BF16)
    got = tc.mma(a, b, np.float32(0.5), "sm80")
    assert got.shape == (2, 3, 4) and got.dtype == np.float32
    for p in range(2):
        assert np.array_equal(got[p], tc.mma(a[p].astype(np.float64), b.astype(np.float64),
                                             np.full((3, 4), 0.5, np.float32), "tc:sm80", fmt="bf16"))
    assert float(got[1, 2, 3]) == slow_tc(a[1, 2], b[:, 3], 0.5, "tc:sm80", "bf16")


# ---------------------------------------------------------------------------------------
# the statistic of hardware.md and the error bound of NUM-TC-4

def test_about_80_percent_of_k64_f16_dot_products_differ_from_the_fma_chain():
    rng = np.random.default_rng(2021)
    a = rng.uniform(-1, 1, (200, 64)).astype(F16)
    b = rng.uniform(-1, 1, (64, 200)).astype(F16)
    model = tc.mma(a, b, np.float32(0), "tc:sm80")
    chain = dot_canonical(a, b)  # NUM-RED-1 in f32: f16 products exact, one rounding per step
    assert chain.dtype == np.float32
    frac = np.mean(model.view(np.uint32) != chain.view(np.uint32))
    assert 0.7 < frac < 0.95, frac  # 0.838 with this seed


def error_bound(a, b, c, model, fmt):
    """NUM-TC-4's bound on |D − (C + Σ a_k b_k)| for one output (f32 accumulation)."""
    n, align = PARAMS[(model, fmt)]
    K, fp8 = len(a), (model, fmt) in FP8_SM90
    emin = -14 if fp8 else FORMATS[fmt][1]
    eps = Fraction(n + 1, 2 ** (23 + align)) + Fraction(1, 2 ** (23 + min(align, 0)))
    # rounding steps: the blocks; for fp8 per instruction its nonempty k-mod-4 groups and the f32 add
    blocks = max(1, sum(len({k % 4 < 2 for k in range(i0, min(i0 + 32, K))}) + 1 for i0 in range(0, K, 32))
                 if fp8 else -(-K // n))
    lift = [max(abs(Fraction(float(x))), _pow2(emin)) for x in a], [max(abs(Fraction(float(y))), _pow2(emin)) for y in b]
    total = abs(Fraction(float(c))) + sum((x * y for x, y in zip(*lift)), Fraction(0))
    grow = (1 + eps) ** blocks
    return (grow - 1) * total + blocks * grow * _pow2(-126)


@pytest.mark.parametrize("model, fmt", sorted(PARAMS))
def test_model_satisfies_the_stated_error_bound(model, fmt):
    rng = np.random.default_rng(17)
    dtype = FORMATS[fmt][0]
    for scale in (1.0, 2.0 ** -6, 8.0):
        a = (rng.standard_normal((6, 96)) * scale).astype(dtype)
        b = (rng.standard_normal((96, 5)) * scale).astype(dtype)
        c = (rng.standard_normal((6, 5)) * scale ** 2).astype(np.float32)  # of the products' size
        d = tc.mma(a, b, c, model)
        fast_bound = tc.error_bound(a, b, c, model)
        worst = Fraction(0)
        for i in range(6):
            for j in range(5):
                exact = Fraction(float(c[i, j])) + sum((Fraction(float(x)) * Fraction(float(y))
                                                        for x, y in zip(a[i], b[:, j])), Fraction(0))
                err = abs(Fraction(float(d[i, j])) - exact)
                bound = error_bound(a[i], b[:, j], c[i, j], model, fmt)
                assert err <= bound, (i, j, float(err), float(bound))
                worst = max(worst, err / bound)
                fast = Fraction(float(fast_bound[i, j]))
                assert bound <= fast <= bound * (1 + Fraction(1, 2 ** 30))  # tc.error_bound: safe and tight
        assert worst > 0  # the model does round (the check is not vacuous)


# ---------------------------------------------------------------------------------------
# models and policies

def test_model_lookup_and_refusals():
    assert tc.model("sm80") is tc.model("tc:sm80") and tc.model("tc:sm80").block("bf16") == tc.BlockFMA(8, 1, 16)
    with pytest.raises(PolicyError, match="unknown tensor-core model 'tc:sm99'"):
        tc.model("tc:sm99")
    with pytest.raises(PolicyError, match="does not take f32 inputs"):
        tc.model("tc:sm80").block("f32")
    with pytest.raises(PolicyError, match="not f16"):
        tc.mma(np.ones((1, 1), BF16), np.ones((1, 1), BF16), np.zeros((1, 1), np.float16), "sm80", out="f16")
    with pytest.raises(ArithError, match="cannot tell the input format"):
        tc.mma(np.ones((1, 1)), np.ones((1, 1)), 0.0, "sm80")
    with pytest.raises(ArithError, match="not f16 values"):
        tc.mma(np.full((1, 1), 0.1), np.ones((1, 1)), 0.0, "sm80", fmt="f16")


def test_policy_spelling_printing_and_parsing():
    p = Policy("bf16", accum="tc:sm80")
    assert p.tc == "sm80" and p.accum.name == "f32" and str(p) == "bf16 @accum(tc:sm80)"
    assert bf16 @ accum("tc:sm80") == p
    t = TensorType((4, 8), p)
    assert str(t) == "tensor<4x8xbf16, #policy<tc=sm80>>"
    assert parse_type(str(t)) == t


@pytest.mark.parametrize("kwargs, match", [
    (dict(storage="f32", accum="tc:sm80"), "does not take f32 inputs"),
    (dict(storage="fp8_e4m3", accum="tc:sm80"), "does not take fp8_e4m3"),
    (dict(storage="bf16", accum="tc:sm70"), "does not take bf16"),
    (dict(storage="bf16", accum="tc:sm80", reduction="exact"), "conflict"),
    (dict(storage="bf16", accum="tc:sm80", scaling="per_tensor"), "not modeled"),
    (dict(storage="bf16", accum="tc:sm90", tc="sm80"), "two tensor-core models"),
    (dict(storage="bf16", tc="sm80", accum="f64"), "accumulates in f32"),
])
def test_policy_refusals(kwargs, match):
    with pytest.raises(PolicyError, match=match):
        Policy(**kwargs)


def _adversarial_bf16(rng, shape_a, shape_b):
    """Random bf16 operands with rows where the model and the fma chain round differently
    even after rounding into bf16: six products 1.5·2^-25, then 2^-8, then 1 (see below)."""
    a = rng.standard_normal(shape_a).astype(BF16)
    b = rng.standard_normal(shape_b).astype(BF16)
    row = np.array([1.5 * 2.0 ** -25] * 6 + [2.0 ** -8, 1.0])
    a[..., 0, :8] = row
    b[..., :8, 0] = 1.0
    b[..., 8:, 0] = 0.0
    return a, b


def test_matmul_under_a_tc_policy_computes_the_model():
    rng = np.random.default_rng(5)
    pol = Policy("bf16", accum="tc:sm80")
    a, b = _adversarial_bf16(rng, (2, 3, 40), (40, 5))
    x, y = tr.asarray(a, policy=pol), tr.asarray(b, policy=pol)
    got = np.asarray(op.matmul(x, y))
    assert np.array_equal(got.view(np.uint16), tc.mma(a, b, np.float32(0), "sm80").astype(BF16).view(np.uint16))
    # row 0, column 0: sm80 truncates the six 1.5·2^-25 (grid 2^-24): 1 + 2^-8 exactly, a
    # bf16 tie, rounded to even: 1.0. The fma chain sums them first (9·2^-25), rounds
    # 1 + 2^-8 + 9·2^-25 to 1 + 2^-8 + 2^-22, above the tie: 1 + 2^-7.
    assert float(got[0, 0, 0]) == 1.0 and float(np.asarray(op.matmul(a, b))[0, 0, 0]) == 1.0 + 2.0 ** -7
    c = rng.standard_normal((3, 5)).astype(BF16)
    g = np.asarray(op.gemm(x, y, tr.asarray(c, policy=pol)))
    assert np.array_equal(g.view(np.uint16),
                          tc.mma(a, b, c.astype(np.float32), "sm80").astype(BF16).view(np.uint16))
    t = np.asarray(op.matmul(x, tr.asarray(np.swapaxes(b, 0, 1).copy(), policy=pol), transpose_b=True))
    assert np.array_equal(t.view(np.uint16), got.view(np.uint16))


@pytest.mark.parametrize("tile, batch", [((16, 16, 16), ()), ((32, 16, 32), ()), ((16, 16, 32), (2,))])
def test_lowered_tc_matmul_gives_the_graph_bits(tile, batch):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent / "lowering"))
    from lowering_helpers import assert_same_bits, lowered

    rng = np.random.default_rng(11)
    pol = Policy("bf16", accum="tc:sm80")
    a, b = _adversarial_bf16(rng, batch + (32, 64), (64, 32))
    x, y = tr.asarray(a, policy=pol), tr.asarray(b, policy=pol)
    got, want, reports, program = lowered(lambda p, q: op.matmul(p, q), x, y, directives=dict(tile=tile))
    assert_same_bits(got, want)
    assert float(got[0][(0,) * len(batch) + (0, 0)]) == 1.0 and reports[0].findings == []
    assert 'accum = "tc:sm80"' in str(program.tile)


@pytest.mark.parametrize("tile", [(32, 32, 32), (32, 64, 64), (64, 32, 96)])
def test_lowered_fp8_tc_gemm_gives_the_graph_bits(tile):
    """The tile interpreter runs tc.mma per K tile of whole instructions (NUM-TC-5): the Graph
    IR's bits, on the e5m2 outputs planted to show the fp8 structure."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent / "lowering"))
    from lowering_helpers import assert_same_bits, lowered
    from tessera_conformance.cases.numerics._common import fp8_structure_rows

    rng = np.random.default_rng(13)
    a, b, c = ((rng.standard_normal(s) * 2.0 ** rng.integers(-3, 4, s)).astype(E5M2)
               for s in ((64, 192), (192, 64), (64, 64)))
    fp8_structure_rows(a, b, c)
    pol = Policy("fp8_e5m2", accum="tc:sm90")
    got, want, reports, _ = lowered(lambda p, q, r: op.gemm(p, q, r), *(tr.asarray(v, policy=pol) for v in (a, b, c)),
                                    directives=dict(tile=tile))
    assert_same_bits(got, want)
    assert [float(want[0][i, i]) for i in range(3)] == [20480.0, 16384.0, 2.0 ** -16] and reports[0].findings == []


def test_lowering_refuses_a_k_tile_that_splits_blocks():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent / "lowering"))
    from lowering_helpers import lowered

    pol = Policy("fp8_e4m3", accum="tc:sm90")
    a = tr.asarray(np.ones((32, 64), E4M3), policy=pol)
    b = tr.asarray(np.ones((64, 32), E4M3), policy=pol)
    with pytest.raises(LoweringError, match=r"the K tile 16 splits the k = 32 instructions of tc:sm90 \(fp8_e4m3"):
        lowered(lambda p, q: op.matmul(p, q), a, b, directives=dict(tile=(16, 16, 16)))
    # sm_80's m16n8k16 is two blocks of 8: a K tile of 8 holds whole blocks but half an instruction
    pol = Policy("bf16", accum="tc:sm80")
    a = tr.asarray(np.ones((32, 64), BF16), policy=pol)
    b = tr.asarray(np.ones((64, 32), BF16), policy=pol)
    with pytest.raises(LoweringError, match=r"the K tile 8 splits the k = 16 instructions of tc:sm80"):
        lowered(lambda p, q: op.matmul(p, q), a, b, directives=dict(tile=(16, 16, 8)))
