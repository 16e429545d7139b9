"""TILE-MEM: global buffers (mut, addresses), shared buffers (layout, lifetime), fragments."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref import kernel, tbarrier, tile, tshared
from tessera_ref.errors import KernelError
from tessera_conformance import assert_bits, clause

from .support import (TRANSPOSE, bank_wavefronts, counters, global_sectors, launch, line_of, semantic_checks,
                      swizzle, warps)


@kernel
def store_into_input(X: f32[n]):
    """Stores into a parameter not declared mut."""
    X[tile.lane_id()] = 1.0


@clause("TILE-MEM-1")
def test_only_mut_buffers_are_written(backend):
    x = np.zeros(4, np.float32)
    with pytest.raises(KernelError, match="mut"):
        launch(backend, store_into_input, x, grid=1, lanes=4)
    assert not x.any()


@clause("TILE-MEM-1", "TILE-COUNT-2")
@pytest.mark.parametrize("fmt, row0, col0, per, stride", [
    ("f32", 0, 0, 32, 1), ("f32", 0, 1, 32, 1), ("f32", 0, 8, 32, 1), ("f32", 0, 0, 1, 1),
    ("f32", 1, 3, 8, 2), ("f64", 0, 0, 32, 1), ("f64", 2, 5, 16, 1), ("f16", 0, 3, 32, 1)])
def test_elements_are_row_major_from_an_aligned_base(backend, fmt, row0, col0, per, stride):
    """Element i of a buffer is at byte base + i·size with base a multiple of 256: the
    sectors a warp's read touches follow from that address alone."""
    R, C, lanes = 40, 72, 32
    dt = {"f32": np.float32, "f64": np.float64, "f16": np.float16}[fmt]
    k = kernel.from_source(_GATHER.replace("f32", fmt), constants=dict(ROW0=row0, COL0=col0, PER=per, STRIDE=stride))
    x = np.arange(R * C).reshape(R, C).astype(dt)
    y = np.zeros(lanes, dt)
    report = launch(backend, k, x, y, grid=1, lanes=lanes)
    rows = row0 + np.arange(lanes) // per
    cols = col0 + (np.arange(lanes) % per) * stride
    assert_bits(y, x[rows, cols])
    size = np.dtype(dt).itemsize
    reads = [(r * C + c) * size for r, c in zip(rows, cols)]
    writes = [l * size for l in range(lanes)]
    c = counters(backend, report)
    assert c.global_sectors == global_sectors([reads], size) + global_sectors([writes], size)
    assert c.hbm_read_bytes == 32 * global_sectors([reads], size)


_GATHER = '''
@kernel
def gather(X: f32[R, C], Y: mut f32[L]):
    l = tile.lane_id()
    Y[l] = X[ROW0 + l // PER, COL0 + (l % PER) * STRIDE]
'''


def shared_byte(i, j, pitch, size, swz):
    """TILE-MEM-2's byte address of element (i, j): offset (i·pitch + j)·size, swizzled."""
    o = (i * pitch + j) * size
    return swizzle(o) if swz == "xor" else o


@clause("TILE-MEM-2", "TILE-COUNT-1")
@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize("pad, swz", [(0, "none"), (1, "none"), (3, "none"), (0, "xor")])
def test_shared_layout_by_its_bank_conflicts(backend, fmt, pad, swz):
    """The data round-trips in every layout, and the wavefronts are those of TILE-MEM-2's
    addresses (pitch d + pad, Swizzle<3,4,3>) under hardware.md's bank rule."""
    from .support import dtype
    k = kernel.from_source(TRANSPOSE.replace("f32", fmt), constants=dict(PAD=pad, SWIZZLE=swz))
    dt = dtype(fmt)
    x = (np.arange(1024) % 97).reshape(32, 32).astype(dt)
    y = np.zeros_like(x)
    report = launch(backend, k, x, y, grid=1, lanes=32)
    assert_bits(y, np.ascontiguousarray(x.T))
    size, pitch = dt.itemsize, 32 + pad
    requests = [[shared_byte(j, l, pitch, size, swz) for l in range(32)] for j in range(32)]  # row writes
    requests += [[shared_byte(l, j, pitch, size, swz) for l in range(32)] for j in range(32)]  # column reads
    waves, ideal = bank_wavefronts(requests, size)
    c = counters(backend, report)
    assert (c.smem_requests, c.smem_wavefronts, c.smem_ideal_wavefronts) == (64, waves, ideal)
    assert c.smem_read_bytes == c.smem_write_bytes == 1024 * size


