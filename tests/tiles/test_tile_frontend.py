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
from tessera_ref.runner import tessera_alias


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


def test_inspect_ir_tile_and_missing_levels():
    text = matmul.inspect_ir("tile")
    assert '"tessera.tile.mma"' in text and '"tessera.tile.cp_async"' in text
    if "target" not in type(matmul)._ir_views:
        with pytest.raises(KernelError, match="no 'target' IR"):
            matmul.inspect_ir("target")


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


def test_import_tessera_sees_the_kernel_names():
    with tessera_alias():
        import tessera
        assert tessera.kernel is kernel and tessera.tile is tile


def test_autotune_builds_one_kernel_per_configuration():
    k = kernel.load(pathlib.Path(__file__).parent / "data" / "tp_axpy.tsr")
    assert isinstance(k, AutotunedKernel)
    assert [c for c, _ in k.variants()] == [{"BM": 128, "stages": 2}, {"BM": 128, "stages": 3},
                                            {"BM": 256, "stages": 2}, {"BM": 256, "stages": 3}]
