"""Validate the tensor-core model (NUM-TC-2/3) on a GPU: device ``mma.sync`` bits = ``tc.mma``.

A standalone kernel (one warp per 16×8 output tile), compiled by the pinned NVRTC with the
device header and launched by CuPy, feeds f16/bf16 operands through the header's wrappers of
``mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32`` with the PTX fragment
layout (g = lane >> 2, t = lane & 3: A a0,a1 = (g, 2t..2t+1), a2,a3 = (g+8, …), a4..a7 the
same at columns +8; B b0,b1 = (k = 2t..2t+1, n = g), b2,b3 = k + 8; C/D c0,c1 = (g, 2t..),
c2,c3 = (g+8, 2t..)), walking K in steps of 16 with the accumulator carried in registers,
and compares every output's bits with the model for the device's architecture (NaN: NaN).

The GPU tests carry the ``gpu`` marker and skip without CuPy or a device. The kernels are
also compiled without a GPU (the SASS must hold HMMA), so a typo shows up in CI. fp8 inputs go
through ``m16n8k32`` on sm_90. Not covered yet: f16 accumulation, sm_70's ``m8n8k4``.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera_ref.backends.cuda.compile import build
from tessera_ref.backends.cuda.runtime import arch_of
from tessera_ref.numerics import tc

from cuda_programs import needs_toolchain

KERNELS = r"""
#include "tessera_device.cuh"
__device__ __forceinline__ unsigned tsr_pack2(unsigned short lo, unsigned short hi) {
    return (unsigned)lo | ((unsigned)hi << 16);
}

#define TSR_TC_KERNEL(NAME, MMA)                                                               \
extern "C" __global__ void NAME(const unsigned short* A, const unsigned short* B,              \
                                const float* C, float* D, int N, int K) {                       \
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;                                   \
    int r0 = blockIdx.x * 16 + g, r1 = r0 + 8, col = blockIdx.y * 8 + 2 * t;                    \
    float c[4] = {C[r0 * N + col], C[r0 * N + col + 1], C[r1 * N + col], C[r1 * N + col + 1]};  \
    int n = blockIdx.y * 8 + g;                                                                 \
    for (int k0 = 0; k0 < K; k0 += 16) {                                                        \
        int k = k0 + 2 * t;                                                                     \
        unsigned a[4] = {tsr_pack2(A[r0 * K + k], A[r0 * K + k + 1]),                           \
                         tsr_pack2(A[r1 * K + k], A[r1 * K + k + 1]),                           \
                         tsr_pack2(A[r0 * K + k + 8], A[r0 * K + k + 9]),                       \
                         tsr_pack2(A[r1 * K + k + 8], A[r1 * K + k + 9])};                      \
        unsigned b[2] = {tsr_pack2(B[k * N + n], B[(k + 1) * N + n]),                           \
                         tsr_pack2(B[(k + 8) * N + n], B[(k + 9) * N + n])};                    \
        MMA(c, a, b, c);                                                                        \
    }                                                                                           \
    D[r0 * N + col] = c[0]; D[r0 * N + col + 1] = c[1];                                         \
    D[r1 * N + col] = c[2]; D[r1 * N + col + 1] = c[3];                                         \
}

TSR_TC_KERNEL(tsr_tc_mma_bf16, tsr_mma_m16n8k16_bf16)
TSR_TC_KERNEL(tsr_tc_mma_f16, tsr_mma_m16n8k16_f16)
"""

#: m16n8k32 with fp8 inputs (sm_89+): A a0..a3 = (g, 4t..4t+3), a4..a7 = (g+8, …),
#: a8..a15 the same at columns +16; B b0..b3 = (k = 4t..4t+3, n = g), b4..b7 = k + 16; one
#: byte per element, the lowest k in the lowest byte.
FP8_KERNELS = r"""
__device__ __forceinline__ unsigned tsr_pack4(unsigned char e0, unsigned char e1, unsigned char e2,
                                              unsigned char e3) {
    return (unsigned)e0 | ((unsigned)e1 << 8) | ((unsigned)e2 << 16) | ((unsigned)e3 << 24);
}

