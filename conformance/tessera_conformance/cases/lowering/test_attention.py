"""LOWER-FA-1 (the FlashAttention kernel) and LOWER-FA-2 (its traffic against a naive schedule)."""
import numpy as np
import pytest

from tessera_ref import op
from tessera_ref.lowering.cost import attention_cost, kernel_cost, naive_attention_bytes
from tessera_conformance import assert_bits, assert_close, clause

from ..tiles.support import counters, findings, part, round_to
from .support import alloc_bytes, graph, kernels, lower_only, lowered, planted_race, schedule_of, skeleton, tile_funcs

RNG = np.random.default_rng(17)
SHAPES = ((2, 16, 16), (2, 96, 16), (2, 96, 8))  # a Q tile of 16 rows per batch entry, 3 key blocks of 32
BASE = dict(tile=(16, 32, 32), lanes=32)


def flash(q, k, v):
    return op.flash_attention(q, k, v, block_k=32)


def _qkv(fmt="f32", shapes=SHAPES):
    return [round_to(RNG.standard_normal(s) * (3 if i == 1 else 1), fmt) for i, s in enumerate(shapes)]


def attention64(q, k, v, causal=False):
    """Attention in float64: the values the bits approximate."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.tril(np.ones((sq, sk), bool), k=sk - sq), s, -np.inf)  # bottom-right aligned
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


@clause("LOWER-FA-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("fmt, causal", [("f32", False), ("f32", True), ("f16", True), ("bf16", False),
                                         ("fp8_e4m3", False), ("fp8_e5m2", True)])
def test_flash_attention_gives_the_graphs_bits(backend, fmt, causal):
    q, k, v = _qkv(fmt)
    f = lambda q, k, v: op.flash_attention(q, k, v, causal=causal, block_k=32)  # noqa: E731
    got, reports, program = lowered(backend, f, q, k, v, directives=dict(BASE, tile=(16, 64, 32), padding=1),
                                    counters=False)
    assert_bits(got, graph(f, q, k, v))
    assert findings(backend, reports[0]) == [] and part(backend, reports[0], "coverage")["O"] == (2 * 16 * 8,) * 2
    if fmt == "f32":
        assert_close(got[0], attention64(q, k, v, causal), rel=1e-5)
    assert schedule_of(kernels(program)[0])["tile"] == [16, 32, 16]  # (Br, block_k, D): the key tile is block_k


@clause("LOWER-FA-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("stages, async_copy", [(1, True), (2, True), (3, True), (5, True), (3, False)])
def test_the_stages_change_neither_bits_nor_traffic(backend, stages, async_copy):
    """Rings of `stages` K and V blocks (one without cp.async), padded; waits for at most
    stages − 2; Q read once, K and V once per Q tile, O once."""
    q, k, v = _qkv("f32")
    directives = dict(BASE, stages=stages, async_copy=async_copy, padding=1)
    got, reports, program = lowered(backend, flash, q, k, v, directives=directives)
    assert_bits(got, graph(flash, q, k, v))
    assert findings(backend, reports[0]) == []
    c = counters(backend, reports[0])
    assert c.hbm_bytes == 2 * (16 * 16 + 96 * (16 + 8) + 16 * 8) * 4
    ring = stages if async_copy else 1
    allocs = [x for x in skeleton(tile_funcs(program)[0].regions[0].entry) if isinstance(x, str)
              and x.startswith("alloc")]
    assert f"alloc {ring}x32x16xf32 pad=1 none" in allocs and f"alloc {ring}x32x8xf32 pad=1 none" in allocs
    assert all(x.endswith(" none") for x in allocs)  # never swizzled
    assert not any(x.startswith("alloc 16x8xf32") for x in allocs)  # the [Br, Dv] accumulator is a fragment
    text = str(program.tile)
    assert (f"pending = {ring - 2}" in text) == (ring >= 2)


@clause("LOWER-FA-1", "LOWER-COST-1")
def test_shared_memory_grows_by_one_k_and_v_block_per_stage(backend):
    q, k, v = _qkv("f16")
    sizes = {}
    for stages in (1, 2, 3):
        program = lower_only(backend, flash, q, k, v, directives=dict(BASE, stages=stages, padding=2))
        sizes[stages] = alloc_bytes(tile_funcs(program)[0])
        assert kernel_cost(kernels(program)[0]).smem_bytes == sizes[stages]
    assert sizes[2] - sizes[1] == sizes[3] - sizes[2] == 32 * (16 + 8 + 2 * 2) * 2


@clause("LOWER-FA-1")
def test_the_barrier_after_the_wait_is_needed(backend):
    q, k, v = _qkv("f32")
    program = lower_only(backend, flash, q, k, v, directives=dict(BASE, stages=2))
    text = str(program.tile)
    planted_race(backend, program, (q, k, v), '"tessera.tile.barrier"',
                 text[text.index('"tessera.tile.cp_async_wait"() {pending = 0}'):][:60],
                 match="read-after-write")


@clause("LOWER-FA-1")
def test_the_barrier_that_ends_a_one_stage_block_is_needed(backend):
    q, k, v = _qkv("f32")
    program = lower_only(backend, flash, q, k, v, directives=dict(BASE, stages=1))
    text = str(program.tile)
    planted_race(backend, program, (q, k, v), '"tessera.tile.barrier"',
                 text[text.index('"tessera.tile.frag_load"'):][:60], match="cp_async")


# -- LOWER-FA-2: seed 003 §3.6's schedule against a naive one --------------------------------

SEED_FLASH = dict(tile=(128, 128, 64), padding=1, async_copy=True, stages=3)


def _traffic(backend, s):
    q, k, v = (round_to(RNG.standard_normal((s, 64)), "f16") for _ in range(3))
    kt = np.ascontiguousarray(k.T)
    _, flash_reports, program = lowered(backend, lambda q, k, v: op.flash_attention(q, k, v, block_k=128), q, k, v,
                                        directives=SEED_FLASH, checks=False)
    _, naive_reports, naive = lowered(backend, lambda q, kt, v: op.matmul(op.softmax(op.matmul(q, kt)), v), q, kt, v,
                                      directives=SEED_FLASH, checks=False)
    flash_bytes = counters(backend, flash_reports[0]).hbm_bytes
    naive_bytes = [counters(backend, r).hbm_bytes for r in naive_reports]
    assert flash_bytes == kernel_cost(kernels(program)[0]).hbm_bytes == attention_cost(s, s, 64, (128, 128)).hbm_bytes
    assert naive_bytes == [kernel_cost(k).hbm_bytes for k in kernels(naive)]
    want = naive_attention_bytes(s, s, 64, (128, 128), itemsize=2)
    assert naive_bytes == [want["scores"], want["softmax"], want["pv"]]
    return flash_bytes, sum(naive_bytes)


@clause("LOWER-FA-2", "LOWER-COST-1")
def test_the_interpreter_and_the_cost_model_count_the_same_traffic(backend):
    """At S = 128 (fast): both schedules' counted bytes are the cost model's."""
    _traffic(backend, 128)


@clause("LOWER-FA-2")
@pytest.mark.slow
def test_the_quoted_counts_at_s_512(backend):
    """3,997,696 B naive, 655,360 B FlashAttention: 6.10x."""
    flash_bytes, naive_bytes = _traffic(backend, 512)
    assert (naive_bytes, flash_bytes) == (3_997_696, 655_360)
    assert round(naive_bytes / flash_bytes, 2) == 6.10


@clause("LOWER-FA-2")
@pytest.mark.parametrize("s, ratio", [(512, 6.10), (1024, 6.72), (4096, 7.29), (16384, 7.45)])
def test_the_quoted_ratios(s, ratio):
    naive = naive_attention_bytes(s, s, 64, (128, 128), itemsize=2)["total"]
    assert round(naive / attention_cost(s, s, 64, (128, 128)).hbm_bytes, 2) == ratio
    if s == 512:
        assert naive == 3_997_696 and attention_cost(s, s, 64, (128, 128)).hbm_bytes == 655_360
