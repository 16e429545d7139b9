"""TILE-VIS (and TILE-CHECK-2): barriers, cp.async groups and visibility, tile-collective ops."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref import cp_async, kernel, tbarrier, tile, tshared
from tessera_ref.errors import TileBarrierError, TileRaceError
from tessera_conformance import assert_bits, clause

from .support import bank_wavefronts, counters, expect_error, findings, global_sectors, launch, line_of, pieces, warps, where

X32 = np.arange(32, dtype=np.float32) * 3 - 40


@kernel
def rotate(X: f32[32], Y: mut[f32[32]]):
    """Writes, a barrier, then each lane reads its neighbour's element; all lanes read s[0]."""
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    s[i] = X[i]
    s[i] = s[i] * 2.0
    tbarrier()
    Y[i] = s[(i + 1) % 32] + s[0]


@clause("TILE-VIS-1", "TILE-CHECK-1")
def test_a_barrier_makes_writes_visible_to_every_lane(backend):
    """After the barrier any lane may read; before it a lane may read and write its own element."""
    y = np.zeros(32, np.float32)
    report = launch(backend, rotate, X32, y, grid=1, lanes=32)
    assert findings(backend, report) == []
    assert_bits(y, (np.roll(X32, -1) * 2 + X32[0] * 2).astype(np.float32))


@kernel
def barrier_if(Y: mut[f32[8]]):
    """A barrier under a lane-varying condition."""
    i = tile.lane_id()
    if i < 4:
        tbarrier()  # VIS-1 barrier
    Y[i] = 1.0


@clause("TILE-VIS-1", "TILE-CHECK-5")
def test_a_barrier_is_reached_by_every_lane_or_none(backend):
    """Allowed with 4 lanes (all take the branch); with 8, lanes 4-7 do not reach it."""
    y = np.zeros(8, np.float32)
    assert findings(backend, launch(backend, barrier_if, y, grid=1, lanes=4)) == []
    assert_bits(y[:4], np.ones(4, np.float32))
    _, message = expect_error(backend, TileBarrierError, line_of(__file__, "# VIS-1 barrier"), barrier_if,
                              np.zeros(8, np.float32), grid=1, lanes=8)
    assert "0-3" in message and "4-7" in message and "(0,)" in message


@kernel
def fragment_then_lane_read(X: f32[4, 4], Y: mut[f32[4]]):
    """A fragment stored to shared memory is every lane's write: reading it needs a barrier."""
    a = tile.load(X, index=(0, 0), shape=(4, 4))
    s = tshared.alloc[f32](4, 4)
    tile.store(s, index=(0, 0), value=a)
    i = tile.lane_id()
    Y[i] = s[i, 0]  # VIS-1 collective


@clause("TILE-VIS-1", "TILE-VIS-3", "TILE-CHECK-1")
def test_a_tile_collective_access_counts_as_every_lanes(backend):
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    found, message = expect_error(backend, TileRaceError, r"read-after-write.*" + line_of(__file__, "# VIS-1 collective"),
                                  fragment_then_lane_read, x, np.zeros(4, np.float32), grid=1, lanes=4)
    assert "s[0, 0]" in message and found


WAIT, BARRIER = 0, 1


@kernel
def staged(X: f32[64], Y: mut[f32[64]]):
    """Two copies in two groups; wait(WAIT) and a barrier; lanes read both halves."""
    s = tshared.alloc[f32](64)
    i = tile.lane_id()
    cp_async.shared.global_(s[0:32], X[0:32])
    cp_async.commit()
    cp_async.shared.global_(s[32:64], X[32:64])
    cp_async.commit()
    cp_async.wait(WAIT)
    if BARRIER == 1:
        tbarrier()
    Y[i] = s[i]  # VIS-2 first
    Y[i + 32] = s[i + 32]  # VIS-2 second
    cp_async.wait(0)


