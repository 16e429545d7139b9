"""Malformed text raises IRParseError at the right line and column, with a caret snippet
and a hint."""
import pytest

from tessera_ref.errors import TesseraError
from tessera_ref.ir import IRParseError, parse_attribute, parse_module, parse_type


def wrap(body: str) -> str:
    return '"tessera.module"() ({\n' + body + '\n}) : () -> ()'


def func(ops: str) -> str:
    """A module with one function of argument %a: tensor<4xf32> whose body is ``ops``."""
    return wrap('  "tessera.func"() ({\n  ^bb0(%a: tensor<4xf32>):\n' + ops + "\n"
                '  }) {function_type = (tensor<4xf32>) -> (), sym_name = "f"} : () -> ()')


def line_col(text: str, marker: str, nth: int = 1) -> tuple[int, int]:
    """1-based line and column of the nth occurrence of marker (None: the end of the text),
    computed independently of the parser."""
    index = len(text) if marker is None else -1
    for _ in range(nth if marker is not None else 0):
        index = text.index(marker, index + 1)
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


CASES = [
    # (text, marker where the error points, occurrence, fragment of the message)
    (func('    %0 = "test.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>'), "%x", 1,
     "use of undefined value %x"),
    (func('    %0 = "test.neg"(%a) : (tensr<4xf32>) -> tensor<4xf32>'), "tensr", 1,
     "unknown format or type 'tensr'"),
    (func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<4xfp8>'), "fp8>", 1,
     "'fp8' is an alias"),
    (func('    %0 = "test.neg"(%a : (tensor<4xf32>) -> tensor<4xf32>'), ": (", 1,
     "expected ')' to close the operand list of 'test.neg'"),
    (func('    %0 = "test.neg(%a) : (tensor<4xf32>) -> tensor<4xf32>'), '"test.neg(', 1,
     "unterminated string"),
    (func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>\n'
          '    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>'), "%0", 2,
     "redefinition of %0 (first defined at 4:5)"),
    (func('    %0 = "test.add"(%a, %a) : (tensor<4xf32>) -> tensor<4xf32>'), "(tensor<4xf32>) ->", 1,
     "lists 1 operand type(s) but the op has 2 operand(s)"),
    (func('    %0 = "test.neg"(%a) : (tensor<8xf32>) -> tensor<4xf32>'), "%a)", 1,
     "operand #0 of 'test.neg' is %a of type tensor<4xf32>, but the signature says tensor<8xf32>"),
    (func('    %0, %1 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>'), "(tensor<4xf32>) ->", 1,
     "lists 1 result type(s) but the op defines 2 result name(s)"),
    (func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32, #policy<rounding=banana>>'), "#policy", 1,
     "unknown rounding 'banana'"),
    (func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32, #policy<acum=f64>>'), "acum", 1,
     "unknown policy field 'acum'"),
    (func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<[B]4xf32>'), "4xf32>\n", 1,
     "expected 'x' after dimension B"),
    (func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<?x4xf32>'), "?x4", 1,
     "expected an element format"),
    (func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<399999999999999999996xf32>'), "3999", 1,
     "dimension 399999999999999999996 does not fit an int64 index (at most 2^63 - 1"),
    (func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<4294967296x4294967296xf32>'), "tensor<42", 1,
     "more than 2^63 - 1 elements"),
    (func('    "test.op"() {x = nan(0x7ff0000000000000)} : () -> ()'), "0x7ff0", 1,
     "is not the bit pattern of a NaN"),
    (func('    "test.op"() {x = dense<"0x0000"> : tensor<2xf32>} : () -> ()'), "dense", 1,
     "needs 8 bytes, got 2"),
    (func('    "test.op"() {x = 1, x = 2} : () -> ()'), "x = 2", 1, "attribute 'x' is given twice"),
    (func('    "test.op"() {x = \'a\'} : () -> ()'), "'a'", 1, "expected an attribute value"),
    (func('    "test.op"() : () -> () loc("f.py":)'), ")\n", 1, "expected a line number"),
    (func('    "test.op"() {s = "bad \\q escape"} : () -> ()'), "\\q", 1, "unknown escape '\\q'"),
    (wrap('  %c = "rand.const"() : () -> f32\n'
          '  "tessera.func"() ({\n    "test.use"(%c) : (f32) -> ()\n'
          '  }) {function_type = () -> (), sym_name = "g"} : () -> ()'), "%c)", 1,
     "%c is defined outside the isolated op 'tessera.func'"),
    (wrap('  "tessera.func"() ({\n  ^bb0(%a: f32):\n    "tessera.return"() : () -> ()\n'
          '  }) {function_type = (f32) -> (), sym_name = "f"} : () -> ()\n'
          '  "tessera.func"() ({\n    "test.use"(%a) : (f32) -> ()\n'
          '  }) {function_type = () -> (), sym_name = "g"} : () -> ()'), "%a)", 1,
     "use of undefined value %a"),
    (wrap('  "rand.op"() ({\n    %v = "rand.def"() : () -> f32\n  }) : () -> ()\n'
          '  "rand.use"(%v) : (f32) -> ()'), "%v)", 1, "use of undefined value %v"),
    (wrap('  "rand.op"() ({\n  ^bb0:\n  ^bb0:\n  }) : () -> ()'), "^bb0", 2,
     "block label ^bb0 is used twice"),
    ('"tessera.func"() : () -> ()', '"tessera.func"', 1, 'the top-level op must be "tessera.module"'),
    (wrap('  "tessera.module"() ({\n  }) : () -> ()'), '"tessera.module"', 2, "a module cannot be nested"),
    (wrap("") + "\n%extra", "%extra", 1, "unexpected '%extra' after the module"),
    ("   // only a comment\n", None, 1, "empty input"),
]


