"""GRAPH-IR-1, GRAPH-TYPE-1/2, GRAPH-CONSTANT-1, GRAPH-VERIFY-1: the text format (printed by
``inspect_ir``, re-parsed and re-run on the backend), types, typing rules and the verifier."""
import re

import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, TesseraError
from tessera_ref.ir import parse_module, verify
from tessera_conformance import assert_bits, clause, oracle_only, run

from . import _reference as R
from . import _xmath as X
from ._cases import check, jit, operand, policy, run_text, values
from ._formats import from_codes, round_values

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the Graph IR text parser is the library's (tessera_ref.ir); no backend parses text")


def _attribute_names(line: str) -> list:
    """The attribute names of one printed op, in printed order (top-level entries of {…})."""
    start = line.index(") {", line.index('"tessera.graph.')) + 2
    depth, names, token = 0, [], ""
    for ch in line[start + 1:]:
        if ch in "}]>)" and depth == 0:
            break
        depth += (ch in "{[<(") - (ch in "}]>)")
        if ch == "," and depth == 0:
            names.append(token.split("=")[0].strip())
            token = ""
        else:
            token += ch
    return names + [token.split("=")[0].strip()]


def _model(x, w, b):
    h = op.matmul(x, w, transpose_b=True, tile_shape=[4, 4, 2])
    h = op.layernorm_safe(h, b, eps=1e-5)
    h = op.flash_attention(h, h, h, causal=True, scale=0.1, block_k=4)
    return op.slice(h, (1,), (None,), (2,))


def _model_args():
    g = np.random.default_rng(0)
    return (g.standard_normal((8, 6)).astype(np.float32), g.standard_normal((4, 6)).astype(np.float32),
            g.standard_normal(4).astype(np.float32))


@clause("GRAPH-IR-1")
def test_printed_module_structure(backend):
    """Generic syntax: module, func, block arguments, return, sorted attributes, the user's loc."""
    f = jit(backend, _model, rewrite=False)
    f(*_model_args())
    text = f.inspect_ir()
    lines = text.splitlines()
    assert lines[0] == '"tessera.module"() ({' and lines[1] == '  "tessera.func"() ({'
    assert lines[2] == "  ^bb0(%0: tensor<8x6xf32>, %1: tensor<4x6xf32>, %2: tensor<4xf32>):"
    assert lines[-1] == "}) : () -> ()"
    assert re.search(r'\{function_type = \(tensor<8x6xf32>, tensor<4x6xf32>, tensor<4xf32>\) -> tensor<4x4xf32>, '
                     r'sym_name = "_model"\}', text)
    body = [ln for ln in lines if ln.startswith("    ")]
    assert body[-1].lstrip().startswith('"tessera.return"(')
    first = _model.__code__.co_firstlineno
    for name, offset in (("matmul", 1), ("layernorm_safe", 2), ("flash_attention", 3), ("slice", 4)):
        line = next(ln for ln in body if f'"tessera.graph.{name}"' in ln)
        assert re.search(rf'loc\("[^"]*test_ir\.py":{first + offset}:0\)$', line), line
        names = _attribute_names(line)
        assert names == sorted(names) and len(names) >= 2, (name, names)
    assert all('"tessera.graph.' in ln for ln in body[:-1])


@clause("GRAPH-IR-1", "GRAPH-TYPE-1")
def test_print_parse_print_is_identical_and_reruns(backend):
    """Print -> parse -> print gives the same bytes; the parsed module reruns with the same bits."""
    nan_payloads = from_codes(np.array([0x7FC00001, 0xFFFFFFFF, 0x80000000, 0x00000001], np.uint64), "f32")
    pol = policy("bf16", rounding="rtz")

    def f(x, w, b, y):
        return _model(x, w, b), op.add(op.mul(y, 0.1), nan_payloads), op.div(op.cast(y, pol), 3.0)

    y = np.float32([1.0, 2.0, -3.0, 0.5])
    jf = jit(backend, f)
    want = jf(*_model_args(), y)
    for optimized in (True, False):
        text = jf.inspect_ir(optimized=optimized)
        assert str(parse_module(text)) == text
    got = run_text(backend, jf.inspect_ir(), *_model_args(), y)
    assert_bits(got, [np.asarray(w) for w in want])


