"""Types: their text, equality, validation, and parsing back."""
import pytest
from hypothesis import given

from ir_testing import types
from tessera_ref.ir import FunctionType, IndexType, IRError, ScalarType, TensorType, parse_type
from tessera_ref.numerics import Policy, accum, bf16, f32, f64, fp4, fp6, fp8

F32 = ScalarType(f32)


@pytest.mark.parametrize("ty, text", [
    (TensorType((128, 64), bf16), "tensor<128x64xbf16>"),
    (TensorType((), "f32"), "tensor<f32>"),
    (TensorType((0, 3), "int8"), "tensor<0x3xint8>"),
    (TensorType(("B", 64), f32), "tensor<[B]x64xf32>"),
    (TensorType(("max_x", "x", "f32", 2), fp4), "tensor<[max_x]x[x]x[f32]x2xfp4_e2m1>"),
    (TensorType((128, "S"), fp6 @ accum(f64, rounding="stochastic")),
     "tensor<128x[S]xfp6_e2m3, #policy<accum=f64, rounding=stochastic>>"),
    (TensorType((4,), Policy(fp8, overflow="saturate", scaling="mx", reduction="exact")),
     "tensor<4xfp8_e4m3, #policy<overflow=saturate, scaling=mx, reduction=exact>>"),
    (TensorType((4,), Policy(f64, accum=f32)), "tensor<4xf64, #policy<accum=f32>>"),
    (TensorType((4,), Policy(bf16, accum=f32)), "tensor<4xbf16>"),  # explicit default = default
    (F32, "f32"),
    (ScalarType("fp8_e5m2"), "fp8_e5m2"),
    (ScalarType(Policy(bf16, rounding="rtz")), "scalar<bf16, #policy<rounding=rtz>>"),
    (IndexType(), "index"),
    (FunctionType((), ()), "() -> ()"),
    (FunctionType((TensorType((4,), f32), F32), (TensorType((4,), f32),)), "(tensor<4xf32>, f32) -> tensor<4xf32>"),
    (FunctionType((F32,), (F32, F32)), "(f32) -> (f32, f32)"),
    (FunctionType((F32,), (FunctionType((F32,), (F32,)),)), "(f32) -> ((f32) -> f32)"),
])
def test_type_text_and_parse_back(ty, text):
    assert str(ty) == text
    assert parse_type(text) == ty
    assert repr(ty) == f"{type(ty).__name__}({text})"


def test_parser_accepts_policy_fields_in_any_order_and_prints_them_in_order():
    ty = parse_type("tensor<4xfp8_e4m3, #policy<reduction=exact, rounding=rtz, accum=f16>>")
    assert str(ty) == "tensor<4xfp8_e4m3, #policy<accum=f16, rounding=rtz, reduction=exact>>"
    assert ty.policy == Policy(fp8, accum="f16", rounding="rtz", reduction="exact")


def test_types_are_immutable_values():
    a, b = TensorType(["B", 4], "bf16"), TensorType(("B", 4), bf16)
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != TensorType(("B", 4), Policy(bf16, rounding="rtz"))
    assert IndexType() == IndexType() and F32 != TensorType((), f32)
    with pytest.raises(AttributeError):
        a.shape = (1,)
    assert (a.rank, a.format.name, a.is_static, TensorType((2,), f32).is_static) == (2, "bf16", False, True)
    assert ScalarType("bf16").format is bf16


@pytest.mark.parametrize("make, message", [
    (lambda: TensorType((-1,), f32), "cannot be negative"),
    (lambda: TensorType((True,), f32), "must be an int or a symbol name"),
    (lambda: TensorType((1.5,), f32), "must be an int or a symbol name"),
    (lambda: TensorType(("a b",), f32), "is not a name"),
    (lambda: TensorType(("é",), f32), "is not a name"),
    (lambda: TensorType((1,), "fp7"), "unknown number format 'fp7'"),
    (lambda: TensorType((1,), f32, layout="#shard"), "a tensor layout is a ShardLayout"),
    (lambda: ScalarType("nope"), "unknown number format"),
    (lambda: FunctionType((f32,), ()), "a function type holds types"),
])
def test_malformed_types_are_ir_errors(make, message):
    with pytest.raises(IRError, match=message):
        make()


@given(types)
def test_random_types_round_trip(ty):
    assert parse_type(str(ty)) == ty
    assert str(parse_type(str(ty))) == str(ty)
