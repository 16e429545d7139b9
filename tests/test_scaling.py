"""Block and per-tensor scaling (NUM-SCALE-*, NUM-MX-*, NUM-NVFP4-*, NUM-AMAX-*, NUM-DELAY-*).

Expected values come from hand computation or from independent references written here:
Python integers, ``math.frexp`` and ``fractions.Fraction`` for MX; ``np.float32`` scalar
operations and ml_dtypes casts for NVFP4 and per-tensor scaling. The formats' constants
(emax, max) are written out here rather than taken from the registry.
"""
import dataclasses
import hashlib
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from determinism import digests_across_environments
from tessera_ref.errors import ScalingError, TesseraError
from tessera_ref.numerics.scaling import (
    DelayedScaling, ScaledTensor, amax_scale, quantize_mx, quantize_nvfp4, quantize_per_tensor,
)


# name -> (emax of the element format, max, mantissa bits, min-normal exponent, ml_dtypes dtype)
MX = {
    "fp8_e4m3": (8, 448.0, 3, -6, ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": (15, 57344.0, 2, -14, ml_dtypes.float8_e5m2),
    "fp6_e3m2": (4, 28.0, 2, -2, ml_dtypes.float6_e3m2fn),
    "fp6_e2m3": (2, 7.5, 3, 0, ml_dtypes.float6_e2m3fn),
    "fp4_e2m1": (2, 6.0, 1, 0, ml_dtypes.float4_e2m1fn),
}
SIGN = {"fp8_e4m3": 0x80, "fp8_e5m2": 0x80, "fp6_e3m2": 0x20, "fp6_e2m3": 0x20, "fp4_e2m1": 0x8}


# ---------------------------------------------------------------------------------------
# independent references

def _positive_grid(name):
    """(code, exact value) of every finite non-negative code, decoded by ml_dtypes."""
    dt = MX[name][4]
    codes = np.arange(SIGN[name], dtype=np.uint8)
    vals = codes.view(dt).astype(np.float64)
    return [(int(c), Fraction(float(v))) for c, v in zip(codes, vals) if np.isfinite(v)]


_GRIDS = {name: _positive_grid(name) for name in MX}


def ref_round_rne_saturate(value: Fraction, negative: bool, name: str) -> int:
    """Round-to-nearest-even onto the format's grid, saturating; sign bit from the source."""
    grid = _GRIDS[name]
    mag = abs(value)
    top_code, top = grid[-1]
    if mag >= top:
        code = top_code
    else:
        code = None
        for (c0, v0), (c1, v1) in zip(grid, grid[1:]):
            if v0 <= mag <= v1:
                lo, hi = mag - v0, v1 - mag
                code = c0 if lo < hi else c1 if hi < lo else (c0 if c0 % 2 == 0 else c1)
                break
    return code | (SIGN[name] if negative else 0)


def ref_mx_exponent(block, name, mode):
    """Shared exponent E of an MX block from Python floats, or None for a NaN scale."""
    emax, fmax = MX[name][0], MX[name][1]
    if any(math.isnan(v) or math.isinf(v) for v in block):
        return None
    amax = max(abs(v) for v in block)
    if amax == 0:
        return -127
    _, p = math.frexp(amax)
    e = p - 1 - emax
    if mode == "ceil" and Fraction(amax) > Fraction(fmax) * Fraction(2) ** e:
        e += 1
    if e > 127:
        return None
    return max(e, -127)


def ref_mx(values, name, mode="floor", block=32):
    """(element codes, scale codes) of a 1-D array, block by block."""
    codes, scales = [], []
    values = [float(v) for v in values]
    for b in range(0, len(values), block):
        blk = values[b:b + block]
        e = ref_mx_exponent(blk, name, mode)
        if e is None:
            scales.append(0xFF)
            codes += [0] * len(blk)
            continue
        scales.append(e + 127)
        for v in blk:
            codes.append(ref_round_rne_saturate(Fraction(v) / Fraction(2) ** e, math.copysign(1, v) < 0, name))
    return codes, scales


def f32(v):
    return np.float32(v)


def ref_nvfp4_global(x32, global_amax=None):
    ga = f32(np.max(np.abs(x32))) if global_amax is None else f32(global_amax)
    g = f32(ga / f32(2688.0))
    if not (np.isfinite(ga) and g >= f32(2.0**-126)):
        g = f32(1.0)
    return g


def ref_nvfp4_block(xb, g):
    """One block by the step-by-step f32 sequence; ml_dtypes for both casts."""
    a = f32(0.0)
    for v in xb:
        a = f32(np.nan) if (np.isnan(v) or np.isnan(a)) else max(a, f32(abs(v)))
    if not np.isfinite(a):
        return 0x7F, [0] * len(xb), [f32(np.nan)] * len(xb)
    t = f32(f32(a / f32(6.0)) / g)
    s8 = np.array([min(t, f32(448.0))], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    s_code = int(s8.view(np.uint8)[0])
    s = f32(s8.astype(np.float32)[0])
    if s == 0:
        return s_code, [0] * len(xb), [f32(0.0)] * len(xb)
    d = f32(s * g)
    codes, deq = [], []
    for v in xb:
        y = f32(f32(v) / d)
        q = np.array([y], dtype=np.float32).astype(ml_dtypes.float4_e2m1fn)
        codes.append(int(q.view(np.uint8)[0]))
        deq.append(f32(f32(f32(q.astype(np.float32)[0]) * s) * g))
    return s_code, codes, deq


def ref_nvfp4_rows(x2d, global_amax=None):
    """Reference NVFP4 of a 2-D f32 array with 1x16 blocks along the last axis."""
    x2d = np.asarray(x2d, dtype=np.float32)
    g = ref_nvfp4_global(x2d, global_amax)
    rows, cols = x2d.shape
    codes = np.zeros((rows, cols), np.uint8)
    scales = np.zeros((rows, cols // 16), np.uint8)
    deq = np.zeros((rows, cols), np.float32)
    for r in range(rows):
        for b in range(cols // 16):
            s, c, d = ref_nvfp4_block(x2d[r, 16 * b:16 * b + 16], g)
            scales[r, b], codes[r, 16 * b:16 * b + 16], deq[r, 16 * b:16 * b + 16] = s, c, d
    return codes, scales, deq, g


def bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]) if a.dtype.kind == "f" else a


# ---------------------------------------------------------------------------------------
# MX: hand-worked cases

def test_mx_fp4_hand_worked_example():
    # amax 12 = 0.75*2**4 -> floor(log2) = 3, E = 3 - 2 = 1, X = 2, scale code 128.
    # V/X = 0.15 -> 0 (code 0); -0.85 -> -1 (0x8|0x2); 2.5 tie -> 2 (0x4, even); 6 -> 6 (0x7)
    x = np.zeros(32, np.float32)
    x[:4] = [0.3, -1.7, 5.0, 12.0]
    for mode in ("floor", "ceil"):  # 12/2 = 6 <= 6: ceil keeps E = 1
        t = quantize_mx(x, "fp4_e2m1", scale_rounding=mode)
        assert t.scales.tolist() == [0x80]
        assert t.codes[:4].tolist() == [0x0, 0xA, 0x4, 0x7]
        assert not t.codes[4:].any()
        assert t.dequantize()[:4].tolist() == [0.0, -2.0, 4.0, 12.0]
        assert t.nbytes == 16 + 1


def test_mx_e4m3_floor_saturates_ceil_does_not():
    x = np.zeros(32, np.float32)
    x[0], x[1] = 480.0, -3.0
    floor = quantize_mx(x, "fp8_e4m3", scale_rounding="floor")
    # E = floor(log2 480) - 8 = 0; 480 > 448 saturates to 448 = 1.75*2**8 -> 0x7E
    assert floor.scales.tolist() == [127]
    assert floor.codes[0] == 0x7E and floor.dequantize()[0] == 448.0
    # -3 = -1.5*2**1 -> sign | exp field 8 | mantissa 4 = 0xC4
    assert floor.codes[1] == 0xC4
    ceil = quantize_mx(x, "fp8_e4m3", scale_rounding="ceil")
    # 480 > 448 * 2**0 -> E = 1; 240 = 1.875*2**7 -> exp field 14, mantissa 7 -> 0x77
    assert ceil.scales.tolist() == [128]
    assert ceil.codes[0] == 0x77 and ceil.dequantize()[0] == 480.0
    # -1.5 = sign | exp field 7 | mantissa 4 -> 0xBC
    assert ceil.codes[1] == 0xBC and ceil.dequantize()[1] == -3.0


# ---------------------------------------------------------------------------------------
# MX: against the independent reference

finite_f64 = st.builds(
    lambda m, e, s: s * m * 2.0 ** e,
    st.integers(0, 2**20), st.integers(-160, 140), st.sampled_from([1.0, -1.0]),
)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(MX)), mode=st.sampled_from(["floor", "ceil"]),
       blocks=st.lists(st.lists(finite_f64, min_size=32, max_size=32), min_size=1, max_size=3),
       specials=st.lists(st.tuples(st.integers(0, 95), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0])),
                         max_size=2))
