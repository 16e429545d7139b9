"""NUM-SCALE, NUM-MX, NUM-NVFP4, NUM-AMAX, NUM-DELAY: block and tensor scaling.

Scaled quantization is a library function of the oracle's numerics (``op.cast`` refuses a
scaled policy), so these cases run on the oracle only. Expected values come from the block
rules written out here with the exact conversions of :mod:`._ref_convert` and f32 operations
rounded from exact rationals (``⊘``, ``⊗`` of the chapter), and from the spec's worked
examples (``golden/numerics_scaling_examples.json``).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tessera_ref import numerics
from tessera_ref.errors import TesseraError
from tessera_conformance import clause, golden, oracle_only

from . import _ref_convert as R
from . import _ref_rng as RNG
from ._common import same_values

MX = {"fp8_e4m3": 8, "fp8_e5m2": 15, "fp6_e3m2": 4, "fp6_e2m3": 2, "fp4_e2m1": 2}  # emax_F (NUM-MX-1)
MODES = ["rne", "rtz", "rup", "rdown"]


pytestmark = oracle_only("block and tensor scaling (numerics.quantize_*) has no backend entry point; the case checks "
                         "the oracle's numerics library")


def _f32_div(a: float, b: float) -> float:
    return R.div(a, b, "f32")


def _f32_mul(a: float, b: float) -> float:
    return R.mul(a, b, "f32")


def _amax(values) -> float:
    if any(math.isnan(v) for v in values):
        return math.nan
    return max((abs(v) for v in values), default=0.0)


# -- the MX reference (NUM-MX-1 … NUM-MX-6) -------------------------------------------------------

def _floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > a else e


def mx_block(values, fmt: str, scale_rounding: str = "floor", rounding: str = "rne", us=None):
    """``(scale code, element codes)`` of one MX block, from the clauses."""
    us = us or [None] * len(values)
    amax = _amax(values)
    if math.isnan(amax) or math.isinf(amax):
        return 0xFF, [0] * len(values)
    if amax == 0:
        E = -127
    else:
        a = Fraction(amax)
        E = _floor_log2(a) - MX[fmt]
        if scale_rounding == "ceil" and a / Fraction(2) ** E > R.SPECS[fmt].max:
            E += 1
        if E > 127:
            return 0xFF, [0] * len(values)
        E = max(E, -127)
    codes = [R.round_code(Fraction(v) / Fraction(2) ** E if v else v, fmt, rounding, "saturate", u)
             for v, u in zip(values, us)]
    return E + 127, codes


def mx_dequant(scale_code: int, codes, fmt: str) -> list:
    if scale_code == 0xFF:
        return [math.nan] * len(codes)
    return [_f32_mul(R.decode(c, R.SPECS[fmt]), 2.0 ** (scale_code - 127)) for c in codes]


def _blocks_last_axis(x: np.ndarray, k: int):
    """Rows of ``k`` consecutive elements along the last axis, C order."""
    return x.reshape(-1, k)


def _check_mx(x, fmt, k=32, scale_rounding="floor", rounding="rne", key=None, axis=-1):
    st = numerics.quantize_mx(x, fmt, block=k, axis=axis, scale_rounding=scale_rounding, rounding=rounding, key=key)
    moved = np.moveaxis(np.asarray(x), axis, -1)
    codes = np.moveaxis(np.asarray(st.codes), axis, -1).reshape(-1, k)
    scales = np.moveaxis(np.asarray(st.scales), axis, -1).reshape(-1)
    index = np.moveaxis(np.arange(x.size).reshape(x.shape), axis, -1).reshape(-1, k)
    words = None if key is None else RNG.key_words(key)
    deq = np.moveaxis(st.dequantize(), axis, -1).reshape(-1, k)
    for b, block in enumerate(_blocks_last_axis(moved, k)):
        us = None if words is None else [RNG.random_bits(words, int(i)) for i in index[b]]
        s, c = mx_block([float(v) for v in block], fmt, scale_rounding, rounding, us)
        assert int(scales[b]) == s, (fmt, scale_rounding, b, int(scales[b]), s)
        assert [int(v) for v in codes[b]] == c, (fmt, scale_rounding, rounding, b)
        assert same_values(deq[b], mx_dequant(s, c, fmt)), (fmt, b)
    return st


def _mx_data(rows: int, seed: int, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 32)) * 10.0 ** rng.integers(-30, 30, (rows, 1))
    x[0, :] = 0.0
    x[0, 3] = -0.0
    x[1, :] = x[1, :] * 1e-40  # f32 subnormals: E clamps to −127
    x[2, 5] = np.nan
    x[3, 7] = -np.inf
    x[4, :] = [448 * 2.0 ** k * (1 - 2.0 ** -6 * j) for j, k in zip(range(32), [3] * 32)]  # near max·2^E
    x[5, :3] = [480.0, -500.0, 1.0]
    x[6, :] = np.linspace(-6.5, 6.5, 32)
    return x.astype(dtype)


@clause("NUM-MX-1", "NUM-MX-2", "NUM-MX-3", "NUM-MX-4", "NUM-MX-5", "NUM-MX-6")
@pytest.mark.parametrize("scale_rounding", ["floor", "ceil"])
@pytest.mark.parametrize("fmt", sorted(MX))
def test_mx_blocks(fmt, scale_rounding):
    """``quantize_mx``: the shared exponent (floor rule, or ceil: no element saturates), the
    special blocks (NaN/inf → NaN scale and zero codes; all-zero → 2^-127), E clamped at
    −127, elements ``fl_F(V·2^-E)`` saturated, and ``dequantize`` one f32 product."""
    for rounding in MODES:
        _check_mx(_mx_data(24, 1), fmt, scale_rounding=scale_rounding, rounding=rounding)


@clause("NUM-MX-1", "NUM-MX-4", "NUM-MX-5")
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp4_e2m1"])
def test_mx_f64_sources_keep_their_range(fmt):
    """f64 inputs are taken exactly: blocks whose ``E`` exceeds 127 are NaN blocks, tiny ones
    clamp to E = −127 (and their quotients round exactly, below 2^-64 too); under ``ceil`` a
    block at the top of the range becomes NaN where ``floor`` saturates."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 32)) * 10.0 ** rng.integers(-300, 300, (8, 1))
    x[0, :] = 2.0 ** 140
    x[1, :] = 2.0 ** -200 * np.arange(32)
    x[2, 0] = 2.0 ** (127 + MX[fmt]) * 1.999
    x[2, 1:] = 1.0
    for scale_rounding in ("floor", "ceil"):
        st = _check_mx(x, fmt, scale_rounding=scale_rounding)
        assert int(st.scales[0, 0]) == 0xFF and int(st.scales[1, 0]) == 0
    assert int(numerics.quantize_mx(x, fmt, scale_rounding="floor").scales[2, 0]) == 254
    assert int(numerics.quantize_mx(x, fmt, scale_rounding="ceil").scales[2, 0]) == 0xFF


