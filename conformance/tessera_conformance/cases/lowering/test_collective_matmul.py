"""LOWER-CM-1 … LOWER-CM-3: collective matmul — the rewrite, its bits and its timeline, run on
the backend. Expected values are independent: a sequential f32 fold written out in NumPy
scalars, and times worked out by hand from a machine of round numbers."""
import dataclasses

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op, schedule, sim
from tessera_ref.sim.presets import Link, get_preset
from tessera_conformance import assert_bits, clause, eager

from ..sim._machine import run_on

S = dist.ShardSpec
US = 1e-6


@pytest.fixture(autouse=True)
def _no_directives():
    schedule.reset()
    yield
    schedule.reset()


@tr.jit
def block_out(h, w):
    """The output projection of a tensor-parallel block: a K-split GEMM, its pending sum over
    tp reduce-scattered over the sequence (dimension 1)."""
    return dist.collective.reduce_scatter(op.matmul(h, w), axis="tp", dim=1)


@clause("LOWER-CM-1", "LOWER-CM-2")
def test_chunks_fold_each_element_in_rank_order(backend):
    """dp=2 × tp=3; h's K (3) is split over tp, W is ones, so tp rank r's partial of element
    (b, s, n) is h[b, s, r] = (2^24, c, -2^24) with c in {1, 2, 3}. In rank order
    (2^24 + c) - 2^24 is 0, 2, 4 (2^24 + c rounds to even); the reverse order gives c."""
    mesh = dist.Mesh(("dp", "tp"), range(6), (2, 3))
    rng = np.random.default_rng(5)
    c = rng.integers(1, 4, (4, 6)).astype(np.float32)
    h = np.stack([np.full((4, 6), 2.0 ** 24, np.float32), c, np.full((4, 6), -2.0 ** 24, np.float32)], axis=-1)
    want = np.float32(np.float32(h[..., 0] + h[..., 1]) + h[..., 2])
    reverse = np.float32(np.float32(h[..., 2] + h[..., 1]) + h[..., 0])
    assert not np.array_equal(want, reverse)  # the case tells the orders apart
    want = np.repeat(want[..., None], 8, axis=-1)
    H = dist.tensor((4, 6, 3), S(("batch", -1), ("dp", "tp")), mesh, dtype="f32", data=h)
    W = dist.tensor((3, 8), S(("row",), ("tp",)), mesh, dtype="f32", data=np.ones((3, 8), np.float32))
    unfused = eager(backend, lambda: block_out(H, W))
    schedule.collective_matmul(3)
    fused = eager(backend, lambda: block_out(H, W))
    assert_bits(fused, want, "chunked")
    assert_bits(unfused, want, "unfused")
    text = block_out.inspect_ir("schedule")
    assert text.count('"tessera.graph.reduce_scatter"') == 3 and "sizes = [3, 3, 2]" in text


@tr.jit
def gathered_in(x, w):
    """A sequence-parallel input gathered over tp for a column-parallel GEMM."""
    return op.matmul(dist.collective.all_gather(x, axis="tp"), w)


@clause("LOWER-CM-1", "LOWER-CM-2")
def test_chunked_gathers_give_the_products_bits(backend):
    """Small integers: every product is exact, so each element is the f64 product rounded."""
    mesh = dist.Mesh(("tp",), range(4), (4,))
    rng = np.random.default_rng(9)
    x, w = rng.integers(-3, 4, (3, 8, 5)).astype(np.float32), rng.integers(-3, 4, (5, 12)).astype(np.float32)
    X = dist.tensor(x.shape, S(("row",), ("tp",)), mesh, dtype="f32", data=x)
    Wc = dist.tensor(w.shape, S(("col",), ("tp",)), mesh, dtype="f32", data=w)
    schedule.collective_matmul(2)
    got = eager(backend, lambda: gathered_in(X, Wc))
    assert_bits(got, (x.astype(np.float64) @ w).astype(np.float32))
    assert gathered_in.inspect_ir("schedule").count('"tessera.graph.all_gather"') == 2


ROUND = dataclasses.replace(get_preset("H100"), name="round", peak_flops=(("bf16", 1e15),), hbm_bandwidth=2e13,
                            nvlink=Link("NVLink", 0.5e12, 0.1e-6), efficiency=())


@clause("LOWER-CM-3")
def test_the_first_chunks_transfer_hides_under_the_second_chunks_gemm(backend):
    """Per device, bf16: h is 1000 × 1000, W 1000 × 1000 (K split over tp=2). Two chunks of W's
    columns: split 4e6 B at 2e13 B/s = 0.2 µs; each GEMM 2·1000·500·1000 FLOP at 1e15 = 1 µs;
    each reduce-scatter of 1e6 B over 2 ranks α + n/2/β = 0.1 + 1 = 1.1 µs; concat 2e6 B = 0.1 µs."""
    mesh = dist.mesh(devices=["cuda:0", "cuda:1"], axes=("tp",), shape=(2,))
    m = sim.machine(ROUND, devices=2, overlap=True)
    schedule.collective_matmul(2)

    @tr.jit
    def f(a, b):
        return dist.collective.reduce_scatter(op.matmul(a, b), axis="tp", dim=0)

    def program():
        a = dist.tensor((1000, 2000), S(("col",), ("tp",)), mesh, dtype="bf16")
        b = dist.tensor((2000, 1000), S(("row",), ("tp",)), mesh, dtype="bf16")
        f(a, b)

    events = [e for e in run_on(backend, m, program) if e.device == 0]
    want = [("split", 0, 0.2), ("matmul", 0.2, 1.2), ("reduce_scatter[tp]", 1.2, 2.3), ("matmul", 1.2, 2.2),
            ("reduce_scatter[tp]", 2.3, 3.4), ("concat", 3.4, 3.5)]
    assert [(e.name, pytest.approx(e.start / US, abs=1e-9), pytest.approx(e.end / US, abs=1e-9))
            for e in events] == want
    assert m.overlapped_step_time == pytest.approx(3.5 * US) and m.conservative_step_time == pytest.approx(4.5 * US)
