"""Views, visibility and checker semantics of the tile interpreter, each against a planted bug
or a hand-derived value (TILE-MEM, TILE-VIS, TILE-CHECK, TILE-COUNT, TILE-NUM-2)."""
import ml_dtypes
import numpy as np
import pytest

from tessera_ref import kernel
from tessera_ref.errors import KernelError, TileBoundsError, TileRaceError


def _run(src, *arrays, lanes, **kw):
    return kernel.from_source(src, filename="k.tsr")(*arrays, grid=1, lanes=lanes, **kw)


def _f32(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


# -- views (TILE-CHECK-3) -------------------------------------------------------------------

def test_an_integer_index_after_a_slice_is_rejected_with_its_line():
    src = '''
@kernel
def k(X: f32[8, 8], Y: mut f32[4]):
    s = tshared.alloc[f32](4)
    cp_async.shared.global(s, X[0:4, 2])
'''
    with pytest.raises(KernelError, match=r"keeps an integer index after a slice.*\[at k.tsr:5\].*2:2\+1"):
        kernel.from_source(src, filename="k.tsr")


def test_a_leading_integer_index_views_that_row():
    src = '''
@kernel
def k(X: f32[4, 8], Y: mut f32[4]):
    i = tile.lane_id()
    v = X[2, 3:7]
    Y[i] = v[i]
'''
    X, Y = _f32(4, 8), np.zeros(4, np.float32)
    _run(src, X, Y, lanes=4)
    assert Y.tolist() == [19.0, 20.0, 21.0, 22.0]  # X[2, 3:7] = 2*8 + 3 ...


@pytest.mark.parametrize("lo", [4, 1])
def test_lane_reads_through_a_valid_view_read_the_view(lo):
    src = f'''
@kernel
def k(X: f32[8], Y: mut f32[4]):
    v = X[{lo}:{lo}+4]
    i = tile.lane_id()
    Y[i] = v[i]
'''
    Y = np.zeros(4, np.float32)
    report = _run(src, _f32(8), Y, lanes=4, on_error="collect")
    assert report.findings == [] and Y.tolist() == [lo, lo + 1, lo + 2, lo + 3]


def test_a_lane_index_past_the_view_is_out_of_bounds_even_inside_the_buffer():
    src = '''
@kernel
def k(X: f32[8], Y: mut f32[8]):
    v = X[0:4]
    i = tile.lane_id()
    Y[i] = v[i]
'''
    Y = np.zeros(8, np.float32)
    report = _run(src, _f32(8), Y, lanes=8, on_error="collect")
    (finding,) = report.findings
    assert finding.kind == "bounds" and finding.lanes == (4, 5, 6, 7) and "X[4] (shape [4]" in finding.what
    assert Y.tolist() == [0, 1, 2, 3, 0, 0, 0, 0]  # the offending lanes were skipped


@pytest.mark.parametrize("base", ["X", "s"])
def test_a_view_leaving_its_buffer_is_reported_where_it_is_made(base):
    src = f'''
@kernel
def k(X: f32[8], Y: mut f32[16]):
    s = tshared.alloc[f32](8)
    i = tile.lane_id()
    v = {base}[0:16]
    Y[i] = v[i]
'''
    with pytest.raises(TileBoundsError, match=rf"views {base}\[0:16\] in axis 0 \(size 8.*\[at k.tsr:6\]"):
        _run(src, np.zeros(8, np.float32), np.zeros(16, np.float32), lanes=16)


def test_collect_mode_skips_the_lanes_of_an_out_of_bounds_store():
    src = '''
@kernel
def k(Y: mut f32[6]):
    i = tile.lane_id()
    Y[i] = 1.0
'''
    Y = np.zeros(6, np.float32)
    report = _run(src, Y, lanes=8, on_error="collect")
    assert [f.lanes for f in report.findings] == [(6, 7)]
    assert Y.tolist() == [1.0] * 6 and report.coverage["Y"] == (6, 6)


# -- counters and numerics -----------------------------------------------------------------

def test_copy_counts_do_not_depend_on_iteration_order():
    """X[0:128] (f32, 16-byte aligned) moves as 32 16-byte pieces: one request, 512 bytes = 16
    sectors, 4 phases of 8 lanes each hitting 32 distinct words (4 wavefronts). X[1:129] starts
    4 bytes into a 16-byte chunk, so it moves as 128 4-byte pieces: 4 requests of 128 bytes at
    byte 4 mod 32, 5 sectors each (20), one wavefront each (4). Together: 5 global requests,
    36 sectors, 8 wavefronts, in either order."""
    src = '''
@kernel
def k(X: f32[256], Y: mut f32[32]):
    s = tshared.alloc[f32](128)
    for u in range(2):
        t = FIRST + u * STEP
        cp_async.shared.global(s, X[t:t+128])
        cp_async.commit()
        cp_async.wait(0)
        tbarrier()
'''
    for first, step in ((0, 1), (1, -1)):
        k = kernel.from_source(src, constants=dict(FIRST=first, STEP=step))
        c = k(np.zeros(256, np.float32), np.zeros(32, np.float32), grid=1, lanes=32).counters
        assert (c.global_requests, c.global_sectors, c.smem_requests, c.smem_wavefronts) == (5, 36, 5, 8)


def test_storing_a_fragment_into_shared_memory_of_another_format_rounds_once():
    """1 + 2^-8 + 2^-30 in f64 rounds to bf16 (7 fraction bits) as 1 + 2^-7 (above the tie);
    through f32 first it would become the tie 1 + 2^-8 and then 1.0 (double rounding)."""
    src = '''
@kernel
def k(X: f64[1, 4], Y: mut bf16[1, 4]):
    a = tile.load(X, index=(0, 0), shape=(1, 4))
    s = tshared.alloc[bf16](1, 4)
    tile.store(s, index=(0, 0), value=a)
    tbarrier()
    i = tile.lane_id()
    Y[0, i] = s[0, i]
'''
    X = np.full((1, 4), 1 + 2.0 ** -8 + 2.0 ** -30)
    Y = np.zeros((1, 4), ml_dtypes.bfloat16)
    _run(src, X, Y, lanes=4)
    assert Y.astype(np.float64).tolist() == [[1 + 2.0 ** -7] * 4]


# -- races (TILE-CHECK-1, TILE-CHECK-2) ------------------------------------------------------

_SHARED = '''
@kernel
def k(X: f32[32], Y: mut f32[32]):
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    BODY
'''


def _race(body, match):
    src = _SHARED.replace("BODY", body.replace("\n", "\n    "))
    with pytest.raises(TileRaceError, match=match):
        _run(src, np.ones(32, np.float32), np.zeros(32, np.float32), lanes=32)


def test_plain_read_after_write_by_another_lane_is_a_race():
    _race("s[i] = 1.0\nY[i] = s[(i + 1) % 32]", r"reads s\[1\] by lane 0 .*read-after-write race.*k.tsr:7")


def test_a_race_names_the_lanes_that_accessed_the_reported_element():
    # lanes 0-3 read s[3], written by lane 3: the racing readers of s[3] are lanes 0-2 (not
    # every racing lane of the op, nor lane 3 reading its own write)
    _race("s[i] = 1.0\nY[i] = s[(i // 4) * 4 + 3]", r"reads s\[3\] by lanes 0-2 of tile .*read-after-write race")


def test_plain_write_after_read_by_another_lane_is_a_race():
    _race("s[i] = 1.0\ntbarrier()\nY[i] = s[(i + 1) % 32]\ns[i] = 2.0",
          r"writes s\[0\] by lane 0 .*write-after-read race.*k.tsr:9")


def test_write_after_write_between_two_stores_is_a_race():
    _race("s[i] = 1.0\ns[(i + 1) % 32] = 2.0", r"writes s\[1\] by lane 0 .*write-after-write race.*k.tsr:7")


def test_a_lane_write_while_a_copy_is_in_flight_is_a_race():
    _race("cp_async.shared.global(s, X[0:32])\ns[i] = 1.0\ncp_async.commit()\ncp_async.wait(0)",
          r"writes s\[0\] .*a cp.async copy in flight will also write.*k.tsr:7")


def test_a_copy_issued_onto_elements_lanes_wrote_in_this_phase_is_a_race():
    _race("s[i] = 5.0\ncp_async.shared.global(s, X[0:32])\ncp_async.commit()\ncp_async.wait(0)",
          r"cp.async writes s\[0\] by every lane.*write-after-write race.*k.tsr:7")


def test_reading_copied_data_after_the_wait_needs_a_barrier_even_for_a_copying_lane():
    _race("cp_async.shared.global(s, X[0:32])\ncp_async.commit()\ncp_async.wait(0)\nY[i] = s[i]",
          r"reads s\[0\] by lane 0 .*read-after-write race.*k.tsr:9")


def test_a_fragment_stored_to_shared_memory_is_every_lanes_write():
    src = '''
@kernel
def k(X: f32[4, 4], Y: mut f32[4]):
    a = tile.load(X, index=(0, 0), shape=(4, 4))
    s = tshared.alloc[f32](4, 4)
    tile.store(s, index=(0, 0), value=a)
    i = tile.lane_id()
    Y[i] = s[i, 0]
'''
    with pytest.raises(TileRaceError, match=r"reads s\[0, 0\] by lane 0 .*read-after-write race.*k.tsr:8"):
        _run(src, _f32(4, 4), np.zeros(4, np.float32), lanes=4)


def test_a_copy_never_waited_for_is_a_warning_at_its_own_line():
    src = '''
@kernel
def k(X: f32[32], Y: mut f32[32]):
    s = tshared.alloc[f32](32)
    cp_async.shared.global(s, X[0:32])
    i = tile.lane_id()
    Y[i] = 0.0
'''
    report = _run(src, np.ones(32, np.float32), np.zeros(32, np.float32), lanes=32)
    (finding,) = report.findings
    assert finding.kind == "warning" and finding.location == "k.tsr:5" and "into s" in finding.what


# -- lane-varying control flow (TILE-MEM-3, TILE-CHECK-5) -----------------------------------

@pytest.mark.parametrize("stmt", [
    "cp_async.shared.global(s, X[0:32])",
    "a = tile.load(X, index=(0,), shape=(32,))",
    "tile.store(Y, index=(0,), value=f)",
])
def test_tile_collective_ops_under_a_lane_varying_if_are_errors(stmt):
    src = f'''
@kernel
def k(X: f32[32], Y: mut f32[32]):
    s = tshared.alloc[f32](32)
    f = tile.load(X, index=(0,), shape=(32,))
    i = tile.lane_id()
    if i < 16:
        {stmt}
'''
    for lanes in (32, 8):  # some lanes take the branch / all do: the same error
        with pytest.raises(KernelError, match=r"issued by the whole tile.*lane-varying if.*\[at k.tsr:8\]"):
            _run(src, np.ones(32, np.float32), np.zeros(32, np.float32), lanes=lanes)


def test_a_collective_op_under_a_lane_varying_if_no_lane_takes_is_an_error_too():
    src = '''
@kernel
def k(X: f32[32], Y: mut f32[32]):
    f = tile.load(X, index=(0,), shape=(32,))
    i = tile.lane_id()
    if i > 100:
        tile.store(Y, index=(0,), value=f)
'''
    with pytest.raises(KernelError, match=r"frag_store' is issued by the whole tile.*\[at k.tsr:7\]"):
        _run(src, np.ones(32, np.float32), np.zeros(32, np.float32), lanes=32)


def test_a_fragment_assigned_under_a_lane_varying_if_is_an_error_even_when_every_lane_takes_it():
    src = '''
@kernel
def k(A: f32[4, 4], C: mut f32[4, 4]):
    i = tile.lane_id()
    acc = tile.zeros((4, 4), f32)
    if i < 8:
        acc = acc
    tile.store(C, index=(0, 0), value=acc)
'''
    with pytest.raises(KernelError, match=r"cannot yield a tile-level value.*\[at k.tsr:6\]"):
        _run(src, _f32(4, 4), np.zeros((4, 4), np.float32), lanes=4)


def test_shared_allocation_in_a_loop_is_one_buffer_per_tile():
    src = '''
@kernel
def k(Y: mut f32[4]):
    i = tile.lane_id()
    for j in range(2):
        s = tshared.alloc[f32](4)
        if j == 0:
            s[i] = 7.0
        tbarrier()
        if j == 1:
            Y[i] = s[i]
'''
    Y = np.zeros(4, np.float32)
    report = _run(src, Y, lanes=4)
    assert Y.tolist() == [7.0] * 4 and report.findings == []


@pytest.mark.parametrize("lanes, error", [(4, None), (8, "tbarrier\\(\\) in tile \\(0,\\) is reached by lanes 0-3 "
                                                       "but not by lanes 4-7.*k.tsr:6")])
def test_a_barrier_under_a_lane_varying_if_is_checked_on_the_lanes_that_reach_it(lanes, error):
    """TILE-VIS-1: allowed when every lane (or none) takes the branch, else TILE-CHECK-5."""
    from tessera_ref.errors import TileBarrierError

    src = '''
@kernel
def k(Y: mut f32[8]):
    i = tile.lane_id()
    if i < 4:
        tbarrier()
    Y[i] = 1.0
'''
    if error is None:
        assert _run(src, np.zeros(8, np.float32), lanes=lanes).findings == []
    else:
        with pytest.raises(TileBarrierError, match=error):
            _run(src, np.zeros(8, np.float32), lanes=lanes)
