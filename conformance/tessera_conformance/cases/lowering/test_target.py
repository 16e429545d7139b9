"""LOWER-TARGET-1: the CUDA C text of the "target" level (type-checked here against stand-in headers)."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from tessera_ref import op
from tessera_ref.errors import LoweringError
from tessera_ref.ir import tile as T
from tessera_ref.lowering import inspect
from tessera_ref.lowering.pipeline import TARGETS
from tessera_conformance import clause

from ..tiles.support import dtype
from .support import lower_only, tile_funcs

CTYPE = {"f64": "double", "f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "fp8_e4m3": "__nv_fp8_e4m3",
         "fp8_e5m2": "__nv_fp8_e5m2"}


def every_family(a, b, q, w):
    """A matmul, a softmax, layernorm, an elementwise maximum and FlashAttention: all four families."""
    s = op.softmax(op.matmul(a, b))
    n = op.layernorm_safe(op.maximum(s, a), w, w)
    return op.flash_attention(n, q, q, block_k=32)


def _target(backend, fmt, directives=None):
    args = [np.ones((64, 64), dtype(fmt))] * 3 + [np.ones(64, dtype(fmt))]
    program = lower_only(backend, every_family, *args, directives=directives)
    return inspect(program, "target"), program


@clause("LOWER-TARGET-1")
@pytest.mark.parametrize("fmt", list(CTYPE))
def test_each_kernel_is_a_global_function_of_the_formats_c_type(backend, fmt):
    text, program = _target(backend, fmt)
    header = text.split("\n\n")[0]
    assert header.startswith("//") and re.search(r"compiled by NVRTC", header, re.I) and "--fmad=false" in header
    names = [f.attributes["sym_name"] for f in tile_funcs(program)]
    assert len(names) == 5 and text.count("__global__ void") == 5
    for name in names:
        assert re.search(rf"__global__ void (__launch_bounds__\(\d+(, \d+)?\) )?{name}\(const {CTYPE[fmt]}\* ", text), name
    for call in ("tsr_exp(", "tsr_rsqrt(", "tsr_max(", "__syncthreads()", "tsr_cp_async<", "tsr_cp_async_commit()",
                 "tsr_cp_async_wait<"):
        assert call in text, call
    assert ("fma(" in text) == (fmt == "f64") and ("fmaf(" in text) == (fmt != "f64")
    if fmt in ("f16", "bf16", "fp8_e4m3", "fp8_e5m2"):
        assert f"tsr_cvt<{CTYPE[fmt]}>(" in text and "(float)(" in text  # narrowing by the header, widening a cast


@clause("LOWER-TARGET-1")
@pytest.mark.parametrize("padding, swizzle", [(0, "none"), (1, "none"), (0, "xor")])
def test_shared_buffers_have_padded_rows_and_swizzled_offsets(backend, padding, swizzle):
    text, _ = _target(backend, "f16", dict(tile=(32, 32, 16), stages=2, padding=padding, swizzle=swizzle))
    for shape in ("2, 32, 16", "2, 16, 32"):  # A's ring (a narrow A stays row-major), then B's
        assert re.search(rf"__half\* v\d+ = reinterpret_cast<__half\*>\(tsr_smem \+ \d+\);  // \[{shape}\], "
                         rf"rows padded by {padding}", text), shape
    assert ("TSR_SWIZZLE(" in text.split("#include")[-1].split("\n", 1)[1]) == (swizzle == "xor")
    assert re.search(r"\bfloat v\d+\[8\];", text)  # the 32x32 accumulator: 8 elements per thread of 128


@clause("LOWER-TARGET-1")
def test_a_buffer_carried_through_a_loop_is_a_pointer_swapped_in_parallel():
    from ..tiles.test_frontend import axpy_db
    text = axpy_db.inspect_ir("target")
    m = re.search(r"__half\* (\w+) = &(v\d+)\[0\];\s*__half\* (\w+) = &(v\d+)\[0\];\s*(v\d+) = \1;\s*(v\d+) = \3;",
                  re.split(r"for \((?:int|long) v", text)[1])
    assert m and {m.group(2), m.group(4)} == {m.group(5), m.group(6)} and m.group(2) != m.group(5)


@clause("LOWER-TARGET-1")
def test_an_op_without_a_rule_is_a_lowering_error_that_says_why():
    kb = T.KernelBuilder("red", [("X", T.buffer((4, 32), "f32")), ("Y", T.buffer((4, 1), "f32"), True)])
    X, Y = kb.params
    kb.frag_store(kb.subview(Y, [0, 0], (4, 1)), kb.reduce(kb.frag_load(kb.subview(X, [0, 0], (4, 32))), "sum", 1))
    with pytest.raises(LoweringError, match=r"reduce.{10,}"):
        TARGETS["target"](kb.finish())


@clause("LOWER-TARGET-2")
@pytest.mark.parametrize("padding", [0, 1])
def test_shared_buffers_are_carved_out_of_one_dynamic_array(backend, padding):
    """Every alloc is a pointer into tsr_smem at the next 128-byte boundary after the previous
    one, in program order; the kernel's byte count is printed above it."""
    text, program = _target(backend, "f32", dict(tile=(32, 32, 16), stages=2, padding=padding))
    for func in tile_funcs(program):
        allocs = [o for o in func.walk() if o.name == "tessera.tile.alloc"]
        placed, top = [], 0
        for o in allocs:
            t = o.results[0].type
            placed.append(top)
            size = int(np.prod(t.shape[:-1])) * (t.shape[-1] + o.attributes["pad"]) * t.dtype.itemsize
            top += -(-size // 128) * 128
        name = func.attributes["sym_name"]
        at = re.search(rf"void (__launch_bounds__\([\d, ]+\) )?{name}\(", text).start()
        head, body = text[:at].rsplit("\n\n", 1)[-1], text[at:].split("\n}\n", 1)[0]
        assert (f"// dynamic shared memory: {top} B" in head) == bool(allocs), name
        assert ("unsigned char tsr_smem[];" in body) == bool(allocs)
        assert [int(o) for o in re.findall(r"reinterpret_cast<\w+\*>\(tsr_smem \+ (\d+)\)", body)] == placed


STUB = r'''
#pragma once
#include <cmath>
#define __global__
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
struct tsr_dim3 { long x, y, z; };
extern tsr_dim3 threadIdx, blockIdx, blockDim, gridDim;
inline void __syncthreads() {}
#define NARROW(T, S) struct T { S bits; T() = default; explicit T(float); explicit T(double); \
  explicit operator float() const; explicit operator double() const; }; \
  T operator+(T, T); T operator-(T, T); T operator*(T, T); T operator/(T, T); T operator-(T); \
  bool operator<(T, T); bool operator>(T, T); bool operator==(T, T);
NARROW(__half, unsigned short)
NARROW(__nv_bfloat16, unsigned short)
NARROW(__nv_fp8_e4m3, unsigned char)
NARROW(__nv_fp8_e5m2, unsigned char)
template <class T, class S> T tsr_cvt(S);
template <class T, int R, int O, class S> T tsr_cvt(S);
template <class T, class S> T tsr_widen(S);
enum { TSR_RNE, TSR_RTZ, TSR_RUP, TSR_RDOWN, TSR_NATIVE = 0, TSR_SATURATE };
template <int N> void tsr_cp_async(void*, const void*);
struct float2 { float x, y; }; struct float4 { float x, y, z, w; }; struct double2 { double x, y; };
struct uint2 { unsigned x, y; }; struct uint4 { unsigned x, y, z, w; };
float2 make_float2(float, float); float4 make_float4(float, float, float, float); double2 make_double2(double, double);
#define TSR_INFF 1.0f
#define TSR_INF 1.0
inline void tsr_cp_async_commit() {}
template <int N> void tsr_cp_async_wait() {}
#define TSR_SWIZZLE(offset, size) (offset)
#define MATH(f) float f(float); double f(double);
MATH(tsr_exp) MATH(tsr_expm1) MATH(tsr_log) MATH(tsr_sin) MATH(tsr_cos) MATH(tsr_tanh) MATH(tsr_erf)
MATH(tsr_erfc) MATH(tsr_sigmoid) MATH(tsr_silu) MATH(tsr_gelu) MATH(tsr_gelu_tanh) MATH(tsr_rsqrt)
template <class T> T tsr_max(T, T);
template <class T> T tsr_min(T, T);
template <class T> T tsr_canon(T);
__half __habs(__half); __nv_bfloat16 __habs(__nv_bfloat16);
template <class T> T tsr_shfl_xor(T, int);
'''


@clause("LOWER-TARGET-1")
@pytest.mark.parametrize("fmt", list(CTYPE))
def test_the_text_parses_as_cpp_with_a_stub_header(backend, fmt, tmp_path):
    """g++ -fsyntax-only against a stub device header whose narrow types convert only explicitly."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    text, _ = _target(backend, fmt, dict(tile=(32, 32, 16), padding=1, swizzle="xor"))
    for name in ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"):
        (tmp_path / name).write_text("#pragma once\n")
    (tmp_path / "tessera_device.cuh").write_text(STUB)
    (tmp_path / "k.cu").write_text(text)
    done = subprocess.run([gxx, "-std=c++17", "-fsyntax-only", "-x", "c++", f"-I{tmp_path}", str(tmp_path / "k.cu")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:3000]


STAND_IN = r'''
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
template <class T, class S> __device__ T tsr_cvt(S x) { return T(x); }
template <class T, int R, int O, class S> __device__ T tsr_cvt(S x) { return T(x); }
template <class T, class S> __device__ T tsr_widen(S x) { return T(x); }
enum { TSR_RNE, TSR_RTZ, TSR_RUP, TSR_RDOWN, TSR_NATIVE = 0, TSR_SATURATE };
template <int N> __device__ void tsr_cp_async(void* d, const void* s) { memcpy(d, s, N); }
#define TSR_INFF __int_as_float(0x7f800000)
#define TSR_INF __longlong_as_double(0x7ff0000000000000LL)
__device__ inline void tsr_cp_async_commit() {}
template <int N> __device__ void tsr_cp_async_wait() {}
#define TSR_SWIZZLE(offset, size) (offset)
#define MATH(f, g) __device__ inline float f(float x) { return g(x); } __device__ inline double f(double x) { return g(x); }
MATH(tsr_exp, exp) MATH(tsr_expm1, expm1) MATH(tsr_log, log) MATH(tsr_sin, sin) MATH(tsr_cos, cos)
MATH(tsr_tanh, tanh) MATH(tsr_erf, erf) MATH(tsr_erfc, erfc) MATH(tsr_sigmoid, exp) MATH(tsr_silu, exp)
MATH(tsr_gelu, exp) MATH(tsr_gelu_tanh, exp) MATH(tsr_rsqrt, rsqrt)
template <class T> __device__ T tsr_max(T a, T b) { return a > b ? a : b; }
template <class T> __device__ T tsr_min(T a, T b) { return a < b ? a : b; }
template <class T> __device__ T tsr_canon(T x) { return x; }
template <class T> __device__ T tsr_shfl_xor(T v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
'''


@clause("LOWER-TARGET-1")
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["bf16", "fp8_e4m3", "fp8_e5m2"])
def test_narrow_kernels_compile_for_sm_90(backend, fmt, tmp_path):
    """nvcc -arch=sm_90 -c with the CUDA headers and a compile-only stand-in device header."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    text, _ = _target(backend, fmt, dict(tile=(32, 32, 16), padding=1, swizzle="xor"))
    (tmp_path / "tessera_device.cuh").write_text(STAND_IN)
    (tmp_path / "k.cu").write_text(text)
    done = subprocess.run([nvcc, "-arch=sm_90", "-c", f"-I{tmp_path}", str(tmp_path / "k.cu"), "-o",
                           str(tmp_path / "k.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
