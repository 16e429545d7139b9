"""LOWER-TARGET-1: the CUDA C text of lowered kernels (type-checked by g++ against a stand-in header)."""
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import kernel, op
from tessera_ref.backends.cuda.render import emit_cuda
from tessera_ref.errors import LoweringError
from tessera_ref.ir import tile as T
from tessera_ref.lowering import inspect, lower

# Just enough of CUDA for g++ to check the generated text's syntax and types (not its behaviour).
SHIM = r"""
#pragma once
#include <cmath>
struct tsr_dim3 { long x, y, z; };
extern tsr_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
typedef float __half;
// distinct narrow types, so a missing conversion is a compile error (as with CUDA's explicit operators)
struct __nv_bfloat16 { unsigned short x; explicit operator float() const { return 0; } };
struct __nv_fp8_e4m3 { unsigned char x; explicit operator float() const { return 0; } };
struct __nv_fp8_e5m2 { unsigned char x; explicit operator float() const { return 0; } };
template <class T, class S> T tsr_cvt(S) { return T(); }
template <class T, class S> T tsr_widen(S) { return T(); }
inline void __syncthreads() {}
template <int N> void tsr_cp_async(void*, const void*) {}
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct double2 { double x, y; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }
#define TSR_INFF 1.0f
#define TSR_INF 1.0
inline void tsr_cp_async_commit() {}
template <int N> void tsr_cp_async_wait() {}
inline long TSR_SWIZZLE(long i, int) { return i; }
template <class T> T tsr_exp(T x) { return x; }
template <class T> T tsr_rsqrt(T x) { return x; }
template <class T> T tsr_max(T a, T b) { return a; }
template <class T> T tsr_min(T a, T b) { return a; }
template <class T> T tsr_shfl_xor(T v, int) { return v; }
template <class T> T tsr_canon(T x) { return x; }
"""

GXX = shutil.which("g++")


