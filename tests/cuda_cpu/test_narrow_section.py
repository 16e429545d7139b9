"""CUDA-HDR-1 … 4 for the narrow formats: tessera_device.cuh's narrow-format sections (tsr_cvt,
tsr_cvt_sr, tsr_widen and tsr_canon of __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2; the
16-bit NUM-MATH entry points and tsr_max / tsr_min), compiled by g++ over the CUDA-on-CPU twin's
narrow types — the one source the twin runs and NVRTC compiles — on every code of every narrow
format, against ``numerics.convert.encode`` and the interpreter's f32 math (independent
implementations: exact f64 values, not the header's integer encoder)."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tessera_ref.backends.cuda.cpu.build import TWIN_DIR
from tessera_ref.backends.cuda.toolchain import HEADER_DIR
from tessera_ref.ir.tile import MATH_FNS
from tessera_ref.numerics.convert import encode, rounding_bits
from tessera_ref.numerics.rng import RNGKey
from tessera_ref.ops.exact import ieee_extreme, math_in_accum

GXX = shutil.which("g++")
pytestmark = [pytest.mark.skipif(GXX is None, reason="needs g++ to build the header as host C++"),
              pytest.mark.filterwarnings("ignore:invalid value encountered in cast"),
              pytest.mark.filterwarnings("ignore:overflow encountered in cast")]

NARROW = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
          "fp8_e5m2": ml_dtypes.float8_e5m2}
#: the canonical quiet NaN of each narrow format, sign clear (CUDA-HDR-3, by hand)
CANON = {"f16": 0x7E00, "bf16": 0x7FC0, "fp8_e4m3": 0x7F, "fp8_e5m2": 0x7E}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("narrow") / "narrow.so"
    cmd = [GXX, "-O2", "-ffp-contract=off", "-std=c++17", "-shared", "-fPIC", f"-I{TWIN_DIR}", f"-I{HEADER_DIR}",
           str(Path(__file__).with_name("narrow_shim.cpp")), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return ctypes.CDLL(str(out))


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def _codes(fmt):
    bits = 8 * np.dtype(NARROW[fmt]).itemsize
    return np.arange(1 << bits, dtype=np.uint32)


def _values(fmt, codes):
    return codes.astype(f"u{np.dtype(NARROW[fmt]).itemsize}").view(NARROW[fmt])


def _agree(got, want, what, codes):
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{what}: {bad.size} of {got.size} differ, first at code {codes[bad[0]]:#x}: "
                           f"header {int(got[bad[0]]):#x}, want {int(want[bad[0]]):#x}")


@pytest.mark.parametrize("fmt", list(NARROW))
def test_conversions_of_every_narrow_code(lib, fmt):
    c = _codes(fmt)
    x = _values(fmt, c)
    key = RNGKey(12)
    rbits = np.ascontiguousarray(rounding_bits(key, None, c.shape), dtype=np.uint32)
    out = np.empty((c.size, 11), np.uint64)
    assert lib.tsr_narrow_source(fmt.encode(), _ptr(c), _ptr(rbits), _ptr(out), ctypes.c_long(c.size)) == 0

    def wide(target):  # the rne conversion; exact into the wider formats, a NaN keeps its sign
        return encode(x, target).astype(np.uint64)

    want = {"tsr_cvt<double>": wide("f64"), "tsr_cvt<float>": wide("f32"), "tsr_cvt<__half>": wide("f16"),
            "tsr_cvt<__nv_bfloat16>": wide("bf16"), "tsr_cvt<__nv_fp8_e4m3>": wide("fp8_e4m3"),
            "tsr_cvt<__nv_fp8_e5m2>": wide("fp8_e5m2"),
            "tsr_cvt<e4m3, rtz, saturate>": encode(x, "fp8_e4m3", rounding="rtz", overflow="saturate"),
            "tsr_cvt_sr<e5m2>": encode(x, "fp8_e5m2", rounding="stochastic", key=key),
            "tsr_widen<float>": wide("f32"), "tsr_widen<double>": wide("f64"),
            "tsr_canon": np.where(np.isnan(x.astype(np.float64)), CANON[fmt], c)}
    for j, (what, w) in enumerate(want.items()):
        _agree(out[:, j], np.asarray(w).astype(np.uint64), f"{what} of {fmt}", c)
    # by hand: a negative NaN keeps its sign through a conversion and loses it in tsr_canon
    neg_nan = {"f16": 0xFE01, "bf16": 0xFFC1, "fp8_e4m3": 0xFF, "fp8_e5m2": 0xFF}[fmt]
    assert out[neg_nan, 1] == 0xFFC00000 and out[neg_nan, 10] == CANON[fmt]


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("fn", MATH_FNS)
def test_16_bit_math_is_f32_math_rounded_once_more(lib, fmt, fn):
    c = _codes(fmt)
    x = _values(fmt, c)
    out = np.empty(c.size, np.uint32)
    assert lib.tsr_narrow_math(fn.encode(), int(fmt == "bf16"), _ptr(c), _ptr(out), ctypes.c_long(c.size)) == 0
    want = encode(math_in_accum(fn, x.astype(np.float32), accum="f32"), fmt).astype(np.uint32)
    _agree(out, want, f"tsr_{fn}({fmt})", c)


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("which", ["max", "min"])
def test_16_bit_extremes(lib, fmt, which):
    rng = np.random.default_rng(17)
    special = {"f16": [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x3C00, 0xBC00],
               "bf16": [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x3F80, 0xBF80]}[fmt]
    s = np.array(special, np.uint32)
    a = np.concatenate([np.repeat(s, s.size), rng.integers(0, 1 << 16, 100_000).astype(np.uint32)])
    b = np.concatenate([np.tile(s, s.size), rng.integers(0, 1 << 16, 100_000).astype(np.uint32)])
    out = np.empty(a.size, np.uint32)
    lib.tsr_narrow_extreme(int(which == "max"), int(fmt == "bf16"), _ptr(a), _ptr(b), _ptr(out), ctypes.c_long(a.size))
    va, vb = _values(fmt, a).astype(np.float64), _values(fmt, b).astype(np.float64)
    r = ieee_extreme(va, vb, which)
    want = np.where(np.isnan(r), CANON[fmt], encode(np.where(np.isnan(r), 0.0, r), fmt)).astype(np.uint32)
    _agree(out, want, f"tsr_{which}({fmt})", a)
    # by hand (pair i·8 + j is special[i], special[j]): maximum(+0, −0) = +0, minimum(+0, −0) = −0;
    # (NaN, 1) and (−NaN with a payload, −1) give the canonical NaN
    assert out[0 * 8 + 1] == (0x0000 if which == "max" else 0x8000)
    assert out[4 * 8 + 6] == out[5 * 8 + 7] == CANON[fmt]
