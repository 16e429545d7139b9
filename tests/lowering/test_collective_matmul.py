"""Collective matmul (LOWER-CM-1 … LOWER-CM-3): the rewrite, its bits, its timeline."""
import dataclasses

import numpy as np
import pytest

from tessera_ref import dist, jit, op, schedule, sim
from tessera_ref.errors import KernelError
from tessera_ref.numerics import Policy
from tessera_ref.lowering.collective_matmul import collective_matmul
from tessera_ref.sim.overlap import comm_exposure
from tessera_ref.sim.presets import Link, get_preset

S = dist.ShardSpec
US = 1e-6


@pytest.fixture(autouse=True)
def _no_directives():
    schedule.reset()
    yield
    schedule.reset()


def _mesh(p):
    return dist.mesh(devices=[f"cuda:{i}" for i in range(p)], axes=("tp",), shape=(p,))


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint32)


@jit
def mm_rs0(a, w):
    return dist.collective.reduce_scatter(op.matmul(a, w), axis="tp", dim=0)


@jit
def mm_rs1(a, w):
    return dist.collective.reduce_scatter(op.matmul(a, w), axis="tp", dim=1)


@pytest.mark.parametrize("fn,chunked_operand", [(mm_rs0, "W's columns"), (mm_rs1, "A's rows")])
@pytest.mark.parametrize("chunks", [2, 3, 6])
def test_chunked_reduce_scatter_folds_in_rank_order(fn, chunked_operand, chunks):
    """Rank r holds column r of A and row r of W (ones), so its partial of every element is
    c_r = A[m, r]: the contributions 2^24, 1, -2^24, 1 folded in rank order give
    ((2^24 + 1) - 2^24) + 1 = 0 + 1 = 1 in f32 (2^24 + 1 rounds to 2^24), while the reverse
    order gives ((1 - 2^24) + 1) + 2^24 = 2: a fold in any other order shows."""
    c = np.float32([2.0 ** 24, 1.0, -2.0 ** 24, 1.0])
    reverse = np.float32(np.float32(np.float32(c[3] + c[2]) + c[1]) + c[0])
    assert reverse == 2.0  # the case tells the orders apart
    mesh = _mesh(4)
    A = dist.tensor((8, 4), S(("col",), ("tp",)), mesh, dtype="f32", data=np.tile(c, (8, 1)))
    W = dist.tensor((4, 12), S(("row",), ("tp",)), mesh, dtype="f32", data=np.ones((4, 12), np.float32))
    unfused = fn(A, W).numpy()
    schedule.collective_matmul(chunks)
    fused = fn(A, W)
    assert np.array_equal(fused.numpy(), np.ones((8, 12), np.float32))
    assert np.array_equal(_bits(fused.numpy()), _bits(unfused))
    assert fused.type == fn.trace(A, W).body.first_op.regions[0].entry.last_op.operands[0].type
    text = fn.inspect_ir("schedule")
    assert text.count('"tessera.graph.reduce_scatter"') == chunks
    assert text.count('"tessera.graph.split"') == 1 and text.count('"tessera.graph.concat"') == 1


def test_chunked_reduce_scatter_on_random_data_is_bit_identical():
    rng = np.random.default_rng(7)
    mesh = _mesh(4)
    A = dist.tensor((4, 12, 32), S((-1,), ("tp",)), mesh, dtype="bf16", data=rng.standard_normal((4, 12, 32)))
    W = dist.tensor((32, 10), S(("row",), ("tp",)), mesh, dtype="bf16", data=rng.standard_normal((32, 10)))
    unfused = mm_rs0(A, W).numpy()  # scatters the batch dimension: W's 10 columns chunked
    schedule.collective_matmul(4)
    fused = mm_rs0(A, W).numpy()
    assert np.array_equal(fused.view(np.uint16), unfused.view(np.uint16))
    assert mm_rs0.inspect_ir("schedule").count("sizes = [3, 3, 2, 2]") == 1