@clause("TILE-VIS-2", "TILE-CHECK-2")
def test_copies_land_at_their_wait_and_are_visible_after_a_barrier(backend):
    x = np.arange(64, dtype=np.float32) - 7
    y = np.zeros(64, np.float32)
    report = launch(backend, staged, x, y, grid=1, lanes=32)
    assert findings(backend, report) == []
    assert_bits(y, x)


@clause("TILE-VIS-2", "TILE-CHECK-2")
def test_wait_n_retires_all_but_the_last_n_groups(backend):
    """wait(1) leaves the second group in flight: the first half may be read, not the second."""
    x = np.arange(64, dtype=np.float32)
    _, message = expect_error(backend, TileRaceError, r"in flight.*" + line_of(__file__, "# VIS-2 second"),
                              staged.specialize(WAIT=1), x, np.zeros(64, np.float32), grid=1, lanes=32)
    assert "s[32]" in message


@clause("TILE-VIS-2", "TILE-CHECK-2")
def test_copied_data_needs_a_barrier_after_the_wait(backend):
    """Even the lane that would have moved the piece may not read it before the barrier."""
    x = np.arange(64, dtype=np.float32)
    _, message = expect_error(backend, TileRaceError, r"read-after-write.*" + line_of(__file__, "# VIS-2 first"),
                              staged.specialize(BARRIER=0), x, np.zeros(64, np.float32), grid=1, lanes=32)
    assert "s[0]" in message


CASE = 1


@kernel
def copy_hazards(X: f32[32], Y: mut[f32[32]]):
    """A copy and lane accesses of its destination in one phase, in the order CASE picks."""
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    if CASE == 1:
        s[i] = 1.0
        cp_async.shared.global_(s, X[0:32])  # VIS-2 copy over write
    if CASE == 2:
        s[i] = 1.0
        tbarrier()
        Y[i] = s[i]
        cp_async.shared.global_(s, X[0:32])  # VIS-2 copy over read
    if CASE == 3:
        cp_async.shared.global_(s, X[0:32])
        s[i] = 2.0  # VIS-2 write in flight
    cp_async.commit()
    cp_async.wait(0)


@clause("TILE-VIS-2", "TILE-CHECK-2")
@pytest.mark.parametrize("case, marker, what", [
    (1, "# VIS-2 copy over write", "write-after-write"),
    (2, "# VIS-2 copy over read", "write-after-read"),
    (3, "# VIS-2 write in flight", "in flight"),
])
def test_a_copy_races_with_lane_accesses_of_its_destination_in_one_phase(backend, case, marker, what):
    k = copy_hazards.specialize(CASE=case)
    expect_error(backend, TileRaceError, rf"{what}.*" + line_of(__file__, marker), k,
                 np.ones(32, np.float32), np.zeros(32, np.float32), grid=1, lanes=32)


@kernel
def reads_in_flight(X: f32[32], Y: mut[f32[32]]):
    """Reading a destination before the wait."""
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    cp_async.shared.global_(s, X[0:32])
    cp_async.commit()
    tbarrier()
    Y[i] = s[i]  # VIS-2 early read
    cp_async.wait(0)


@clause("TILE-VIS-2", "TILE-CHECK-2")
def test_reading_a_copy_before_its_wait_is_a_race(backend):
    expect_error(backend, TileRaceError, r"in flight.*" + line_of(__file__, "# VIS-2 early read"), reads_in_flight,
                 np.ones(32, np.float32), np.zeros(32, np.float32), grid=1, lanes=32)


@kernel
def never_waited(X: f32[64], Y: mut[f32[32]]):
    """Two copies nobody waits for."""
    s = tshared.alloc[f32](32)
    t = tshared.alloc[f32](32)
    cp_async.shared.global_(s, X[0:32])  # VIS-2 unwaited
    cp_async.shared.global_(t, X[32:64])
    Y[tile.lane_id()] = 0.0


@clause("TILE-VIS-2", "TILE-CHECK-2")
def test_copies_never_waited_for_are_a_warning_at_the_first(backend):
    y = np.ones(32, np.float32)
    report = launch(backend, never_waited, np.ones(64, np.float32), y, grid=2, lanes=32)
    (warning,) = [f for f in findings(backend, report) if f.tile == (0,)]
    assert warning.kind == "warning" and warning.location.endswith(where(__file__, "# VIS-2 unwaited"))
    assert not y.any()  # a warning does not stop the run


