"""Depth and size limits of the IR (issue 19, item 9): nesting beyond MAX_NESTING is one
clear error at the same depth in the parser, printer, verifier and clone; comments cost
linear memory."""
from __future__ import annotations

import tracemalloc

import pytest

from tessera_ref.ir import Block, IRError, IRParseError, Module, Operation, Region, parse_module, parse_type, verify
from tessera_ref.ir.errors import MAX_NESTING
from tessera_ref.ir.types import MAX_DIM, TensorType


def _nested_regions(depth: int) -> Module:
    """A module whose ops nest ``depth`` regions below the module's own region."""
    module = Module()
    block = module.body
    for _ in range(depth - 1):
        op = block.append(Operation("test.wrap", regions=[Region([Block()])]))
        block = op.regions[0].blocks[0]
    return module


def _region_text(depth: int) -> str:
    inner = ""
    for _ in range(depth - 1):
        inner = '"test.wrap"() ({\n' + inner + '}) : () -> ()\n'
    return '"tessera.module"() ({\n' + inner + '}) : () -> ()'


def test_regions_at_the_limit_work_everywhere():
    module = _nested_regions(MAX_NESTING)
    text = str(module)
    assert str(parse_module(text)) == text
    assert text.count("test.wrap") == MAX_NESTING - 1
    parse_module(_region_text(MAX_NESTING))
    verify(module)
    assert str(module.clone()) == text


def test_regions_past_the_limit_are_one_clear_error_everywhere():
    module = _nested_regions(MAX_NESTING + 1)
    for action in (lambda: str(module), lambda: verify(module), module.clone):
        with pytest.raises(IRError, match=f"nested more than {MAX_NESTING} levels deep"):
            action()
    with pytest.raises(IRParseError, match=f"regions are nested more than {MAX_NESTING} levels deep"):
        parse_module(_region_text(MAX_NESTING + 1))


@pytest.mark.parametrize("depth", [5 * MAX_NESTING, 5000])
def test_far_deeper_text_is_a_parse_error_not_a_recursion_error(depth):
    for text in (_region_text(depth), '"tessera.module"() {a = ' + "[" * depth + "]" * depth + "} : () -> ()",
                 '"tessera.module"() {a = ' + "{b = " * depth + "1" + "}" * depth + "} : () -> ()"):
        with pytest.raises(IRParseError, match="levels deep"):
            parse_module(text)


def _array_text(depth: int) -> str:
    return '"tessera.module"() ({\n}) {a = ' + "[" * depth + "1" + "]" * depth + "} : () -> ()"


def test_attributes_at_and_past_the_limit():
    at, past = 1, 1
    for _ in range(MAX_NESTING - 1):  # the value 1 inside 99 arrays: 100 levels
        at = [at]
    past = [at]
    module = Module()
    module.attributes["a"] = at
    text = str(module)
    assert text.count("[") == MAX_NESTING - 1 and str(parse_module(text)) == text
    parse_module(_array_text(MAX_NESTING - 1))
    module.attributes["a"] = past
    for action in (lambda: str(module), lambda: verify(module)):
        with pytest.raises(IRError, match="nested more than"):
            action()
    with pytest.raises(IRParseError, match="nested more than"):
        parse_module(_array_text(MAX_NESTING))


def test_comments_are_skipped_in_memory_that_does_not_grow_with_their_number():
    def peak(lines: int) -> int:
        text = "//\n" * lines + '"tessera.module"() ({\n}) : () -> ()'
        tracemalloc.start()
        try:
            parse_module(text)
            return tracemalloc.get_traced_memory()[1] - len(text)
        finally:
            tracemalloc.stop()

    small, large = peak(10_000), peak(200_000)
    assert large < 2 * small + 100_000  # the old regex kept state per comment line: ~20x growth


def test_a_dimension_or_element_count_past_int64_is_refused_and_int64_max_is_not():
    """Issue 31: a 20-digit dimension passed the parser, the verifier and the CUDA renderer
    (``long v5 = 399999999999999999996;``); now the type itself refuses it (GRAPH-TYPE-1)."""
    largest = TensorType((MAX_DIM,), "f32")
    assert MAX_DIM == 9223372036854775807 and parse_type(str(largest)) == largest
    for shape in [(MAX_DIM + 1,), (399999999999999999996, 4), (2 ** 32, 2 ** 32), (3, MAX_DIM)]:
        with pytest.raises(IRError, match="int64"):
            TensorType(shape, "f32")
    assert TensorType(("B", MAX_DIM), "f32").shape == ("B", MAX_DIM)  # a symbolic size is not counted
    with pytest.raises(IRParseError, match="does not fit an int64") as info:
        parse_type("tensor<00000000000000000000000000001x" + "9" * 5000 + "xf32>")
    assert (info.value.line, info.value.column) == (1, 38)
    assert parse_type("tensor<0009223372036854775807xf32>") == largest