#define TSR_TC8_KERNEL(NAME, MMA)                                                              \
extern "C" __global__ void NAME(const unsigned char* A, const unsigned char* B,                \
                                const float* C, float* D, int N, int K) {                       \
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;                                   \
    int r0 = blockIdx.x * 16 + g, r1 = r0 + 8, col = blockIdx.y * 8 + 2 * t;                    \
    float c[4] = {C[r0 * N + col], C[r0 * N + col + 1], C[r1 * N + col], C[r1 * N + col + 1]};  \
    int n = blockIdx.y * 8 + g;                                                                 \
    for (int k0 = 0; k0 < K; k0 += 32) {                                                        \
        int k = k0 + 4 * t;                                                                     \
        const unsigned char *p0 = A + r0 * K + k, *p1 = A + r1 * K + k;                         \
        unsigned a[4] = {tsr_pack4(p0[0], p0[1], p0[2], p0[3]), tsr_pack4(p1[0], p1[1], p1[2], p1[3]), \
                         tsr_pack4(p0[16], p0[17], p0[18], p0[19]),                             \
                         tsr_pack4(p1[16], p1[17], p1[18], p1[19])};                            \
        unsigned b[2] = {tsr_pack4(B[k * N + n], B[(k + 1) * N + n], B[(k + 2) * N + n], B[(k + 3) * N + n]), \
                         tsr_pack4(B[(k + 16) * N + n], B[(k + 17) * N + n], B[(k + 18) * N + n],  \
                                   B[(k + 19) * N + n])};                                       \
        MMA(c, a, b, c);                                                                        \
    }                                                                                           \
    D[r0 * N + col] = c[0]; D[r0 * N + col + 1] = c[1];                                         \
    D[r1 * N + col] = c[2]; D[r1 * N + col + 1] = c[3];                                         \
}

