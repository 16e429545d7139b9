"""Shared helpers of the IR tests: a toy dialect, hypothesis strategies for random
types, attributes and modules, and a structural comparison of two IR trees that does not
go through the printer."""
from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from tessera_ref.ir import (
    OPS,
    Block,
    Builder,
    DenseAttr,
    FunctionType,
    IndexType,
    Module,
    Operation,
    Region,
    ScalarType,
    SymbolRef,
    TensorType,
    attr_key,
    func_op,
    register_op,
    return_op,
)
from tessera_ref.numerics import FORMATS, Policy

# -- the toy dialect ---------------------------------------------------------------------


def _verify_same_types(op):
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    if len(op.results) != 1 or any(t != types[0] for t in types):
        raise op.emit_error(f"operands and result must have one type, got "
                            f"{', '.join(str(t) for t in types)}",
                            fix="convert the operands to a common type first")


if "test.add" not in OPS:
    register_op("test.add", verify=_verify_same_types)
    register_op("test.neg", verify=_verify_same_types)
    register_op("test.print", side_effects=True)
    register_op("test.yield", terminator=True)

F32 = TensorType((4,), "f32")


def new_module(arg_types=(F32,), result_types=(F32,), name="f"):
    """A module with one function; returns (module, builder at the end of its body, args)."""
    module = Module()
    func = module.body.append(func_op(name, arg_types, result_types, location="test.py:1"))
    body = func.regions[0].entry
    return module, Builder(body), body.args


def unary(builder, name, value, line):
    return builder.create(name, [value], [value.type], location=f"test.py:{line}").result


def finish(builder, *values):
    builder.insert(return_op(values, location="test.py:99"))


# -- strategies --------------------------------------------------------------------------

SYMBOLS = ["B", "S", "max_x", "x", "f32", "_", "xx1"]
FORMAT_NAMES = list(FORMATS)
ACCUMS = ["f16", "bf16", "f32", "f64"]
ROUNDINGS = ["rne", "rtz", "rup", "rdown", "stochastic"]
MX_ELEMENTS = ["fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1"]


@st.composite
def policies(draw):
    storage = draw(st.sampled_from(FORMAT_NAMES))
    if not draw(st.booleans()):
        return Policy(storage)
    scaling = draw(st.sampled_from(["none", "per_tensor", "delayed"]
                                   + (["mx"] if storage in MX_ELEMENTS else [])
                                   + (["nvfp4"] if storage == "fp4_e2m1" else [])))
    return Policy(storage, accum=draw(st.sampled_from(ACCUMS)), rounding=draw(st.sampled_from(ROUNDINGS)),
                  overflow=draw(st.sampled_from(["native", "saturate"])), scaling=scaling,
                  reduction=draw(st.sampled_from(["canonical", "exact"])))


dims = st.one_of(st.integers(0, 4096), st.sampled_from(SYMBOLS))
tensor_types = st.builds(TensorType, st.lists(dims, max_size=4).map(tuple), policies())
scalar_types = st.builds(ScalarType, policies())
value_types = st.one_of(tensor_types, tensor_types, scalar_types, st.just(IndexType()))
function_types = st.builds(FunctionType, st.lists(value_types, max_size=3).map(tuple),
                           st.lists(value_types, max_size=2).map(tuple))
types = st.one_of(value_types, function_types, function_types.map(lambda f: FunctionType((f,), (f,))))


def nan_with_bits(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


nan_payloads = st.builds(lambda sign, mantissa: nan_with_bits((sign << 63) | (0x7FF << 52) | mantissa),
                         st.integers(0, 1), st.integers(1, (1 << 52) - 1))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), nan_payloads,
                   st.sampled_from([0.0, -0.0, 5e-324, 1e16, 0.1]))


@st.composite
def dense_attrs(draw):
    fmt = FORMATS[draw(st.sampled_from(FORMAT_NAMES))]
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    count = math.prod(shape) * fmt.dtype.itemsize
    limit = (1 << fmt.bits) - 1 if fmt.bits < 8 else 255
    data = bytes(draw(st.lists(st.integers(0, limit), min_size=count, max_size=count)))
    return DenseAttr(fmt, shape, data)


symbol_refs = st.builds(SymbolRef, st.one_of(st.sampled_from(["f", "main", "a.b$c"]), st.text(max_size=8)))
leaf_attributes = st.one_of(st.booleans(), st.integers(-(1 << 70), 1 << 70), floats, st.text(max_size=12),
                            types, dense_attrs(), symbol_refs)
attribute_keys = st.one_of(st.sampled_from(["tile_shape", "alpha", "a.b", "x$y", "_k"]), st.text(max_size=6))


