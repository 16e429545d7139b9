"""Python @kernel definitions shared by the tile tests and the benchmark."""
from __future__ import annotations

from tessera_ref import cp_async, f32, kernel, mut, tbarrier, tile, tshared
from tessera_ref.frontend.tile_api import symbols

BM, BN, BK = 64, 64, 32
PAD, SWIZZLE = 0, "none"  # the A tile's layout (specialize(PAD=1) or SWIZZLE="xor")
stages = 2  # fill_prefix's default; each autotune configuration sets its own
M, N, K, n = symbols("M N K n")


@kernel
def matmul(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]]):
    """C = A @ B with BMxBN output tiles staged through shared memory, BK at a time."""
    m0 = tile.id(0) * BM
    n0 = tile.id(1) * BN
    sA = tshared.alloc[f32](BM, BK, pad=PAD, swizzle=SWIZZLE)
    sB = tshared.alloc[f32](BK, BN)
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(K, step=BK):
        cp_async.shared.global_(sA, A[m0:m0 + BM, k0:k0 + BK])
        cp_async.shared.global_(sB, B[k0:k0 + BK, n0:n0 + BN])
        cp_async.commit()
        cp_async.wait(0)
        tbarrier()
        acc += tile.mma(sA, sB, accum=f32)
        tbarrier()
    tile.store(C, index=(m0, n0), value=acc)


@kernel
def saxpy_unguarded(x: f32[n], y: mut[f32[n]], alpha: f32):
    """The seed's saxpy without its `if i < n` (a planted out-of-bounds bug)."""
    i = tile.linear_id()
    y[i] = alpha * x[i] + y[i]


@kernel.autotune(space=dict(BM=[128, 256], stages=[2, 3]))
def fill_prefix(x: mut[f32[n]]):
    """x[:BM] = stages, so a test can see which configuration ran."""
    i = tile.lane_id()
    for j in range(0, BM, 128):
        x[j + i] = float(stages)