TSR_TC8_KERNEL(tsr_tc_mma_fp8_e4m3, tsr_mma_m16n8k32_e4m3)
TSR_TC8_KERNEL(tsr_tc_mma_fp8_e5m2, tsr_mma_m16n8k32_e5m2)
"""

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
          "fp8_e5m2": ml_dtypes.float8_e5m2}
#: compute capability -> the model of NUM-TC-1 (other architectures have none yet)
MODELS = {(8, 0): "tc:sm80", (9, 0): "tc:sm90"}


@needs_toolchain
@pytest.mark.parametrize("arch, source", [("sm_80", KERNELS), ("sm_90", KERNELS + FP8_KERNELS)])
def test_the_validation_kernels_compile_to_hmma(arch, source):
    """The header's mma.sync wrappers, compiled by the pinned NVRTC (no GPU needed): one
    HMMA.16816.F32(.BF16) per m16n8k16 on both architectures; the fp8 m16n8k32 kernels on
    sm_90 (what nvcc 13 makes of them is NUM-TC-1's doubt)."""
    b = build(source, arch)
    for fmt in ("bf16", "f16"):
        sass = b.kernels[f"tsr_tc_mma_{fmt}"].sass
        assert sum(n for o, n in sass.items() if o.startswith("HMMA.16816.F32")) >= 1, sass
    if arch == "sm_90":
        assert {"tsr_tc_mma_fp8_e4m3", "tsr_tc_mma_fp8_e5m2"} <= set(b.kernels)


def _device_model():
    cupy = pytest.importorskip("cupy")
    if not cupy.cuda.is_available():
        pytest.skip("no CUDA device")
    cc = cupy.cuda.Device().compute_capability
    key = (int(cc[:-1]), int(cc[-1]))
    if key not in MODELS:
        pytest.skip(f"no tensor-core model for sm_{cc} (NUM-TC-1 has sm_80 and sm_90)")
    return cupy, MODELS[key]


def _on_device(cupy, fmt: str, a, b, c, tmp_path):
    M, K = a.shape
    N = b.shape[1]
    fp8 = fmt.startswith("fp8")
    arch = arch_of(cupy.cuda.Device().compute_capability)
    cubin = tmp_path / f"tc_{arch}_{fmt}.cubin"
    if not cubin.exists():
        cubin.write_bytes(build(KERNELS + FP8_KERNELS if fp8 else KERNELS, arch).cubin)
    kernel = cupy.RawModule(path=str(cubin)).get_function(f"tsr_tc_mma_{fmt}")
    codes = np.uint8 if fp8 else np.uint16
    A = cupy.asarray(np.ascontiguousarray(a).view(codes))
    B = cupy.asarray(np.ascontiguousarray(b).view(codes))
    C = cupy.asarray(np.ascontiguousarray(c, dtype=np.float32))
    D = cupy.empty((M, N), dtype=cupy.float32)
    kernel((M // 16, N // 8), (32,), (A, B, C, D, np.int32(N), np.int32(K)))
    return cupy.asnumpy(D)


def _assert_model_bits(got, want, what, bound=None):
    """NaN where the model has NaN; within twice NUM-TC-4's bound of the model (both are
    within it of the exact sum); then the same bits."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaN positions differ"
    if bound is not None:
        finite = np.isfinite(want)
        far = np.abs(got[finite].astype(np.float64) - want[finite]) > 2 * bound[finite]
        assert not far.any(), f"{what}: {far.sum()} outputs lie outside the NUM-TC-4 bound"
    g, w = got[~nan].view(np.uint32), want[~nan].view(np.uint32)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{what}: {bad.size} of {g.size} outputs differ from the model; first: device "
                           f"{g[bad[0]]:08x}, model {w[bad[0]]:08x}")


def _targeted(fmt: str, K: int):
    """One (A, B) pair per hand vector of tests/test_tc.py: every row of A is the vector's
    a (zero-padded to K), column 0 of B its b, the other columns zero."""
    T = 2.0 ** -12
    rows = [
        ([T, T, 1.0], [T, T, 1.0]),                                   # extra alignment bits
        ([2.0 ** -13] * 3 + [1.0], [2.0 ** -12] * 3 + [1.0]),         # truncation below the grid
        ([1.5 * T, 1.0], [2.0 ** -11, 1.0]),                          # toward zero, not to nearest
        ([-1.5 * T, -1.0], [2.0 ** -11, 1.0]),
        ([2.0 ** -8] * 4 + [1.0, 32.0], [2.0 ** -7] * 4 + [1.0, 32.0]),  # swamping
        ([1.0, -1.0, 2.0 ** -15], [1.0, 1.0, 2.0 ** -15]),            # cancellation
        ([2.0 ** -13] * 8 + [1.0], [2.0 ** -13] * 8 + [1.0]),         # blocks of 8 vs 16
        ([2.0 ** -24, 2.0 ** -14], [2.0 ** 10, 1.5 * 2.0 ** -14]),    # subnormal input exponent
        ([-0.0], [1.0]),                                              # signed zeros
        ([np.inf, 1.0], [0.0, 1.0]),                                  # 0·inf
        ([np.inf, 1.0], [1.0, -np.inf]),                              # +inf and -inf
    ]
    for ra, rb in rows:
        a = np.zeros((16, K))
        a[:, :len(ra)] = ra
        b = np.zeros((K, 8))
        b[:len(rb), 0] = rb
        yield a.astype(DTYPES[fmt]), b.astype(DTYPES[fmt])


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_targeted_vectors_match_the_model(fmt, tmp_path):
    cupy, model = _device_model()
    for a, b in _targeted(fmt, 32):
        for c0 in (0.0, -0.0, 2.0 ** 23, 1.5 * 2.0 ** -16):
            c = np.full((16, 8), c0, np.float32)
            _assert_model_bits(_on_device(cupy, fmt, a, b, c, tmp_path), tc.mma(a, b, c, model), f"{model} {fmt} c={c0}")


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "f16"])
@pytest.mark.parametrize("K", [16, 64, 512])
def test_random_vectors_match_the_model(fmt, K, tmp_path):
    cupy, model = _device_model()
    rng = np.random.default_rng(K)
    for trial in range(4):
        spread = [0, 4, 8, 12][trial] if fmt == "bf16" else [0, 2, 4, 6][trial]
        a = (rng.standard_normal((64, K)) * 2.0 ** rng.integers(-spread, spread + 1, (64, K))).astype(DTYPES[fmt])
        b = (rng.standard_normal((K, 32)) * 2.0 ** rng.integers(-spread, spread + 1, (K, 32))).astype(DTYPES[fmt])
        c = rng.standard_normal((64, 32)).astype(np.float32)
        _assert_model_bits(_on_device(cupy, fmt, a, b, c, tmp_path), tc.mma(a, b, c, model), f"{model} {fmt} K={K} #{trial}",
                           bound=tc.error_bound(a, b, c, model))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("K", [32, 128])
def test_fp8_random_vectors_match_the_model(fmt, K, tmp_path):
    cupy, model = _device_model()
    if model != "tc:sm90":
        pytest.skip(f"{model} has no fp8 model (NUM-TC-1)")
    rng = np.random.default_rng(K + 8)
    for trial in range(4):
        a = (rng.standard_normal((32, K)) * 2.0 ** rng.integers(-3, 4, (32, K))).astype(DTYPES[fmt])
        b = (rng.standard_normal((K, 16)) * 2.0 ** rng.integers(-3, 4, (K, 16))).astype(DTYPES[fmt])
        c = (rng.standard_normal((32, 16)) if trial % 2 else np.zeros((32, 16))).astype(np.float32)
        _assert_model_bits(_on_device(cupy, fmt, a, b, c, tmp_path), tc.mma(a, b, c, model), f"{model} {fmt} K={K} #{trial}",
                           bound=tc.error_bound(a, b, c, model))