@LIBRARY
@clause("GRAPH-IR-1")
def test_parse_errors_name_the_position(backend):
    """A parse error names file:line:column and shows the line with a caret under the column."""
    text = ('"tessera.module"() ({\n  "tessera.func"() ({\n  ^bb0(%0: tensor<4xf32>):\n'
            '    %1 = "tessera.graph.add"(%0, %0 : (tensor<4xf32>) -> ()\n}) : () -> ()')
    with pytest.raises(TesseraError) as info:
        parse_module(text, "model.mlir")
    msg = str(info.value)
    m = re.search(r"model\.mlir:4:(\d+)", msg)
    assert m, msg
    column = int(m.group(1))
    src = '    %1 = "tessera.graph.add"(%0, %0 : (tensor<4xf32>) -> ()'
    assert src in msg
    caret = msg.splitlines()[msg.splitlines().index(src) + 1]
    assert caret.index("^") == column - 1


@clause("GRAPH-TYPE-1")
def test_types_print_policy_only_when_not_default(backend):
    """A default policy is not printed, another one is; element kinds i1, index, complex<f32>."""
    sto = policy("bf16", rounding="stochastic")

    def f(a, b, c):
        return op.less(a, a), op.argmax(a, axis=0), op.fft(a), op.add(b, b), op.mul(c, c, seed=1)

    jf = jit(backend, f)
    a = np.ones((2, 4), np.float32)
    jf(a, tr.asarray(a, dtype="bf16"), tr.asarray(a, policy=sto, seed=0))
    text = jf.inspect_ir()
    sig = text.splitlines()[2]
    assert sig == ("  ^bb0(%0: tensor<2x4xf32>, %1: tensor<2x4xbf16>, "
                   "%2: tensor<2x4xbf16, #policy<rounding=stochastic>>):")
    ret = next(ln for ln in text.splitlines() if '"tessera.return"' in ln)
    for t in ("tensor<2x4xi1>", "tensor<4xindex>", "tensor<2x4xcomplex<f32>>", "tensor<2x4xbf16>",
              "tensor<2x4xbf16, #policy<rounding=stochastic>>"):
        assert t in ret, t
    sym = text.replace("tensor<2x4xf32>", "tensor<[B]x4xf32>")
    assert "[B]" in str(parse_module(sym))


@clause("GRAPH-TYPE-1", "GRAPH-TYPE-2")
def test_element_kinds_are_not_converted_implicitly(backend):
    """index and i1 do not convert implicitly into or out of numbers, nor integer kinds into each
    other (DTypeError)."""
    idx, mask, x = np.arange(3), np.array([True, False, True]), np.ones(3, np.float32)
    for fn, args in ((op.add, (idx, idx.astype(np.int32))), (op.mul, (idx, x)), (op.equal, (idx, x)), (op.add, (mask, x)),
                     (op.where, (mask, idx, x))):
        with pytest.raises(DTypeError):
            run(backend, fn, *args)


@clause("GRAPH-TYPE-2")
def test_weak_python_scalars(backend):
    """A Python number takes the first tensor operand's policy (its rounding); else f32; bool is i1."""
    xv = values(operand(np.linspace(-3, 3, 13), "bf16"))
    rtz = policy("bf16", rounding="rtz")
    x = tr.asarray(round_values(xv, "bf16"), policy=rtz)
    c_rtz = values(round_values(np.array(0.1), "bf16", "rtz"))
    c_rne = values(round_values(np.array(0.1), "bf16"))
    assert c_rtz != c_rne
    want = round_values(R.add("f32", xv, c_rtz), "bf16", "rtz")
    got = run(backend, lambda v: (v + 0.1, op.add(0.1, v), op.mul(2, v)), x)
    assert_bits(got, [want, want, round_values(R.mul("f32", xv, 2.0), "bf16", "rtz")])
    xb = round_values(xv, "bf16")
    check(backend, lambda v: v - 0.1, (xb,), round_values(R.sub("f32", xv, c_rne), "bf16"))
    got = run(backend, lambda v: (op.add(0.1, 0.2), op.logical_and(op.less(v, 0.0), True)), xb)
    assert_bits(got[0], np.float32(np.float32(0.1) + np.float32(0.2)))
    assert_bits(got[1], xv < 0)


@clause("GRAPH-TYPE-2", "GRAPH-TYPE-4")
def test_numpy_arrays_take_their_dtype_format(backend):
    """NumPy arrays take their dtype's format: f64, f32, f16, bf16, index, i32, ui8, index (int16), i1,
    complex<f32>."""
    args = (np.ones(2), np.ones(2, np.float32), np.ones(2, np.float16), np.ones(2, ml_dtypes.bfloat16),
            np.ones(2, np.int64), np.ones(2, np.int32), np.ones(2, np.uint8), np.ones(2, np.int16),
            np.ones(2, bool), np.ones(2, np.complex64))
    jf = jit(backend, lambda *a: tuple(op.reshape(v, (2, 1)) for v in a))
    jf(*args)
    sig = jf.inspect_ir().splitlines()[2]
    kinds = re.findall(r"tensor<2x([^>]+>?)>", sig)
    assert kinds == ["f64", "f32", "f16", "bf16", "index", "i32", "ui8", "index", "i1", "complex<f32>"], sig