def test_mx_matches_reference(name, mode, blocks, specials):
    values = [v for b in blocks for v in b]
    for i, s in specials:
        if i < len(values):
            values[i] = s
    x = np.array(values, dtype=np.float64)
    t = quantize_mx(x, name, scale_rounding=mode)
    codes, scales = ref_mx(values, name, mode)
    assert t.scales.tolist() == scales
    assert t.codes.tolist() == codes


@pytest.mark.parametrize("name", sorted(MX))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_mx_every_format_and_input_dtype(name, dtype):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(8 * 32) * np.exp2(rng.integers(-8, 8, 8 * 32))).astype(dtype)
    for mode in ("floor", "ceil"):
        t = quantize_mx(x, name, scale_rounding=mode)
        codes, scales = ref_mx(x.astype(np.float64), name, mode)
        assert t.codes.tolist() == codes and t.scales.tolist() == scales
        assert t.elem_format.name == name and t.scale_format.name == "e8m0"


@pytest.mark.parametrize("name", sorted(MX))
def test_mx_nan_inf_and_zero_blocks(name):
    x = np.ones((4, 32), np.float32)
    x[0, 5] = np.nan
    x[1, 31] = np.inf
    x[2] = 0.0
    x[3, 0] = -np.inf
    x = np.concatenate([x, np.full((1, 32), 3.0, np.float32)])
    t = quantize_mx(x, name)
    assert t.scales[:, 0].tolist()[:4] == [0xFF, 0xFF, 0x00, 0xFF]
    assert not t.codes[[0, 1, 2, 3]].any()  # NaN blocks and the zero block store code 0
    out = t.dequantize()
    assert np.isnan(out[[0, 1, 3]]).all()
    assert (out[2] == 0).all()
    # the finite block is untouched: 3 = 0.75*2**2 -> E = 1 - emax
    assert t.scales[4, 0] == 1 - MX[name][0] + 127
    assert (out[4] == 3.0).all()


