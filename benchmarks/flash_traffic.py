"""Seed 003 §3.6: FlashAttention's schedule against a naive one — simulated HBM traffic.

The FlashAttention schedule is the seed's (``schedule.tile((128, 128, 64))``,
``use_shared_memory(True, padding=1)``, ``async_copy(True)``, ``pipeline_stages(3)``)
applied to ``op.flash_attention`` (block_k = 128). The naive schedule is three kernels of
the same lowering: ``S = Q·Kᵀ`` (K given transposed), ``P = softmax(S)``, ``O = P·V``,
with the same tile sizes. Both run in the tile interpreter on f16 data at a small size; the
HBM bytes are the interpreter's counters (every global access, no cache model), and the
cost model (tessera_ref.lowering.cost), which reproduces those counters exactly, gives the
ratio at larger sizes. Run: ``python benchmarks/flash_traffic.py``.
"""
import sys
import time

import numpy as np

from tessera_ref import op, schedule
from tessera_ref.lowering.cost import attention_cost, naive_attention_bytes

def seed_schedule() -> None:
    """Seed 003 §3.6's directives, issued inside an ``@op.kernel`` body."""
    schedule.tile((128, 128, 64))
    schedule.use_shared_memory(True, padding=1)
    schedule.async_copy(True)
    schedule.pipeline_stages(3)


def measured(S: int, D: int):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((S, D)).astype(np.float16) for _ in range(3))
    kt = np.ascontiguousarray(k.T)

    @op.kernel
    def flash(q, k, v):
        seed_schedule()
        return op.flash_attention(q, k, v, block_k=128)

    @op.kernel
    def naive(q, kt, v):
        seed_schedule()
        return op.matmul(op.softmax(op.matmul(q, kt)), v)

    t0 = time.perf_counter()
    out = flash(q, k, v, checks=False)
    assert np.array_equal(np.asarray(out.data), flash.reference(q, k, v)[0])
    flash_bytes = sum(r.counters.hbm_bytes for r in flash.reports)
    naive(q, kt, v, checks=False)
    naive_bytes = [r.counters.hbm_bytes for r in naive.reports]
    return flash_bytes, naive_bytes, time.perf_counter() - t0


def main():
    S, D = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (512, 64)
    flash_bytes, naive_bytes, seconds = measured(S, D)
    model_flash = attention_cost(S, S, D, (128, 128), padding=1).hbm_bytes
    model_naive = naive_attention_bytes(S, S, D, (128, 128))
    print(f"interpreter, S={S}, D={D}, f16 ({seconds:.1f} s):")
    print(f"  naive (scores, softmax, P.V): {naive_bytes} = {sum(naive_bytes):,} B "
          f"(model {model_naive['total']:,} B)")
    print(f"  flash (seed 003 schedule):    {flash_bytes:,} B (model {model_flash:,} B)")
    print(f"  ratio naive / flash: {sum(naive_bytes) / flash_bytes:.2f}x")
    print("cost model, f16, one head, D=64, tile (128, 128):")
    for n in (1024, 2048, 4096, 8192, 16384):
        naive_total = naive_attention_bytes(n, n, 64, (128, 128))["total"]
        one_pass = naive_total - 2 * n * n * 2  # a softmax reading S once instead of three times
        flash = attention_cost(n, n, 64, (128, 128), padding=1).hbm_bytes
        print(f"  S={n:6d}: naive {naive_total / 2**20:9.1f} MiB, flash {flash / 2**20:8.1f} MiB, "
              f"ratio {naive_total / flash:.2f}x (one-pass softmax: {one_pass / flash:.2f}x)")


if __name__ == "__main__":
    main()
