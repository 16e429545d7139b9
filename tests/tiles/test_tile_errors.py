"""User mistakes in kernel bodies, launches and hand-built Tile IR are TesseraErrors naming the
line (TILE-FE-1, TILE-IR-1, TILE-EXEC-1), never raw Python exceptions."""
import numpy as np
import pytest

from tessera_ref import kernel
from tessera_ref.errors import KernelError
from tessera_ref.ir import tile as T
from tessera_ref.ir.errors import IRError

_BODY = '''
@kernel
def k(X: f32[8], Y: mut f32[8]):
    i = tile.lane_id()
    STMT
'''


@pytest.mark.parametrize("stmt, match", [
    ("Y[i + 1 // 0] = 1.0", "divides the constant 1 by zero"),
    ("a = tile.load()", r"tile.load takes 1 positional"),
    ("tile.store(Y, index=i)", "tile.store needs value="),
    ("c = tile.mma(tile.zeros((4, 4), f32))", r"tile.mma takes 2 to 3 positional"),
    ("a = tile.zeros(4, f32)", "a fragment shape is a tuple of positive constant ints"),
    ("a = tile.load(X, index=0, shape=4)", "a fragment shape is a tuple"),
    ("a = tile.zeros((4, 4), f99)", "'f99' is not a number format"),
    ("s = tshared.alloc[f99](4)", "'f99' is not a number format"),
    ("c = tile.mma(tile.zeros((4, 4), f32), tile.zeros((4, 4), f32), accum=bogus)", "'bogus' is not a number"),
    ("s = tshared.alloc[f32](4, pad=-1)", "pad must be an int >= 0"),
    ("Y[X[i]] = 1.0", r"an index must be an integer \(index\), got f32"),
    ("Y[1.7] = 1.0", r"an index must be an integer \(index\), got 1.7"),
    ("j = tile.id(\"x\")", "axis is 0, 1 or 2"),
    ("cp_async.wait(-1)", "n must be an int >= 0"),
    ("v = X[4:0]", "has length -4"),
])
def test_kernel_body_mistakes_name_the_line(stmt, match):
    with pytest.raises(KernelError, match=match + r".*\[at k.tsr:5\]"):
        kernel.from_source(_BODY.replace("STMT", stmt), filename="k.tsr")


def test_mma_accum_may_be_a_string():
    src = _BODY.replace("STMT", 'c = tile.mma(tile.zeros((4, 4), f16), tile.zeros((4, 4), f16), accum="f16")')
    assert 'accum = "f16"' in kernel.from_source(src).inspect_ir()


def test_an_autotune_space_of_non_lists_is_a_kernel_error():
    src = "@kernel.autotune(space=dict(BM=128))\ndef k(Y: mut f32[n]):\n    i = tile.lane_id()\n"
    with pytest.raises(KernelError, match=r"non-empty lists.*\[at k.tsr:2\]"):
        kernel.from_source(src, filename="k.tsr")


def test_a_lambda_is_not_a_kernel():
    with pytest.raises(KernelError, match="needs a function defined with def"):
        kernel(lambda x: x)


def test_the_if_op_carries_its_own_line():
    src = '''
@kernel
def k(Y: mut f32[8]):
    i = tile.lane_id()
    if i < 4:
        Y[i] = 1.0
        Y[i] = 2.0
'''
    module = kernel.from_source(src, filename="k.tsr").module
    (op,) = [o for o in module.walk() if o.name == T.IF]
    assert op.location == "k.tsr:5"


_SCALARS = '''
@kernel
def k(Y: mut f32[n], alpha: f32, m: index):
    i = tile.lane_id()
    if i < m:
        Y[i] = alpha
'''


@pytest.mark.parametrize("alpha, m, match", [
    ("abc", 2, r"'alpha' \(f32\) must be a real number"),
    (None, 2, r"'alpha' \(f32\) must be a real number"),
    (np.ones(3), 2, r"'alpha' \(f32\) must be a real number"),
    (1.0, 2.7, r"'m' \(index\) must be an integer"),
    (1.0, 2 ** 70, r"'m' \(index\) must be an integer"),
])
def test_bad_scalar_arguments_are_kernel_errors(alpha, m, match):
    with pytest.raises(KernelError, match=match):
        kernel.from_source(_SCALARS)(np.zeros(4, np.float32), alpha, m, grid=1, lanes=4)


@pytest.mark.parametrize("grid", ["a", (1.5,), (True,)])
def test_a_non_integer_grid_is_a_kernel_error(grid):
    with pytest.raises(KernelError, match="integer grid sizes"):
        kernel.from_source(_SCALARS)(np.zeros(4, np.float32), 1.0, 2, grid=grid, lanes=4)


def _kb():
    kb = T.KernelBuilder("k", [("x", T.buffer((16,), "f32")), ("y", T.buffer((4, 4), "f32"), True)])
    return kb, kb.params


@pytest.mark.parametrize("build, match", [
    (lambda kb, x, y: kb.frag_store(kb.subview(y, [0, 0], (2, 2)), kb.fill((4, 4), "f32")), "shapes must match"),
    (lambda kb, x, y: kb.cp_async(kb.alloc((16,), "f16"), kb.subview(x, [0], (16,))), "formats must match"),
    (lambda kb, x, y: kb.op("tile_id", (), (T.INDEX_T,)), "needs attribute 'axis'"),
    (lambda kb, x, y: kb.alloc((4,), "f32", pad=-1), "pad must be >= 0"),
    (lambda kb, x, y: kb.wait(-1), "pending >= 0"),
    (lambda kb, x, y: kb.if_(kb.binary("lt", kb.lane_id(), kb.const(2)), then=lambda: [kb.const(1)],
                             else_=lambda: [kb.const(1.0, "f32")]), "yields f32 as value 0"),
])
def test_the_verifier_rejects_malformed_tile_ir(build, match):
    kb, (x, y) = _kb()
    build(kb, x, y)
    with pytest.raises(IRError, match=match):
        kb.finish()
