"""LOWER-FA-1 and LOWER-COST-1: the FlashAttention kernel's bits, and the cost model against
the tile interpreter's counters."""
import ml_dtypes
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, lowered

from tessera_ref import op
from tessera_ref.errors import LoweringError, TileRaceError
from tessera_ref.interp.tile import run
from tessera_ref.ir import parse_module
from tessera_ref.ir import schedule as S
from tessera_ref.lowering.autotune import shared_bytes
from tessera_ref.lowering.cost import attention_cost, kernel_cost, naive_attention_bytes

RNG = np.random.default_rng(11)


def _kernels(program):
    return [o for o in program.func.regions[0].entry if o.name == S.KERNEL]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float8_e5m2])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_matches_graph(dtype, causal):
    q = RNG.standard_normal((2, 64, 32)).astype(dtype)
    k = (RNG.standard_normal((2, 96, 32)) * 3).astype(dtype)
    v = RNG.standard_normal((2, 96, 16)).astype(dtype)
    got, want, reports, program = lowered(lambda q, k, v: op.flash_attention(q, k, v, causal=causal, block_k=32),
                                          q, k, v, directives=dict(tile=(32, 64, 32), padding=1))
    assert_same_bits(got, want)
    assert reports[0].findings == [] and reports[0].coverage["O"] == (2 * 64 * 16,) * 2
    kop = _kernels(program)[0]
    assert list(kop.attributes["tile"]) == [32, 32, 32]  # Bc is the op's block_k, whatever was asked
    cost = kernel_cost(kop)
    assert cost.hbm_bytes == reports[0].counters.hbm_bytes and cost.smem_bytes == shared_bytes(program.tile)


QKV_SHAPES = ((2, 64, 32), (2, 96, 32), (2, 96, 16))  # 3 key blocks of 32


