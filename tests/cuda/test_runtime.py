"""CUDA-RUN-1 … 3: the backend "cuda". Without a GPU making it is a BackendError that says
so; on a GPU (``gpu`` marker) every library kernel that compiles today gives the
interpreter's bits, and the header's NUM-MATH functions give them on every f16/bf16 input."""
import numpy as np
import pytest

from cuda_programs import KNOWN, LIBRARY, needs_toolchain, on_the_interpreter
from tessera_ref import backends
from tessera_ref.backends.cuda.runtime import arch_of
from tessera_ref.errors import BackendError


def _gpu() -> bool:
    try:
        import cupy
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


@pytest.mark.skipif(_gpu(), reason="this machine has a GPU")
def test_without_a_gpu_the_cuda_backend_says_so():
    with pytest.raises(BackendError, match="CuPy|GPU") as info:
        backends.get("cuda")
    assert "interp" in info.value.fix or "pip install" in info.value.fix
    with pytest.raises(BackendError):
        with backends.use("cuda"):
            pass
    assert "cuda" in backends.available()


def test_architecture_of_a_compute_capability():
    assert [arch_of(c) for c in ("80", "86", "89", "90")] == ["sm_80", "sm_80", "sm_80", "sm_90"]
    with pytest.raises(BackendError, match="7.5"):
        arch_of("75")


RUNNABLE = [n for n in LIBRARY if (n, "compile") not in KNOWN]


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.gpu
@needs_toolchain
@pytest.mark.parametrize("name", RUNNABLE)
def test_device_bits_equal_the_interpreter(name):
    program, inputs, want = on_the_interpreter(name, 7)
    with backends.use("cuda"):
        got, reports = program.run(*inputs)
    assert reports and all(r.checks is False for r in reports)
    for g, w in zip(got, want):
        assert np.array_equal(_bits(g), _bits(w)), name


MATH_KERNEL = r"""
#include "tessera_device.cuh"
extern "C" __global__ void math_f32(const float* x, float* y, int fn, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  float r;
  switch (fn) {
    case 0: r = tsr_exp(v); break;      case 1: r = tsr_expm1(v); break;  case 2: r = tsr_log(v); break;
    case 3: r = tsr_sin(v); break;      case 4: r = tsr_cos(v); break;    case 5: r = tsr_tanh(v); break;
    case 6: r = tsr_erf(v); break;      case 7: r = tsr_erfc(v); break;   case 8: r = tsr_sigmoid(v); break;
    case 9: r = tsr_silu(v); break;     case 10: r = tsr_gelu(v); break;  case 11: r = tsr_gelu_tanh(v); break;
    default: r = tsr_rsqrt(v);
  }
  y[i] = r;
}
"""


@pytest.mark.gpu
@needs_toolchain
def test_device_math_is_the_interpreters_on_every_16_bit_input(tmp_path):
    import cupy
    import ml_dtypes
    from tessera_ref.backends.cuda.compile import build
    from tessera_ref.backends.cuda.runtime import arch_of as arch
    from tessera_ref.ir.tile import MATH_FNS
    from tessera_ref.ops.exact import math_in_accum
    b = build(MATH_KERNEL, arch(cupy.cuda.Device().compute_capability))
    path = tmp_path / "math.cubin"
    path.write_bytes(b.cubin)
    kernel = cupy.RawModule(path=str(path)).get_function("math_f32")
    codes = np.arange(1 << 16, dtype=np.uint16)
    x = np.concatenate([codes.view(np.float16).astype(np.float32), codes.view(ml_dtypes.bfloat16).astype(np.float32)])
    dx = cupy.asarray(x)
    for i, name in enumerate(MATH_FNS):
        dy = cupy.empty_like(dx)
        kernel(((x.size + 255) // 256,), (256,), (dx, dy, np.int32(i), np.int64(x.size)))
        want = math_in_accum(name, x, accum="f32")
        assert np.array_equal(dy.get().view(np.uint32), want.view(np.uint32)), name
