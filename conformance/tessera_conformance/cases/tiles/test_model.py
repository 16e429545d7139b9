"""TILE-MODEL: lanes, tiles and the grid; uniform and lane-varying values; the order of tiles."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tessera_ref import kernel, tile, tshared
from tessera_ref.errors import KernelError, TileRaceError
from tessera_conformance import assert_bits, clause

from .support import expect_error, findings, launch, line_of, semantic_checks


@kernel
def whoami(OUT: mut[f32[A, B, C, L, 8]]):
    """Each lane stores its ids at its own place."""
    l = tile.lane_id()
    i0 = tile.id(0)
    i1 = tile.id(1)
    i2 = tile.id(2)
    OUT[i0, i1, i2, l, 0] = float(l)
    OUT[i0, i1, i2, l, 1] = float(i0)
    OUT[i0, i1, i2, l, 2] = float(i1)
    OUT[i0, i1, i2, l, 3] = float(i2)
    OUT[i0, i1, i2, l, 4] = float(tile.num_tiles(0))
    OUT[i0, i1, i2, l, 5] = float(tile.num_tiles(1))
    OUT[i0, i1, i2, l, 6] = float(tile.num_tiles(2))
    OUT[i0, i1, i2, l, 7] = float(tile.linear_id())


@clause("TILE-MODEL-1")
@pytest.mark.parametrize("grid", [(2, 3, 2), (3, 2), (5,)])
def test_every_lane_of_every_tile_sees_its_ids(backend, grid):
    lanes = 4
    shape = tuple(grid) + (1,) * (3 - len(grid))
    out = np.full(shape + (lanes, 8), -1.0, np.float32)
    launch(backend, whoami, out, grid=grid, lanes=lanes)
    want = np.zeros_like(out)
    for i0, i1, i2, l in np.ndindex(*shape, lanes):
        linear = (i0 * shape[1] + i1) * shape[2] + i2  # row-major, the last grid axis fastest
        want[i0, i1, i2, l] = [l, i0, i1, i2, *shape, linear * lanes + l]
    assert_bits(out, want)


@kernel
def select(X: f32[n], Y: mut[f32[n]]):
    """A lane-varying if: each lane keeps the value of the branch it took."""
    i = tile.lane_id()
    v = X[i]
    w = 0.0
    if v > 0.0:
        w = v * 2.0
    else:
        w = -v
    Y[i] = w


@kernel
def uniform_if(X: f32[n], Y: mut[f32[n]], m: index):
    """A uniform if runs one branch, so a tile-collective op may be in it."""
    f = tile.load(X, index=(0,), shape=(8,))
    if m > 2:
        tile.store(Y, index=(0,), value=f)


@kernel
def varying_if(X: f32[n], Y: mut[f32[n]]):
    """The same op under a condition computed from the lane id."""
    f = tile.load(X, index=(0,), shape=(8,))
    i = tile.lane_id()
    if i > 100:
        tile.store(Y, index=(0,), value=f)  # MODEL-2 varying


@clause("TILE-MODEL-2")
def test_a_lane_varying_if_is_masked_execution(backend):
    x = np.array([1.5, -2.0, 0.0, -0.0, 3.0, -7.25, 0.5, -1.0], np.float32)
    y = np.zeros_like(x)
    launch(backend, select, x, y, grid=1, lanes=8)
    assert_bits(y, np.where(x > 0, x * 2, -x).astype(np.float32))


@clause("TILE-MODEL-2", "TILE-MEM-3")
def test_uniform_and_lane_varying_conditions(backend):
    x = np.arange(8, dtype=np.float32)
    for m, want in ((3, x), (1, np.zeros(8, np.float32))):
        y = np.zeros(8, np.float32)
        launch(backend, uniform_if, x, y, m, grid=1, lanes=8)
        assert_bits(y, want)
    with pytest.raises(KernelError, match=line_of(__file__, "# MODEL-2 varying")):
        launch(backend, varying_if, x, np.zeros(8, np.float32), grid=1, lanes=8)


@kernel
def lane_bound(Y: mut[f32[n]]):
    """A loop whose end differs between lanes."""
    i = tile.lane_id()
    for j in range(i):  # MODEL-2 bound
        Y[i] = float(j)


@kernel
def active_bound(Y: mut[f32[n]]):
    """A lane-varying end that the active lanes agree on."""
    i = tile.lane_id()
    if i < 2:
        for j in range(i // 2 + 3):
            Y[i] = float(j)


@clause("TILE-MODEL-2")
def test_loop_bounds_must_be_uniform_among_the_active_lanes(backend):
    y = np.zeros(4, np.float32)
    report = launch(backend, active_bound, y, grid=1, lanes=4)
    assert_bits(y, np.array([2, 2, 0, 0], np.float32))
    semantic_checks(backend, report)
    with pytest.raises(KernelError, match=r"lane.*" + line_of(__file__, "# MODEL-2 bound")) as info:
        launch(backend, lane_bound, np.zeros(4, np.float32), grid=1, lanes=4)
    assert re.search(r"\b1-3\b|1, 2, 3", str(info.value))  # it names the lanes that disagree


@kernel
def every_tile_stores(Y: mut[f32[1]]):
    """Every tile stores its own linear number into Y[0]: a race between tiles."""
    t = tile.id(0) * tile.num_tiles(1) + tile.id(1)
    if tile.lane_id() == 0:
        Y[0] = float(t)


@kernel
def lockstep_safe(X: f32[n], Y: mut[f32[n]]):
    """Correct if lanes ran in lockstep, but a read of another lane's write in one phase."""
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    s[i] = X[i]
    Y[i] = s[(i + 1) % 32]  # MODEL-3 phase


@clause("TILE-MODEL-3", "TILE-CHECK-6")
def test_tiles_run_in_linear_order(backend):
    """Tile (0, 1) is the first to store over another tile's value, (0, 0)'s; the five later
    tiles each do (one finding, repeats folded); tile (1, 2) stores last."""
    y = np.zeros(1, np.float32)
    report = launch(backend, every_tile_stores, y, grid=(2, 3), lanes=4, on_error="collect")
    (race,) = [f for f in findings(backend, report) if f.kind == "race"]
    assert race.tile == (0, 1) and race.count == 5
    assert "tile (0, 0)" in race.what and "different values" in race.what and "Y[0]" in race.what
    assert y[0] == 5.0  # the last tile in that order stored last


@clause("TILE-MODEL-3", "TILE-CHECK-1")
def test_checkers_reason_about_phases_not_lockstep(backend):
    x = np.arange(32, dtype=np.float32)
    expect_error(backend, TileRaceError,
                 r"read-after-write.*" + line_of(__file__, "# MODEL-3 phase"), lockstep_safe, x,
                 np.zeros(32, np.float32), grid=1, lanes=32)