@jit
def ag_mm(x, w):
    return op.matmul(dist.collective.all_gather(x, axis="tp"), w)


@jit
def mm_ag(x, w):
    return op.matmul(x, dist.collective.all_gather(w, axis="tp"))


def test_chunked_all_gather_moves_the_same_bits():
    rng = np.random.default_rng(3)
    mesh = _mesh(4)
    X = dist.tensor((3, 8, 16), S(("row",), ("tp",)), mesh, dtype="f32", data=rng.standard_normal((3, 8, 16)))
    W = dist.tensor((16, 12), None, mesh, dtype="f32", data=rng.standard_normal((16, 12)))
    Wk = dist.tensor((16, 12), S(("row",), ("tp",)), mesh, dtype="f32", data=rng.standard_normal((16, 12)))
    X2 = dist.tensor((8, 16), None, mesh, dtype="f32", data=rng.standard_normal((8, 16)))
    before = [ag_mm(X, W).numpy(), mm_ag(X2, Wk).numpy()]
    one_device = [op.matmul(X.numpy(), W.numpy()), op.matmul(X2.numpy(), Wk.numpy())]
    schedule.collective_matmul(2)
    after = [ag_mm(X, W).numpy(), mm_ag(X2, Wk).numpy()]
    for b, a, o in zip(before, after, one_device):
        assert np.array_equal(_bits(a), _bits(b)) and np.array_equal(_bits(a), _bits(np.asarray(o)))
    # the batch (3 -> 2 + 1) of the gathered X, then the columns of the gathered W (12 -> 6 + 6)
    assert ag_mm.inspect_ir("schedule").count('"tessera.graph.all_gather"') == 2
    assert "sizes = [2, 1]" in ag_mm.inspect_ir("schedule")
    assert "sizes = [6, 6]" in mm_ag.inspect_ir("schedule")


def test_patterns_it_leaves_alone():
    mesh = _mesh(2)
    A = dist.tensor((8, 16), S(("row",), ("tp",)), mesh, dtype="f32")
    W = dist.tensor((16, 12), None, mesh, dtype="f32")
    # the only chunkable dimension of the gathered operand is the gathered one
    assert collective_matmul(ag_mm.trace(A, W).body.first_op, 4) is ag_mm.trace(A, W).body.first_op

    @jit
    def two_users(a, w):
        y = op.matmul(a, w)
        return dist.collective.reduce_scatter(y, axis="tp", dim=0), y

    @jit
    def stochastic(a, w):  # each element's rounding keyed by its position
        return dist.collective.reduce_scatter(op.matmul(a, w, seed=5), axis="tp", dim=0)

    Ak = dist.tensor((8, 16), S(("col",), ("tp",)), mesh, dtype="f32")
    Wk = dist.tensor((16, 12), S(("row",), ("tp",)), mesh, dtype="f32")
    func = two_users.trace(Ak, Wk).body.first_op
    assert collective_matmul(func, 4) is func
    sr = Policy("bf16", rounding="stochastic")
    As = dist.tensor((8, 16), S(("col",), ("tp",)), mesh, dtype=sr)
    Ws = dist.tensor((16, 12), S(("row",), ("tp",)), mesh, dtype=sr)
    func = stochastic.trace(As, Ws).body.first_op
    assert collective_matmul(func, 4) is func
    func = mm_rs0.trace(Ak, Wk).body.first_op
    assert collective_matmul(func, 1) is func and collective_matmul(func, 2) is not func


def test_the_directive_checks_its_argument():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(KernelError, match="collective_matmul"):
            schedule.collective_matmul(bad)
    schedule.collective_matmul(3)
    assert schedule.defaults() == {"collective_matmul": 3}


