"""TILE-FE: Python kernels, the Tessera DSL and pipelined loops."""
from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

from tessera_ref import cp_async, kernel, op, tbarrier, tile, tshared
from tessera_ref.errors import KernelError, TileBoundsError, TileRaceError
from tessera_ref.frontend.kernel import AutotunedKernel
from tessera_ref.frontend.tile_api import symbols
from tessera_conformance import ORACLE, assert_bits, clause, run

from .support import expect_error, findings, launch, line_of, part, round_to, tile_error

HERE = Path(__file__).resolve().parent


@clause("TILE-FE-1")
def test_a_module_without_the_future_import_defines_its_sizes_first(backend, tmp_path):
    from . import nofuture_kernels as mod
    x = np.arange(200, dtype=np.float32)
    y = np.ones(200, np.float32)
    report = launch(backend, mod.saxpy, x, y, np.float32(2.0), grid=2, lanes=128)
    assert_bits(y, 2 * x + 1)
    assert part(backend, report, "coverage")["y"] == (200, 200)
    X = np.arange(12, dtype=np.float32).reshape(3, 4)
    Y = np.zeros_like(X)
    launch(backend, mod.scale_rows, X, Y, np.float32(3.0), grid=1, lanes=32)
    assert_bits(Y, 3 * X)
    # without `symbols`, Python stops at the def with a NameError before @kernel runs
    text = (HERE / "nofuture_kernels.py").read_text().replace('n = symbols("n")', "")
    (tmp_path / "broken.py").write_text(text)
    with pytest.raises(NameError, match="'n' is not defined"):
        runpy.run_path(str(tmp_path / "broken.py"))


WIDTH, SCALE = 4, 2.0