@pytest.mark.parametrize("name", sorted(MX))
def test_mx_scale_clamps_at_minus_127(name):
    emax = MX[name][0]
    # amax = 2**-126: E = -126 - emax <= -128 -> clamped to -127, so V/X = 2**-126 * 2**127 = 2
    assert -126 - emax < -127
    x = np.zeros(32, np.float64)
    x[0] = 2.0**-126
    x[1] = -(2.0**-127)
    x[2] = 2.0**-150  # 2**-23 after scaling: below half the smallest subnormal (2**-16) of every format
    t = quantize_mx(x, name)
    assert t.scales.tolist() == [0]
    assert t.codes[0] == ref_round_rne_saturate(Fraction(2), False, name)
    assert t.codes[1] == ref_round_rne_saturate(Fraction(1), True, name)
    assert t.codes[2] == 0
    assert t.dequantize()[:3].tolist() == [2.0**-126, -(2.0**-127), 0.0]


@pytest.mark.parametrize("name", sorted(MX))
def test_mx_scale_nan_above_127(name):
    emax = MX[name][0]
    top = 127 + emax  # floor(log2 amax) that gives E = 127 exactly
    x = np.zeros((3, 32), np.float64)
    x[0, 0] = 2.0**top
    x[1, 0] = 2.0 ** (top + 1)  # E = 128 -> NaN
    x[2, 0] = -1e300  # far above: still NaN, whatever the sign
    t = quantize_mx(x, name)
    assert t.scales[0, 0] == 254  # E = 127
    assert t.scales[1, 0] == 0xFF and t.scales[2, 0] == 0xFF
    assert not t.codes[1:].any()
    out = t.dequantize()
    # 2**emax * 2**127 is an f32 iff emax == 0; here every emax >= 2 so it overflows to inf
    assert out[0, 0] == np.inf and np.isnan(out[1:]).all()


def test_mx_ceil_turns_top_binade_into_nan_for_f64():
    # amax = 480 * 2**127: floor gives E = 127 and saturates; ceil needs E = 128 -> NaN
    x = np.zeros(32, np.float64)
    x[0] = 480.0 * 2.0**127
    assert quantize_mx(x, "fp8_e4m3", scale_rounding="floor").scales.tolist() == [254]
    assert quantize_mx(x, "fp8_e4m3", scale_rounding="floor").codes[0] == 0x7E
    assert quantize_mx(x, "fp8_e4m3", scale_rounding="ceil").scales.tolist() == [0xFF]


@pytest.mark.parametrize("rounding, expect", [("rne", [0x00, 0x80]), ("rtz", [0x00, 0x80]),
                                               ("rup", [0x01, 0x80]), ("rdown", [0x00, 0x81])])
def test_mx_tiny_quotients_round_exactly_despite_f64_underflow(rounding, expect):
    # E = 100 - 8 = 92; +-2**-1000 / 2**92 = +-2**-1092 underflows in f64 but is a nonzero real:
    # rup must give the smallest subnormal (0x01) and rdown its negative (0x81); zeros keep the sign
    x = np.zeros(32, np.float64)
    x[0] = 2.0**100
    x[1], x[2] = 2.0**-1000, -(2.0**-1000)
    t = quantize_mx(x, "fp8_e4m3", rounding=rounding)
    assert t.codes[1:3].tolist() == expect


# ---------------------------------------------------------------------------------------
# MX: floor vs ceil, error bound

@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(sorted(MX)),
       block=st.lists(st.floats(-(2.0**100), 2.0**100, width=32), min_size=32, max_size=32))
def test_mx_ceil_never_saturates_and_is_minimal(name, block):
    fmax = Fraction(MX[name][1])
    x = np.array(block, np.float32)
    t = quantize_mx(x, name, scale_rounding="ceil")
    e = int(t.scales[0]) - 127
    amax = Fraction(float(np.max(np.abs(x))))
    assert amax <= fmax * Fraction(2) ** e
    if e > -127 and amax > 0:
        assert amax > fmax * Fraction(2) ** (e - 1)  # the smallest such power of two
    # every element's exact quotient V/X is within range: nothing saturates
    for v in block:
        assert abs(Fraction(float(np.float32(v))) / Fraction(2) ** e) <= fmax
    floor = quantize_mx(x, name, scale_rounding="floor")
    ef = int(floor.scales[0]) - 127
    assert ef in (e, e - 1) or (amax == 0 and ef == e == -127)


