"""Each checker catches its planted bug and says what, where and which lanes (TILE-CHECK-*)."""
import pathlib

import numpy as np
import pytest
from tile_dsl import AXPY_DB, CP_VISIBILITY
import tile_kernels
from tile_kernels import saxpy_unguarded

from tessera_ref import kernel
from tessera_ref.errors import TileBarrierError, TileBoundsError, TileRaceError, TileUninitializedError

DATA = pathlib.Path(__file__).parent / "data"


def _f16(n, seed):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float16)


def _expect(error, match: str, src: str, *arrays, lanes: int) -> None:
    """The DSL kernel ``src`` run on one tile of ``lanes`` lanes raises ``error`` matching ``match``."""
    with pytest.raises(error, match=match):
        kernel.from_source(src)(*arrays, grid=1, lanes=lanes)


def test_double_buffer_without_its_trailing_barrier_is_a_war_race():
    k = kernel.from_source(AXPY_DB.replace("TRAILING", "pass"))
    with pytest.raises(TileRaceError) as info:
        k(_f16(1024, 0), _f16(1024, 1), np.float16(2), grid=1, lanes=128)
    message = str(info.value)
    assert "write-after-read race: a cp.async refills an element another lane read" in message
    assert "[at <tessera>:8]" in message  # the cp_async line
    assert "by every lane (a tile-collective op) of tile (0,)" in message  # TILE-VIS-3


def test_seed_tp_axpy_as_printed():
    """Seed 004's loop: a WAR race on the refilled buffer, and the last chunk never processed."""
    k = kernel.load(DATA / "tp_axpy.tsr")
    X, Y = _f16(1024, 2), _f16(1024, 3)
    Y0 = Y.copy()
    report = k(X, Y, np.float16(2), grid=1, lanes=128, on_error="collect")
    kinds = {(f.kind, f.location) for f in report.findings}
    path = str(DATA / "tp_axpy.tsr")
    assert ("race", f"{path}:7") in kinds  # cp_async.shared.global(s1, ...) refills s0's old buffer
    assert ("warning", f"{path}:12") in kinds  # every lane stores every element
    assert report.coverage["Y"] == (896, 1024)
    assert np.array_equal(Y[896:], Y0[896:])  # the last 128 elements are never updated
    want = _f16_axpy_prefix(X, Y0)
    assert np.array_equal(Y[:896].view(np.uint16), want.view(np.uint16))


def _f16_axpy_prefix(X, Y0):
    prod = (2.0 * X[:896].astype(np.float64)).astype(np.float16)
    return (prod.astype(np.float64) + Y0[:896].astype(np.float64)).astype(np.float16)


def test_reading_a_cp_async_copy_before_the_barrier_is_a_raw_race():
    k = kernel.from_source(CP_VISIBILITY.replace("WAIT", "cp_async.wait(0)").replace("BARRIER", "pass"))
    with pytest.raises(TileRaceError, match=r"reads s\[0\] by lane 0 of tile \(0,\): read-after-write race.*\[at <tessera>:10\]"):
        k(np.ones(128, np.float32), np.zeros(128, np.float32), grid=1, lanes=128)


def test_reading_a_cp_async_copy_before_its_wait_is_a_race():
    k = kernel.from_source(CP_VISIBILITY.replace("WAIT", "pass").replace("BARRIER", "tbarrier()"))
    with pytest.raises(TileRaceError, match="still in flight"):
        k(np.ones(128, np.float32), np.zeros(128, np.float32), grid=1, lanes=128)


def test_wait_and_barrier_make_the_copy_visible():
    k = kernel.from_source(CP_VISIBILITY.replace("WAIT", "cp_async.wait(0)").replace("BARRIER", "tbarrier()"))
    X = np.arange(128, dtype=np.float32)
    Y = np.zeros(128, np.float32)
    assert k(X, Y, grid=1, lanes=128).findings == []
    assert np.array_equal(X, Y)


