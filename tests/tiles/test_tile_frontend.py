"""The @kernel front end: Python and DSL forms, errors naming the kernel line (TILE-FE-*)."""
import pathlib
import re

import numpy as np
import pytest
from tile_dsl import SAXPY
from tile_kernels import matmul

from tessera_ref import kernel, tile
from tessera_ref.errors import KernelError
from tessera_ref.frontend.dsl import to_python
from tessera_ref.frontend.kernel import AutotunedKernel
from tessera_ref.runner import run_path, tessera_alias


def test_dsl_rewrites_keep_line_numbers():
    text = "@kernel\ndef k(y: mut f32[n]):\n    cp_async.shared.global(s, X[t:t+128])\n"
    assert to_python(text) == "@kernel\ndef k(y: mut[f32[n]]):\n    cp_async.shared.global_(s, X[t:t+128])\n"


def test_python_and_dsl_forms_give_the_same_ir():
    python_src = '''
@kernel
def saxpy(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
'''
    # the DSL text has a code-fence line first, so shift the Python text by one line
    assert kernel.from_source("\n\n" + python_src.lstrip("\n")).inspect_ir() == \
        kernel.from_source(SAXPY).inspect_ir()


def test_inspect_ir_tile_target_and_missing_levels():
    text = matmul.inspect_ir("tile")
    assert '"tessera.tile.mma"' in text and '"tessera.tile.cp_async"' in text
    assert "Compiled by NVRTC" in matmul.inspect_ir("target") and "__global__ void matmul(" in matmul.inspect_ir("target")
    for level in ("schedule", "graph"):  # a @kernel is written at the tile level
        with pytest.raises(KernelError, match=f"no '{level}' IR"):
            matmul.inspect_ir(level)


def test_fragments_mma_sync_and_shared_stores():
    src = '''
@kernel
def k(A: f32[16, 8], B: f32[8, 16], C: mut f32[16, 16]):
    a = tile.load(A, index=(0, 0), shape=(16, 8))
    s = tshared.alloc[f32](8, 16, pad=1)
    tile.store(s, index=(0, 0), value=tile.load(B, index=(0, 0), shape=(8, 16)))
    tbarrier()
    c = tile.mma_sync(a, s)
    tile.store(C, index=(0, 0), value=c)
'''
    A = np.arange(128, dtype=np.float32).reshape(16, 8)
    B = np.arange(128, dtype=np.float32).reshape(8, 16) / 8
    C = np.zeros((16, 16), np.float32)
    report = kernel.from_source(src)(A, B, C, grid=1, lanes=32)
    assert np.array_equal(C, (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32))
    assert report.findings == []


def test_symbolic_sizes_and_constants_fold():
    src = '''
@kernel
def k(X: f32[n, m], Y: mut f32[n, m]):
    i = tile.lane_id()
    for j in range(m):
        if i < n:
            Y[i, j] = X[i, j] * SCALE
'''
    X = np.arange(12, dtype=np.float32).reshape(3, 4)
    Y = np.zeros_like(X)
    kernel.from_source(src, constants={"SCALE": 2.0})(X, Y, grid=1, lanes=8)
    assert np.array_equal(Y, 2 * X)


@pytest.mark.parametrize("body, message, line", [
    ("    while True:\n        pass", "While statements are not supported", 4),
    ("    Y[0] = Z", "name 'Z' is not defined", 4),
    ("    i = tile.lane_id()\n    Y[i] = i", "stores a index into a buffer of f32", 5),
    ("    i = tile.lane_id()\n    Y[i] = Y[i] + i", "add of f32 and index", 5),
    ("    tile.frobnicate()", "tile.frobnicate(...) is not a kernel operation", 4),
    ("    s = tshared.alloc[f32](N)", "needs positive constant sizes", 4),
])
def test_front_end_errors_name_the_kernel_line(body, message, line):
    src = f"\n@kernel\ndef k(Y: mut f32[n]):\n{body}\n"
    with pytest.raises(KernelError, match=re.escape(message)) as info:
        kernel.from_source(src, filename="bad.tsr", constants={"N": 0})
    assert f"[at bad.tsr:{line}]" in str(info.value)


def test_kernel_names_outside_a_kernel_say_so():
    with pytest.raises(KernelError, match="runs only inside a @kernel body"):
        tile.linear_id()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(KernelError, match=r"tile\.mma\(\.\.\.\) runs only inside"):
        tile.mma(a, a.T)
    # seed 001's schedule form: outside a kernel body tile.mma_sync is op.matmul (SCHED-FE-2)
    assert np.array_equal(np.asarray(tile.mma_sync(a, a.T).data), a.astype(np.float64) @ a.T.astype(np.float64))