@kernel
def sizes_and_names(X: f32[n, m], Y: mut[f32[n]], Z: mut[f32[n, m]]):
    """Sizes from the arguments, carried names, tuple swaps, constants that fold."""
    i = tile.lane_id()
    s = tshared.alloc[f32](WIDTH // 2 * 3 - 1)
    acc = 0.0
    lo = 0.0
    hi = 1.0
    if i < n:
        for j in range(m):
            acc = acc + X[i, j]
            lo, hi = hi, lo
            Z[i, j] = X[i, j] * SCALE + lo
        Y[i] = acc
        s[i] = acc
    tbarrier()


@clause("TILE-FE-1")
def test_sizes_constants_and_carried_names(backend):
    x = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 3
    y, z = np.zeros(3, np.float32), np.zeros((3, 4), np.float32)
    launch(backend, sizes_and_names, x, y, z, grid=1, lanes=8)
    want = np.zeros(3, np.float32)
    for j in range(4):
        want = want + x[:, j]  # f32, left to right
    assert_bits(y, want)
    assert_bits(z, x * np.float32(2) + np.array([1, 0, 1, 0], np.float32))
    z = np.zeros((3, 4), np.float32)
    launch(backend, sizes_and_names.specialize(SCALE=-1.0), x, y, z, grid=1, lanes=8)
    assert_bits(z, -x + np.array([1, 0, 1, 0], np.float32))
    assert "tensor<5xf32>" in sizes_and_names.inspect_ir()  # 4 // 2 * 3 - 1, folded


@kernel
def views(X: f32[4, 8], Y: mut[f32[4]]):
    """An integer index before a slice drops that axis."""
    i = tile.lane_id()
    v = X[2, 3:3 + 4]
    Y[i] = v[i]


@kernel
def mma_forms(A: f32[16, 8], B: f32[8, 16], C: mut[f32[16, 16]], D: mut[f32[16, 16]], E: mut[f32[16, 16]]):
    """`acc += tile.mma(a, b, accum=...)`, `tile.mma(a, b, acc)` and `tile.mma_sync(a, b)`."""
    a = tile.load(A, index=(0, 0), shape=(16, 8))
    b = tile.load(B, index=(0, 0), shape=(8, 16))
    acc = tile.zeros((16, 16), f32)
    acc += tile.mma(a, b, accum="f32")
    tile.store(C, index=(0, 0), value=acc)
    tile.store(D, index=(0, 0), value=tile.mma(a, b, acc))
    tile.store(E, index=(0, 0), value=tile.mma_sync(a, b))


@kernel
def builtins(X: f32[8], Y: mut[f32[8]], Z: mut[f32[8]]):
    """min, max, abs, float and int."""
    i = tile.lane_id()
    Y[i] = max(min(X[i], 2.0), -2.0) + abs(X[i])
    Z[i] = float(int(X[i] * 0.0 + 3.0) * i)


@clause("TILE-FE-1")
def test_views_mma_forms_and_builtins(backend):
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    y = np.zeros(4, np.float32)
    launch(backend, views, x, y, grid=1, lanes=4)
    assert_bits(y, x[2, 3:7])
    a = (np.arange(128, dtype=np.float32).reshape(16, 8) - 60) / 4
    b = (np.arange(128, dtype=np.float32).reshape(8, 16) - 64) / 8
    c, d, e = (np.zeros((16, 16), np.float32) for _ in range(3))
    launch(backend, mma_forms, a, b, c, d, e, grid=1, lanes=32)
    ab = (a.astype(np.float64) @ b).astype(np.float32)  # small multiples of 2^-5: exact
    assert_bits(c, ab)
    assert_bits(d, 2 * ab)
    assert_bits(e, ab)
    v = np.array([-3.5, -2.0, -0.5, 0.0, 0.25, 1.5, 2.5, 7.0], np.float32)
    y, z = np.zeros(8, np.float32), np.zeros(8, np.float32)
    launch(backend, builtins, v, y, z, grid=1, lanes=8)
    assert_bits(y, np.clip(v, -2, 2) + np.abs(v))
    assert_bits(z, 3 * np.arange(8, dtype=np.float32))


_BODY = '''
@kernel
def k(X: f32[8, 8], Y: mut f32[8]):
    i = tile.lane_id()
    STMT
'''


@clause("TILE-FE-1")
@pytest.mark.parametrize("stmt, match", [
    ("while i < 3:\n        i = i + 1", "While"),
    ("v = X[0:4, 2]", "integer index after a slice"),
    ("Y[1.5] = 1.0", "index"),
    ("Y[X[0, i]] = 1.0", "index"),
    ("v = X[0, 2:2+0]", "length"),
    ("Y[i] = i", "index"),
    ("with i:\n        pass", "With"),
    ("Y[i] = foo(i)", "foo"),
    ("Y[i] = Q", "'Q'"),
])
def test_anything_else_is_a_kernel_error_naming_the_line(stmt, match):
    with pytest.raises(KernelError, match=match + r".*\[at k.tsr:5\]"):
        kernel.from_source(_BODY.replace("STMT", stmt), filename="k.tsr")


@clause("TILE-FE-1")
def test_a_size_no_annotation_binds_is_an_error_where_used():
    src = "\n@kernel\ndef k(Y: mut f32[n]):\n    i = tile.lane_id()\n    if i < m:\n        Y[i] = 0.0\n"
    with pytest.raises(KernelError, match=r"'m'.*\[at k.tsr:5\]"):
        kernel.from_source(src, filename="k.tsr", constants={"m": symbols("m")})


@clause("TILE-FE-1", "SCHED-FE-2")
def test_kernel_names_outside_a_kernel_body(backend):
    for call in (tile.lane_id, tile.linear_id, tbarrier, cp_async.commit, lambda: cp_async.wait(0),
                 lambda: tile.id(0), lambda: tile.zeros((4, 4), "f32")):
        with pytest.raises(KernelError, match="kernel"):
            call()
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((8, 96)) * 10.0 ** rng.integers(-3, 4, (8, 96))).astype(np.float32)
    b = rng.standard_normal((96, 4)).astype(np.float32)
    got = run(backend, lambda a, b: tile.mma_sync(a, b), a, b)
    assert_bits(got, run(ORACLE, lambda a, b: op.matmul(a, b), a, b))


_DSL = '''
```tessera
@kernel
def saxpy(x: f32[n], y: mut f32[n], alpha: f32):
    s = tshared.alloc[f32](128)
    i = tile.lane_id()
    cp_async.shared.global(s, x[0:128])
    cp_async.commit()
    cp_async.wait(0)
    tbarrier()
    y[i] = alpha * s[i] + y[i]
    y[i + 128] = y[i + 200]
```
'''


@clause("TILE-FE-2")
def test_dsl_text_and_files(backend, tmp_path):
    """`mut f32[n]`, `cp_async.shared.global`, fence lines ignored; errors name the DSL line."""
    path = tmp_path / "k.tsr"
    path.write_text(_DSL)
    for k in (kernel.from_source(_DSL, filename=str(path)), kernel.load(path)):
        x = np.arange(256, dtype=np.float32)
        y = np.zeros(256, np.float32)
        with tile_error(backend, TileBoundsError, r"y\[256\].*" + line_of(path, "y[i + 128] = y[i + 200]")):
            launch(backend, k, x, y, np.float32(2), grid=1, lanes=128)
        assert_bits(y[:128], 2 * x[:128])


_TUNED = '''
@kernel.autotune(space=dict(W=[32, 64], V=[1.0, 2.0, 3.0]))
def fill(Y: mut f32[n]):
    i = tile.lane_id()
    for j in range(0, W, 32):
        Y[j + i] = V
'''


