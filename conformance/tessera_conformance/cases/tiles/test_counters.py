"""TILE-COUNT: shared wavefronts, global sectors and HBM bytes, mma operand reads, FLOPs and
the roofline — each against the clause's formula computed here."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref import kernel, tbarrier, tile, tshared
from tessera_ref.ir import tile as T
from tessera_ref.sim.presets import get_preset
from tessera_conformance import assert_bits, clause

from .support import (TRANSPOSE, bank_wavefronts, counters, dtype, global_sectors, launch, launch_module, part,
                      pieces, swizzle, warps)


@kernel
def shared_patterns(X: f64[32], Y: mut[f64[32]], Z: mut[f32[32]]):
    """8-byte consecutive accesses, and every lane reading one word."""
    s = tshared.alloc[f64](32)
    b = tshared.alloc[f32](32)
    i = tile.lane_id()
    s[i] = X[i]
    b[i] = 1.5
    tbarrier()
    Y[i] = s[i]
    Z[i] = b[0]


@clause("TILE-COUNT-1")
def test_hardware_md_vectors(backend):
    """8-byte consecutive: 2 phases of 16 lanes, 1 wavefront each; a broadcast word: 1."""
    x = np.arange(32, dtype=np.float64)
    y, z = np.zeros(32), np.zeros(32, np.float32)
    c = counters(backend, launch(backend, shared_patterns, x, y, z, grid=1, lanes=32))
    assert_bits(y, x)
    # s write 2 + b write 1 + s read 2 + b[0] read 1
    assert (c.smem_requests, c.smem_wavefronts, c.smem_ideal_wavefronts) == (4, 6, 6)
    assert (c.smem_write_bytes, c.smem_read_bytes) == (32 * 8 + 32 * 4, 32 * 8 + 32 * 4)


@clause("TILE-COUNT-1")
@pytest.mark.parametrize("fmt, pad, swz, waves", [
    ("f32", 0, "none", 1056), ("f32", 1, "none", 64), ("f32", 0, "xor", 160), ("bf16", 0, "none", 544),
    ("fp8_e4m3", 0, "none", 288)])
def test_the_transpose_numbers_the_spec_quotes(backend, fmt, pad, swz, waves):
    """tiles.md's measured transposes (ideal 64), here also derived from the bank rule."""
    k = kernel.from_source(TRANSPOSE.replace("f32", fmt), constants=dict(PAD=pad, SWIZZLE=swz))
    x = np.arange(1024).reshape(32, 32).astype(dtype(fmt))
    c = counters(backend, launch(backend, k, x, np.zeros_like(x), grid=1, lanes=32))
    size = dtype(fmt).itemsize

    def at(i, j):
        o = (i * (32 + pad) + j) * size
        return swizzle(o) if swz == "xor" else o
    model = bank_wavefronts([[at(j, l) for l in range(32)] for j in range(32)]
                            + [[at(l, j) for l in range(32)] for j in range(32)], size)
    assert (c.smem_wavefronts, c.smem_ideal_wavefronts) == model == (waves, 64)


STRIDE = 1


@kernel
def read_twice(X: f32[n], Y: mut[f32[n]]):
    """Each element read twice and written once, strided by STRIDE."""
    i = tile.linear_id()
    Y[i] = X[(i * STRIDE) % n] + X[(i * STRIDE) % n]


@clause("TILE-COUNT-2")
@pytest.mark.parametrize("stride", [1, 2, 8, 32])
def test_sectors_bytes_and_efficiency(backend, stride):
    """Every request goes to HBM (no cache): the second read costs what the first did."""
    n, lanes, grid = 256, 64, 4
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    c = counters(backend, launch(backend, read_twice.specialize(STRIDE=stride), x, y, grid=grid, lanes=lanes))
    assert_bits(y, 2 * x[(np.arange(n) * stride) % n])
    reads = warps([((i * stride) % n) * 4 for i in range(n)])
    writes = warps([i * 4 for i in range(n)])
    rs, ws = global_sectors(reads, 4), global_sectors(writes, 4)
    assert (c.global_requests, c.global_sectors) == (3 * len(writes), 2 * rs + ws)
    assert (c.hbm_read_bytes, c.hbm_write_bytes, c.hbm_bytes) == (64 * rs, 32 * ws, 64 * rs + 32 * ws)
    distinct = 2 * sum(4 * len(set(r)) for r in reads) + sum(4 * len(set(w)) for w in writes)
    assert c.sector_efficiency == pytest.approx(distinct / (32 * (2 * rs + ws)), rel=1e-12)