def test_import_tessera_sees_the_kernel_names():
    with tessera_alias():
        import tessera
        assert tessera.kernel is kernel and tessera.tile is tile


def test_autotune_builds_one_kernel_per_configuration():
    k = kernel.load(pathlib.Path(__file__).parent / "data" / "tp_axpy.tsr")
    assert isinstance(k, AutotunedKernel)
    assert [c for c, _ in k.variants()] == [{"BM": 128, "stages": 2}, {"BM": 128, "stages": 3},
                                            {"BM": 256, "stages": 2}, {"BM": 256, "stages": 3}]


# A Python kernel module WITHOUT `from __future__ import annotations` (TILE-FE-1): Python
# evaluates `f32[n]` when the def runs, so the sizes are defined with `symbols` first.
NO_FUTURE = """
import numpy as np
from tessera import f32, kernel, mut, tile
from tessera.frontend.tile_api import symbols

n = symbols("n")
R, C = symbols("R C")

@kernel
def saxpy(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]

@kernel
def scale_rows(X: "f32[R, C]", Y: "mut[f32[R, C]]", s: f32):
    r = tile.linear_id()
    if r < R:
        for c in range(C):
            Y[r, c] = X[r, c] * s

x = np.arange(200, dtype=np.float32)
y = np.ones(200, np.float32)
report = saxpy(x, y, np.float32(2.0), grid=2, lanes=128)
X = np.arange(12, dtype=np.float32).reshape(3, 4)
Y = np.zeros_like(X)
scale_rows(X, Y, np.float32(3.0), grid=1, lanes=32)
"""


def test_python_kernels_without_the_future_import(tmp_path):
    script = tmp_path / "kernels.py"
    script.write_text(NO_FUTURE)
    out = run_path(str(script))
    assert np.array_equal(out["y"], 2 * out["x"] + 1) and out["report"].findings == []
    assert np.array_equal(out["Y"], 3 * out["X"])
    assert "tile.sizes = {n = [\"x\", 0]}" in out["saxpy"].inspect_ir().replace("'", "\"")
    # without `symbols`, Python itself stops at the def, before @kernel runs
    script.write_text(NO_FUTURE.replace('n = symbols("n")', ""))
    with pytest.raises(NameError, match="'n' is not defined"):
        run_path(str(script))


def test_symbols_and_unbound_sizes():
    from tessera_ref.frontend.tile_api import Size, symbols
    n = symbols("n")
    assert isinstance(n, Size) and n == "n" and symbols("M, K") == ("M", "K")
    with pytest.raises(KernelError, match="expected size names"):
        symbols("2n")
    src = "\n@kernel\ndef k(Y: mut f32[n]):\n    i = tile.lane_id()\n    if i < m:\n        Y[i] = 0.0\n"
    with pytest.raises(KernelError, match="the size 'm' is used, but no parameter's annotation binds it") as info:
        kernel.from_source(src, filename="k.tsr", constants={"m": symbols("m")})
    assert "[at k.tsr:5]" in str(info.value)


def _loop_ops(src):
    from tessera_ref.ir import tile as T

    (loop,) = [o for o in kernel.from_source(src).module.walk() if o.name == T.FOR]
    return [(o.name.rsplit(".", 1)[1], o.attributes.get("pending")) for o in loop.regions[0].entry
            if o.name.rsplit(".", 1)[1] in ("cp_async", "cp_async_commit", "cp_async_wait", "barrier")]


def test_a_prefetch_loop_commits_and_waits_before_the_barrier_after_a_copy():
    """TILE-FE-3: with prefetch=2, `commit; wait(1)` goes before the barrier that follows the
    copy, and not before the trailing barrier (no copy since the last commit)."""
    from tile_dsl import AXPY_DB

    ops = _loop_ops(AXPY_DB.replace("TRAILING", "tbarrier()"))
    assert ops == [("cp_async", None), ("cp_async_commit", None), ("cp_async_wait", 1), ("barrier", None),
                   ("barrier", None)]
    assert _loop_ops(AXPY_DB.replace("prefetch=2", "prefetch=3").replace("TRAILING", "pass"))[2] == \
        ("cp_async_wait", 2)


@pytest.mark.parametrize("change", [("prefetch=2", "prefetch=0"), ("TRAILING", "cp_async.commit()")])
def test_plain_loops_and_explicit_commits_get_no_inserted_wait(change):
    from tile_dsl import AXPY_DB

    ops = _loop_ops(AXPY_DB.replace(*change).replace("TRAILING", "pass"))
    assert ("cp_async_wait", 1) not in ops and ops.count(("cp_async_commit", None)) == (change[0] == "TRAILING")