SYM = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%0: tensor<[B]xf32>, %1: tensor<RHSxf32>):
    %2 = "tessera.graph.add"(%0, %1) : (tensor<[B]xf32>, tensor<RHSxf32>) -> tensor<[B]xf32>
    "tessera.return"(%2) : (tensor<[B]xf32>) -> ()
  }) {function_type = (tensor<[B]xf32>, tensor<RHSxf32>) -> tensor<[B]xf32>, sym_name = "f"} : () -> ()
}) : () -> ()'''


@clause("GRAPH-TYPE-2")
def test_symbolic_broadcasting(backend):
    """A name fits the same name or the integer 1; a name against another integer does not."""
    x = np.arange(5, dtype=np.float32)
    assert_bits(run_text(backend, SYM.replace("RHS", "[B]"), x, x)[0], x + x)
    assert_bits(run_text(backend, SYM.replace("RHS", "1"), x, np.float32([2.0]))[0], x + np.float32(2.0))
    with pytest.raises(TesseraError):
        run_text(backend, SYM.replace("RHS", "5"), x, x)


@clause("GRAPH-CONSTANT-1")
def test_constants_hold_exact_codes(backend):
    """Concrete arrays become constants with their exact codes; `type` only for a non-default policy."""
    codes = from_codes(np.array([0x7FC00001, 0xFFFFFFFF, 0x80000000, 0x00000001], np.uint64), "f32")
    fp4 = operand([0.5, -6.0, -0.0, 1.5], "fp4_e2m1")
    rtz = tr.asarray(np.array([1.5, -0.0, 3.0]), policy=policy("bf16", rounding="rtz"))
    jf = jit(backend, lambda x: (codes, fp4, rtz, op.concat([x, codes])))
    got = jf(np.zeros(1, np.float32))
    assert_bits([np.asarray(g) for g in got], [codes, fp4, np.asarray(rtz),
                                               np.concatenate([np.zeros(1, np.float32), codes])])
    consts = [ln for ln in jf.inspect_ir().splitlines() if '"tessera.graph.constant"() {' in ln]
    assert len(consts) == 3
    assert sum("type = tensor<3xbf16, #policy<rounding=rtz>>" in ln for ln in consts) == 1
    assert sum("type =" in ln for ln in consts) == 1


BASE = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%0: tensor<2x3xf32>):
    %1 = "tessera.graph.transpose"(%0) {perm = [1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %2 = "tessera.graph.exp"(%1) : (tensor<3x2xf32>) -> tensor<3x2xf32>
    "tessera.return"(%2) : (tensor<3x2xf32>) -> ()
  }) {function_type = (tensor<2x3xf32>) -> tensor<3x2xf32>, sym_name = "f"} : () -> ()
}) : () -> ()'''

BROKEN = {
    "unknown attribute": ('"tessera.graph.exp"(%1) :', '"tessera.graph.exp"(%1) {base = 2} :'),
    "non-canonical perm": ("perm = [1, 0]", "perm = [-1, 0]"),
    "result type": ("(tensor<3x2xf32>) -> tensor<3x2xf32>\n    \"tessera.return\"",
                    "(tensor<3x2xf32>) -> tensor<2x3xf32>\n    \"tessera.return\""),
    "unknown op": ("tessera.graph.exp", "tessera.graph.expo"),
    "use before definition": ('"tessera.graph.transpose"(%0)', '"tessera.graph.transpose"(%2)'),
    "missing terminator": ('    "tessera.return"(%2) : (tensor<3x2xf32>) -> ()\n', ""),
}


@clause("GRAPH-VERIFY-1")
@pytest.mark.parametrize("what", sorted(BROKEN))
def test_verifier_rejects(backend, what):
    """Unknown/non-canonical attributes, wrong result types, unknown ops, structural errors are rejected."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_bits(run_text(backend, BASE, x)[0], round_values(R.acc(X.exp(x.T.astype(np.float64)), "f32"), "f32"))
    old, new = BROKEN[what]
    assert old in BASE
    with pytest.raises(TesseraError):
        verify(parse_module(BASE.replace(old, new)))
