"""The schedule cost model: shared memory, HBM bytes, FLOPs and a time for a scheduled kernel.

The model counts what the tile lowering's kernels do (LOWER-COST-1), without running them:

- ``smem_bytes`` — the shared buffers the kernel allocates: for matmul
  ``stages · (BM·(BK+pad) + BK·(BN+pad)) · itemsize`` (plus the ``BM·BN`` accum tile of the
  epilogue when storage is narrower than accum); row kernels ``R·32·4`` (the butterfly
  scratch); attention the buffers listed in :func:`attention_cost`;
- ``hbm_bytes`` — the 32-byte sectors the kernel's global accesses touch, each time (no
  cache model, as the tile interpreter counts them): matmul reads, per output matrix, each A
  row panel once per column tile and each B column panel once per row tile — a transposed
  operand's stored tile is read row by row, the same sectors; without shared staging the
  mma reads A by columns, a sector per element once rows are 32 bytes apart; row kernels read
  the input once per pass (reductions 1, layernorm 3, rmsnorm 2, softmax 3), a sector per
  element when the row's elements are 32 bytes apart or more, and a reduction stores each
  result from one lane (a sector each); FlashAttention reads Q once, K and V once per Q
  tile (whatever the number of stages), writes O once;
- ``flops`` — for matmul and FlashAttention what the tile interpreter counts for the lowered
  kernel (TILE-COUNT-4): matmul ``2·M·N·K`` per output matrix (its ``mma``; the epilogue's
  conversions are no FLOPs); attention the two ``mma`` per key block plus every scalar and
  fragment operation of :func:`attention_cost`'s formula. Row kernels and elementwise kernels
  get a nominal count (5 per input element, 1 per output element);
- ``seconds`` — compute time with wave quantization (``ceil(tiles / SMs)`` waves of one tile
  per SM, each at ``peak / SMs``) and memory time ``hbm_bytes / bandwidth``, overlapped
  (``max``) when loads are asynchronous with at least two stages, added otherwise.

For aligned shapes (rows a multiple of 32 elements) ``hbm_bytes`` equals the tile
interpreter's HBM counter; the tests check that for every family.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import LoweringError
from ..ir import schedule as S
from ..sim.presets import get_preset
from ..sim.roofline import peak_key
from .plan import the_op
from .tile_matmul import matmul_dims
from .tile_rows import row_view

__all__ = ["KernelCost", "kernel_cost", "matmul_cost", "attention_cost", "naive_attention_bytes"]

_ROW_PASSES = {"sum": 1, "mean": 1, "max": 1, "min": 1, "softmax": 3, "layernorm_safe": 3, "rmsnorm_safe": 2}


@dataclass(frozen=True)
class KernelCost:
    """What the cost model says about one scheduled kernel (see the module docstring)."""

    smem_bytes: int
    hbm_bytes: int
    flops: int
    tiles: int
    seconds: float

    def fits(self, preset) -> tuple:
        """``(ok, reason)``: whether the shared memory fits ``preset``'s per-block limit."""
        limit = get_preset(preset).smem_per_block
        if self.smem_bytes > limit:
            return False, f"needs {self.smem_bytes:,} B of shared memory per block, over the limit of {limit:,} B"
        return True, None


def _time(flops, hbm_bytes, tiles, overlap, dtype, preset) -> float:
    p = get_preset(preset)
    peak = p.peaks[peak_key(p, dtype)]
    waves = math.ceil(tiles / p.sm_count) if tiles else 0
    compute = waves * (flops / max(tiles, 1)) / (peak / p.sm_count)
    memory = hbm_bytes / p.hbm_bandwidth
    return max(compute, memory) if overlap else compute + memory


