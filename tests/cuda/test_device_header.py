"""CUDA-HDR-2/3/4: tessera_device.cuh's NUM-MATH functions, tsr_max/tsr_min and tsr_cvt,
compiled as host C++ (g++ -O2 -ffp-contract=off) from the same source as the device code,
give the interpreter's bits: on every f16 and bf16 value (as f32 and f64 inputs), specials,
and the rounding boundaries of every conversion target."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tessera_ref.ir.tile import MATH_FNS
from tessera_ref.numerics.convert import encode
from tessera_ref.ops.exact import ieee_extreme, math_in_accum

HEADER_DIR = Path(__file__).resolve().parents[2] / "tessera_ref" / "backends" / "cuda"
SHIM = Path(__file__).with_name("header_shim.cpp")
GXX = shutil.which("g++")
pytestmark = [pytest.mark.skipif(GXX is None, reason="needs g++ to build the header as host C++"),
              pytest.mark.filterwarnings("ignore:invalid value encountered in cast")]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("hdr") / "shim.so"
    cmd = [GXX, "-O2", "-ffp-contract=off", "-std=c++17", "-shared", "-fPIC", f"-I{HEADER_DIR}", str(SHIM), "-o",
           str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return ctypes.CDLL(str(out))


def _call(lib, entry, name, x, out_dtype, *extra):
    x = np.ascontiguousarray(x)
    out = np.empty(x.shape, dtype=out_dtype)
    rc = getattr(lib, entry)(name.encode(), *extra, x.ctypes.data_as(ctypes.c_void_p),
                             out.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(x.size))
    assert rc == 0
    return out


def _all_16bit_values():
    codes = np.arange(1 << 16, dtype=np.uint16)
    return np.concatenate([codes.view(np.float16).astype(np.float32),
                           codes.view(ml_dtypes.bfloat16).astype(np.float32)])


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38,
                     1.0, -1.0, 0.5, 2.0, 88.72, -103.9, 1e6, 1.7e6, -2.5e7, 1e30, 12.3, -12.3, 0.84375, 1.25,
                     6.0, 28.0, -6.0, 2.857], dtype=np.float32)


def _same_bits(got, want, what, inputs):
    gb, wb = got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")
    bad = np.flatnonzero(gb != wb)
    assert bad.size == 0, (f"{what}: {bad.size} of {got.size} differ, first at x={inputs.flat[bad[0]]!r}: "
                           f"header {got.flat[bad[0]]!r} interpreter {want.flat[bad[0]]!r}")


@pytest.mark.parametrize("fn", MATH_FNS)
def test_math_f32_matches_the_interpreter_on_every_16_bit_value(lib, fn):
    x = np.concatenate([_all_16bit_values(), SPECIALS])
    got = _call(lib, "tsr_math_f32", fn, x, np.float32)
    _same_bits(got, math_in_accum(fn, x, accum="f32"), f"tsr_{fn}(float)", x)


@pytest.mark.parametrize("fn", MATH_FNS)
def test_math_f64_matches_the_interpreter(lib, fn):
    rng = np.random.default_rng(15)
    x = np.concatenate([_all_16bit_values().astype(np.float64), SPECIALS.astype(np.float64),
                        rng.standard_normal(4000) * 10.0 ** rng.integers(-8, 9, 4000),
                        np.array([1e300, -1e300, 2.0 ** -1070, 5e-324, 1.5e8, 3.0e15, 6.0e19])])
    got = _call(lib, "tsr_math_f64", fn, x, np.float64)
    _same_bits(got, math_in_accum(fn, x, accum="f64"), f"tsr_{fn}(double)", x)


@pytest.mark.parametrize("which", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extremes_are_ieee_maximum_and_minimum(lib, which, dtype):
    v = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.5], dtype=dtype)
    a, b = (g.ravel() for g in np.meshgrid(v, v))
    out = np.empty_like(a)
    assert lib.tsr_extreme(which.encode(), int(dtype == np.float64), a.ctypes.data_as(ctypes.c_void_p),
                           b.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
                           ctypes.c_long(a.size)) == 0
    want = ieee_extreme(a, b, which)
    want = np.where(np.isnan(want), dtype(np.nan), want)  # canonical quiet NaN, sign clear
    _same_bits(out, want.astype(dtype), f"tsr_{which}", a)
    # hand-checked: the zeros are ordered, a NaN operand wins
    pick = {(0.0, -0.0): 0.0 if which == "max" else -0.0, (1.0, np.nan): np.nan}
    for (x, y), r in pick.items():
        i = np.flatnonzero((a == x) & (np.signbit(a) == np.signbit(x)) & ((b == y) | (np.isnan(b) & np.isnan(y)))
                           & (np.signbit(b) == np.signbit(y)))[0]
        assert np.array_equal(out[i:i + 1], np.array([r], dtype=dtype), equal_nan=True)
        assert np.signbit(out[i]) == np.signbit(r)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_matches_the_interpreter_on_every_special_pair_and_random_pairs(lib, dtype):
    """NUM-MATH-12's rules (zeros, infinities, NaN, negative bases with odd, even and
    non-integer exponents) and the exp(y·log|x|) path, as tsr_pow(float) and tsr_pow(double)."""
    rng = np.random.default_rng(21)
    v = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, -2.5,
                  1e-40, 1e30, -7.0, 0.999, 1.001, 127.0, -128.0, 1e-7], dtype=dtype)
    a, b = (g.ravel() for g in np.meshgrid(v, v))
    x = np.concatenate([a, np.abs(rng.standard_normal(5000) * 10).astype(dtype),
                        np.round(rng.standard_normal(2000) * 4).astype(dtype)])
    y = np.concatenate([b, (rng.standard_normal(5000) * 8).astype(dtype),
                        np.round(rng.standard_normal(2000) * 6).astype(dtype)])
    out = np.empty_like(x)
    assert lib.tsr_pow_arrays(int(dtype == np.float64), x.ctypes.data_as(ctypes.c_void_p),
                              y.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
                              ctypes.c_long(x.size)) == 0
    accum = "f64" if dtype == np.float64 else "f32"
    with np.errstate(all="ignore"):
        want = math_in_accum("pow", x, y, accum=accum)
    _same_bits(out, want, f"tsr_pow({np.dtype(dtype).name})", x)
    assert np.isnan(want).any() and np.isinf(want).any() and (want == 0).any()  # the rules are exercised


def _boundary_inputs(fmt):
    """f64 inputs at and around every rounding boundary of ``fmt``, plus specials and randoms."""
    dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
             "fp8_e5m2": ml_dtypes.float8_e5m2, "f32": None}[fmt]
    rng = np.random.default_rng(3)
    if dtype is None:
        vals = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
        vals = vals[np.isfinite(vals)].astype(np.float64)
    else:
        bits = 8 * np.dtype(dtype).itemsize
        vals = np.arange(1 << bits, dtype=f"u{bits // 8}").view(dtype).astype(np.float64)
        vals = np.sort(vals[np.isfinite(vals)])
    mids = (vals[:-1] + vals[1:]) / 2  # exact in f64 for these narrow formats
    near = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
    top = vals.max()
    extra = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 1e300, -1e300, top * 1.5, top * 1.0625,
             top * 1.03125, 2.0 ** -1074, 2.0 ** -150, 2.0 ** -149 * 1.5, 2.0 ** -149 * 0.5]
    randoms = rng.standard_normal(20000) * 2.0 ** rng.integers(-30, 30, 20000)
    return np.concatenate([vals, near, extra, randoms])


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2"])
def test_cvt_is_num_cvt_at_every_rounding_boundary(lib, fmt):
    x = _boundary_inputs(fmt)
    got = _call(lib, "tsr_cvt_codes", fmt, x, np.uint64)
    want = encode(x, fmt).astype(np.uint64)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"tsr_cvt<{fmt}>: {bad.size} differ, first x={x[bad[0]]!r}: {got[bad[0]]:#x} vs {want[bad[0]]:#x}"


def test_cvt_nan_keeps_its_sign_as_the_canonical_quiet_nan(lib):
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 1e39, -1e39])
    hand = {"f16": [0x7E00, 0xFE00, 0x7C00, 0xFC00, 0x7C00, 0xFC00],
            "bf16": [0x7FC0, 0xFFC0, 0x7F80, 0xFF80, 0x7F80, 0xFF80],
            "fp8_e4m3": [0x7F, 0xFF, 0x7F, 0xFF, 0x7F, 0xFF],
            "fp8_e5m2": [0x7E, 0xFE, 0x7C, 0xFC, 0x7C, 0xFC]}
    for fmt, codes in hand.items():
        assert list(_call(lib, "tsr_cvt_codes", fmt, x, np.uint64)) == codes, fmt