@pytest.mark.parametrize("name", sorted(MX))
@pytest.mark.parametrize("mode", ["floor", "ceil"])
def test_mx_round_trip_error_bound(name, mode):
    """|dequant - x| <= max(2**-(m+1) |x|, 2**(emin-m-1) X) for every element whose |x|/X is at
    most the element max (half a unit in the last place of the element, normal or subnormal,
    times the block scale X); saturated elements (floor only) dequantize to exactly +-max*X."""
    emax, fmax, m, emin, _ = MX[name]
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((64, 32)) * np.exp2(rng.integers(-30, 30, (64, 1)))).astype(np.float32)
    t = quantize_mx(x, name, scale_rounding=mode)
    out = t.dequantize().astype(np.float64)
    saturated = 0
    for r in range(64):
        e = ref_mx_exponent([float(v) for v in x[r]], name, mode)
        scale = 2.0**e
        for v, d in zip(x[r].astype(np.float64), out[r]):
            if abs(v) / scale > fmax:
                assert mode == "floor" and d == math.copysign(fmax * scale, v)
                saturated += 1
            else:
                bound = max(2.0 ** -(m + 1) * abs(v), 2.0 ** (emin - m - 1) * scale)
                assert abs(d - v) <= bound
    assert mode == "floor" or saturated == 0


# ---------------------------------------------------------------------------------------
# MX: layout

def test_mx_axis_is_the_transpose_of_the_last_axis():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 5, 3)).astype(np.float32)
    a = quantize_mx(x, "fp6_e2m3", axis=0)
    b = quantize_mx(np.moveaxis(x, 0, -1), "fp6_e2m3", axis=-1)
    assert a.axis == (0,) and a.scales.shape == (2, 5, 3)
    assert np.array_equal(np.moveaxis(a.codes, 0, -1), b.codes)
    assert np.array_equal(np.moveaxis(a.scales, 0, -1), b.scales)
    assert np.array_equal(bits(a.dequantize()), bits(np.moveaxis(b.dequantize(), -1, 0)))


def test_mx_padding_equals_explicit_zero_padding_and_crops():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    with pytest.raises(ScalingError, match="pad=True"):
        quantize_mx(x, "fp4_e2m1")
    t = quantize_mx(x, "fp4_e2m1", pad=True)
    manual = quantize_mx(np.pad(x, [(0, 0), (0, 24)]), "fp4_e2m1")
    assert t.shape == (3, 40) and t.padded_shape == (3, 64)
    assert np.array_equal(t.codes, manual.codes) and np.array_equal(t.scales, manual.scales)
    assert t.dequantize().shape == (3, 40)
    assert np.array_equal(bits(t.dequantize()), bits(manual.dequantize()[:, :40]))
    assert t.nbytes == 3 * 64 // 2 + 3 * 2


def test_mx_other_block_sizes():
    x = np.arange(1, 17, dtype=np.float32)
    t = quantize_mx(x, "fp8_e4m3", block=8)
    # blocks 1..8 (amax 8 -> E = 3 - 8 = -5) and 9..16 (amax 16 -> E = 4 - 8 = -4)
    assert t.scales.tolist() == [122, 123]
    assert t.dequantize().tolist() == list(range(1, 17))


# ---------------------------------------------------------------------------------------
# NVFP4

def test_nvfp4_hand_worked_example():
    # g = 2688/2688 = 1; t = 10/6 = 1.6666666 -> e4m3 1.625 (0x3D: exp field 7, mantissa 5)
    # 10/1.625 = 6.15 -> 6 (0x7, saturated); -3/1.625 = -1.85 -> -2 (0xC); 0.7/1.625 = 0.43 -> 0.5 (0x1)
    x = np.zeros(16, np.float32)
    x[:3] = [10.0, -3.0, 0.7]
    t = quantize_nvfp4(x, global_amax=2688.0)
    assert t.global_scale == np.float32(1.0)
    assert t.scales.tolist() == [0x3D]
    assert t.codes[:3].tolist() == [0x7, 0xC, 0x1] and not t.codes[3:].any()
    assert t.dequantize()[:3].tolist() == [9.75, -3.25, 0.8125]
    assert t.nbytes == 8 + 1 + 4


def test_nvfp4_order_of_operations_is_observable():
    # (amax / 6) / g = 2.625 exactly, the midpoint of the e4m3 neighbours 2.5 (0x42: exp field 8,
    # mantissa 2, even) and 2.75 (0x43): ties to 2.5. amax / (6 * g) and (amax * f32(1/6)) / g
    # both give 2.6250002, which would round to 2.75.
    x = np.zeros(16, np.float32)
    x[0] = 3.4846041202545166
    t = quantize_nvfp4(x, global_amax=594.7057495117188)
    assert t.scales.tolist() == [0x42] == [ref_nvfp4_block(x, ref_nvfp4_global(x, 594.7057495117188))[0]]
    # s_b = 320 (0x7A), g = f32(240.13008 / 2688), d = 28.586914: x / d = 3.4999998 -> 3 (0x5),
    # whereas x * f32(1 / d) = 3.5 exactly would tie to 4 (0x6)
    x = np.zeros(16, np.float32)
    x[0], x[1] = 171.521484375, 100.05419158935547
    t = quantize_nvfp4(x, global_amax=240.1300811767578)
    assert t.scales.tolist() == [0x7A] and t.codes[:2].tolist() == [0x7, 0x5]
    assert t.codes[:2].tolist() == ref_nvfp4_block(x, ref_nvfp4_global(x, 240.1300811767578))[1][:2]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 4), nblocks=st.integers(1, 3),
       spread=st.integers(0, 40), ga=st.sampled_from([None, "exact", "larger", "smaller", 0.0, 1e-42, math.inf]))