_MMA = '''
@kernel
def mm(A: f32[64, 32], B: f32[32, 64], C: mut f32[64, 64]):
    sA = tshared.alloc[f32](64, 32, pad=PAD, swizzle=SWIZZLE)
    sB = tshared.alloc[f32](32, 64)
    cp_async.shared.global(sA, A[0:64, 0:32])
    cp_async.shared.global(sB, B[0:32, 0:64])
    cp_async.commit()
    cp_async.wait(0)
    tbarrier()
    acc = tile.zeros((64, 64), f32)
    acc += tile.mma(sA, sB, accum=f32)
    tile.store(C, index=(0, 0), value=acc)
'''


@clause("TILE-COUNT-3", "TILE-VIS-3", "TILE-COUNT-1")
@pytest.mark.parametrize("pad, swz", [(0, "none"), (1, "none"), (0, "xor"), (2, "none")])
def test_mma_reads_a_a_column_at_a_time_and_b_by_rows(backend, pad, swz):
    """Lane m reads a[m, k] for each k (a request per column per 32 rows), b in row-major order."""
    k = kernel.from_source(_MMA, constants=dict(PAD=pad, SWIZZLE=swz))
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (64, 32)).astype(np.float32)
    b = rng.integers(-4, 5, (32, 64)).astype(np.float32)
    out = np.zeros((64, 64), np.float32)
    c = counters(backend, launch(backend, k, a, b, out, grid=1, lanes=128))
    assert_bits(out, (a.astype(np.float64) @ b).astype(np.float32))

    def at_a(m, kk):
        o = (m * (32 + pad) + kk) * 4
        return swizzle(o) if swz == "xor" else o
    piece_a, moves_a = pieces([r * 32 * 4 for r in range(64)], [r * (32 + pad) * 4 for r in range(64)], 128, 4,
                              swz == "xor")
    piece_b, moves_b = pieces([r * 64 * 4 for r in range(32)], [r * 64 * 4 for r in range(32)], 256, 4)
    copies = [(warps([d for _, d in moves_a]), piece_a), (warps([d for _, d in moves_b]), piece_b)]
    a_reads = [[at_a(32 * g + l, kk) for l in range(32)] for kk in range(32) for g in range(2)]
    b_reads = warps([(kk * 64 + nn) * 4 for kk in range(32) for nn in range(64)])
    parts = [bank_wavefronts(r, p) for r, p in copies] + [bank_wavefronts(a_reads, 4), bank_wavefronts(b_reads, 4)]
    assert c.smem_requests == sum(len(r) for r, _ in copies) + len(a_reads) + len(b_reads)
    assert (c.smem_wavefronts, c.smem_ideal_wavefronts) == tuple(map(sum, zip(*parts)))
    assert c.flops == 2 * 64 * 64 * 32


def _build(name, params, body):
    kb = T.KernelBuilder(name, params)
    body(kb, *kb.params)
    return kb.finish()


def _scalar_ops(kb, X, Y):
    i = kb.lane_id()
    active = kb.binary("lt", i, kb.const(20))

    def then():
        x = kb.load(X, [i])
        v = kb.binary("add", kb.binary("mul", x, x), x)  # 2
        v = kb.binary("max", kb.binary("min", v, x), kb.binary("div", v, x))  # 3
        v = kb.binary("sub", kb.unary("exp", v), kb.unary("tanh", v))  # 3
        v = kb.unary("sqrt", kb.unary("abs", kb.unary("neg", v)))  # 0
        v = kb.select(kb.binary("gt", v, x), v, kb.cast(kb.cast(v, "f16"), "f32"))  # 0
        v = kb.binary("mod", kb.binary("floordiv", v, kb.const(0.75, "f32")), kb.const(2.5, "f32"))  # 0
        j = kb.binary("mod", kb.binary("add", i, kb.const(3)), kb.const(32))  # index arithmetic: 0
        kb.store(Y, [j], v)
        return []
    kb.if_(active, then=then)


