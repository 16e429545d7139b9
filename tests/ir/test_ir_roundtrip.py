"""Round trips of the text format: golden modules, canonical printing, and random
modules (print -> parse -> print is byte-identical and gives the same IR)."""
import math
import struct

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ir_testing import assert_same_ir, modules, new_module
from tessera_ref.ir import (
    DenseAttr,
    IndexType,
    IRParseError,
    Module,
    Operation,
    ScalarType,
    SymbolRef,
    TensorType,
    parse_module,
    verify,
)
from tessera_ref.ir.core import Block, Region
from tessera_ref.numerics import Policy

GOLDEN = r'''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%q: tensor<[B]x[S]x64xbf16>, %k: tensor<[B]x[S]x64xbf16>, %w: tensor<64x64xfp6_e2m3, #policy<accum=f64, rounding=stochastic, overflow=saturate>>):
    %scale = "tessera.graph.constant"() {value = dense<"0x0000003E"> : tensor<1xf32>} : () -> tensor<1xf32> loc("attention.py":7:0)
    %0 = "test.matmul"(%q, %k) {tile_shape = [128, 128, 64], transpose_b = true} : (tensor<[B]x[S]x64xbf16>, tensor<[B]x[S]x64xbf16>) -> tensor<[B]x[S]x[S]xf32> loc("attention.py":12:0)
    %1, %2 = "test.softmax_stats"(%0) {axis = -1, eps = 1.0e-06, neg_zero = -0.0, ninf = 0xFFF0000000000000 : f64, not_a_number = 0x7FF8000000000000 : f64, other_nan = 0xFFF8000000000001 : f64, pinf = 0x7FF0000000000000 : f64} : (tensor<[B]x[S]x[S]xf32>) -> (tensor<[B]x[S]x[S]xf32>, tensor<[B]x[S]xf32>) loc("attention.py":13:0)
    %3 = "test.loop"(%1, %w) ({
    ^bb0(%i: index, %acc: tensor<[B]x[S]x[S]xf32>):
      %4 = "test.add"(%acc, %1) : (tensor<[B]x[S]x[S]xf32>, tensor<[B]x[S]x[S]xf32>) -> tensor<[B]x[S]x[S]xf32> loc("a \"quoted\" name\twith tab")
      "test.yield"(%4) : (tensor<[B]x[S]x[S]xf32>) -> ()
    }, {
      "test.yield"() : () -> ()
    ^bb1:
    }) {bounds = {lower = 0, "step size" = 1, upper = 8}, callee = @softmax, empty = [], label = "caf\C3\A9 \E2\88\91", types = [f32, index, scalar<bf16, #policy<rounding=rtz>>, (f32) -> ((f32) -> f32), tensor<fp4_e2m1>]} : (tensor<[B]x[S]x[S]xf32>, tensor<64x64xfp6_e2m3, #policy<accum=f64, rounding=stochastic, overflow=saturate>>) -> tensor<[B]x[S]x[S]xf32>
    "tessera.return"(%3, %2) : (tensor<[B]x[S]x[S]xf32>, tensor<[B]x[S]xf32>) -> () loc("attention.py":20:0)
  }) {function_type = (tensor<[B]x[S]x64xbf16>, tensor<[B]x[S]x64xbf16>, tensor<64x64xfp6_e2m3, #policy<accum=f64, rounding=stochastic, overflow=saturate>>) -> (tensor<[B]x[S]x[S]xf32>, tensor<[B]x[S]xf32>), sym_name = "attention"} : () -> () loc("attention.py":5:0)
  "tessera.func"() ({
  ^bb0(%0: tensor<4xf32>):
    %1 = "test.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
    "tessera.return"(%1) : (tensor<4xf32>) -> ()
  }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "softmax"} : () -> ()
}) {sym_name = "golden"} : () -> ()'''


def test_golden_module_prints_back_byte_identical_and_verifies():
    module = parse_module(GOLDEN, "golden.mlir")
    assert str(module) == GOLDEN
    verify(module)


def test_golden_module_content_is_what_the_text_says():
    module = parse_module(GOLDEN, "golden.mlir")
    assert isinstance(module, Module) and module.attributes == {"sym_name": "golden"}
    attention = module.lookup("attention")
    assert attention.location == "attention.py:5"
    q, k, w = attention.regions[0].entry.args
    assert (q.name, k.name, w.name) == ("q", "k", "w")
    assert q.type == TensorType(("B", "S", 64), "bf16")
    assert w.type.policy == Policy("fp6_e2m3", accum="f64", rounding="stochastic", overflow="saturate")
    const, matmul, stats, loop, ret = attention.regions[0].entry.ops
    assert const.attributes["value"].to_array().tolist() == [0.125]
    assert matmul.attributes == {"tile_shape": (128, 128, 64), "transpose_b": True}
    assert matmul.location == "attention.py:12" and matmul.operands == (q, k)
    attrs = stats.attributes
    assert attrs["axis"] == -1 and attrs["eps"] == 1e-06
    assert math.copysign(1.0, attrs["neg_zero"]) == -1.0
    assert math.isnan(attrs["not_a_number"])
    assert struct.pack("<d", attrs["other_nan"]).hex() == "010000000000f8ff"
    assert (attrs["ninf"], attrs["pinf"]) == (-math.inf, math.inf)
    assert len(stats.results) == 2
    body, second = loop.regions
    i, acc = body.entry.args
    assert i.type == IndexType()
    add = body.entry.first_op
    assert add.operands == (acc, stats.results[0])  # a value from outside the region
    assert add.location == 'a "quoted" name\twith tab'
    assert len(second.blocks) == 2 and second.blocks[1].first_op is None
    assert loop.attributes["bounds"] == {"lower": 0, "step size": 1, "upper": 8}
    assert loop.attributes["callee"] == SymbolRef("softmax")
    assert loop.attributes["label"] == "café ∑"
    assert loop.attributes["types"][2] == ScalarType(Policy("bf16", rounding="rtz"))
    assert ret.operands == (loop.result, stats.results[1])