@kernel
def cube(X: f32[64], Y: mut[f32[64]]):
    """A 3-D shared buffer with padded rows, written and read back through its three indices."""
    s = tshared.alloc[f32](2, 4, 8, pad=3)
    l = tile.lane_id()
    s[l // 32, (l // 8) % 4, l % 8] = X[l]
    tbarrier()
    Y[l] = s[l // 32, (l // 8) % 4, l % 8]


@clause("TILE-MEM-2", "TILE-COUNT-1")
def test_a_padded_3d_buffer(backend):
    """Element (i0, i1, i2) of alloc(2, 4, 8, pad=3) is at element (i0·4 + i1)·11 + i2."""
    x = np.arange(64, dtype=np.float32) - 20
    y = np.zeros_like(x)
    report = launch(backend, cube, x, y, grid=1, lanes=64)
    assert_bits(y, x)
    addr = [(((l // 32) * 4 + (l // 8) % 4) * 11 + l % 8) * 4 for l in range(64)]
    waves, ideal = bank_wavefronts(warps(addr) * 2, 4)
    c = counters(backend, report)
    assert (c.smem_wavefronts, c.smem_ideal_wavefronts) == (waves, ideal)


@clause("TILE-MEM-2")
def test_a_negative_pad_is_a_kernel_error():
    src = "@kernel\ndef k(Y: mut f32[n]):\n    s = tshared.alloc[f32](4, pad=-1)\n"
    with pytest.raises(KernelError, match=r"pad.*\[at k.tsr:3\]"):
        kernel.from_source(src, filename="k.tsr")


@kernel
def alloc_in_loop(Y: mut[f32[n]]):
    """The alloc runs twice in the tile: the same buffer, with what the first pass wrote."""
    i = tile.lane_id()
    for j in range(2):
        s = tshared.alloc[f32](8)
        if j == 0:
            s[i] = 7.0 + float(i)
        tbarrier()
        if j == 1:
            Y[i] = s[i]


@kernel
def two_allocs(Y: mut[f32[n]]):
    """Two allocations are two buffers."""
    i = tile.lane_id()
    a = tshared.alloc[f32](8)
    b = tshared.alloc[f32](8)
    a[i] = 1.0
    b[i] = 2.0
    tbarrier()
    Y[i] = a[i] + b[(i + 1) % 8] * 10.0


@clause("TILE-MEM-2")
def test_allocations_are_static(backend):
    y = np.zeros(8, np.float32)
    launch(backend, alloc_in_loop, y, grid=1, lanes=8)
    assert_bits(y, 7 + np.arange(8, dtype=np.float32))
    y = np.zeros(8, np.float32)
    launch(backend, two_allocs, y, grid=1, lanes=8)
    assert_bits(y, np.full(8, 21, np.float32))


_BARE = '''
@kernel
def bare(X: f16[m], Y: mut f16[m]):
    s = tshared.alloc
    i = tile.lane_id()
    cp_async.shared.global(s, X[0:64])
    cp_async.commit()
    cp_async.wait(0)
    tbarrier()
    Y[i] = s[i]
'''


@clause("TILE-MEM-2", "TILE-FE-2")
def test_a_bare_alloc_takes_the_shape_of_its_first_copy(backend):
    k = kernel.from_source(_BARE)
    assert "tensor<64xf16>" in k.inspect_ir()
    x = np.arange(64).astype(np.float16)
    y = np.zeros_like(x)
    launch(backend, k, x, y, grid=1, lanes=64)
    assert_bits(y, x)


@kernel
def fragment_in_varying_if(A: f32[4, 4], C: mut[f32[4, 4]]):
    """A fragment assigned under a lane-varying condition."""
    i = tile.lane_id()
    acc = tile.zeros((4, 4), f32)
    if i < 8:  # MEM-3 fragment
        acc = tile.load(A, index=(0, 0), shape=(4, 4))
    tile.store(C, index=(0, 0), value=acc)


@kernel
def fragment_in_uniform_if(A: f32[4, 4], C: mut[f32[4, 4]]):
    """A fragment assigned under a condition every lane agrees on."""
    acc = tile.zeros((4, 4), f32)
    if tile.id(0) == 0:
        acc = tile.load(A, index=(0, 0), shape=(4, 4))
    tile.store(C, index=(0, 0), value=acc)


@clause("TILE-MEM-3")
def test_a_fragment_cannot_depend_on_a_lane_varying_condition(backend):
    """An error even when every lane (4 of 4) takes the branch; fine under a uniform one."""
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    c = np.zeros((4, 4), np.float32)
    semantic_checks(backend, launch(backend, fragment_in_uniform_if, a, c, grid=1, lanes=4))
    assert_bits(c, a)
    with pytest.raises(KernelError, match=line_of(__file__, "# MEM-3 fragment")):
        launch(backend, fragment_in_varying_if, a, np.zeros((4, 4), np.float32), grid=1, lanes=4)


_COLLECTIVE = '''
@kernel
def k(X: f32[32], Y: mut f32[32], A: f32[8, 8], C: mut f32[8, 8]):
    s = tshared.alloc[f32](32)
    f = tile.load(X, index=(0,), shape=(32,))
    i = tile.lane_id()
    if i < COND:
        STMT
'''


@clause("TILE-MEM-3", "TILE-VIS-3")
@pytest.mark.parametrize("stmt", [
    "cp_async.shared.global(s, X[0:32])",
    "g = tile.load(X, index=(0,), shape=(32,))",
    "tile.store(Y, index=(0,), value=f)",
    "c = tile.mma(tile.load(A, index=(0, 0), shape=(8, 8)), tile.load(A, index=(0, 0), shape=(8, 8)), accum=f32)",
])
@pytest.mark.parametrize("cond, lanes", [(16, 32), (100, 8), (-1, 8)], ids=["some", "all", "none"])
def test_tile_collective_ops_under_a_lane_varying_if(backend, stmt, cond, lanes):
    """A KernelError naming the op's line whichever lanes take the branch."""
    k = kernel.from_source(_COLLECTIVE.replace("STMT", stmt).replace("COND", str(cond)), filename="c.tsr")
    args = (np.ones(32, np.float32), np.zeros(32, np.float32), np.ones((8, 8), np.float32),
            np.zeros((8, 8), np.float32))
    with pytest.raises(KernelError, match=r"\[at c.tsr:8\]"):
        launch(backend, k, *args, grid=1, lanes=lanes)
