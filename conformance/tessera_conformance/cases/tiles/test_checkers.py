"""TILE-CHECK: races, bounds, uninitialized reads, divergent barriers and global stores, each
reported with what, which buffer and element, tile, lanes and the kernel line."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref import kernel, tbarrier, tile, tshared
from tessera_ref.errors import TileBarrierError, TileBoundsError, TileRaceError, TileUninitializedError
from tessera_conformance import assert_bits, clause

from .support import expect_error, findings, launch, line_of, part, where

HAZARD = 0


@kernel
def hazards(X: f32[32], Y: mut[f32[32]]):
    """One shared-memory hazard per HAZARD value."""
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    s[i] = X[i]
    if HAZARD == 1:
        Y[i] = s[(i + 1) % 32]  # CHECK-1 raw
    if HAZARD == 2:
        tbarrier()
        Y[i] = s[(i + 3) % 32]
        s[i] = 2.0  # CHECK-1 war
    if HAZARD == 3:
        s[(i + 1) % 32] = 2.0  # CHECK-1 waw
    if HAZARD == 4:
        tbarrier()
        s[i // 2] = X[i]  # CHECK-1 one store


@clause("TILE-CHECK-1")
@pytest.mark.parametrize("hazard, marker, kind, element, lanes", [
    # the finding names the element and the lanes of this access that touched it
    (1, "# CHECK-1 raw", "read-after-write", "s[1]", "by lane 0 of"),
    (2, "# CHECK-1 war", "write-after-read", "s[0]", "by lane 0 of"),
    (3, "# CHECK-1 waw", "write-after-write", "s[1]", "by lane 0 of"),
    (4, "# CHECK-1 one store", "write-after-write", "s[0]", "by lanes 0-1 of"),
])
def test_two_lanes_touching_one_shared_element_in_a_phase_race(backend, hazard, marker, kind, element, lanes):
    _, message = expect_error(backend, TileRaceError, rf"{kind} race.*" + line_of(__file__, marker),
                              hazards.specialize(HAZARD=hazard), np.ones(32, np.float32), np.zeros(32, np.float32),
                              grid=1, lanes=32)
    assert element in message and "tile (0,)" in message and lanes in message


@clause("TILE-CHECK-1")
def test_without_a_hazard_there_is_no_finding(backend):
    y = np.zeros(32, np.float32)
    x = np.arange(32, dtype=np.float32)
    assert findings(backend, launch(backend, hazards, x, y, grid=2, lanes=32)) == []


@clause("TILE-CHECK-1", "TILE-EXEC-1")
def test_collect_keeps_every_finding_and_goes_on(backend):
    """Races of two lines in each of three tiles are two findings (repeats folded), and the
    run finishes."""
    k = kernel.from_source(_THREE_RACES, filename="three.tsr")
    y = np.zeros(32, np.float32)
    report = launch(backend, k, np.ones(32, np.float32), y, grid=3, lanes=32, on_error="collect")
    races = [f for f in findings(backend, report) if f.kind == "race"]
    assert sorted(f.location for f in races) == ["three.tsr:7", "three.tsr:8"]
    assert all(f.count == 3 for f in races)  # repeated in each of the 3 tiles, folded
    assert (y == 1).all()


_THREE_RACES = '''
@kernel
def k(X: f32[32], Y: mut f32[32]):
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    s[i] = 1.0
    s[(i + 1) % 32] = 1.0
    Y[i] = s[(i + 5) % 32]
'''


@kernel
def saxpy_unguarded(x: f32[n], y: mut[f32[n]], alpha: f32):
    """The seed's saxpy without its `if i < n`."""
    i = tile.linear_id()
    y[i] = alpha * x[i] + y[i]  # CHECK-3 unguarded


@clause("TILE-CHECK-3")
def test_a_global_read_out_of_bounds_names_index_shape_space_tile_lanes_and_line(backend):
    x, y = np.ones(1000, np.float32), np.ones(1000, np.float32)
    _, message = expect_error(backend, TileBoundsError, line_of(__file__, "# CHECK-3 unguarded"), saxpy_unguarded,
                              x, y, np.float32(2), grid=8, lanes=128)
    for piece in ("x[1000]", "[1000]", "global", "104-127", "(7,)"):
        assert piece in message


@clause("TILE-CHECK-3")
def test_collect_skips_the_offending_lanes(backend):
    x = np.arange(1000, dtype=np.float32)
    y = np.ones(1000, np.float32)
    report = launch(backend, saxpy_unguarded, x, y, np.float32(2), grid=8, lanes=128, on_error="collect")
    (bounds,) = [f for f in findings(backend, report) if f.kind == "bounds"]
    assert bounds.tile == (7,) and tuple(bounds.lanes) == tuple(range(104, 128))
    assert_bits(y, (np.float32(2) * x + np.float32(1)).astype(np.float32))
    assert part(backend, report, "coverage")["y"] == (1000, 1000)


VIEW = 0


@kernel
def views(X: f32[8], Y: mut[f32[16]]):
    """Views leaving their buffer (made there), and lane indices past a view."""
    s = tshared.alloc[f32](8)
    i = tile.lane_id()
    if VIEW == 1:
        v = X[4:12]  # CHECK-3 global view
        Y[i] = v[i]
    if VIEW == 2:
        w = s[0:16]  # CHECK-3 shared view
        w[i] = 1.0
    if VIEW == 3:
        u = X[2:6]
        Y[i] = u[i]  # CHECK-3 past view
    if VIEW == 4:
        s[i] = 1.0  # CHECK-3 shared store
    if VIEW == 5:
        f = tile.load(X, index=(4,), shape=(8,))  # CHECK-3 fragment