@clause("NUM-MX-1")
def test_mx_axis_and_block_extent():
    """Blocks of ``k`` consecutive elements along ``axis``; scales laid out like the tensor
    with the blocked axis divided by ``k``."""
    x = _mx_data(16, 3).reshape(16, 32)[:, :24].T.copy()  # (24, 16): block along axis 0
    st = _check_mx(x, "fp6_e2m3", k=8, axis=0)
    assert st.scales.shape == (3, 16) and st.codes.shape == (24, 16) and st.block == (8,) and st.axis == (0,)


@clause("NUM-MX-2", "NUM-MX-3", "NUM-MX-5", "NUM-MX-6", "NUM-SCALE-3")
def test_mx_worked_examples():
    """The chapter's worked example, value for value."""
    for case in golden("numerics_scaling_examples")["cases"]:
        if case["scheme"] != "mx":
            continue
        x = np.zeros(32, np.float32)
        x[:len(case["values"])] = case["values"]
        st = numerics.quantize_mx(x, case["format"], scale_rounding=case["scale_rounding"])
        assert int(st.scales[0]) == int(case["scale_code"], 16), case
        assert [int(c) for c in st.codes[:len(case["codes"])]] == [int(c, 16) for c in case["codes"]], case
        assert all(int(c) == 0 for c in st.codes[len(case["values"]):])
        assert st.dequantize()[:len(case["dequantized"])].tolist() == case["dequantized"], case
        if "nbytes" in case:
            assert st.nbytes == case["nbytes"]
        s, c = mx_block([float(v) for v in x], case["format"], case["scale_rounding"])
        assert s == int(case["scale_code"], 16) and c[:len(case["codes"])] == [int(v, 16) for v in case["codes"]]


