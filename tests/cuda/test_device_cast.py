"""CUDA-HDR-3 / LOWER-CAST-1: the device header's conversions, compiled as host C++ from the
same source as the device code, are GRAPH-CAST-1's number -> format rule — checked against
``tessera_ref.numerics.convert.encode`` (an independent implementation: exact f64 arithmetic
on values, not integer code manipulation) on every f16, bf16, fp8_e4m3 and fp8_e5m2 value,
a large f32 sample with every special value and every rounding tie of the targets, into
every tile format with every rounding and overflow mode."""
import ctypes

import ml_dtypes
import numpy as np
import pytest

from tessera_ref.numerics.convert import encode, rounding_bits
from tessera_ref.numerics.rng import RNGKey

from test_device_header import GXX, _boundary_inputs, lib  # noqa: F401 - the compiled header fixture

pytestmark = [pytest.mark.skipif(GXX is None, reason="needs g++ to build the header as host C++"),
              pytest.mark.filterwarnings("ignore:invalid value encountered in cast"),
              pytest.mark.filterwarnings("ignore:overflow encountered in cast")]

TARGETS = ["f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2"]
ROUNDING = {"rne": 0, "rtz": 1, "rup": 2, "rdown": 3}
OVERFLOW = {"native": 0, "saturate": 1}
NARROW = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
          "fp8_e5m2": ml_dtypes.float8_e5m2}


def _every_value(fmt):
    dtype = NARROW[fmt]
    bits = 8 * np.dtype(dtype).itemsize
    return np.arange(1 << bits, dtype=f"u{bits // 8}").view(dtype).astype(np.float64)


def _f32_sample():
    """Random f32 bit patterns (NaN payloads of both signs included), every special value,
    and the f32 values at, just above and just below every rounding tie of the targets."""
    rng = np.random.default_rng(16)
    rand = rng.integers(0, 1 << 32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([0x0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF,
                        0x1, 0x80000001, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x007FFFFF], np.uint32).view(np.float32)
    ties = [_boundary_inputs(f).astype(np.float32) for f in NARROW]  # midpoints are f32 values for these targets
    return np.concatenate([rand, special, *ties]).astype(np.float64)


def _codes(lib, fmt, rounding, overflow, x, rbits=None):
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty(x.shape, np.uint64)
    rb = None if rbits is None else np.ascontiguousarray(rbits, dtype=np.uint32)
    rc = lib.tsr_cvt_codes_mode(fmt.encode(), rounding, overflow, x.ctypes.data_as(ctypes.c_void_p),
                                None if rb is None else rb.ctypes.data_as(ctypes.c_void_p),
                                out.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(x.size))
    assert rc == 0
    return out


def _check(lib, x, source, target, rounding, overflow, src_dtype=np.float64):
    want = encode(x.astype(src_dtype), target, rounding=rounding, overflow=overflow).astype(np.uint64)
    got = _codes(lib, target, ROUNDING[rounding], OVERFLOW[overflow], x)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"tsr_cvt {source} -> {target} ({rounding}, {overflow}): {bad.size} of {x.size} differ, "
                           f"first x={x[bad[0]]!r}: header {got[bad[0]]:#x}, numerics {want[bad[0]]:#x}")


@pytest.mark.parametrize("overflow", OVERFLOW)
@pytest.mark.parametrize("rounding", ROUNDING)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("source", list(NARROW))
def test_every_narrow_value_into_every_format(lib, source, target, rounding, overflow):
    _check(lib, _every_value(source), source, target, rounding, overflow, NARROW[source])


@pytest.mark.parametrize("overflow", OVERFLOW)
@pytest.mark.parametrize("rounding", ROUNDING)
@pytest.mark.parametrize("target", TARGETS)
def test_f32_sample_into_every_format(lib, target, rounding, overflow):
    _check(lib, _f32_sample(), "f32", target, rounding, overflow, np.float32)