def test_nvfp4_matches_step_by_step_reference(seed, rows, nblocks, spread, ga):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, 16 * nblocks)) * np.exp2(rng.integers(-spread, spread + 1, (rows, 16 * nblocks)))
         ).astype(np.float32)
    amax = float(np.max(np.abs(x)))
    global_amax = {"exact": amax, "larger": amax * 37.0, "smaller": amax / 9.0}.get(ga, ga)
    t = quantize_nvfp4(x, global_amax=global_amax)
    codes, scales, deq, g = ref_nvfp4_rows(x, global_amax)
    assert bits(np.float32(t.global_scale)) == bits(g)
    assert np.array_equal(t.scales, scales)
    assert np.array_equal(t.codes, codes)
    assert np.array_equal(bits(t.dequantize()), bits(deq))


def test_nvfp4_special_blocks():
    x = np.ones((5, 16), np.float32)
    x[0, 3] = np.nan
    x[1, 0] = -np.inf
    x[2] = 0.0
    x[3] = 1e-30  # t = 1e-30/6/g rounds to e4m3 zero -> elements 0
    t = quantize_nvfp4(x, global_amax=1.0)
    ref = [ref_nvfp4_block(x[r], ref_nvfp4_global(x, 1.0)) for r in range(5)]
    assert t.scales[:, 0].tolist() == [r[0] for r in ref]
    assert t.scales[0, 0] == 0x7F and t.scales[1, 0] == 0x7F and t.scales[2, 0] == 0 and t.scales[3, 0] == 0
    assert not t.codes[:4].any()
    out = t.dequantize()
    assert np.isnan(out[:2]).all() and (out[2:4] == 0).all() and (out[4] == 1.0).all()


@pytest.mark.parametrize("ga", [0.0, np.inf, np.nan, 1e-40])
def test_nvfp4_unusable_global_amax_gives_unit_global_scale(ga):
    x = np.linspace(-3, 3, 32, dtype=np.float32)
    t = quantize_nvfp4(x, global_amax=ga)
    assert t.global_scale == np.float32(1.0)
    assert np.array_equal(t.codes, ref_nvfp4_rows(x[None], 2688.0)[0][0])  # g = 1 either way


def test_nvfp4_default_global_amax_is_tensor_amax():
    x = np.linspace(-5, 7, 64, dtype=np.float32).reshape(2, 32)
    assert quantize_nvfp4(x).global_scale == np.float32(np.float32(7.0) / np.float32(2688.0))


def test_nvfp4_2d_blocks_match_tile_reference():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((32, 48)).astype(np.float32)
    x[15, 2] = 40.0  # the last row of tile (0, 0) decides that tile's scale
    t = quantize_nvfp4(x, block_2d=True)
    assert t.block == (16, 16) and t.axis == (0, 1) and t.scales.shape == (2, 3)
    g = ref_nvfp4_global(x)
    for i in range(2):
        for j in range(3):
            tile = x[16 * i:16 * i + 16, 16 * j:16 * j + 16].reshape(-1)
            s, c, d = ref_nvfp4_block(tile, g)
            assert t.scales[i, j] == s
            assert t.codes[16 * i:16 * i + 16, 16 * j:16 * j + 16].reshape(-1).tolist() == c
            assert np.array_equal(bits(t.dequantize()[16 * i:16 * i + 16, 16 * j:16 * j + 16].reshape(-1)),
                                  bits(np.array(d, np.float32)))
    one_d = quantize_nvfp4(x)
    assert one_d.scales.shape == (32, 3)
    assert one_d.scales[0, 0] != t.scales[0, 0]  # row 0 alone does not see the 40
    assert t.nbytes == 32 * 48 // 2 + 6 + 4


def test_nvfp4_axis_and_padding():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((20, 6)).astype(np.float32)
    with pytest.raises(ScalingError, match="not a multiple of the block size 16"):
        quantize_nvfp4(x, axis=0)
    t = quantize_nvfp4(x, axis=0, pad=True)
    assert t.padded_shape == (32, 6) and t.scales.shape == (2, 6)
    codes, scales, deq, _ = ref_nvfp4_rows(np.pad(x, [(0, 12), (0, 0)]).T, float(np.max(np.abs(x))))
    assert np.array_equal(t.codes.T, codes) and np.array_equal(t.scales.T, scales)
    assert np.array_equal(bits(t.dequantize()), bits(deq.T[:20]))


# ---------------------------------------------------------------------------------------
# stochastic rounding

def _needs_rng():
    return pytest.importorskip("tessera_ref.numerics.rng", reason="the counter-based RNG module is not present")