def _syntax_check(text, tmp_path):
    for name in ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "tessera_device.cuh"):
        (tmp_path / name).write_text(SHIM if name == "tessera_device.cuh" else "#pragma once\n")
    src = tmp_path / "k.cu"
    src.write_text(text)
    result = subprocess.run([GXX, "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-unused-variable",
                             "-Wno-unused-but-set-variable", "-Wno-unknown-pragmas", f"-I{tmp_path}", "-x", "c++", str(src)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + text


def _program(fn, *args, **directives):
    return lower(t.jit(fn).trace(*args), directives or None)


A = np.ones((64, 64), np.float32)


def test_launch_bounds_hold_a_register_blocked_matmul_to_its_register_budget():
    """A register-blocked matmul records 128 registers a lane (launch.registers), so 256 lanes
    ask for 65,536 / (256 · 128) = 2 blocks an SM; kernels without a budget get no bounds."""
    mm = inspect(_program(lambda a, b: op.matmul(a, b), A, A, tile=(64, 64, 8), lanes=256), "target")
    assert 'extern "C" __global__ void __launch_bounds__(256, 2) ' in mm
    sm = inspect(_program(lambda x: op.softmax(x), A), "target")
    assert "__launch_bounds__" not in sm and 'extern "C" __global__ void _lambda_' in sm


def test_matmul_target_text_is_labelled_and_has_the_pipeline():
    text = inspect(_program(lambda a, b: op.matmul(a, b), A, A, tile=(32, 32, 16), stages=3, padding=1), "target")
    assert text.startswith("// Tessera target text") and "Compiled by NVRTC" in text
    assert "__global__ void" in text and "tsr_cp_async_wait<1>();" in text and "__syncthreads();" in text
    assert "fmaf(" in text and text.count("// [3, 16, 32], rows padded by 1") == 2  # A k-major, and B
    # A's ring 3 x 16 k-rows x (32 + 1) floats = 6,336 B, then B's (the same size) at the next 128-byte
    # boundary, 6,400; the total is rounded up to a boundary too: 2 x 6,400 B of dynamic shared memory
    assert "reinterpret_cast<float*>(tsr_smem + 6400);" in text and "dynamic shared memory: 12800 B\n" in text


@pytest.mark.skipif(GXX is None, reason="needs g++")
@pytest.mark.parametrize("fn,args,directives", [
    (lambda a, b: op.matmul(a, b), (A, A), dict(tile=(32, 32, 16), stages=3, swizzle="xor")),
    (lambda a, b, c: op.gemm(a, b, c), (A, A, A), dict(async_copy=False)),
    (lambda a: op.softmax(a), (A,), {}),
    (lambda a: op.mean(a, axis=0), (A,), {}),
    (lambda a, b: op.maximum(a, b) * 2.0, (A, A), dict(vectorize=4)),
    (lambda q, k, v: op.flash_attention(q, k, v, causal=True, block_k=32), (A, A, A), dict(stages=3, padding=1)),
    (lambda q, k, v: op.flash_attention(q, k, v, block_k=32), (A, A, A), dict(stages=1)),
])
def test_generated_cuda_c_parses(fn, args, directives, tmp_path):
    _syntax_check(inspect(_program(fn, *args, **directives), "target"), tmp_path)


SEED_004 = '''
@kernel
def tp_axpy(X: f16[m], Y: mut f16[m], alpha: f16):
    s0 = tshared.alloc
    s1 = tshared.alloc
    for t in tile.range(m, step=128, prefetch=2):
        cp_async.shared.global(s1, X[t:t+128])
        tbarrier()
        if t > 0:
            for i in range(128):
                yv = alpha * s0[i] + tile.load(Y, index=t-128+i)
                tile.store(Y, index=t-128+i, value=yv)
        s0, s1 = s1, s0
    tbarrier()
'''


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_kernel_target_view_swaps_buffers_in_parallel(tmp_path):
    k = kernel.from_source(SEED_004)
    text = k.inspect_ir("target")
    assert text == emit_cuda(k.module)
    lines = [ln.strip() for ln in text.splitlines()]
    swap = [ln for ln in lines if ln.startswith("__half* next")]
    assert len(swap) == 4  # the initial (s0, s1) and the swap s0, s1 = s1, s0, each through temporaries
    _syntax_check(text, tmp_path)


BF16, E4M3, E5M2 = (np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn),
                    np.dtype(ml_dtypes.float8_e5m2))


def _narrow_programs():
    """Kernels of every family in bf16 and fp8 storage (f32 accumulation)."""
    a16, q16 = np.ones((64, 64), BF16), np.ones((64, 32), BF16)
    e4, e5 = np.ones((8, 64), E4M3), np.ones((8, 64), E5M2)
    return {
        "matmul bf16": _program(lambda a, b: op.matmul(a, b), a16, a16, tile=(32, 32, 16), stages=3, padding=1),
        "attention bf16": _program(lambda q, k, v: op.flash_attention(q, k, v, causal=True, block_k=32),
                                   q16, q16, q16, stages=2),
        "add e4m3": _program(lambda a, b: a + b, e4, e4),
        "softmax e5m2": _program(lambda x: op.softmax(x), e5),
    }


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_bf16_and_fp8_kernels_use_cuda_types_and_explicit_conversions(tmp_path):
    """bf16 / fp8 buffers are CUDA's __nv_bfloat16 / __nv_fp8_e4m3 / __nv_fp8_e5m2; rounding
    into them goes through tsr_cvt (NUM-CVT), a widening cast into f32 through tsr_widen (exact,
    NaN made canonical), an mma operand's widening is a C cast — the stub header's narrow types have explicit conversions only, so g++
    finds any that is missing."""
    for name, program in _narrow_programs().items():
        text = inspect(program, "target")
        ctype = {"bf16": "__nv_bfloat16", "e4m3": "__nv_fp8_e4m3", "e5m2": "__nv_fp8_e5m2"}[name.split()[1]]
        assert f"{ctype}* __restrict__" in text and f"tsr_cvt<{ctype}>(" in text, name
        widening = "(float)(" if name.startswith(("matmul", "attention")) else "tsr_widen<float>("  # mma: a C cast
        assert widening in text and "#include <cuda_fp8.h>" in text and "Compiled by NVRTC" in text
        _syntax_check(text, tmp_path)


def test_a_format_without_a_cuda_type_is_a_lowering_error():
    kb = T.KernelBuilder("k", [("x", T.buffer((32,), "fp4_e2m1")), ("y", T.buffer((32,), "fp4_e2m1"), True)])
    x, y = kb.params
    kb.store(y, [kb.lane_id()], kb.load(x, [kb.lane_id()]))
    with pytest.raises(LoweringError, match="no C type for the format fp4_e2m1.*") as info:
        emit_cuda(kb.finish())
    assert "__nv_bfloat16" not in str(info.value) and "bf16" in info.value.fix


#: A compile-only stand-in for the CUDA phase's device header: enough for nvcc to type-check
#: and compile the target text, NOT the NUM-MATH algorithms or tsr_cvt's NaN rule.
NVCC_HEADER = r"""
#pragma once
template <int N> __device__ void tsr_cp_async(void* d, const void* s) { memcpy(d, s, N); }
#define TSR_INFF __int_as_float(0x7f800000)
#define TSR_INF __longlong_as_double(0x7ff0000000000000LL)
__device__ inline void tsr_cp_async_commit() {}
template <int N> __device__ void tsr_cp_async_wait() {}
__device__ inline long TSR_SWIZZLE(long i, int) { return i; }
template <class T> __device__ T tsr_exp(T x) { return expf(x); }
template <class T> __device__ T tsr_rsqrt(T x) { return rsqrtf(x); }
template <class T> __device__ T tsr_max(T a, T b) { return fmaxf(a, b); }
template <class T> __device__ T tsr_min(T a, T b) { return fminf(a, b); }
template <class T> __device__ T tsr_shfl_xor(T v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
template <class T> __device__ T tsr_canon(T x) { return x; }
template <class T, class S> __device__ T tsr_widen(S x) { return (T)(float)x; }
template <class T> __device__ T tsr_cvt(float x);
template <> __device__ __nv_bfloat16 tsr_cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __nv_fp8_e4m3 tsr_cvt<__nv_fp8_e4m3>(float x) {
  __nv_fp8_e4m3 r; r.__x = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3); return r; }
template <> __device__ __nv_fp8_e5m2 tsr_cvt<__nv_fp8_e5m2>(float x) {
  __nv_fp8_e5m2 r; r.__x = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2); return r; }
"""
NVCC = shutil.which("nvcc")


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")
def test_bf16_and_fp8_target_text_compiles_with_nvcc_for_sm_90(tmp_path):
    """Where the CUDA toolkit is installed, nvcc compiles the text for sm_90 (compiling only:
    nothing runs, and the stand-in header is not the CUDA phase's)."""
    (tmp_path / "tessera_device.cuh").write_text(NVCC_HEADER)
    for i, program in enumerate(_narrow_programs().values()):
        src = tmp_path / f"k{i}.cu"
        src.write_text(inspect(program, "target"))
        result = subprocess.run([NVCC, "-arch=sm_90", "-c", f"-I{tmp_path}", str(src), "-o", str(tmp_path / f"k{i}.o")],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