# -- the split of tile-collective work among lanes (TILE-VIS-3) ----------------------------


_COPY = '''
@kernel
def k(X: f32[R, C], Y: mut f32[1]):
    s = tshared.alloc[f32](H, W, pad=PAD)
    cp_async.shared.global(s, X[R0:R0+H, C0:C0+W])
    cp_async.commit()
    cp_async.wait(0)
'''


@clause("TILE-VIS-3", "TILE-COUNT-1", "TILE-COUNT-2")
@pytest.mark.parametrize("fmt, h, w, r0, c0, pad", [
    ("f32", 1, 128, 0, 0, 0), ("f32", 1, 128, 0, 1, 0), ("f32", 1, 128, 0, 2, 0), ("f32", 64, 32, 0, 0, 0),
    ("f32", 64, 32, 0, 0, 1), ("f32", 8, 32, 3, 2, 2), ("f16", 16, 64, 1, 4, 0), ("f64", 8, 16, 0, 1, 0),
    ("fp8_e4m3", 4, 64, 0, 8, 0)])
def test_a_copy_moves_aligned_pieces_piece_j_by_lane_j(backend, fmt, h, w, r0, c0, pad):
    from .support import dtype
    R, C = 70, 136
    dt = dtype(fmt)
    k = kernel.from_source(_COPY.replace("f32", fmt), constants=dict(H=h, W=w, R0=r0, C0=c0, PAD=pad, R=R, C=C))
    report = launch(backend, k, np.zeros((R, C), dt), np.zeros(1, dt), grid=1, lanes=32)
    size = dt.itemsize
    piece, moves = pieces([((r0 + r) * C + c0) * size for r in range(h)], [r * (w + pad) * size for r in range(h)],
                          w * size, size)
    c = counters(backend, report)
    src, dst = warps([m[0] for m in moves]), warps([m[1] for m in moves])
    assert c.global_requests == len(src)
    assert c.global_sectors == global_sectors(src, piece)
    assert (c.smem_requests, c.smem_wavefronts, c.smem_ideal_wavefronts) == (len(dst),) + bank_wavefronts(dst, piece)
    assert c.smem_write_bytes == h * w * size and c.hbm_read_bytes == 32 * global_sectors(src, piece)


_FRAG = '''
@kernel
def k(X: f32[R, C], Y: mut f32[R, C]):
    f = tile.load(X, index=(R0, C0), shape=(H, W))
    tile.store(Y, index=(R1, C1), value=f)
'''


@clause("TILE-VIS-3", "TILE-COUNT-2")
@pytest.mark.parametrize("h, w, r0, c0, r1, c1", [(8, 64, 0, 0, 0, 0), (4, 12, 1, 3, 2, 5), (16, 8, 0, 1, 9, 0)])
def test_fragment_loads_and_stores_move_elements_in_row_major_order(backend, h, w, r0, c0, r1, c1):
    R, C = 32, 72
    k = kernel.from_source(_FRAG, constants=dict(H=h, W=w, R0=r0, C0=c0, R1=r1, C1=c1))
    x = np.arange(R * C, dtype=np.float32).reshape(R, C)
    y = np.zeros_like(x)
    report = launch(backend, k, x, y, grid=1, lanes=32)
    want = np.zeros_like(x)
    want[r1:r1 + h, c1:c1 + w] = x[r0:r0 + h, c0:c0 + w]
    assert_bits(y, want)
    reads = warps([((r0 + i) * C + c0 + j) * 4 for i in range(h) for j in range(w)])
    writes = warps([((r1 + i) * C + c1 + j) * 4 for i in range(h) for j in range(w)])
    c = counters(backend, report)
    assert c.global_requests == len(reads) + len(writes)
    assert (c.hbm_read_bytes, c.hbm_write_bytes) == (32 * global_sectors(reads, 4), 32 * global_sectors(writes, 4))