@clause("TILE-CHECK-3")
@pytest.mark.parametrize("view, marker, parts", [
    (1, "# CHECK-3 global view", ("X[4:12]", "size 8")),
    (2, "# CHECK-3 shared view", ("s[0:16]", "size 8", "shared")),
    (3, "# CHECK-3 past view", ("[4]", "[4]", "4-7")),  # lanes 4-7 index the 4-element view
    (4, "# CHECK-3 shared store", ("s[8]", "shared", "8-15")),
    (5, "# CHECK-3 fragment", ("X[4:12]", "size 8")),
])
def test_views_and_shared_accesses_are_bounds_checked(backend, view, marker, parts):
    _, message = expect_error(backend, TileBoundsError, line_of(__file__, marker), views.specialize(VIEW=view),
                              np.arange(8, dtype=np.float32), np.zeros(16, np.float32), grid=1,
                              lanes=16 if view in (2, 4) else 8)
    for piece in parts:
        assert piece in message


@clause("TILE-CHECK-3")
def test_an_out_of_bounds_copy_is_skipped_whole_under_collect(backend):
    k = kernel.from_source(_COPY_PAST, filename="copy.tsr")
    y = np.full(32, 5, np.float32)
    report = launch(backend, k, np.ones(40, np.float32), y, grid=1, lanes=32, on_error="collect")
    assert [f.kind for f in findings(backend, report) if f.kind == "bounds"] == ["bounds"]
    with pytest.raises(TileBoundsError, match=r"X\[16:48\].*\[at copy.tsr:5\]"):
        launch(backend, k, np.ones(40, np.float32), y, grid=1, lanes=32)


_COPY_PAST = '''
@kernel
def k(X: f32[40], Y: mut f32[32]):
    s = tshared.alloc[f32](32)
    cp_async.shared.global(s, X[16:48])
    cp_async.commit()
    cp_async.wait(0)
'''


@kernel
def half_written(Y: mut[f32[n]]):
    """Lanes 32-63 read elements nobody wrote."""
    s = tshared.alloc[f32](64, pad=1)
    i = tile.lane_id()
    if i < 32:
        s[i] = 1.0
    tbarrier()
    Y[i] = s[i]  # CHECK-4 read


@clause("TILE-CHECK-4")
def test_reading_unwritten_shared_memory(backend):
    _, message = expect_error(backend, TileUninitializedError, line_of(__file__, "# CHECK-4 read"), half_written,
                              np.zeros(64, np.float32), grid=1, lanes=64)
    assert "s[32] by lane 32 of" in message


@kernel
def divergent(Y: mut[f32[n]]):
    """A barrier only the first 16 lanes reach."""
    i = tile.lane_id()
    if i < 16:
        tbarrier()  # CHECK-5 barrier
    Y[i] = 1.0


@clause("TILE-CHECK-5")
def test_a_divergent_barrier(backend):
    _, message = expect_error(backend, TileBarrierError, line_of(__file__, "# CHECK-5 barrier"), divergent,
                              np.zeros(32, np.float32), grid=1, lanes=32)
    assert "0-15" in message and "16-31" in message


STORE = 0


@kernel
def global_stores(Y: mut[f32[8]]):
    """Lanes and tiles storing to one element, equal or different values."""
    i = tile.lane_id()
    t = tile.id(0)
    if STORE == 1:
        Y[i // 2] = float(i)  # CHECK-6 lanes differ
    if STORE == 2:
        Y[i // 2] = 3.0  # CHECK-6 lanes equal
    if STORE == 3:
        Y[i] = float(t)  # CHECK-6 tiles differ
    if STORE == 4:
        Y[i] = float(i)  # CHECK-6 tiles equal


@clause("TILE-CHECK-6")
@pytest.mark.parametrize("store, grid, marker, kind", [
    (1, 1, "# CHECK-6 lanes differ", "race"), (2, 1, "# CHECK-6 lanes equal", "warning"),
    (3, 2, "# CHECK-6 tiles differ", "race"), (4, 2, "# CHECK-6 tiles equal", "warning")])
def test_global_stores_to_one_element(backend, store, grid, marker, kind):
    """A race when the values differ, a warning (redundant work) when they are equal."""
    k = global_stores.specialize(STORE=store)
    y = np.zeros(8, np.float32)
    report = launch(backend, k, y, grid=grid, lanes=8, on_error="collect")
    (finding,) = findings(backend, report)
    assert finding.kind == kind and finding.location.endswith(where(__file__, marker)) and "Y[0]" in finding.what
    if kind == "race":
        with pytest.raises(TileRaceError, match=line_of(__file__, marker)):
            launch(backend, k, np.zeros(8, np.float32), grid=grid, lanes=8)
    else:
        assert findings(backend, launch(backend, k, np.zeros(8, np.float32), grid=grid, lanes=8))[0].kind == "warning"


@kernel
def other_hazards(X: f32[8], Y: mut[f32[8]]):
    """A tile reading what another writes, and one lane storing an element twice: not checked."""
    i = tile.lane_id()
    if tile.id(0) == 0:
        Y[i] = X[i]
    if tile.id(0) == 1:
        Y[i] = Y[i] + 1.0
        tbarrier()
        Y[i] = Y[i] + 1.0


@clause("TILE-CHECK-6")
def test_other_global_hazards_are_not_checked(backend):
    """Tile 1 reads tile 0's stores and stores each element in two phases: not a race; its
    stores over tile 0's values of other values are (TILE-CHECK-6's second rule)."""
    y = np.zeros(8, np.float32)
    report = launch(backend, other_hazards, np.arange(8, dtype=np.float32), y, grid=2, lanes=8, on_error="collect")
    kinds = sorted((f.kind, f.tile) for f in findings(backend, report))
    assert kinds == [("race", (1,))]
    assert_bits(y, np.arange(8, dtype=np.float32) + 2)