# -- the timeline ------------------------------------------------------------------------------
# A machine of round numbers: bf16 at 1e15 FLOP/s, HBM 2e13 B/s, NVLink 0.5e12 B/s with α = 0.1 µs.
ROUND = dataclasses.replace(get_preset("H100"), name="round", peak_flops=(("bf16", 1e15),), hbm_bandwidth=2e13,
                            nvlink=Link("NVLink", 0.5e12, 0.1e-6), efficiency=())


def _timeline(chunks):
    schedule.collective_matmul(chunks)
    m = sim.machine(ROUND, devices=2, overlap=True)
    with sim.use(m):
        mesh = _mesh(2)
        A = dist.tensor((1000, 2000), S(("col",), ("tp",)), mesh, dtype="bf16")  # abstract: no data
        W = dist.tensor((2000, 1000), S(("row",), ("tp",)), mesh, dtype="bf16")
        mm_rs0(A, W)
    return m


def test_the_timeline_hides_all_but_the_last_chunks_transfer():
    """Per device: A is 1000 x 1000 and W 1000 x 1000 bf16 (2e6 B each).
    Unfused: the matmul 2·1000·1000·1000 = 2e9 FLOP = 2 µs (its 6e6 B take 0.3 µs); the
    reduce-scatter of its 2e6 B output over 2 ranks α + n/2/β = 0.1 + 2 = 2.1 µs, after it: 4.1 µs,
    all of it exposed. Two chunks: split W (4e6 B moved: 0.2 µs); each chunk's matmul 1e9 FLOP =
    1 µs; each reduce-scatter of 1e6 B 0.1 + 1 = 1.1 µs; the concat of two 500 x 500 blocks
    (2e6 B moved: 0.1 µs). Chunk 0's reduce-scatter runs under chunk 1's matmul."""
    unfused = _timeline(1)
    spans = [(e.name, e.start / US, e.end / US) for e in unfused.timeline.events if e.device == 0]
    assert spans == [("matmul", 0, pytest.approx(2)), ("reduce_scatter[tp]", pytest.approx(2), pytest.approx(4.1))]
    assert comm_exposure(unfused.timeline)[0, "tp"] == pytest.approx((2.1 * US, 0))
    fused = _timeline(2)
    spans = [(e.name, e.start / US, e.end / US) for e in fused.timeline.events if e.device == 0]
    want = [("split", 0, 0.2), ("matmul", 0.2, 1.2), ("reduce_scatter[tp]", 1.2, 2.3), ("matmul", 1.2, 2.2),
            ("reduce_scatter[tp]", 2.3, 3.4), ("concat", 3.4, 3.5)]
    assert [s[0] for s in spans] == [w[0] for w in want]
    assert [s[1:] for s in spans] == [pytest.approx(w[1:], abs=1e-9) for w in want]
    exposed, hidden = comm_exposure(fused.timeline)[0, "tp"]
    assert exposed == pytest.approx(1.2 * US) and hidden == pytest.approx(1.0 * US)
    assert fused.overlapped_step_time == pytest.approx(3.5 * US)
    assert fused.conservative_step_time == pytest.approx(4.5 * US)  # in program order nothing hides


def test_seed_004_block_and_its_gradients_keep_their_bits():
    """The demo's block on a small NVL72-shaped mesh: its output projection is chunked (four
    reduce-scatters), and the output and both weight gradients are bit-identical."""
    from tessera_ref import demo
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    x, Wqkv, Wo = demo._weights(mesh, "f32", 4, 18, demo.HEADS * 4, seeds=(3, 4, 5))
    before = [demo.tp_block(x, Wqkv, Wo).numpy(), *(g.numpy() for g in demo.loss_gradients(x)(Wqkv, Wo))]
    schedule.collective_matmul(4)
    after = [demo.tp_block(x, Wqkv, Wo).numpy(), *(g.numpy() for g in demo.loss_gradients(x)(Wqkv, Wo))]
    for b, a in zip(before, after):
        assert np.array_equal(_bits(a), _bits(b))
    assert demo.tp_block.inspect_ir("schedule").count('"tessera.graph.reduce_scatter"') == 4