@pytest.mark.parametrize("text, marker, nth, fragment", CASES)
def test_parse_error_points_at_the_offending_text(text, marker, nth, fragment):
    with pytest.raises(IRParseError) as info:
        parse_module(text, "case.mlir")
    err = info.value
    assert (err.line, err.column) == line_col(text, marker, nth), str(err)
    assert fragment in err.what
    assert str(err).startswith(f"case.mlir:{err.line}:{err.column}: error: ")
    source_line, caret = err.snippet.split("\n")
    assert source_line == text.split("\n")[err.line - 1]
    assert caret == " " * (err.column - 1) + "^"
    assert isinstance(err, TesseraError) and isinstance(err, ValueError)


def test_unclosed_region_reports_where_it_was_opened_and_the_end_of_input():
    text = '"tessera.module"() ({\n  "rand.op"() : () -> ()\n'
    with pytest.raises(IRParseError) as info:
        parse_module(text)
    assert "expected '}' to close the region opened at 1:21, found end of input" in info.value.what
    assert (info.value.line, info.value.column) == (3, 1)


def test_errors_carry_a_hint():
    with pytest.raises(IRParseError) as info:
        parse_module(func('    %0 = "test.neg"(%a) : (tensor<4xf32>) -> tensor<4xfp8>'))
    assert info.value.fix == "write fp8_e4m3"
    assert str(info.value).endswith("Fix: write fp8_e4m3")


def test_caret_follows_tabs():
    text = wrap('\t"rand.op"() : () -> (tensr)')
    with pytest.raises(IRParseError) as info:
        parse_module(text)
    assert info.value.snippet.split("\n")[1] == "\t" + " " * len('"rand.op"() : () -> (') + "^"


@pytest.mark.parametrize("text, fragment", [
    ("tensor<4xf32> extra", "unexpected 'extra' after the type"),
    ("tensor<4xf32", "expected '>' to close tensor<...>"),
    ("scalar<f32, #policy<accum=int8>>", "accum(int8) cannot accumulate"),
    ("(f32 -> f32", "expected ')' to close the type list"),
])
def test_parse_type_errors(text, fragment):
    with pytest.raises(IRParseError) as info:
        parse_type(text)
    assert fragment in info.value.what


@pytest.mark.parametrize("text, fragment", [
    ("[1, 2", "expected ']' to close the array"),
    ("{a = 1", "expected '}' to close the attribute dictionary"),
    ("@", "expected a symbol name after '@'"),
    ('dense<"0x0"> : tensor<1xint8>', 'expected the bytes of a dense constant'),
    ('dense<"0x01"> : tensor<[B]xint8>', "a dense constant's type is a static tensor type"),
    ('dense<"0x10"> : tensor<1xfp4_e2m1>', "holds a code wider than 4 bits"),
    ("1" * 5000, "has too many digits"),
])
def test_parse_attribute_errors(text, fragment):
    with pytest.raises(IRParseError) as info:
        parse_attribute(text)
    assert fragment in info.value.what


def test_non_str_input_is_a_clear_error():
    from tessera_ref.ir import IRError

    with pytest.raises(IRError, match="parse_module reads a str"):
        parse_module(b'"tessera.module"() ({}) : () -> ()')