def test_wrong_index_is_out_of_bounds_with_tile_lanes_and_line():
    x, y = np.ones(1000, np.float32), np.ones(1000, np.float32)
    with pytest.raises(TileBoundsError) as info:
        saxpy_unguarded(x, y, np.float32(2), grid=8, lanes=128)
    message = str(info.value)
    assert "reads x[1000] (shape [1000], global memory) by lanes 104-127 of tile (7,)" in message
    source = pathlib.Path(tile_kernels.__file__).read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(source) if "y[i] = alpha * x[i] + y[i]" in text)
    assert f"tile_kernels.py:{line}]" in message  # y[i] = alpha * x[i] + y[i]


def test_out_of_bounds_view_names_the_slice():
    src = '''
@kernel
def k(X: f32[m], Y: mut f32[m]):
    s = tshared.alloc[f32](128)
    for t in tile.range(m, step=128):
        cp_async.shared.global(s, X[t:t+128])
'''
    _expect(TileBoundsError, r"X\[128:256\] in axis 0 \(size 200", src, np.zeros(200, np.float32),
            np.zeros(200, np.float32), lanes=32)


def test_uninitialized_shared_read():
    src = '''
@kernel
def k(Y: mut f32[n]):
    s = tshared.alloc[f32](64, pad=1)
    i = tile.lane_id()
    if i < 32:
        s[i] = 1.0
    tbarrier()
    Y[i] = s[i]
'''
    _expect(TileUninitializedError, r"reads s\[32\] by lane 32 .*nothing has written.*:9\]", src,
            np.zeros(64, np.float32), lanes=64)


def test_divergent_barrier():
    src = '''
@kernel
def k(Y: mut f32[n]):
    i = tile.lane_id()
    if i < 16:
        tbarrier()
    Y[i] = 1.0
'''
    _expect(TileBarrierError, r"reached by lanes 0-15 but not by lanes 16-31.*:6\]", src,
            np.zeros(32, np.float32), lanes=32)


def test_two_lanes_storing_one_shared_element_is_a_waw_race():
    src = '''
@kernel
def k(Y: mut f32[n]):
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    s[i // 2] = float(i)
'''
    _expect(TileRaceError, r"write-after-write race: several lanes store", src, np.zeros(32, np.float32), lanes=32)


def test_checks_off_runs_the_racy_kernel_silently():
    k = kernel.from_source(AXPY_DB.replace("TRAILING", "pass"))
    report = k(_f16(1024, 0), _f16(1024, 1), np.float16(2), grid=1, lanes=128, checks=False)
    assert report.findings == []


def test_mma_without_the_barrier_after_the_wait_is_a_race():
    src = '''
@kernel
def mm(A: f32[64, 32], B: f32[32, 64], C: mut f32[64, 64]):
    sA = tshared.alloc[f32](64, 32)
    sB = tshared.alloc[f32](32, 64)
    cp_async.shared.global(sA, A[0:64, 0:32])
    cp_async.shared.global(sB, B[0:32, 0:64])
    cp_async.commit()
    cp_async.wait(0)
    acc = tile.zeros((64, 64), f32)
    acc += tile.mma(sA, sB, accum=f32)
    tile.store(C, index=(0, 0), value=acc)
'''
    A, B = np.ones((64, 32), np.float32), np.ones((32, 64), np.float32)
    _expect(TileRaceError, r"mma reads sA\[0, 0\] by every lane .*read-after-write.*:11\]", src,
            A, B, np.zeros((64, 64), np.float32), lanes=128)


def test_seed_tp_axpy_on_several_tiles_races_between_tiles():
    """tile.range runs the whole loop in every tile: tile 1 updates Y again after tile 0."""
    k = kernel.load(DATA / "tp_axpy.tsr")
    report = k(_f16(1024, 2), _f16(1024, 3), np.float16(2), grid=2, lanes=128, on_error="collect")
    between = [f for f in report.findings if "after tile (0,) stored it" in f.what]
    assert between and between[0].kind == "race" and between[0].tile == (1,)
    assert "different values" in between[0].what
