"""The parser and the verifier on ill-formed input: a TesseraError, never a raw exception.

Three sources of ill-formed modules: the misuse probe of :mod:`malformed` (every registered
op on 0-3 operands of several types), mutations of printed modules (a traced program at the
graph and tile levels), and text written by a small grammar from the registered op names.
Every text the parser accepts must print to a text that parses and prints identically.
The hypothesis tests are derandomized with a fixed example budget (they run the same
examples everywhere, in a few seconds).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera_ref as tr
from malformed import raw_errors
from tessera_ref import op
from tessera_ref.errors import TesseraError
from tessera_ref.ir import OPS, VerifyError, parse_module, verify

FUZZ = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


def _label(args: str) -> str:
    """The entry block's label line (written only when the block has arguments)."""
    return f"  ^bb0({args}):\n" if args else ""


def test_the_misuse_probe_raises_only_tessera_errors():
    found = raw_errors()
    assert found == [], f"{len(found)} raw exceptions, e.g. {found[:3]}"


@pytest.mark.parametrize("name, operands, words", [
    ("tessera.graph.matmul", [], ["takes 2 to 3 operand(s), has 0"]),
    ("tessera.graph.neg", ["f32"], ["operand #0 is a f32", "take tensors"]),
    ("tessera.graph.neg", ["tensor<4xf32>", "tensor<4xf32>"], ["takes 1 operand(s), has 2"]),
    ("tessera.graph.concat", [], ["takes at least 1 operand(s), has 0"]),
    ("tessera.tile.load", [], ["needs the buffer as its first operand"]),
    ("tessera.tile.subview", [], ["needs the viewed buffer as its first operand"]),
])
def test_ill_formed_ops_from_the_issue_are_verify_errors_at_their_line(name, operands, words):
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(operands))
    uses = ", ".join(f"%a{i}" for i in range(len(operands)))
    text = ('"tessera.module"() ({\n  "tessera.func"() ({\n' + _label(args) +
            f'    "{name}"({uses}) : ({", ".join(operands)}) -> () loc("m.py":58)\n'
            '    "tessera.return"() : () -> ()\n'
            f'  }}) {{function_type = ({", ".join(operands)}) -> (), sym_name = "f"}} : () -> ()\n'
            '}) : () -> ()')
    with pytest.raises(VerifyError) as info:
        verify(parse_module(text))
    assert info.value.op_name == name and info.value.location == "m.py:58"
    for word in words:
        assert word in str(info.value)


@functools.lru_cache(maxsize=None)
def printed_modules() -> tuple:
    """Texts of real modules: a traced program at the graph, schedule and tile levels."""
    def f(x, w):
        return op.softmax(op.matmul(x, w) * 2.0, axis=-1).sum(axis=0)

    g = tr.jit(f)
    g(np.ones((4, 8), np.float32), np.ones((8, 4), np.float32))
    return tuple(g.inspect_ir(level) for level in ("graph", "schedule", "tile"))


def _check(text: str) -> None:
    """Parse and verify ``text``: TesseraErrors are fine; an accepted text prints stably."""
    try:
        module = parse_module(text)
    except TesseraError:
        return
    printed = str(module)
    again = parse_module(printed)
    assert str(again) == printed
    try:
        verify(module)
    except TesseraError:
        with pytest.raises(TesseraError):
            verify(again)
    else:
        verify(again)


_PIECES = ['"', "(", ")", "{", "}", "<", ">", "[", "]", "%0", "%99", "^bb0", ":", ",", "->", "=", "x",
           "tensor<4xf32>", "index", "f32", "i1", "0", "-1", "1e999", "0x7FF8", "@f", "dense<", "loc(",
           "//", "\n", " "] + sorted(f'"{name}"' for name in OPS)


@st.composite
def mutations(draw):
    text = draw(st.sampled_from(printed_modules()))
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["delete", "insert", "swap_lines", "rename_op"]))
        if edit == "delete":
            text = text[:position] + text[position + draw(st.integers(1, 12)):]
        elif edit == "insert":
            text = text[:position] + draw(st.sampled_from(_PIECES)) + text[position:]
        elif edit == "swap_lines":
            lines = text.split("\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        else:
            start = text.find('"tessera.', position)
            if start >= 0:
                end = text.index('"', start + 1)
                text = text[:start] + f'"{draw(st.sampled_from(sorted(OPS)))}"' + text[end + 1:]
    return text


_TYPES = ["tensor<4xf32>", "tensor<2x3xbf16>", "tensor<[B]x4xf32>", "tensor<4xi1>", "tensor<f32>",
          "f32", "index", "() -> ()"]
_ATTRS = ["", "{axis = 0}", "{axis = [0], keepdims = false}", '{fn = "add"}', "{value = 1.5}",
          "{transpose_a = false, transpose_b = false}", '{pad = 0, swizzle = "none"}', "{value = 4}",
          '{value = dense<"0x00000040"> : tensor<f32>}', "{pending = 0}", "{axis = 7}"]


@st.composite
def grammar_texts(draw):
    """A module text of one function applying registered ops to visible values."""
    args = draw(st.lists(st.sampled_from(_TYPES[:7]), max_size=3))
    values = [(f"%a{i}", t) for i, t in enumerate(args)]
    lines = []
    for n in range(draw(st.integers(1, 5))):
        name = draw(st.sampled_from(sorted(OPS)))
        used = draw(st.lists(st.sampled_from(values), max_size=3)) if values else []
        results = draw(st.lists(st.sampled_from(_TYPES[:7]), max_size=2))
        names = [f"%r{n}_{i}" for i in range(len(results))]
        lhs = f"{', '.join(names)} = " if names else ""
        signature = f"({', '.join(t for _, t in used)}) -> ({', '.join(results)})"
        lines.append(f'    {lhs}"{name}"({", ".join(v for v, _ in used)}) {draw(st.sampled_from(_ATTRS))} '
                     f': {signature}')
        values += list(zip(names, results))
    lines.append('    "tessera.return"() : () -> ()')
    arg_list = ", ".join(f"%a{i}: {t}" for i, t in enumerate(args))
    return ('"tessera.module"() ({\n  "tessera.func"() ({\n' + _label(arg_list) + "\n".join(lines)
            + f'\n  }}) {{function_type = ({", ".join(args)}) -> (), sym_name = "f"}} : () -> ()\n}}) : () -> ()')


@FUZZ
@given(mutations())
def test_mutated_printed_modules_raise_only_tessera_errors(text):
    _check(text)


@FUZZ
@given(grammar_texts())
def test_grammar_generated_modules_raise_only_tessera_errors(text):
    _check(text)


def test_a_graph_op_declaring_a_scalar_result_is_a_verify_error():
    """Found by the grammar fuzzer: a Graph IR op whose result is declared a scalar raised a raw
    AttributeError from the verifier; it is a VerifyError naming the result and the inferred type."""
    text = ('"tessera.module"() ({\n  "tessera.func"() ({\n  ^bb0(%a0: tensor<4xf32>):\n'
            '    %r0 = "tessera.graph.abs"(%a0)  : (tensor<4xf32>) -> (f32)\n    "tessera.return"() : () -> ()\n'
            '  }) {function_type = (tensor<4xf32>) -> (), sym_name = "f"} : () -> ()\n}) : () -> ()')
    with pytest.raises(VerifyError, match=r"result #0 is a f32, but Graph IR ops give tensors \(the inferred: "
                                          r"tensor<4xf32>\)") as caught:
        verify(parse_module(text))
    assert "tessera.graph.abs" in str(caught.value) and "0-d tensor<f32>" in caught.value.fix