def _flash_reference(q, k, v):
    """Attention in float64 (an independent check of the values, not of the bits)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("stages,async_copy", [(1, True), (2, True), (3, True), (5, True), (3, False)])
def test_flash_attention_honours_the_pipeline_stages(stages, async_copy):
    q, k, v = (RNG.standard_normal(shape).astype(np.float32) for shape in QKV_SHAPES)
    got, want, reports, program = lowered(lambda q, k, v: op.flash_attention(q, k, v, block_k=32), q, k, v,
                                          directives=dict(tile=(32, 32, 32), stages=stages, async_copy=async_copy))
    assert_same_bits(got, want)
    assert np.allclose(got[0], _flash_reference(q, k, v), rtol=1e-5, atol=1e-6)
    assert reports[0].findings == []  # race, visibility and uninitialized-read checkers on
    buffers = stages if async_copy else 1
    text = str(program.tile)
    for shape in (f"{buffers}x32x32xf32", f"{buffers}x32x16xf32"):  # the K and V rings
        assert f"-> tensor<{shape}>" in text
    assert ("pending = %d" % (buffers - 2) in text) == (buffers > 1)
    cost = kernel_cost(_kernels(program)[0])
    # Q once, K and V once per 32-row Q tile, O once (f32): the stages change no HBM byte
    assert cost.hbm_bytes == reports[0].counters.hbm_bytes == 2 * (64 * 32 + 2 * 96 * (32 + 16) + 64 * 16) * 4
    assert cost.smem_bytes == shared_bytes(program.tile)


def test_flash_attention_keeps_the_accumulator_in_registers():
    """The accumulator and PV are fragments: the kernel's shared buffers are Q, the K and V
    rings, Kᵀ, S/P, m, ℓ and α — no [Br, Dv] accum tile, and no butterfly scratch (the
    butterflies are warp shuffles)."""
    q, k, v = (RNG.standard_normal(shape).astype(np.float32) for shape in QKV_SHAPES)
    _, _, _, program = lowered(lambda q, k, v: op.flash_attention(q, k, v, block_k=32), q, k, v,
                               directives=dict(tile=(32, 32, 32), stages=2), checks=False)
    allocs = [o.results[0].type for o in program.tile.walk() if o.name == "tessera.tile.alloc"]
    assert sorted(str(t) for t in allocs) == sorted(["tensor<32x32xf32>", "tensor<2x32x32xf32>", "tensor<2x32x16xf32>",
                                                     "tensor<32x32xf32>", "tensor<32x32xf32>", "tensor<32x1xf32>",
                                                     "tensor<32x1xf32>", "tensor<32x1xf32>"])


def test_flash_attention_overlaps_loads_only_when_pipelined():
    q, k, v = (RNG.standard_normal(shape).astype(np.float16) for shape in QKV_SHAPES)
    costs = {}
    for stages, async_copy in ((1, True), (2, True), (2, False)):
        _, _, _, program = lowered(lambda q, k, v: op.flash_attention(q, k, v, block_k=32), q, k, v,
                                   directives=dict(stages=stages, async_copy=async_copy), checks=False)
        costs[stages, async_copy] = kernel_cost(_kernels(program)[0])
    assert costs[1, True].seconds == costs[2, False].seconds > costs[2, True].seconds
    assert costs[2, True].smem_bytes - costs[1, True].smem_bytes == 32 * (32 + 16) * 2  # one more K and V block


def test_planted_missing_barrier_in_the_attention_pipeline_is_a_race():
    """Without the barrier after ``wait``, lanes read K blocks other lanes' copies brought in."""
    q, k, v = (RNG.standard_normal(shape).astype(np.float32) for shape in QKV_SHAPES)
    _, _, _, program = lowered(lambda q, k, v: op.flash_attention(q, k, v, block_k=32), q, k, v,
                               directives=dict(tile=(32, 32, 32), stages=2))
    text = str(program.tile)
    wait = text.index('"tessera.tile.cp_async_wait"() {pending = 0}')
    at = text.index('"tessera.tile.barrier"', wait)  # the barrier that follows it in the key-block loop
    broken = parse_module(text[:text.rindex("\n", 0, at)] + text[text.index("\n", at):])
    out = np.zeros((2, 64, 16), np.float32)
    with pytest.raises(TileRaceError, match=r"reads smem@\S+\[0, \d+, \d+\].*read-after-write race"):  # the K ring
        run(broken, [q, k, v, out], grid=(2, 2), lanes=128, checks=True)


def test_planted_missing_end_of_block_barrier_with_one_stage_is_a_race():
    """With one stage the next block's copy refills the K and V buffers the PV mma just read:
    without the barrier that ends each block, the checker reports the copy as a race."""
    q, k, v = (RNG.standard_normal(shape).astype(np.float32) for shape in QKV_SHAPES)
    _, _, _, program = lowered(lambda q, k, v: op.flash_attention(q, k, v, block_k=32), q, k, v,
                               directives=dict(tile=(32, 32, 32), stages=1))
    text = str(program.tile)
    at = text.index('"tessera.tile.barrier"', text.index('"tessera.tile.frag_load"'))  # after acc' = α ⊗ acc ⊕ PV
    broken = parse_module(text[:text.rindex("\n", 0, at)] + text[text.index("\n", at):])
    out = np.zeros((2, 64, 16), np.float32)
    run(broken, [q, k, v, out.copy()], grid=(2, 2), lanes=128, checks=False)  # it still runs ...
    with pytest.raises(TileRaceError, match="cp_async"):  # ... but the checker objects
        run(broken, [q, k, v, out], grid=(2, 2), lanes=128, checks=True)


def test_flash_attention_with_a_scale_and_a_block_that_does_not_divide():
    q = RNG.standard_normal((32, 16)).astype(np.float32)
    got, want, _, _ = lowered(lambda q: op.flash_attention(q, q, q, scale=0.3, block_k=16), q)
    assert_same_bits(got, want)


