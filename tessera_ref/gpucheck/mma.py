"""Stage ``tc`` (CUDA-CHECK-3): the tensor-core models against ``mma.sync`` on the device.

Standalone validation kernels (one warp per 16×8 output tile) feed operands through the device
header's wrappers of ``mma.sync.aligned.m16n8k16`` (bf16, f16) and ``m16n8k32`` (fp8 on sm_90)
in the PTX fragment layout (g = lane >> 2, t = lane & 3: for m16n8k16 A a0,a1 = (g, 2t..2t+1),
a2,a3 = (g+8, …), a4..a7 the same at columns +8; B b0,b1 = (k = 2t..2t+1, n = g), b2,b3 = k + 8;
C/D c0,c1 = (g, 2t..), c2,c3 = (g+8, 2t..)), walking K with the accumulator carried in
registers; every output's bits are compared with :func:`~tessera_ref.numerics.tc.mma` for the
device's model (NaN: NaN). The cases — hand vectors with several accumulators and random
operands of growing exponent spread — are written to the results directory, so a disagreement
leaves the data the model is then fitted to.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..numerics import tc
from .device import Skip, hexbits

__all__ = ["KERNELS", "FP8_KERNELS", "DTYPES", "MODELS", "targeted", "random_cases", "kernel_of", "on_device",
           "items", "run"]

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


def items(arch: str, quick: bool) -> list:
    return ["bf16", "f16"] + (["fp8_e4m3", "fp8_e5m2"] if arch == "sm_90" else [])


def targeted(fmt: str, K: int):
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



#: the accumulators each hand vector is run with
TARGET_C = (0.0, -0.0, 2.0 ** 23, 1.5 * 2.0 ** -16, 3.0)


def random_cases(fmt: str, scale: str):
    """``(key, a, b, c)`` random cases: K of several instructions, exponent spreads growing
    with the trial, C = 0 in the first trials and random (spread too) in the last."""
    fp8 = fmt.startswith("fp8")
    ks = ((32, 128) if fp8 else (16, 64, 512))[:1 if scale == "dry" else None]
    trials = {"full": 6, "quick": 3, "dry": 2}[scale]
    rng = np.random.default_rng(1)
    for K in ks:
        for trial in range(trials):
            spread = [0, 1, 3, 5, 0, 3][trial] if fp8 else [0, 4, 8, 12, 2, 8][trial] if fmt == "bf16" else \
                [0, 2, 4, 6, 1, 4][trial]
            a = (rng.standard_normal((64, K)) * 2.0 ** rng.integers(-spread, spread + 1, (64, K))).astype(DTYPES[fmt])
            b = (rng.standard_normal((K, 32)) * 2.0 ** rng.integers(-spread, spread + 1, (K, 32))).astype(DTYPES[fmt])
            c = (rng.standard_normal((64, 32)) * 2.0 ** rng.integers(-4, 5, (64, 32)) if trial >= trials - 2
                 else np.zeros((64, 32))).astype(np.float32)
            yield f"{fmt}_K{K}_{trial}", a, b, c


def kernel_of(ctx, fmt: str):
    """The validation kernel of ``fmt`` loaded on the device."""
    module, _ = ctx.load(KERNELS + FP8_KERNELS if fmt.startswith("fp8") else KERNELS)
    return module.get_function(f"tsr_tc_mma_{fmt}")


def on_device(ctx, kernel, fmt: str, a, b, c) -> np.ndarray:
    """``D = C + A·B`` by ``kernel`` (:func:`kernel_of` ``fmt``) on the device."""
    M, K = a.shape
    N = b.shape[1]
    codes = np.uint8 if fmt.startswith("fp8") else np.uint16
    cp = ctx.cp
    A = cp.asarray(np.ascontiguousarray(a).view(codes))
    B = cp.asarray(np.ascontiguousarray(b).view(codes))
    C = cp.asarray(np.ascontiguousarray(c, dtype=np.float32))
    D = cp.empty((M, N), dtype=np.float32)
    kernel((M // 16, N // 8, 1), (32, 1, 1), (A, B, C, D, np.int32(N), np.int32(K)))
    return cp.asnumpy(D)


def _first_difference(key, a, b, c, got, want) -> dict:
    bad = np.argwhere((got.view(np.uint32) != want.view(np.uint32)) & ~(np.isnan(got) & np.isnan(want)))
    i, j = (int(v) for v in bad[0])
    return {"case": key, "differing": int(len(bad)), "of": int(got.size), "row": i, "col": j,
            "a_row": [hexbits(v) for v in a[i]], "b_col": [hexbits(v) for v in b[:, j]], "c": hexbits(c[i, j]),
            "device": hexbits(got[i, j]), "model": hexbits(want[i, j])}


def run(ctx, fmt: str) -> dict:
    cc = ctx.cp.cuda.Device().compute_capability
    model = MODELS.get((int(cc[:-1]), int(cc[-1])))
    if model is None:
        raise Skip(f"no tensor-core model for compute capability {cc[:-1]}.{cc[-1]} (NUM-TC-1)")
    cases = [(f"{fmt}_t{i}_{j}", a, b, np.full((16, 8), c0, np.float32))
             for i, (a, b) in enumerate(targeted(fmt, 32)) for j, c0 in enumerate(TARGET_C)]
    cases += list(random_cases(fmt, ctx.scale))
    kernel, saved, first, differing, outputs = kernel_of(ctx, fmt), {}, None, 0, 0
    for key, a, b, c in cases:
        got = on_device(ctx, kernel, fmt, a, b, c)
        want = tc.mma(a, b, c, model)
        codes = np.uint8 if fmt.startswith("fp8") else np.uint16
        saved.update({f"{key}_a": a.view(codes), f"{key}_b": b.view(codes), f"{key}_c": c, f"{key}_d": got})
        outputs += got.size
        same = np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(
            got[~np.isnan(got)].view(np.uint32), want[~np.isnan(want)].view(np.uint32))
        if not same:
            differing += 1
            first = first or _first_difference(key, a, b, c, got, want)
    np.savez_compressed(ctx.out / f"mma-{fmt}.npz", **saved)
    summary = f"{model} {fmt}: {len(cases)} cases, {outputs} outputs"
    if first:
        return {"status": "differ", "model": model, "cases": len(cases), "differing_cases": differing,
                "first": first, "detail": f"{summary}; {differing} cases differ; first {first['case']} "
                                          f"[{first['row']},{first['col']}]: device {first['device']}, "
                                          f"model {first['model']}"}
    return {"status": "pass", "model": model, "cases": len(cases), "detail": f"{summary}: every bit equal"}