# -- NVFP4 (NUM-NVFP4-1 … NUM-NVFP4-5) ----------------------------------------------------------

def nvfp4_global(x32: list, global_amax=None) -> float:
    ga = R.f32(_amax(x32) if global_amax is None else global_amax)
    g = _f32_div(ga, 2688.0)
    if ga == 0 or math.isinf(ga) or math.isnan(ga) or not g >= 2.0 ** -126:
        return 1.0
    return g


def nvfp4_block(block: list, g: float, rounding="rne", us=None):
    """``(scale code, element codes)`` of one NVFP4 block (f32 values)."""
    us = us or [None] * len(block)
    a = _amax(block)
    if math.isnan(a) or math.isinf(a):
        return 0x7F, [0] * len(block)
    t = _f32_div(_f32_div(a, 6.0), g)
    s_code = R.round_code(t, "fp8_e4m3", "rne", "saturate")
    s = R.decode(s_code, R.SPECS["fp8_e4m3"])
    if s == 0:
        return s_code, [0] * len(block)
    d = _f32_mul(s, g)
    return s_code, [R.round_code(_f32_div(v, d), "fp4_e2m1", rounding, "saturate", u) for v, u in zip(block, us)]


def nvfp4_dequant(s_code: int, codes, g: float) -> list:
    s = R.decode(s_code, R.SPECS["fp8_e4m3"])
    return [_f32_mul(_f32_mul(R.decode(c, R.SPECS["fp4_e2m1"]), s), g) for c in codes]