@pytest.mark.parametrize("block_k, stages", [(12, 1), (12, 3), (20, 2), (64, 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_a_last_partial_key_block_is_the_graphs_last_block(block_k, stages, causal):
    """Sk = 40 keys in blocks of block_k: the last block holds Sk mod block_k keys (all 40
    when block_k > Sk), as the Graph IR's online softmax blocks them — so the bits agree."""
    q = RNG.standard_normal((2, 32, 16)).astype(np.float32)
    k = (RNG.standard_normal((2, 40, 16)) * 3).astype(np.float32)
    v = RNG.standard_normal((2, 40, 8)).astype(np.float32)
    got, want, reports, program = lowered(
        lambda q, k, v: op.flash_attention(q, k, v, causal=causal, block_k=block_k), q, k, v,
        directives=dict(tile=(16, 64, 16), stages=stages))
    assert_same_bits(got, want)
    assert reports[0].findings == []
    kop = _kernels(program)[0]
    cost, counted = kernel_cost(kop), reports[0].counters
    assert (cost.flops, cost.hbm_bytes, cost.smem_bytes) == (counted.flops, counted.hbm_bytes,
                                                            shared_bytes(program.tile))
    full, tail = divmod(40, block_k)
    assert str(program.tile).count('"tessera.tile.mma"') == 2 * bool(full) + 2 * bool(tail)  # loop body, tail block


def test_lanes_that_are_not_whole_warps_are_refused():
    q = RNG.standard_normal((32, 16)).astype(np.float32)
    with pytest.raises(LoweringError, match="48 lanes"):
        lowered(lambda q: op.flash_attention(q, q, q, block_k=16), q, directives=dict(lanes=48))


@pytest.mark.parametrize("fn,shapes,dtype,directives", [
    (lambda a, b: op.matmul(a, b), [(64, 96), (96, 128)], np.float32, dict(tile=(32, 64, 32), stages=3)),
    (lambda a, b: op.matmul(a, b), [(64, 96), (96, 128)], np.float16, dict(tile=(64, 32, 32), padding=1)),
    (lambda a, b, c: op.gemm(a, b, c), [(64, 64)] * 3, np.float32, dict(shared=False, tile=(32, 32, 32))),
    (lambda x: op.softmax(x), [(8, 64)], np.float32, None),
    (lambda x: op.mean(x, axis=0), [(64, 32)], np.float32, None),
    (lambda a, b: a * b, [(8, 64), (8, 64)], np.float16, dict(vectorize=2)),
])
def test_cost_model_counts_what_the_interpreter_counts(fn, shapes, dtype, directives):
    args = [RNG.standard_normal(s).astype(dtype) for s in shapes]
    _, _, reports, program = lowered(fn, *args, directives=directives, checks=False)
    cost = kernel_cost(_kernels(program)[0])
    assert cost.hbm_bytes == reports[0].counters.hbm_bytes
    assert cost.smem_bytes == shared_bytes(program.tile)


@pytest.mark.parametrize("fn,shapes,directives", [
    (lambda a, b: op.matmul(a, b), [(64, 96), (96, 128)], dict(tile=(32, 64, 32))),
    (lambda a, b: op.matmul(a, b, transpose_a=True), [(96, 64), (96, 64)], None),
    (lambda a, b: op.matmul(a, b, transpose_b=True), [(3, 64, 32), (1, 64, 32)], dict(tile=(32, 32, 16), stages=3)),
    (lambda a, b, c: op.gemm(a, b, c), [(2, 1, 32, 64), (3, 64, 32), (32, 32)], dict(tile=(16, 32, 32))),
    (lambda q, k, v: op.flash_attention(q, k, v, block_k=32), [(2, 64, 32), (2, 96, 32), (2, 96, 16)],
     dict(tile=(32, 32, 32), stages=3)),
    (lambda q, k, v: op.flash_attention(q, k, v, block_k=16, causal=True), [(32, 16), (48, 16), (48, 24)],
     dict(tile=(16, 16, 16), lanes=64, stages=1)),
    (lambda q, k, v: op.flash_attention(q, k, v, block_k=48), [(3, 64, 16), (3, 96, 16), (3, 96, 16)], None),
])
def test_cost_model_flops_and_bytes_are_the_interpreter_counts(fn, shapes, directives):
    """LOWER-COST-1 for matmul (batched, broadcast, transposed, with C) and FlashAttention:
    the model's FLOPs, HBM bytes and shared memory are what running the kernel counts."""
    args = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    _, _, reports, program = lowered(fn, *args, directives=directives, checks=False)
    cost = kernel_cost(_kernels(program)[0])
    counted = reports[0].counters
    assert (cost.flops, cost.hbm_bytes, cost.smem_bytes) == (counted.flops, counted.hbm_bytes,
                                                            shared_bytes(program.tile))
    assert cost.tiles == counted.tiles


def test_naive_attention_model_matches_three_lowered_kernels():
    s, d = 128, 32
    q, kt, v = (RNG.standard_normal(shape).astype(np.float16) for shape in ((s, d), (d, s), (s, d)))
    _, _, reports, _ = lowered(lambda q, kt, v: op.matmul(op.softmax(op.matmul(q, kt)), v), q, kt, v,
                               directives=dict(tile=(64, 64, 32)), checks=False)
    want = naive_attention_bytes(s, s, d, (64, 64), itemsize=2)
    assert [r.counters.hbm_bytes for r in reports] == [want["scores"], want["softmax"], want["pv"]]


def test_flash_schedule_moves_several_times_less_than_naive():
    """Seed 003 §3.6 says about 3x; this lowering's numbers (docs/spec/lowering.md, LOWER-FA-2)."""
    ratios = [naive_attention_bytes(n, n, 64, (128, 128))["total"] / attention_cost(n, n, 64, (128, 128)).hbm_bytes
              for n in (1024, 4096)]
    assert 6.5 < ratios[0] < ratios[1] < 7.5


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("stages,async_copy,per_block", [(2, True, 4), (3, True, 4), (1, False, 5)])
def test_flash_attention_barriers_per_key_block(causal, stages, async_copy, per_block):
    """The row max and sum are warp shuffles: a key block passes the pipeline's barrier, the Kᵀ
    staging barrier, the S barrier and the P barrier (and, with one stage, the barrier that
    ends the block) — not the butterflies' 10 per row reduction."""
    q = RNG.standard_normal((1, 64, 32)).astype(np.float32)
    k, v = (RNG.standard_normal((1, 128, 32)).astype(np.float32) for _ in range(2))
    got, want, reports, _ = lowered(lambda q, k, v: op.flash_attention(q, k, v, causal=causal, block_k=32), q, k, v,
                                    directives=dict(tile=(32, 32, 32), stages=stages, async_copy=async_copy))
    assert_same_bits(got, want)
    c = reports[0].counters
    tiles, blocks, rows = 2, 128 // 32, 32
    assert c.barriers == tiles * blocks * per_block
    assert c.shuffles == tiles * blocks * rows * 2 * 5  # per row and block: the max and the sum, 5 steps each


def test_the_demos_attention_shape_lowers_with_its_graph_bits():
    """The demo's flash attention: Sq = Sk = 288 in blocks of the default block_k = 64 (four
    full blocks and one of 32 keys), Br fitted to 48 (SCHED-FIT-1)."""
    q, k, v = ((RNG.standard_normal((2, 288, 32)) * s).astype(np.float32) for s in (1, 3, 1))
    got, want, reports, program = lowered(lambda q, k, v: op.flash_attention(q, k, v), q, k, v)
    assert_same_bits(got, want)
    assert reports[0].findings == [] and list(_kernels(program)[0].attributes["tile"]) == [48, 64, 32]