def nested_attributes(depth: int):
    """Attributes nested at most ``depth`` arrays/dicts deep."""
    if depth == 0:
        return leaf_attributes
    inner = nested_attributes(depth - 1)
    return st.one_of(leaf_attributes, st.lists(inner, max_size=3).map(tuple),
                     st.dictionaries(attribute_keys, inner, max_size=3))


attributes = nested_attributes(2)
attribute_dicts = st.dictionaries(attribute_keys, attributes, max_size=3)
locations = st.one_of(st.none(), st.sampled_from(["model.py:12", "a:b:007", "no line", "", 'q"uote:3']),
                      st.text(max_size=10))
name_hints = st.one_of(st.none(), st.sampled_from(["x", "x", "q", "arg0", "x_1", "0", "7up", "a.b", "bad name"]))
op_names = st.sampled_from(["rand.a", "rand.b", "rand.op_with.dots", "weird name \"x\""])


@st.composite
def modules(draw):
    """A random module: functions holding random DAGs of ops with random types,
    attributes, locations and name hints; some ops carry regions whose bodies use values
    from outside."""
    module = Module(location=draw(locations))
    for f in range(draw(st.integers(1, 3))):
        arg_types = draw(st.lists(value_types, max_size=3))
        result_types = draw(st.lists(value_types, max_size=2))
        func = module.body.append(func_op(f"f{f}", arg_types, result_types, location=draw(locations)))
        body = func.regions[0].entry
        for arg in body.args:
            arg.name = draw(name_hints)
        _fill_block(draw, body, list(body.args), depth=0)
        returned = []
        visible = _visible_values(body)
        for t in result_types:
            value = next((v for v in visible if v.type == t), None)
            if value is None:
                value = Builder(body).create("rand.make", [], [t], location=draw(locations)).result
            returned.append(value)
        body.append(return_op(returned, location=draw(locations)))
    return module


def _visible_values(block):
    values = list(block.args)
    for op in block:
        values.extend(op.results)
    return values


def _fill_block(draw, block, visible, depth):
    builder = Builder(block)
    for _ in range(draw(st.integers(0, 6))):
        operands = draw(st.lists(st.sampled_from(visible), max_size=3)) if visible else []
        regions = []
        if depth < 2 and draw(st.integers(0, 5)) == 0:
            for _ in range(draw(st.integers(1, 2))):
                region = Region()
                for _ in range(draw(st.integers(0, 2))):
                    inner = region.append(Block(draw(st.lists(value_types, max_size=2))))
                    for arg in inner.args:
                        arg.name = draw(name_hints)
                    _fill_block(draw, inner, visible + list(inner.args), depth + 1)
                regions.append(region)
        op = builder.create(draw(op_names), operands, draw(st.lists(types, max_size=2)),
                            draw(attribute_dicts), regions, draw(locations))
        for result in op.results:
            result.name = draw(name_hints)
        visible = visible + list(op.results)


# -- structural comparison -----------------------------------------------------------------


def assert_same_ir(a: Operation, b: Operation, mapping: dict | None = None) -> None:
    """Assert that two op trees are the same IR: names, types, attributes (by attr_key),
    locations, operand wiring and region/block structure (value names are not compared)."""
    mapping = {} if mapping is None else mapping
    assert type(a) is type(b)
    assert a.name == b.name and a.location == b.location
    assert attr_key(a.attributes) == attr_key(b.attributes)
    assert [mapping[v] for v in a.operands] == list(b.operands)
    assert len(a.regions) == len(b.regions)
    for ra, rb in zip(a.regions, b.regions):
        assert len(ra.blocks) == len(rb.blocks)
        for ba, bb in zip(ra.blocks, rb.blocks):
            assert [x.type for x in ba.args] == [y.type for y in bb.args]
            mapping.update(zip(ba.args, bb.args))
            ops_a, ops_b = ba.ops, bb.ops
            assert len(ops_a) == len(ops_b)
            for oa, ob in zip(ops_a, ops_b):
                assert_same_ir(oa, ob, mapping)
    assert [r.type for r in a.results] == [r.type for r in b.results]
    mapping.update(zip(a.results, b.results))


def dense_examples():
    """One DenseAttr per format, from real values."""
    yield DenseAttr.from_array(np.array([[1.0, -2.5], [np.inf, -0.0]], np.float32))
    yield DenseAttr.from_array(np.array([0.5, 6.0, -0.0], ml_dtypes.float4_e2m1fn))
    yield DenseAttr.from_array(np.array([-8, 7], ml_dtypes.int4))
    yield DenseAttr.from_array(np.array([448.0], ml_dtypes.float8_e4m3fn))
    yield DenseAttr.from_array(np.array([1.5, np.nan], ml_dtypes.bfloat16))