def _fragment_ops(kb, X, Y):
    f = kb.frag_load(kb.subview(X, [0, 0], (4, 8)))
    m = kb.reduce(f, "max", 1)  # 32 inputs
    e = kb.unary("exp", kb.binary("sub", f, m))  # 32 + 32 (broadcast [4,1] to [4,8])
    s = kb.reduce(e, "sum", 1)  # 32
    kb.frag_store(kb.subview(Y, [0, 0], (4, 8)), kb.unary("neg", kb.binary("div", e, s)))  # 32, neg 0


@clause("TILE-COUNT-4")
@pytest.mark.parametrize("which, lanes, flops", [("scalar", 32, 20 * 8), ("scalar", 16, 16 * 8),
                                                 ("fragment", 32, 5 * 32)])
def test_flops_count_what_the_clause_lists(backend, which, lanes, flops):
    """One per active lane per add/sub/mul/div/min/max and NUM-MATH unary (not sqrt, neg, abs,
    // or % on floats, casts, selects, comparisons or index arithmetic); per element of fragment
    results after broadcasting and per input element of a reduce."""
    shape = (32,) if which == "scalar" else (4, 8)
    module = _build(which, [("X", T.buffer(shape, "f32")), ("Y", T.buffer(shape, "f32"), True)],
                    _scalar_ops if which == "scalar" else _fragment_ops)
    x = (np.arange(32, dtype=np.float32) / 8 + 0.5).reshape(shape)
    report = launch_module(backend, module, [x, np.zeros_like(x)], grid=2, lanes=lanes, checks=True)
    assert counters(backend, report).flops == 2 * flops


_ROOF = '''
@kernel
def k(A: FMT[16, 16], B: FMT[16, 16], C: mut f32[16, 16]):
    a = tile.load(A, index=(0, 0), shape=(16, 16))
    b = tile.load(B, index=(0, 0), shape=(16, 16))
    acc = tile.zeros((16, 16), f32)
    acc += tile.mma(a, b, accum=f32)
    tile.store(C, index=(0, 0), value=acc)
'''


@clause("TILE-COUNT-4")
@pytest.mark.parametrize("fmt, preset, grid", [("f32", "H100", 1), ("f16", "H100", 3), ("bf16", "B200", 2),
                                               ("f64", "H200", 1), ("fp8_e4m3", "H100", 1)])
def test_the_roofline_is_sim_roof_1_on_the_first_buffers_rate(backend, fmt, preset, grid):
    k = kernel.from_source(_ROOF.replace("FMT", fmt))
    a = np.ones((16, 16), dtype(fmt))
    report = launch(backend, k, a, a, np.zeros((16, 16), np.float32), grid=grid, lanes=32, preset=preset)
    c = counters(backend, report)
    assert c.flops == grid * 2 * 16 ** 3
    p = get_preset(preset)
    key = {"f32": "f32", "f16": "f16", "bf16": "bf16", "f64": "f64", "fp8_e4m3": "fp8"}[fmt]
    want = max(c.flops / p.peaks[key], c.hbm_bytes / p.hbm_bandwidth)
    assert part(backend, report, "roofline").time == pytest.approx(want, rel=1e-12)


@kernel
def warp_exchange(X: f32[n], Y: mut[f32[n]]):
    """Each lane takes its xor-16 partner's value, then adds its xor-1 partner's."""
    i = tile.lane_id()
    p = tile.shfl_xor(X[i], 16)
    Y[i] = p + tile.shfl_xor(p, 1)


@clause("TILE-COUNT-6", "TILE-WARP-1")
def test_shuffles_count_one_per_warp_and_touch_no_shared_memory(backend):
    x = np.arange(96, dtype=np.float32)
    y = np.zeros(96, np.float32)
    report = launch(backend, warp_exchange, x, y, grid=1, lanes=96)
    partner16 = [lane - 16 if lane % 32 >= 16 else lane + 16 for lane in range(96)]
    p = x[partner16]
    assert_bits(y, p + p[[lane - 1 if lane % 2 else lane + 1 for lane in range(96)]])
    c = counters(backend, report)
    assert c.shuffles == 2 * 3 and c.smem_requests == 0 and c.barriers == 0  # two shuffles, three warps