@clause("TILE-FE-2")
def test_autotune_gives_one_kernel_per_configuration(backend):
    k = kernel.from_source(_TUNED)
    assert isinstance(k, AutotunedKernel)
    configs = [c for c, _ in k.variants()]
    assert configs == [dict(W=w, V=v) for w in (32, 64) for v in (1.0, 2.0, 3.0)]
    for config, variant in k.variants():
        y = np.zeros(96, np.float32)
        launch(backend, variant, y, grid=1, lanes=32)
        assert (y[:config["W"]] == config["V"]).all() and not y[config["W"]:].any()


PREFETCH, TRAIL = 2, 1


@kernel
def axpy_db(X: f16[m], Y: mut[f16[m]], alpha: f16):
    """Double-buffered y = alpha * x + y, one chunk of 128 per iteration, no explicit wait."""
    s0 = tshared.alloc[f16](128)
    s1 = tshared.alloc[f16](128)
    i = tile.lane_id()
    for t in tile.range(m, step=128, prefetch=PREFETCH):
        cp_async.shared.global_(s1, X[t:t + 128])
        tbarrier()
        if t > 0:
            yv = alpha * s0[i] + tile.load(Y, index=t - 128 + i)  # FE-3 read
            tile.store(Y, index=t - 128 + i, value=yv)
        s0, s1 = s1, s0
        if TRAIL == 1:
            tbarrier()
    cp_async.wait(0)
    tbarrier()
    y_last = alpha * s0[i] + tile.load(Y, index=m - 128 + i)
    tile.store(Y, index=m - 128 + i, value=y_last)


def _axpy_f16(alpha, x, y):
    r = lambda v: round_to(v, "f16").astype(np.float64)  # noqa: E731
    return round_to(r(float(alpha) * x.astype(np.float64)) + y.astype(np.float64), "f16")


@clause("TILE-FE-3", "TILE-VIS-2")
def test_a_prefetch_loop_waits_for_the_previous_copy_before_its_barrier(backend):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1024).astype(np.float16)
    y = rng.standard_normal(1024).astype(np.float16)
    want = _axpy_f16(1.5, x, y)
    report = launch(backend, axpy_db, x, y, np.float16(1.5), grid=1, lanes=128)
    assert findings(backend, report) == [] and part(backend, report, "coverage")["Y"] == (1024, 1024)
    assert_bits(y, want)
    loop = axpy_db.inspect_ir().split('"tessera.tile.for"')[1]
    assert loop.count("cp_async_commit") == 1 and "pending = 1" in loop
    a, c, w, b = (loop.index(s) for s in ('"tessera.tile.cp_async"', "cp_async_commit", "cp_async_wait", "barrier"))
    assert a < c < w < b  # commit; wait(k - 1) just before the barrier that follows the copy
    three = axpy_db.specialize(PREFETCH=3).inspect_ir().split('"tessera.tile.for"')[1]
    assert "pending = 2" in three and three.count("cp_async_commit") == 1  # not before the trailing barrier


@clause("TILE-FE-3", "TILE-CHECK-2")
def test_other_tile_ranges_are_plain_loops(backend):
    """prefetch=0: no wait is inserted, so the copy is still in flight when it is read."""
    x = np.ones(512, np.float16)
    k = axpy_db.specialize(PREFETCH=0)
    assert "cp_async_wait" not in k.inspect_ir().split('"tessera.tile.for"')[1].split('"tessera.tile.yield"')[0]
    expect_error(backend, TileRaceError, r"in flight.*" + line_of(__file__, "# FE-3 read"), k, x, x.copy(),
                 np.float16(1), grid=1, lanes=128)


_EXPLICIT = '''
@kernel
def k(X: f32[m], Y: mut f32[m]):
    s = tshared.alloc[f32](32)
    i = tile.lane_id()
    for t in tile.range(m, step=32, prefetch=2):
        cp_async.shared.global(s, X[t:t+32])
        cp_async.commit()
        cp_async.wait(0)
        tbarrier()
        Y[t + i] = s[i]
        tbarrier()
'''


@clause("TILE-FE-3")
def test_a_loop_with_its_own_commit_gets_nothing_inserted(backend):
    k = kernel.from_source(_EXPLICIT)
    loop = k.inspect_ir().split('"tessera.tile.for"')[1]
    assert loop.count("cp_async_commit") == 1 and loop.count("cp_async_wait") == 1 and "pending = 0" in loop
    x = np.arange(96, dtype=np.float32)
    y = np.zeros_like(x)
    assert findings(backend, launch(backend, k, x, y, grid=1, lanes=32)) == []
    assert_bits(y, x)