@pytest.mark.parametrize("target", ["f32", "f16", "bf16", "fp8_e4m3"])
def test_f64_sources_round_once(lib, target):
    """f64 values that round differently from the f32 rounding of themselves (double
    rounding would give the other answer) and values beyond every target's range."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(50_000) * 2.0 ** rng.integers(-160, 140, 50_000),
                        np.array([1 + 2.0 ** -24 + 2.0 ** -52, 1e300, -1e300, 5e-324, -5e-324, 2.0 ** -150,
                                  2.0 ** -149 * 0.75, 65520.0, 65519.99, 464.0, 463.99, 3.4028235677973366e38])])
    for rounding in ROUNDING:
        for overflow in OVERFLOW:
            _check(lib, x, "f64", target, rounding, overflow)


def test_hand_checked_modes(lib):
    """Values worked by hand: 1 + 2^-9 (between bf16 neighbours 1 and 1 + 2^-7: rne keeps 1, rup gives 1 + 2^-7; −(1 + 2^-7 + 2^-9) rtz −(1 + 2^-7)), −1e39 into
    f16 (rdown and native: −inf; rup: −65504, the directed mode toward zero gives the largest
    finite), 500 into e4m3 (native: NaN 0x7F, saturate: 448 = 0x7E), +inf saturated into e5m2
    (57344 = 0x7B), −NaN into e4m3 (0xFF) and into f32 (0xFFC00000)."""
    c = lambda fmt, r, o, v: int(_codes(lib, fmt, ROUNDING[r], OVERFLOW[o], np.array([v]))[0])  # noqa: E731
    assert c("bf16", "rne", "native", 1 + 2.0 ** -9) == 0x3F80
    assert c("bf16", "rup", "native", 1 + 2.0 ** -9) == 0x3F81
    assert c("bf16", "rtz", "native", -(1 + 2.0 ** -7 + 2.0 ** -9)) == 0xBF81
    assert c("f16", "rdown", "native", -1e39) == 0xFC00
    assert c("f16", "rup", "native", -1e39) == 0xFBFF
    assert c("fp8_e4m3", "rne", "native", 500.0) == 0x7F
    assert c("fp8_e4m3", "rne", "saturate", 500.0) == 0x7E
    assert c("fp8_e5m2", "rne", "saturate", np.inf) == 0x7B
    assert c("fp8_e4m3", "rtz", "native", -np.nan) == 0xFF
    assert c("f32", "rup", "saturate", -np.nan) == 0xFFC00000
    assert c("f32", "rup", "native", 2.0 ** -1074) == 0x1  # the smallest f32 subnormal, rounded up
    assert c("f32", "rdown", "native", 2.0 ** -1074) == 0x0


@pytest.mark.parametrize("target", ["f32", "bf16", "fp8_e5m2"])
def test_stochastic_rounding_with_the_same_random_bits(lib, target):
    """NUM-CVT-5: up iff bits < frac·2^32. The header takes each element's 32 bits; given the
    bits NUM-RNG-4 draws for key 11, it gives numerics' stochastic codes."""
    x = np.concatenate([_f32_sample()[:100_000], np.array([1e-300, -1e-300, 2.0 ** -1074])])
    if target == "f32":
        x = np.concatenate([x, np.random.default_rng(2).standard_normal(100_000)])  # f64 sources
    key = RNGKey(11)
    rbits = rounding_bits(key, None, x.shape)
    want = encode(x, target, rounding="stochastic", key=key).astype(np.uint64)
    got = _codes(lib, target, 4, 0, x, rbits)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} differ, first x={x[bad[0]]!r}: {got[bad[0]]:#x} vs {want[bad[0]]:#x}"


def test_f32_sources_keep_a_nans_sign_through_every_entry_point(lib):
    x = np.array([0x7FC00001, 0xFF800123, 0x7F800000, 0x3F800000, 0x80000000], np.uint32).view(np.float32)
    n = x.size
    rne, rtz_sat, same = (np.empty(n, np.float32) for _ in range(3))
    to_f64, widened = np.empty(n), np.empty(n)
    lib.tsr_cvt_from_f32(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, rne, rtz_sat, to_f64, widened, same)),
                         ctypes.c_long(n))
    f32 = [0x7FC00000, 0xFFC00000, 0x7F800000, 0x3F800000, 0x80000000]
    assert list(rne.view(np.uint32)) == f32 and list(same.view(np.uint32)) == f32
    assert list(rtz_sat.view(np.uint32)) == [0x7FC00000, 0xFFC00000, 0x7F7FFFFF, 0x3F800000, 0x80000000]
    f64 = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000000, 0x3FF0000000000000, 0x8000000000000000]
    assert list(to_f64.view(np.uint64)) == f64 and list(widened.view(np.uint64)) == f64