def test_nvfp4_stochastic_shard_rounds_as_the_whole():
    _needs_rng()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    whole = quantize_nvfp4(x, rounding="stochastic", key=1234)
    again = quantize_nvfp4(x, rounding="stochastic", key=1234)
    assert np.array_equal(whole.codes, again.codes)
    ga = float(np.max(np.abs(x)))
    idx = np.arange(x.size).reshape(x.shape)
    for rows in (slice(0, 3), slice(3, 8)):
        shard = quantize_nvfp4(x[rows], rounding="stochastic", key=1234, index=idx[rows], global_amax=ga)
        assert np.array_equal(shard.codes, whole.codes[rows])
        assert np.array_equal(shard.scales, whole.scales[rows])
    # every stochastic code is one of the two grid neighbours of the exact quotient
    rne = quantize_nvfp4(x)
    assert np.array_equal(rne.scales, whole.scales)
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    y = np.abs(x / np.repeat(rne.scale_values * rne.global_scale, 16, axis=-1)).astype(np.float64)
    lo = grid[np.searchsorted(grid, y, side="right") - 1]
    hi = grid[np.minimum(np.searchsorted(grid, y, side="left"), 7)]
    got = np.abs(whole.codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64))
    assert ((got == lo) | (got == hi)).all()
    assert not np.array_equal(whole.codes, rne.codes)


def test_mx_stochastic_shard_rounds_as_the_whole():
    _needs_rng()
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    whole = quantize_mx(x, "fp4_e2m1", rounding="stochastic", key=7)
    idx = np.arange(x.size).reshape(x.shape)
    part = quantize_mx(x[2:], "fp4_e2m1", rounding="stochastic", key=7, index=idx[2:])
    assert np.array_equal(part.codes, whole.codes[2:])


# ---------------------------------------------------------------------------------------
# bytes

@pytest.mark.parametrize("make, expected", [
    (lambda x: quantize_mx(x, "fp4_e2m1"), 512 + 32),
    (lambda x: quantize_mx(x, "fp6_e3m2"), 768 + 32),
    (lambda x: quantize_mx(x, "fp6_e2m3"), 768 + 32),
    (lambda x: quantize_mx(x, "fp8_e4m3"), 1024 + 32),
    (lambda x: quantize_mx(x, "fp8_e5m2"), 1024 + 32),
    (lambda x: quantize_nvfp4(x), 512 + 64 + 4),
    (lambda x: quantize_nvfp4(x.reshape(32, 32), block_2d=True), 512 + 4 + 4),
    (lambda x: quantize_per_tensor(x, "fp8_e4m3"), 1024 + 4),
    (lambda x: quantize_per_tensor(x, "fp4_e2m1"), 512 + 4),
    (lambda x: quantize_mx(x[:1000], "fp4_e2m1", pad=True), 512 + 32),
])
def test_nbytes_counts_packed_storage(make, expected):
    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    assert make(x).nbytes == expected


# ---------------------------------------------------------------------------------------
# per-tensor amax scaling

def test_amax_scale_values():
    assert amax_scale(2.0, "fp8_e4m3") == np.float32(224.0)
    assert amax_scale(2.0, "fp8_e4m3", margin=1) == np.float32(112.0)
    assert amax_scale(3.0, "fp8_e5m2") == np.float32(57344.0) / np.float32(3.0)
    assert amax_scale(0.1, "fp8_e4m3", margin=2) == (np.float32(448.0) / np.float32(0.1)) / np.float32(4.0)
    # f32(amax) first: 2**-149 is the smallest subnormal; 448 / it overflows -> f32 max
    assert amax_scale(2.0**-149, "fp8_e4m3") == np.finfo(np.float32).max
    assert amax_scale(2.0**-149, "fp8_e4m3", margin=1) == np.finfo(np.float32).max / np.float32(2.0)
    assert amax_scale(np.float64(3.0000000001), "fp8_e4m3") == np.float32(448.0) / np.float32(3.0)
    assert isinstance(amax_scale(2.0, "fp8"), np.float32)


@pytest.mark.parametrize("amax", [0.0, -0.0, np.inf, np.nan, 1e-60])
def test_amax_scale_unusable_amax_is_one(amax):
    assert amax_scale(amax, "fp8_e4m3") == np.float32(1.0)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(["fp8_e4m3", "fp8_e5m2", "fp4_e2m1"]),
       margin=st.integers(0, 3))
def test_quantize_per_tensor_matches_reference(seed, name, margin):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(64) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
    fmax = f32(MX[name][1])
    scale = f32(f32(fmax / f32(np.max(np.abs(x)))) / f32(2.0**margin))
    t = quantize_per_tensor(x, name, margin=margin)
    assert bits(np.asarray(t.scale_values)) == bits(np.asarray(scale))
    y = np.array([f32(v * scale) for v in x], np.float32)
    ref = np.clip(y, -fmax, fmax).astype(MX[name][4])
    assert np.array_equal(t.codes, ref.view(np.uint8))
    deq = np.array([f32(f32(c) / scale) for c in ref.astype(np.float32)], np.float32)
    assert np.array_equal(bits(t.dequantize()), bits(deq))


def test_quantize_per_tensor_explicit_scale_saturates_and_keeps_nan():
    x = np.array([1.0, 100.0, -1000.0, np.nan], np.float32)
    t = quantize_per_tensor(x, "fp8_e4m3", scale=4.0)
    # 4 -> 0x48; 400 is the midpoint of 384 (1.5*2**8, even mantissa 4) and 416 -> 384 (0x7C);
    # -4000 saturates to -448 (0xFE); NaN -> 0x7F
    assert t.codes.tolist() == [0x48, 0x7C, 0xFE, 0x7F]
    out = t.dequantize()
    assert out[:3].tolist() == [1.0, 96.0, -112.0] and np.isnan(out[3])


