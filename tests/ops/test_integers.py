"""Integer element kinds (GRAPH-TYPE-4), their arithmetic (GRAPH-EW-6) and casts (GRAPH-CAST-2)
through the front end, the IR text and distributed tensors; expected values from Python ints."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, jit, op
from tessera_ref.errors import DTypeError
from tessera_ref.ir import TensorType, parse_module
from tessera_ref.ir.types import I32, INDEX, UI8, element_arg


def test_kind_names_and_aliases():
    assert element_arg("int64") is INDEX and element_arg("i32") is I32 and element_arg("uint8") is UI8
    assert element_arg(np.dtype(np.int32)) is I32
    assert str(TensorType((2, 3), "i32")) == "tensor<2x3xi32>" and str(TensorType((4,), "ui8")) == "tensor<4xui8>"


def test_integer_types_round_trip_through_the_ir_text():
    f = jit(lambda a, b: op.less(a + b, 7))
    f(np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32))
    text = f.inspect_ir("graph")
    assert "tensor<4xi32>" in text
    assert str(parse_module(text)) == text


def test_dist_tensor_of_int32_data_keeps_its_kind_and_values():
    """The crash of issue 28 (an int32 array in dist.tensor): now an i32 tensor, split like any other."""
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("dp", "tp"), shape=(2, 2))
    ids = np.arange(24, dtype=np.int32).reshape(4, 6)
    t = dist.tensor(ids.shape, layout=dist.ShardSpec(("row",), ("dp",)), mesh=mesh, data=ids)
    assert str(t.type).startswith("tensor<4x6xi32")
    assert t.numpy().dtype == np.int32 and (t.numpy() == ids).all()
    assert ((t + 1).numpy() == ids + 1).all() and (t + 1).type.format is I32
    a = dist.tensor((3,), mesh=mesh, dtype="uint8", data=[1, 2, 255])
    assert a.type.format is UI8 and list((a + 1).numpy()) == [2, 3, 0]


def test_weak_int_scalars_take_the_integer_kind_and_floats_refuse():
    x = tr.asarray(np.array([250, 3], np.uint8))
    assert (x + 10).type.format is UI8 and list((x + 10).data) == [4, 13]
    with pytest.raises(DTypeError, match="different element types"):
        x * 0.5


def test_out_of_range_integer_data_names_the_value():
    with pytest.raises(DTypeError, match=r"2147483648 does not fit i32"):
        tr.asarray([2 ** 31], dtype="i32")
    with pytest.raises(DTypeError, match="holds integers"):
        tr.asarray([1.5], dtype="i32")


def test_integer_results_have_no_derivative():
    from tessera_ref.ops import PRIMITIVES
    a = tr.asarray(np.array([1, 2], np.int32))
    r = op.add(a, a)
    assert PRIMITIVES["add"].vjp({}, (a, a), (r,), (r,)) == (None, None)
    assert PRIMITIVES["mul"].jvp({}, (a, a), (a, a), (r,)) == (None,)


def test_cast_of_integers_to_bool_and_back():
    x = tr.asarray(np.array([0, 3, -1], np.int32))
    assert list(op.cast(x, "i1").data) == [False, True, True]
    assert list(op.cast(op.cast(x, "i1"), "ui8").data) == [0, 1, 1]
