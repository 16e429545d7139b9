"""LOWER-TARGET-1: the CUDA C text of lowered kernels (labelled not yet compiled; checked by g++)."""
import shutil
import subprocess

import numpy as np
import pytest
from lowering_helpers import lowered

from tessera_ref import kernel, op
from tessera_ref.lowering import inspect
from tessera_ref.lowering.cuda import emit_cuda

# Just enough of CUDA for g++ to check the generated text's syntax and types (not its behaviour).
SHIM = r"""
#pragma once
#include <cmath>
struct tsr_dim3 { long x, y, z; };
extern tsr_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
typedef float __half;
inline void __syncthreads() {}
template <class T> void tsr_cp_async(T*, const T*, int) {}
inline void tsr_cp_async_commit() {}
template <int N> void tsr_cp_async_wait() {}
inline long TSR_SWIZZLE(long i, int) { return i; }
template <class T> T tsr_exp(T x) { return x; }
template <class T> T tsr_rsqrt(T x) { return x; }
template <class T> T tsr_max(T a, T b) { return a; }
template <class T> T tsr_min(T a, T b) { return a; }
"""

GXX = shutil.which("g++")


def _syntax_check(text, tmp_path):
    for name in ("cuda_fp16.h", "tessera_device.cuh"):
        (tmp_path / name).write_text(SHIM if name == "tessera_device.cuh" else "#pragma once\n")
    src = tmp_path / "k.cu"
    src.write_text(text)
    result = subprocess.run([GXX, "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-unused-variable",
                             "-Wno-unused-but-set-variable", f"-I{tmp_path}", "-x", "c++", str(src)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + text


def _program(fn, *args, **directives):
    return lowered(fn, *args, directives=directives or None)[3]


A = np.ones((64, 64), np.float32)


def test_matmul_target_text_is_labelled_and_has_the_pipeline():
    text = inspect(_program(lambda a, b: op.matmul(a, b), A, A, tile=(32, 32, 16), stages=3, padding=1), "target")
    assert text.startswith("// Tessera target text") and "NOT YET COMPILED" in text
    assert "__global__ void" in text and "tsr_cp_async_wait<1>();" in text and "__syncthreads();" in text
    assert "fmaf(" in text and "[1632]" in text  # 3 stages x 32 rows x (16 + 1 pad) floats


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