def test_quantize_per_tensor_of_a_scalar():
    t = quantize_per_tensor(np.float32(3.0), "fp8_e4m3")  # scale 448/3; 3 * scale = 448 -> 0x7E
    assert t.shape == () and t.codes.shape == () and int(t.codes) == 0x7E
    assert t.dequantize().shape == () and t.dequantize() == np.float32(448.0) / (np.float32(448.0) / np.float32(3.0))


# ---------------------------------------------------------------------------------------
# delayed scaling

def test_delayed_scaling_uses_history_before_current_amax():
    d = DelayedScaling("fp8_e4m3", history_len=3)
    assert d.scale == np.float32(1.0) and d.history.size == 0
    t1 = d.quantize(np.array([2.0, -1.0], np.float32))
    assert t1.scale_values == np.float32(1.0)  # empty history: scale 1
    assert d.history.tolist() == [2.0] and d.scale == np.float32(224.0)
    t2 = d.quantize(np.array([4.0], np.float32))
    assert t2.scale_values == np.float32(224.0)  # the scale from step 1, not from amax 4
    assert d.history.tolist() == [2.0, 4.0] and d.scale == np.float32(112.0)  # max 4 -> 448/4
    t3 = d.quantize(np.array([1.0], np.float32))
    assert t3.scale_values == np.float32(112.0) and t3.codes.tolist() == [0x6E]  # 112 = 1.75*2**6: exp field 13, mantissa 6


def test_delayed_scaling_max_and_length_bound():
    d = DelayedScaling("fp8_e4m3", history_len=3, algo="max")
    for a in [8.0, 2.0, 1.0, 4.0]:
        d.record(a)
    assert d.history.tolist() == [2.0, 1.0, 4.0]  # oldest (8) dropped
    assert d.scale == np.float32(448.0 / 4.0)
    d.record(0.5)
    assert d.history.tolist() == [1.0, 4.0, 0.5] and d.scale == np.float32(112.0)
    d.record(0.5)
    d.record(0.5)  # 4 has rolled out
    assert d.scale == np.float32(896.0)


def test_delayed_scaling_most_recent_and_unusable_amax():
    d = DelayedScaling("fp8_e5m2", history_len=4, algo="most_recent", margin=1)
    d.record(8.0)
    assert d.scale == np.float32(57344.0 / 8.0 / 2.0)
    d.record(2.0)
    assert d.scale == np.float32(57344.0 / 2.0 / 2.0)
    d.record(0.0)  # unusable: keep the previous scale (TE)
    assert d.scale == np.float32(57344.0 / 2.0 / 2.0)
    d.record(np.nan)
    assert d.scale == np.float32(57344.0 / 2.0 / 2.0)
    d.reset()
    assert d.scale == np.float32(1.0) and d.history.size == 0


def test_delayed_scaling_nan_in_history_freezes_max_scale():
    d = DelayedScaling(history_len=2)
    d.record(2.0)
    d.record(np.nan)
    d.record(4.0)  # history [nan, 4]: max is NaN -> keep 224
    assert d.scale == np.float32(224.0)
    d.record(4.0)  # NaN rolled out
    assert d.scale == np.float32(112.0)


def test_delayed_history_is_read_only_and_hybrid_formats():
    d = DelayedScaling()
    d.record(1.0)
    h = d.history
    with pytest.raises(ValueError):
        h[0] = 5.0
    assert d.history.tolist() == [1.0]
    fwd, bwd = DelayedScaling.hybrid(history_len=16)
    assert fwd.fmt.name == "fp8_e4m3" and bwd.fmt.name == "fp8_e5m2"
    fwd.record(2.0)
    assert bwd.history.size == 0 and fwd.history_len == bwd.history_len == 16


# ---------------------------------------------------------------------------------------
# errors

X64 = np.ones(64, np.float32)