def _check_nvfp4(x: np.ndarray, rounding="rne", key=None, global_amax=None, block_2d=False):
    st = numerics.quantize_nvfp4(x, rounding=rounding, key=key, global_amax=global_amax, block_2d=block_2d)
    x32 = [float(v) for v in np.asarray(x, np.float32).reshape(-1)]
    g = nvfp4_global(x32, global_amax)
    assert float(st.global_scale) == g
    words = None if key is None else RNG.key_words(key)
    idx = np.arange(x.size).reshape(x.shape)
    deq = st.dequantize()
    if block_2d:
        R_, C_ = x.shape
        tiles = [(r, c) for r in range(0, R_, 16) for c in range(0, C_, 16)]
        views = [(np.s_[r:r + 16, c:c + 16], (r // 16, c // 16)) for r, c in tiles]
    else:
        views = [(np.s_[..., j:j + 16], None) for j in range(0, x.shape[-1], 16)]
        views = [((*np.unravel_index(r, x.shape[:-1]), np.s_[j:j + 16]), (*np.unravel_index(r, x.shape[:-1]), j // 16))
                 for r in range(int(np.prod(x.shape[:-1]))) for j in range(0, x.shape[-1], 16)]
    for where, scale_at in views:
        block = [float(v) for v in np.asarray(x[where], np.float32).reshape(-1)]
        us = None if words is None else [RNG.random_bits(words, int(i)) for i in idx[where].reshape(-1)]
        s, c = nvfp4_block(block, g, rounding, us)
        assert int(st.scales[scale_at]) == s, (where, int(st.scales[scale_at]), s)
        assert [int(v) for v in np.asarray(st.codes[where]).reshape(-1)] == c, where
        assert same_values(deq[where].reshape(-1), nvfp4_dequant(s, c, g) if s != 0x7F else [math.nan] * len(c)), where
    return st


def _nvfp4_data(rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, 64)) * 10.0 ** rng.integers(-4, 4, (rows, 1))).astype(np.float32)
    x[0, :16] = 0.0
    x[1, 3] = np.nan
    x[2, 20] = np.inf
    x[3, :16] = 1e-30
    return x


@clause("NUM-NVFP4-1", "NUM-NVFP4-2", "NUM-NVFP4-3", "NUM-NVFP4-4", "NUM-NVFP4-5")
@pytest.mark.parametrize("rounding", MODES)
def test_nvfp4_blocks(rounding):
    """``quantize_nvfp4``: ``g = ga ⊘ 2688`` (1 when unusable), ``s_b = fl_e4m3((a_b ⊘ 6) ⊘ g)``
    saturated (NaN for inf/NaN blocks), ``q = fl_fp4(x ⊘ (s_b ⊗ g))`` saturated, zero codes
    when ``s_b`` is 0 or NaN; ``dequantize = (decode(q) ⊗ s_b) ⊗ g``."""
    x = _nvfp4_data(12, 4)
    _check_nvfp4(x, rounding)
    finite = np.nan_to_num(x, nan=1.0, posinf=1.0)
    _check_nvfp4(finite, rounding)
    for ga in (2688.0, 1e-40, 0.0, 5e6, float(np.max(np.abs(finite))) * 4):
        _check_nvfp4(finite, rounding, global_amax=ga)


@clause("NUM-NVFP4-1")
def test_nvfp4_two_dimensional_tiles():
    """``block_2d=True``: one scale per 16×16 tile of the last two axes."""
    x = _nvfp4_data(32, 5)[:, :48].copy()
    st = _check_nvfp4(np.nan_to_num(x, nan=2.0, posinf=3.0), block_2d=True)
    assert st.scales.shape == (2, 3) and st.block == (16, 16) and st.axis == (0, 1)


@clause("NUM-NVFP4-2", "NUM-NVFP4-3", "NUM-NVFP4-4", "NUM-NVFP4-5", "NUM-SCALE-3")
def test_nvfp4_worked_example():
    for case in golden("numerics_scaling_examples")["cases"]:
        if case["scheme"] != "nvfp4":
            continue
        x = np.zeros(16, np.float32)
        x[:len(case["values"])] = case["values"]
        st = numerics.quantize_nvfp4(x, global_amax=case["global_amax"])
        assert float(st.global_scale) == case["global_scale"]
        assert int(st.scales[0]) == int(case["scale_code"], 16)
        assert [int(c) for c in st.codes[:len(case["codes"])]] == [int(c, 16) for c in case["codes"]]
        assert st.dequantize()[:len(case["dequantized"])].tolist() == case["dequantized"]
    st = numerics.quantize_nvfp4(np.ones(1024, np.float32))
    assert st.nbytes == 580


def _f32_steps(v: float, k: int) -> float:
    """The f32 ``k`` steps (of the bit pattern) from ``v > 0``."""
    return float((np.array([v], np.float32).view(np.int32) + np.int32(k)).view(np.float32)[0])


def _te_disagreements():
    """Blocks (with ``g = 1``) where TE's multiplications — ``a_b·RN(1/6)`` for the scale,
    ``x·RN(1/d)`` for the elements — round to another code than the definition's divisions:
    f32 values within a few ulps of ``6·m`` (``m`` an e4m3 midpoint) and of ``d·t`` (``t`` an
    fp4 midpoint)."""
    inv6 = R.f32(1 / 6)
    e4m3 = sorted({abs(v) for v in R.all_values("fp8_e4m3") if math.isfinite(v)})
    blocks = []
    for lo, hi in zip(e4m3[24:60], e4m3[25:61]):
        for k in range(-8, 9):
            a = _f32_steps(6 * (lo + hi) / 2, k)
            if R.round_code(_f32_div(a, 6.0), "fp8_e4m3") != R.round_code(_f32_mul(a, inv6), "fp8_e4m3"):
                blocks.append([a, -1.0] + [0.5] * 14)
    s_code, _ = nvfp4_block([3.0 * 1.625 * 2], 1.0)  # amax 9.75: s_b = 1.625, d = 1.625
    d = R.decode(s_code, R.SPECS["fp8_e4m3"])
    for t in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0):
        for k in range(-8, 9):
            x = _f32_steps(t * d, k)
            if R.round_code(_f32_div(x, d), "fp4_e2m1") != R.round_code(_f32_mul(x, R.div(1.0, d, "f32")), "fp4_e2m1"):
                blocks.append([9.75, x] + [0.0] * 14)
    return blocks


@clause("NUM-NVFP4-3", "NUM-NVFP4-4")
def test_nvfp4_divides_where_transformer_engine_multiplies():
    """Inputs where TE's encode-scale arithmetic (multiplying by reciprocals) gives another code
    than the divisions of the definition: the library follows the definition."""
    blocks = _te_disagreements()
    assert len(blocks) >= 4, "no input separates the two arithmetics"
    _check_nvfp4(np.array(blocks, np.float32), global_amax=2688.0)


@clause("NUM-NVFP4-2")
def test_nvfp4_global_amax_must_be_non_negative():
    with pytest.raises(TesseraError):
        numerics.quantize_nvfp4(np.ones(16, np.float32), global_amax=-1.0)


# -- the container, padding, bytes, stochastic rounding (NUM-SCALE-1 … NUM-SCALE-4) ----------------

@clause("NUM-SCALE-1")
def test_scaled_tensor_holds_its_parts():
    x = _mx_data(8, 7).reshape(4, 64)
    st = numerics.quantize_mx(x, "fp6_e3m2")
    assert st.scheme == "mx" and st.elem_format is numerics.get_format("fp6_e3m2")
    assert st.scale_format is numerics.get_format("e8m0") and st.codes.dtype == np.uint8
    assert st.scales.shape == (4, 2) and st.codes.shape == (4, 64) and st.shape == (4, 64)
    assert st.global_scale is None and st.block == (32,) and st.axis == (1,)
    nv = numerics.quantize_nvfp4(np.ones((2, 32), np.float32))
    assert nv.scheme == "nvfp4" and nv.scale_format is numerics.get_format("fp8_e4m3")
    assert isinstance(nv.global_scale, np.float32)
    pt = numerics.quantize_per_tensor(np.ones(8, np.float32), "f16", scale=2.0)
    assert pt.scheme == "per_tensor" and pt.codes.dtype == np.uint16 and pt.scales.shape == ()
    assert pt.scales.view(np.float32) == np.float32(2.0) and pt.scale_format is numerics.get_format("f32")
    for t in (st, nv, pt):
        assert t.dequantize().dtype == np.float32 and t.dequantize().shape == t.shape
        with pytest.raises((ValueError, TypeError, AttributeError)):
            t.codes[0] = 1
        with pytest.raises(Exception):
            t.scheme = "mx"


@clause("NUM-SCALE-2")
def test_padding():
    """A blocked axis that is not a multiple of the block is an error, or with ``pad=True`` is
    padded with +0: codes and scales cover the padded tensor, ``dequantize`` drops the pad."""
    x = _mx_data(8, 8).reshape(-1)[:40].astype(np.float32)
    x = np.nan_to_num(x, nan=1.0, neginf=-1.0)
    with pytest.raises(TesseraError):
        numerics.quantize_mx(x, "fp8_e4m3")
    with pytest.raises(TesseraError):
        numerics.quantize_nvfp4(x[:20])
    st = numerics.quantize_mx(x, "fp8_e4m3", pad=True)
    padded = np.concatenate([x, np.zeros(24, np.float32)])
    ref = numerics.quantize_mx(padded, "fp8_e4m3")
    assert st.shape == (40,) and st.codes.shape == (64,)
    assert np.array_equal(st.codes, ref.codes) and np.array_equal(st.scales, ref.scales)
    assert same_values(st.dequantize(), ref.dequantize()[:40])
    nv = numerics.quantize_nvfp4(x[:20], pad=True)
    assert nv.codes.shape == (32,) and nv.shape == (20,) and nv.dequantize().shape == (20,)
    _check_mx(padded, "fp8_e4m3")


@clause("NUM-SCALE-3")
def test_bytes():
    """Packed elements (padding included) + one byte per e8m0/e4m3 scale + 4 per f32 scale +
    4 for a global scale: the chapter's table."""
    x = np.ones(1024, np.float32)
    assert numerics.quantize_mx(x, "fp4_e2m1").nbytes == 544
    assert numerics.quantize_mx(x, "fp8_e4m3").nbytes == 1024 + 32
    assert numerics.quantize_mx(x, "fp6_e2m3").nbytes == 768 + 32
    assert numerics.quantize_nvfp4(x).nbytes == 580
    assert numerics.quantize_per_tensor(x, "fp8_e4m3").nbytes == 1028
    assert numerics.quantize_mx(x[:40], "fp4_e2m1", pad=True).nbytes == 32 + 2


@clause("NUM-SCALE-4", "NUM-MX-5", "NUM-NVFP4-4")
def test_stochastic_rounding_is_keyed_by_the_global_unpadded_index():
    """Stochastic element rounding draws ``random_bits(key, i)`` with ``i`` the element's flat
    index in the original tensor; a shard passing its global indices (and, for NVFP4, the
    global amax) produces exactly the codes of the same slice of the whole."""
    x = np.nan_to_num(_mx_data(8, 9), nan=0.5, neginf=-2.0).reshape(4, 64)
    _check_mx(x, "fp4_e2m1", rounding="stochastic", key=31)
    _check_nvfp4(x, rounding="stochastic", key=32)
    key = numerics.RNGKey(33)
    whole = numerics.quantize_mx(x, "fp6_e2m3", rounding="stochastic", key=key)
    idx = np.arange(x.size, dtype=np.uint64).reshape(x.shape)
    part = numerics.quantize_mx(x[1:3], "fp6_e2m3", rounding="stochastic", key=key, index=idx[1:3])
    assert np.array_equal(part.codes, whole.codes[1:3])
    amax = float(np.max(np.abs(x)))
    nv = numerics.quantize_nvfp4(x, rounding="stochastic", key=key)
    part = numerics.quantize_nvfp4(x[:, 16:48], rounding="stochastic", key=key, index=idx[:, 16:48], global_amax=amax)
    assert np.array_equal(part.codes, nv.codes[:, 16:48])
    padded = numerics.quantize_mx(x[:, :40], "fp4_e2m1", rounding="stochastic", key=key, pad=True)
    words = RNG.key_words(33)
    for r in range(4):  # the pad rounds to +0; the real elements use their unpadded index
        us = [RNG.random_bits(words, r * 40 + j) for j in range(40)] + [0] * 24
        row = [float(v) for v in x[r, :40]] + [0.0] * 24
        s0, c0 = mx_block(row[:32], "fp4_e2m1", rounding="stochastic", us=us[:32])
        s1, c1 = mx_block(row[32:], "fp4_e2m1", rounding="stochastic", us=us[32:])
        assert [int(v) for v in padded.codes[r]] == c0 + c1 and [int(v) for v in padded.scales[r]] == [s0, s1]
    for f in (lambda: numerics.quantize_mx(x, "fp4_e2m1", rounding="stochastic"),
              lambda: numerics.quantize_nvfp4(x, rounding="stochastic")):
        with pytest.raises(TesseraError):
            f()


# -- per-tensor amax scaling (NUM-AMAX-1 … NUM-AMAX-4) ----------------------------------------------

PER_TENSOR = ["fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "int8", "int4", "f16", "bf16"]


def amax_scale_ref(amax: float, fmt: str, margin: int = 0) -> float:
    a = R.f32(amax)
    if a == 0 or math.isinf(a) or math.isnan(a):
        return 1.0
    q = _f32_div(R.f32(float(R.SPECS[fmt].max)), a)
    if math.isinf(q):
        q = float(np.finfo(np.float32).max)
    return _f32_div(q, 2.0 ** margin)


@clause("NUM-AMAX-1", "NUM-AMAX-2")
@pytest.mark.parametrize("fmt", PER_TENSOR)
def test_amax_scale(fmt):
    """``(fl_f32(max_F) ⊘ fl_f32(amax)) ⊘ 2^margin``; an overflowing quotient becomes the
    largest f32 first; amax 0, inf or NaN gives 1.0; a negative amax is an error."""
    rng = np.random.default_rng(10)
    amaxes = [float(v) for v in 10.0 ** rng.uniform(-40, 38, 60)] + [0.0, math.inf, math.nan, 1e-45, 3.1e38, 0.7]
    for margin in (0, 1, 5, 127):
        for a in amaxes:
            got = float(numerics.amax_scale(a, fmt, margin))
            want = amax_scale_ref(a, fmt, margin)
            assert got == want, (fmt, a, margin, got, want)
    assert float(numerics.amax_scale(1e-300, fmt)) == 1.0  # rounds to f32 zero: unusable
    for bad in (lambda: numerics.amax_scale(-1.0, fmt), lambda: numerics.amax_scale(1.0, fmt, 128),
                lambda: numerics.amax_scale(1.0, "e8m0")):
        with pytest.raises(TesseraError):
            bad()


@clause("NUM-AMAX-3", "NUM-AMAX-4")
@pytest.mark.parametrize("fmt", PER_TENSOR)
def test_quantize_per_tensor(fmt):
    """``q = fl_F(x ⊗ scale; r)`` saturated (NaN → F's NaN, −0 in fp6/fp4); the scale from
    ``amax_scale`` unless given; ``dequantize = decode(q) ⊘ scale`` (one f32 division)."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(200) * 10.0 ** rng.uniform(-3, 3, 200)).astype(np.float32)
    x[:4] = [np.nan, np.inf, -0.0, 0.0]
    finite = np.where(np.isfinite(x), x, 0.0).astype(np.float32)
    for data, scale, margin in ((finite, None, 0), (finite, None, 3), (x, 0.37, 0), (finite, 1e-30, 0)):
        for rounding in MODES:
            st = numerics.quantize_per_tensor(data, fmt, scale=scale, margin=margin, rounding=rounding)
            s = amax_scale_ref(_amax([float(v) for v in data]), fmt, margin) if scale is None else R.f32(scale)
            assert float(st.scales.view(np.float32)) == s
            codes = [R.round_code(_f32_mul(float(v), s), fmt, rounding, "saturate") for v in data]
            assert [int(c) for c in st.codes] == codes, (fmt, scale, rounding)
            deq = [_f32_div(R.decode(c, R.SPECS[fmt]), s) for c in codes]
            assert same_values(st.dequantize(), deq), (fmt, scale)
    for bad in (dict(scale=0.0), dict(scale=-1.0), dict(scale=math.inf), dict(scale=2.0, margin=1)):
        with pytest.raises(TesseraError):
            numerics.quantize_per_tensor(finite, fmt, **bad)


# -- delayed scaling (NUM-DELAY-1 … NUM-DELAY-4) --------------------------------------------------------

@clause("NUM-DELAY-1", "NUM-DELAY-2")
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_scaling_history(algo):
    """A history of at most ``L`` f32 amaxes (oldest first); the scale is ``amax_scale`` of the
    history's max or newest entry when that is finite and positive, else unchanged; the
    initial scale and the one after ``reset()`` are 1.0."""
    ds = numerics.DelayedScaling("fp8_e4m3", history_len=3, algo=algo, margin=1)
    assert float(ds.scale) == 1.0 and ds.history.size == 0
    seq = [2.0, 0.1, 0.0, 5.0, math.inf, 0.3, 0.2, math.nan, 0.4, 1e-30, 1e-50]
    history, scale = [], 1.0
    for a in seq:
        ds.record(a)
        history = (history + [R.f32(a)])[-3:]
        A = (math.nan if any(math.isnan(h) for h in history) else max(history)) if algo == "max" else history[-1]
        if math.isfinite(A) and A > 0:
            scale = amax_scale_ref(A, "fp8_e4m3", 1)
        assert same_values(ds.history, history) and float(ds.scale) == scale, (a, list(ds.history), float(ds.scale))
    ds.reset()
    assert float(ds.scale) == 1.0 and ds.history.size == 0
    with pytest.raises(TesseraError):
        ds.record(-1.0)


@clause("NUM-DELAY-3")
def test_delayed_scaling_uses_the_scale_of_the_tensors_before():
    """``quantize(x)`` quantizes with the current scale, then records ``amax(x)``."""
    ds = numerics.DelayedScaling("fp8_e5m2", history_len=4)
    rng = np.random.default_rng(12)
    scale = 1.0
    seen = []
    for n in range(6):
        x = (rng.standard_normal(64) * 10.0 ** n).astype(np.float32)
        st = ds.quantize(x)
        assert float(st.scales.view(np.float32)) == scale
        assert [int(c) for c in st.codes] == [R.round_code(_f32_mul(float(v), scale), "fp8_e5m2", "rne", "saturate")
                                              for v in x]
        seen = (seen + [R.f32(float(np.max(np.abs(x))))])[-4:]
        scale = amax_scale_ref(max(seen), "fp8_e5m2")


@clause("NUM-DELAY-4")
def test_hybrid_recipe():
    forward, backward = numerics.DelayedScaling.hybrid(history_len=8)
    assert forward.fmt is numerics.get_format("fp8_e4m3") and backward.fmt is numerics.get_format("fp8_e5m2")
    forward.record(10.0)
    assert float(forward.scale) == amax_scale_ref(10.0, "fp8_e4m3") and float(backward.scale) == 1.0
    backward.record(3.0)
    assert float(backward.scale) == amax_scale_ref(3.0, "fp8_e5m2") and forward.history.tolist() == [10.0]