def test_hand_written_text_prints_canonically_and_then_is_stable():
    text = """
    // comments and free layout are accepted
    "tessera.module"() ({ "tessera.func"() ({ ^entry(%7: tensor<4xf32>):
        %x = "test.neg"(%7) : (tensor<4xf32>) -> (tensor<4xf32>)   // parenthesized single result
        %y = "test.neg"(%x) {b = 2, a = 1, z = {}} : (tensor<4xf32>) -> tensor<4xf32> loc("m.py" : 3)
        "tessera.return"(%y) : (tensor<4xf32>) -> ()
      }) {sym_name = "f", function_type = (tensor<4xf32>) -> tensor<4xf32>} : () -> ()
    }) {} : () -> ()
    """
    canonical = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%0: tensor<4xf32>):
    %x = "test.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
    %y = "test.neg"(%x) {a = 1, b = 2, z = {}} : (tensor<4xf32>) -> tensor<4xf32> loc("m.py":3:0)
    "tessera.return"(%y) : (tensor<4xf32>) -> ()
  }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "f"} : () -> ()
}) : () -> ()'''
    assert str(parse_module(text)) == canonical
    assert str(parse_module(canonical)) == canonical


def test_entry_block_label_is_printed_only_when_needed():
    module = Module()
    module.body.append(Operation("rand.holder", regions=[Region([Block()]), Region()]))
    text = str(module)
    assert "({\n  ^bb0:\n  }, {\n  })" in text  # an empty entry block keeps its label; no blocks: {}
    again = parse_module(text)
    holder = again.body.first_op
    assert len(holder.regions[0].blocks) == 1 and not holder.regions[1].blocks
    assert str(again) == text


def test_value_names_come_from_hints_and_are_made_unique_per_function():
    module, b, (x,) = new_module()
    x.name = "x"
    values = [b.create("test.neg", [x], [x.type]).result for _ in range(4)]
    values[0].name = "x"           # taken by the argument -> x_1
    values[1].name = "x_1"         # taken by the renamed value -> x_1_1
    values[2].name = "not a name"  # not a valid hint -> numbered
    b.create("tessera.return", [values[3]])
    other = module.body.append(parse_module(str(new_module(name="g")[0])).body.first_op.detach())
    other.regions[0].entry.args[0].name = "x"
    text = str(module)
    assert '%x_1 = "test.neg"(%x)' in text and '%x_1_1 = "test.neg"(%x)' in text
    assert '%0 = "test.neg"(%x)' in text and '%1 = "test.neg"(%x)' in text
    assert text.count("^bb0(%x: tensor<4xf32>)") == 2  # names restart in each function
    assert str(parse_module(text)) == text


def test_dense_constants_of_every_width_round_trip():
    from ir_testing import dense_examples

    module = Module()
    module.attributes = {f"c{i}": d for i, d in enumerate(dense_examples())}
    again = parse_module(str(module))
    for key, dense in module.attributes.items():
        assert again.attributes[key] == dense
        np.testing.assert_array_equal(again.attributes[key].to_array().view(np.uint8),
                                      dense.to_array().view(np.uint8))


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(modules())
def test_random_modules_round_trip(module):
    verify(module)
    text = str(module)
    again = parse_module(text, "random.mlir")
    assert str(again) == text
    assert_same_ir(module, again)
    verify(again)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(modules(), st.data())
def test_corrupted_text_parses_or_raises_a_parse_error(module, data):
    text = str(module)
    position = data.draw(st.integers(0, len(text)))
    edit = data.draw(st.sampled_from(["delete", "insert", "truncate"]))
    if edit == "delete":
        text = text[:position] + text[position + 1:]
    elif edit == "insert":
        text = text[:position] + data.draw(st.sampled_from(list('(){}[]<>%^"\\,:=x@#-.0 \n'))) + text[position:]
    else:
        text = text[:position]
    try:
        parsed = parse_module(text)
    except IRParseError as exc:
        assert 1 <= exc.line <= text.count("\n") + 1 and exc.column >= 1
    else:
        assert str(parse_module(str(parsed))) == str(parsed)


def test_name_hints_survive_a_round_trip_through_dense_and_symbol_references():
    module, b, (x,) = new_module()
    c = b.create("tessera.graph.constant", [], [x.type],
                 {"value": DenseAttr.from_array(np.arange(4, dtype=np.float32)), "ref": SymbolRef("f")})
    c.result.name = "c"
    b.create("tessera.return", [c.result])
    again = parse_module(str(module))
    const = again.lookup("f").regions[0].entry.first_op
    assert const.result.name == "c"
    assert const.attributes["value"].to_array().tolist() == [0.0, 1.0, 2.0, 3.0]
