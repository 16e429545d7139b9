"""The canonical collectives across real processes (MESH-MP-4): ``mpiexec -n 2`` and ``-n 4``
give the bits of one process, and a sum whose bits depend on the order is the ascending fold."""
from __future__ import annotations

import numpy as np
import pytest

from _ranks import one_process, ranks


def _ascending(values) -> np.float32:
    """((x0 + x1) + x2) + x3 in f32, one rounding per addition (NumPy's f32 add is IEEE)."""
    acc = np.float32(values[0])
    for v in values[1:]:
        acc = np.float32(acc + np.float32(v))
    return acc


def test_a_sum_across_processes_is_the_ascending_fold_whose_bits_differ_from_pairwise():
    t = 2.0 ** -24
    contributions = [[1.0, t, t, t], [-1.0, -t, -t, -t], [t, 1.0, t, t], [t, t, t, 1.0]]  # per element, by rank
    want = [_ascending(c) for c in contributions]
    pairwise = [np.float32(np.float32(c[0] + np.float32(c[1])) + np.float32(np.float32(c[2]) + np.float32(c[3])))
                for c in contributions]
    # hand-checked: 1 + 2^-24 rounds back to 1 (ties to even), so the ascending fold of the first
    # element is 1 and of the last 1 + 3·2^-24 -> 1 + 2^-22; pairwise gives 1 + 2^-23 for the first
    assert [f"{np.float32(w).view(np.uint32):08x}" for w in want] == ["3f800000", "bf800000", "3f800000", "3f800002"]
    assert [p.view(np.uint32) for p in pairwise] != [w.view(np.uint32) for w in want]
    line = "order " + " ".join(f"{np.float32(w).view(np.uint32):08x}" for w in want) + "\n"
    assert one_process("order") == line
    assert ranks(2, "order") == line
    assert ranks(4, "order") == line


# The bits of the ascending f32 fold of each element, computed with NumPy adds from programs.py's
# values (the 4th element's 1 + 3·2^-24 -> 1 + 2^-22; the uneven case's element 2 is b4000000,
# where a descending or pairwise order gives b3800000).
ORDER_SCATTER = ("order_scatter 3f800000 bf800000 3f800000 3f800002\n"
                 "uneven_scatter bf800000 40000000 b4000000 40400000 c0000000 b4000000 3f7fffff\n")


def test_a_reduce_scatter_across_processes_is_the_ascending_fold():
    assert one_process("order_scatter") == ORDER_SCATTER
    assert ranks(2, "order_scatter") == ORDER_SCATTER
    assert ranks(4, "order_scatter") == ORDER_SCATTER


@pytest.mark.parametrize("n", [2, 4])
def test_a_reduce_scatter_sends_a_rings_bytes_per_process(n):
    """4000 bytes (f32, then bf16) per device, one device per process: each rank sends
    (p−1)/p of them — a ring's bytes — and no all-gather."""
    line = "scatter_bytes sent" + f" {(n - 1) * 4000 // n}" * n + "\n"
    assert ranks(n, "scatter_bytes") == line * 2


@pytest.mark.parametrize("n", [2, 4])
def test_an_exact_reduce_scatter_sends_a_rings_bytes_of_the_digits(n):
    """An exact pending sum (48 x 40 sums of a K-split matmul) moves as its ``w`` digits in use
    (4 bytes each a sum, 8 for the signed top one) plus a 20-byte header a message (length,
    low, top, special): a reduce-scatter sends (p−1)/p of them and no all-gather; an all-reduce
    gathers the merged chunks too, twice that when merging widens no sum. The bits are one
    process's."""
    single = one_process("exact_bytes").splitlines()
    out = ranks(n, "exact_bytes").splitlines()
    assert out[:2] == single
    digits, scatter, reduce = ([int(w) for w in line.split()[2:]] for line in out[2:])
    assert len(digits) == len(scatter) == len(reduce) == n and min(digits) >= 2
    for d, s, r in zip(digits, scatter, reduce):
        ring = (n - 1) * 4 * (d + 1) * 48 * 40 // n
        assert s == ring + (n - 1) * 20
        assert 2 * ring + 2 * (n - 1) * 20 <= r <= 2 * (n - 1) * 4 * (d + 2) * 48 * 40 // n + 2 * (n - 1) * 20


@pytest.mark.parametrize("n", [2, 4])
def test_every_collective_gives_the_bits_of_one_process(n):
    single = one_process("collectives")
    assert len(single.splitlines()) == 70
    assert ranks(n, "collectives") == single


def test_reductions_in_small_rounds_give_the_same_bits():
    """Scratch-bounded rounds (``programs.py small_rounds`` sets ROUND_BYTES to 64 bytes) cut
    each reduction into many exchanges; the bits do not change."""
    assert ranks(4, "small_rounds", "collectives") == one_process("collectives")


@pytest.mark.parametrize("n", [2, 4])
def test_a_tp_dp_training_step_gives_the_bits_of_one_process(n):
    single = one_process("train")
    assert len(single.splitlines()) == 6
    assert ranks(n, "train") == single


@pytest.mark.parametrize("n", [2, 4])
def test_send_and_recv_between_pipeline_stages_give_the_bits_of_one_process(n):
    single = one_process("stages")
    assert single.startswith("stages float32 (8, 16)")
    assert ranks(n, "stages") == single