def matmul_cost(M, N, K, tile, *, batch=1, itemsize=4, shared=True, padding=0, stages=2, async_copy=True,
                with_c=False, dtype="f32", accum_itemsize=4, preset="H100") -> KernelCost:
    """The cost of ``batch`` products ``[M, K] @ [K, N]`` (one per output matrix, however the
    operands broadcast or are transposed) with tile ``(BM, BN, BK)`` (see the module
    docstring); storage narrower than the accumulator adds the ``BM·BN`` accum tile of the
    epilogue."""
    BM, BN, BK = tile
    stages = stages if shared and async_copy else 1
    smem = stages * (BM * (BK + padding) + BK * (BN + padding)) * itemsize if shared else 0
    smem += BM * BN * accum_itemsize if accum_itemsize != itemsize else 0
    tiles = batch * (M // BM) * (N // BN)
    # staged tiles are copied row by row (coalesced); unstaged, the mma reads A a column at a time
    a_bytes = itemsize if shared else min(32, K * itemsize)
    hbm = batch * (M * K * (N // BN) * a_bytes + (K * N * (M // BM) + M * N * (2 if with_c else 1)) * itemsize)
    flops = batch * 2 * M * N * K
    overlap = shared and async_copy and stages >= 2
    return KernelCost(smem, hbm, flops, tiles, _time(flops, hbm, tiles, overlap, dtype, preset))


def attention_cost(Sq, Sk, D, tile, *, Dv=None, heads=1, itemsize=2, accum_itemsize=4, padding=0, stages=1,
                   async_copy=True, lanes=128, dtype="f16", preset="H100") -> KernelCost:
    """FlashAttention's cost with Q tiles of ``Br`` rows and K/V tiles of ``Bc`` rows.

    Shared memory: the buffers of :mod:`.tile_attention` — the Q tile; ``stages`` K and V
    blocks (one with ``async_copy=False``); the Kᵀ tile; S/P in accum; per-row m, ℓ, α; the
    butterfly scratch (the output accumulator and PV are register fragments). HBM: Q once,
    K and V once per Q tile, O once, whatever the number of stages. FLOPs, per head and
    key block of ``Bc`` keys: the two ``mma`` (``2·Sq·Bc·(D + Dv)``); per score 6 lane
    operations (×scale in the max and again for p, the max fold, ⊖ shift, exp, the sum
    fold); per query row 480 lane operations of its warp (two butterflies of 5 × 32, and
    32 lanes each for ``max(m, ·)``, ``m ⊖ shift``, ``exp``, ``α ⊗ ℓ``, ``⊕ Σp``); per
    accumulator element 2 (``α ⊗ acc ⊕ PV``); and at the end one division per output
    element. Loads overlap compute with ``async_copy`` and at least two stages."""
    Br, Bc = tile[0], tile[1]
    Dv = D if Dv is None else Dv
    stages = stages if async_copy else 1
    smem = (Br * (D + padding) + stages * Bc * (D + Dv + 2 * padding) + D * (Bc + padding)) * itemsize \
        + (Br * (Bc + padding) + 3 * Br + (lanes // 32) * 32) * accum_itemsize
    elems = heads * (Sq * D + (Sq // Br) * Sk * (D + Dv) + Sq * Dv)
    blocks = Sk // Bc
    flops = heads * (2 * Sq * Sk * (D + Dv) + 6 * Sq * Sk + Sq * blocks * (480 + 2 * Dv) + Sq * Dv)
    tiles = heads * (Sq // Br)
    return KernelCost(smem, elems * itemsize, flops, tiles,
                      _time(flops, elems * itemsize, tiles, async_copy and stages >= 2, dtype, preset))


def naive_attention_bytes(Sq, Sk, D, tile, *, heads=1, itemsize=2) -> dict:
    """HBM bytes of unfused attention as three kernels of this lowering: ``S = Q·Kᵀ``
    (matmul, tile ``(BM, BN, ·)``), ``P = softmax(S)`` (a row kernel: three passes over S,
    one write), ``O = P·V``. Returns the bytes of each kernel and the total."""
    BM, BN = tile[0], tile[1]
    bn_o = min(BN, D)
    qk = Sq * D * (Sk // min(BN, Sk)) + D * Sk * (Sq // BM) + Sq * Sk
    sm = 3 * Sq * Sk + Sq * Sk
    pv = Sq * Sk * (D // bn_o) + Sk * D * (Sq // BM) + Sq * D
    parts = {"scores": qk, "softmax": sm, "pv": pv}
    out = {k: heads * v * itemsize for k, v in parts.items()}
    out["total"] = sum(out.values())
    return out


def kernel_cost(kop, preset="H100") -> KernelCost:
    """The cost of a ``tessera.schedule.kernel`` op under its schedule."""
    if kop.name != S.KERNEL:
        raise LoweringError(f"kernel_cost takes a '{S.KERNEL}', got '{kop.name}'")
    op = the_op(kop)
    s = kop.attributes
    t = op.results[0].type
    itemsize, dtype = t.dtype.itemsize, t.policy.storage.name
    short = s["op"]
    if short == "matmul":
        batch, M, N, K = matmul_dims(op)
        return matmul_cost(M, N, K, s["tile"], batch=math.prod(batch), itemsize=itemsize, shared=s["shared"],
                           padding=s["padding"], stages=s["stages"], async_copy=s["async_copy"],
                           with_c=len(op.operands) == 3, dtype=dtype,
                           accum_itemsize=t.policy.accum.dtype.itemsize, preset=preset)
    if short == "flash_attention":
        q, k, v = (x.type.shape for x in op.operands)
        return attention_cost(q[-2], k[-2], q[-1], s["tile"], Dv=v[-1], heads=math.prod(q[:-2]), itemsize=itemsize,
                              accum_itemsize=t.policy.accum.dtype.itemsize, padding=s["padding"],
                              stages=s["stages"], async_copy=s["async_copy"], lanes=s["lanes"], dtype=dtype,
                              preset=preset)
    n_in = math.prod(op.operands[0].type.shape)
    n_out = math.prod(t.shape)
    if short in _ROW_PASSES:
        R = s["tile"][0]
        O, _, I = row_view(op)
        along = min(32, I * itemsize)  # bytes per element read along a row (lanes I elements apart)
        reduces = short in ("sum", "mean", "max", "min")
        hbm = (_ROW_PASSES[short] * along + (len(op.operands) - 1) * itemsize) * n_in \
            + n_out * (32 if reduces else along)  # a reduction's result: one lane stores a sector
        tiles = O * I // R
        return KernelCost(R * 32 * t.policy.accum.dtype.itemsize, hbm, 5 * n_in, tiles,
                          _time(5 * n_in, hbm, tiles, False, dtype, preset))
    elems = len(op.operands) * n_out + n_out
    tiles = -(-n_out // (s["lanes"] * s["vectorize"]))
    return KernelCost(0, elems * itemsize, n_out, tiles, _time(n_out, elems * itemsize, tiles, False, dtype, preset))
