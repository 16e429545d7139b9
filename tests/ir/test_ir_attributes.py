"""Attribute values: exact text for floats, strings, dense constants; equality keys."""
import math
import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ir_testing import attributes, dense_attrs, floats, nan_with_bits
from tessera_ref.ir import (
    DenseAttr,
    IRError,
    IRParseError,
    Operation,
    SymbolRef,
    attr_key,
    format_attribute,
    parse_attribute,
    print_op,
    verify,
)
from tessera_ref.numerics import FORMATS


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


@pytest.mark.parametrize("value, text", [
    (True, "true"), (False, "false"), (0, "0"), (-7, "-7"), (1 << 80, str(1 << 80)),
    (1.0, "1.0"), (-0.0, "-0.0"), (0.1, "0.1"), (1e16, "1.0e+16"), (5e-324, "5.0e-324"),
    (-1.5e-300, "-1.5e-300"), (math.inf, "0x7FF0000000000000 : f64"), (-math.inf, "0xFFF0000000000000 : f64"),
    (math.nan, "0x7FF8000000000000 : f64"),
    (nan_with_bits(0xFFF8000000000000), "0xFFF8000000000000 : f64"),
    (nan_with_bits(0x7FF0000000000001), "0x7FF0000000000001 : f64"),
    ("plain", '"plain"'), ('q"b\\s', r'"q\"b\\s"'), ("a\nb\tc", r'"a\nb\tc"'),
    ("é\x00\x7f", r'"\C3\A9\00\7F"'), ("", '""'),
    ((), "[]"), ([1, [2.5, "x"]], '[1, [2.5, "x"]]'),
    ({"b": 1, "a": {}, "odd key": True}, '{a = {}, b = 1, "odd key" = true}'),
    (SymbolRef("main"), "@main"), (SymbolRef("a b"), '@"a b"'),
    (DenseAttr.from_array(np.array([1.0, 2.0], np.float32)), 'dense<"0x0000803F00000040"> : tensor<2xf32>'),
    (DenseAttr("fp4_e2m1", (2, 2), bytes([1, 2, 15, 0])), 'dense<"0x01020F00"> : tensor<2x2xfp4_e2m1>'),
    (DenseAttr("bf16", (0,), b""), 'dense<"0x"> : tensor<0xbf16>'),
])
def test_attribute_text(value, text):
    assert format_attribute(value) == text
    parsed = parse_attribute(text)
    assert attr_key(parsed) == attr_key(value)
    assert format_attribute(parsed) == text


@given(floats)
def test_floats_round_trip_bit_for_bit(x):
    y = parse_attribute(format_attribute(x))
    assert type(y) is float and bits(y) == bits(x)


@given(st.text())
def test_strings_round_trip(s):
    assert parse_attribute(format_attribute(s)) == s


@given(attributes)
def test_random_attributes_round_trip(value):
    text = format_attribute(value)
    parsed = parse_attribute(text)
    assert attr_key(parsed) == attr_key(value)
    assert format_attribute(parsed) == text


def test_floats_never_print_like_ints():
    for x in (1.0, -3.0, 1e22, 2.0**70):
        assert type(parse_attribute(format_attribute(x))) is float


def test_attr_key_compares_floats_by_bits_and_arrays_by_content():
    assert attr_key(math.nan) == attr_key(float("nan"))
    assert attr_key(0.0) != attr_key(-0.0)
    assert attr_key([1, 2]) == attr_key((1, 2))
    assert attr_key(1) != attr_key(1.0) != attr_key(True)
    assert attr_key({"a": 1, "b": 2}) == attr_key({"b": 2, "a": 1})


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_dense_from_array_to_array_round_trip_for_every_format(fmt):
    f = FORMATS[fmt]
    values = np.arange(min(5, 1 << f.bits), dtype=f"u{f.dtype.itemsize}").view(f.dtype)  # codes 0..4
    dense = DenseAttr.from_array(values)
    assert dense.format is f and dense.shape == values.shape
    back = parse_attribute(str(dense)).to_array()
    assert back.dtype == f.dtype
    np.testing.assert_array_equal(back.view(f"u{f.dtype.itemsize}"), values.view(f"u{f.dtype.itemsize}"))


def test_dense_bytes_are_little_endian_codes():
    dense = DenseAttr.from_array(np.array([1.0], ml_dtypes.bfloat16))
    assert dense.data == bytes([0x80, 0x3F])
    assert DenseAttr.from_array(np.array([-1], ml_dtypes.int4)).data == b"\x0f"


@given(dense_attrs())
def test_random_dense_attributes_round_trip(dense):
    assert parse_attribute(str(dense)) == dense


@pytest.mark.parametrize("make, message", [
    (lambda: DenseAttr("f32", (2,), b"\0" * 4), "needs 8 bytes, got 4"),
    (lambda: DenseAttr("int4", (1,), b"\x10"), "wider than 4 bits"),
    (lambda: DenseAttr("f32", ("B",), b""), "static shape"),
    (lambda: DenseAttr("fp7", (1,), b"\0"), "unknown number format"),
    (lambda: DenseAttr.from_array(np.zeros(2, np.float32), "bf16"), "needs an array of dtype bfloat16"),
    (lambda: SymbolRef(3), "names a symbol by a str"),
    (lambda: attr_key(np.int64(3)), r"is not an attribute value.*convert NumPy scalars"),
    (lambda: attr_key({1: 2}), "needs str keys"),
])
def test_malformed_attributes_are_ir_errors(make, message):
    with pytest.raises(IRError, match=message):
        make()


def test_printing_or_verifying_an_op_with_a_bad_attribute_names_the_op():
    op = Operation.create("rand.x", attributes={"bad": object()}, location="m.py:4")
    with pytest.raises(IRError, match=r"cannot print 'rand.x' \(at m.py:4\): <object object"):
        print_op(op)
    with pytest.raises(IRError, match=r"'rand.x' op: attribute 'bad': .* is not an attribute value \[at m.py:4\]"):
        verify(op)


@pytest.mark.parametrize("text, want_bits", [
    ("inf", 0x7FF0000000000000), ("-inf", 0xFFF0000000000000), ("nan", 0x7FF8000000000000),
    ("nan(0xfff8000000000001)", 0xFFF8000000000001), ("1e-06", bits(1e-06)), ("0x3FF0000000000000 : f64", bits(1.0)),
])
def test_the_parser_reads_the_earlier_float_spellings_and_hex_bits(text, want_bits):
    assert bits(parse_attribute(text)) == want_bits


@pytest.mark.parametrize("text", ["1e999", "-2e308", "1e-400", "-0.5e-330", "1" + "0" * 400 + ".0"])
def test_float_literals_outside_binary64_are_parse_errors(text):
    with pytest.raises(IRParseError, match="outside the binary64 range"):
        parse_attribute(text)


def test_zero_spelled_with_an_exponent_is_still_zero():
    assert bits(parse_attribute("0.0e-400")) == 0 and bits(parse_attribute("-0.0e5")) == 1 << 63
