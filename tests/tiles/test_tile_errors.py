"""User mistakes in kernel bodies, launches and hand-built Tile IR are TesseraErrors naming the
line (TILE-FE-1, TILE-IR-1, TILE-EXEC-1), never raw Python exceptions."""
import ast
import pathlib

import numpy as np
import pytest

import tessera_ref
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
    with pytest.raises(KernelError, match=match + r".*\[at k.tsr:5\]") as info:
        kernel.from_source(_BODY.replace("STMT", stmt), filename="k.tsr")
    assert info.value.fix


def _fix_given(call: ast.Call, position: int | None = None) -> bool:
    """``call`` passes ``fix`` (by keyword, or as positional argument ``position``), not as None."""
    given = [k.value for k in call.keywords if k.arg == "fix"]
    if not given and position is not None and len(call.args) > position:
        given = [call.args[position]]
    return bool(given) and not (isinstance(given[0], ast.Constant) and given[0].value is None)


def _called(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)


def _passes_own_fix(call: ast.Call) -> bool:
    return any(k.arg == "fix" and isinstance(k.value, ast.Name) and k.value.id == "fix" for k in call.keywords)


def test_every_kernel_error_in_the_package_has_a_fix():
    """Issue 31: some KernelErrors had no fix. Read with ast: every ``KernelError(...)`` passes
    ``fix=`` (not None); a helper that builds one from its own ``fix`` parameter takes it without
    a default, and every call of that helper in its module passes it."""
    missing, all_helpers = [], set()
    for path in sorted(pathlib.Path(tessera_ref.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text())
        helpers = {}  # name -> position of its fix parameter among a call's positional arguments
        for fn in ast.walk(tree):
            params = [a.arg for a in fn.args.args] if isinstance(fn, ast.FunctionDef) else []
            if "fix" in params and any(isinstance(c, ast.Call) and _called(c) == "KernelError" and _passes_own_fix(c)
                                       for c in ast.walk(fn)):
                assert params.index("fix") < len(params) - len(fn.args.defaults), \
                    f"{path}:{fn.lineno}: {fn.name} must take fix without a default"
                helpers[fn.name] = params.index("fix") - (params[0] == "self")
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and (
                    _called(call) == "KernelError" and not _passes_own_fix(call) and not _fix_given(call)
                    or _called(call) in helpers and not _fix_given(call, helpers[_called(call)])):
                missing.append(f"{path.relative_to(path.parents[1])}:{call.lineno}")
        all_helpers |= set(helpers)
    assert not missing, f"KernelErrors without a fix: {missing}"
    assert "error" in all_helpers  # the kernel frontend's helper was found, so its calls were checked


@pytest.mark.parametrize("call, match", [
    (lambda: kernel.from_source(None), "text must be a str, got NoneType"),
    (lambda: kernel.from_source(b"@kernel"), "text must be a str, got bytes"),
    (lambda: kernel.from_source(_BODY, name=5), "name must be a str, got int"),
    (lambda: kernel.from_source(_BODY, filename=None), "filename must be a str, got NoneType"),
    (lambda: kernel.from_source(_BODY, constants=[("n", 8)]), "constants must be a dict of names"),
    (lambda: kernel.from_source("x = 1\0"), "kernel source"),
    (lambda: kernel.from_source("\ud800"), "not text Python can read"),
    (lambda: kernel.from_source("@kernel.autotune()\ndef k(X: f32[8]):\n    pass\n"), "space must be literal lists"),
    (lambda: kernel.load(None), r"kernel.load\(path\) takes a file path"),
    (lambda: kernel.load("/nonexistent/k.tsr"), "cannot read '/nonexistent/k.tsr': No such file"),
    (lambda: kernel.load(pathlib.Path(__file__).parent), "Is a directory"),
])
def test_from_source_and_load_refuse_bad_arguments_with_a_fix(call, match):
    """Issue 31: ``kernel.from_source(None)`` was a raw AttributeError (frontend/dsl.py), a
    bytes text a TypeError, a missing file a FileNotFoundError."""
    with pytest.raises(KernelError, match=match) as info:
        call()
    assert info.value.fix and info.value.location


def test_load_of_a_file_that_is_not_utf8_is_a_kernel_error(tmp_path):
    path = tmp_path / "k.tsr"
    path.write_bytes(b"\xff\xfe@kernel")
    with pytest.raises(KernelError, match="'utf-8' codec can't decode") as info:
        kernel.load(path)
    assert "UTF-8" in info.value.fix


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