@pytest.mark.parametrize("call", [
    lambda: quantize_mx(X64, "fp8_e4m3", block=0),
    lambda: quantize_mx(X64, "fp8_e4m3", block=-32),
    lambda: quantize_mx(X64, "fp8_e4m3", block=2.5),
    lambda: quantize_mx(X64, "fp8_e4m3", block=True),
    lambda: quantize_mx(X64, "fp8_e4m3", axis=1),
    lambda: quantize_mx(X64, "fp8_e4m3", axis="x"),
    lambda: quantize_mx(X64[:40], "fp8_e4m3"),
    lambda: quantize_mx(X64, "int8"),
    lambda: quantize_mx(X64, "f32"),
    lambda: quantize_mx(X64, "e8m0"),
    lambda: quantize_mx(X64, "nope"),
    lambda: quantize_mx(X64, "fp4", scale_rounding="up"),
    lambda: quantize_mx(X64, "fp4", rounding="nearest"),
    lambda: quantize_mx(X64, "fp4", rounding="stochastic"),
    lambda: quantize_mx(np.float32(1.0), "fp4"),
    lambda: quantize_mx(X64.astype(np.complex64), "fp4"),
    lambda: quantize_mx(X64, "fp4", rounding="stochastic", key=1, index=np.arange(3)),
    lambda: quantize_nvfp4(X64, block_2d=True),
    lambda: quantize_nvfp4(X64.reshape(4, 16), block_2d=True, axis=(0, 0)),
    lambda: quantize_nvfp4(X64.reshape(4, 16), block_2d=True, axis=0),
    lambda: quantize_nvfp4(X64[:24]),
    lambda: quantize_nvfp4(X64, global_amax=-1.0),
    lambda: quantize_nvfp4(X64, global_amax=[1.0, 2.0]),
    lambda: quantize_nvfp4(X64, rounding="stochastic"),
    lambda: amax_scale(-1.0, "fp8_e4m3"),
    lambda: amax_scale(1.0, "fp8_e4m3", margin=-1),
    lambda: amax_scale(1.0, "fp8_e4m3", margin=1.5),
    lambda: amax_scale(1.0, "e8m0"),
    lambda: quantize_per_tensor(X64, "fp8_e4m3", scale=0.0),
    lambda: quantize_per_tensor(X64, "fp8_e4m3", scale=-2.0),
    lambda: quantize_per_tensor(X64, "fp8_e4m3", scale=np.inf),
    lambda: quantize_per_tensor(X64, "fp8_e4m3", scale=2.0, margin=1),
    lambda: quantize_per_tensor(X64, "f64"),
    lambda: DelayedScaling(history_len=0),
    lambda: DelayedScaling(algo="mean"),
    lambda: DelayedScaling(fmt="nope"),
    lambda: DelayedScaling().record(-1.0),
    lambda: ScaledTensor("mx", np.zeros(32, np.uint8), "fp4", np.zeros(2, np.uint8), "e8m0", (32,), (0,), (32,)),
    lambda: ScaledTensor("blocky", np.zeros(32, np.uint8), "fp4", np.zeros(1, np.uint8), "e8m0", (32,), (0,), (32,)),
    lambda: ScaledTensor("mx", np.zeros(32, np.float32), "fp4", np.zeros(1, np.uint8), "e8m0", (32,), (0,), (32,)),
    lambda: ScaledTensor("mx", np.zeros(32, np.uint8), "fp4", np.zeros(1, np.uint8), "fp8_e4m3", (32,), (0,), (32,)),
    lambda: ScaledTensor("mx", np.zeros(32, np.uint8), "fp4", np.zeros(1, np.uint8), "e8m0", (0,), (0,), (32,)),
    lambda: ScaledTensor("mx", np.zeros(32, np.uint8), "fp4", np.zeros(1, np.uint8), "e8m0", (32,), (1,), (32,)),
    lambda: ScaledTensor("nvfp4", np.zeros(16, np.uint8), "fp4", np.zeros(1, np.uint8), "e4m3", (16,), (0,), (16,)),
])
def test_bad_inputs_raise_scaling_error(call):
    with pytest.raises(ScalingError) as info:
        call()
    assert isinstance(info.value, TesseraError) and info.value.fix


def test_not_divisible_error_names_shape_and_offers_padding():
    with pytest.raises(ScalingError) as info:
        quantize_mx(np.ones((2, 40), np.float32), "fp8_e4m3")
    msg = str(info.value)
    assert "40" in msg and "32" in msg and "pad=True" in msg and "64" in msg and "test_scaling.py" in msg


# ---------------------------------------------------------------------------------------
# the container, determinism

def test_scaled_tensor_is_immutable_and_reprs_clearly():
    t = quantize_mx(np.ones(64, np.float32), "fp4_e2m1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.scheme = "nvfp4"
    with pytest.raises(ValueError):
        t.codes[0] = 1
    text = repr(t)
    assert "mx" in text and "fp4_e2m1" in text and "e8m0" in text and "34 bytes" in text and "2 blocks of 32" in text
    assert "global scale" in repr(quantize_nvfp4(np.ones(16, np.float32)))


def test_scaled_tensor_from_codes_round_trips():
    # a backend's raw output can be wrapped and dequantized: fp4 code 0x3 = 1.5, scale 2**2
    t = ScaledTensor("mx", np.full(32, 3, np.uint8), "fp4_e2m1", np.array([129], np.uint8), "e8m0",
                     block=(32,), axis=(0,), shape=(32,))
    assert (t.dequantize() == 6.0).all()


_DIGEST = """
import hashlib, numpy as np
from tessera_ref.numerics.scaling import quantize_mx, quantize_nvfp4, quantize_per_tensor
x = (np.random.default_rng(123).standard_normal((64, 256)) * 3).astype(np.float32)
h = hashlib.sha256()
for t in (quantize_mx(x, "fp8_e4m3"), quantize_mx(x, "fp4_e2m1", scale_rounding="ceil"),
          quantize_nvfp4(x), quantize_nvfp4(x, block_2d=True), quantize_per_tensor(x, "fp8_e5m2")):
    for a in (t.codes, t.scales, t.dequantize()):
        h.update(np.ascontiguousarray(a).tobytes())
print(h.hexdigest())
"""


def test_deterministic_across_runs_and_thread_counts():
    digests = digests_across_environments(_DIGEST)
    assert digests[0] == digests[1]
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    a, b = quantize_nvfp4(x), quantize_nvfp4(x.copy())
    assert np.array_equal(a.codes, b.codes) and np.array_equal(bits(a.dequantize()), bits(b.dequantize()))
    h = hashlib.sha256(quantize_mx(x, "fp6_e3m2").codes.tobytes()).hexdigest()
    assert h == hashlib.sha256(quantize_mx(x, "fp6_e3m2").codes.tobytes()).hexdigest()
