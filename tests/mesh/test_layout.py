"""ShardSpec → layout (MESH-SPEC-1/2) and the ``#shard<...>`` type syntax (MESH-LAYOUT-1)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera_ref import dist
from tessera_ref.errors import LayoutError, MeshError, TesseraError
from tessera_ref.ir.errors import IRError, IRParseError
from tessera_ref.ir import ShardLayout, TensorType, parse_type
from tessera_ref.ir.layout import PARTIAL_OPS
from tessera_ref.numerics import Policy

S = dist.ShardSpec


# -- partition names (MESH-SPEC-2) -------------------------------------------------------------------

@pytest.mark.parametrize("rank, expected", [
    (1, {"batch": 0, "row": 0, "col": None, "channel": None}),
    (2, {"batch": 0, "row": 0, "col": 1, "channel": 1}),
    (3, {"batch": 0, "row": 1, "col": 2, "channel": 1}),
    (4, {"batch": 0, "row": 2, "col": 3, "channel": 1}),
])
def test_partition_names(rank, expected):
    for name, dim in expected.items():
        spec = S((name,), ("tp",))
        if dim is None:
            with pytest.raises(LayoutError) as info:
                spec.layout(rank)
            assert info.value.fix and repr(name) in str(info.value)
            continue
        lay = spec.layout(rank)
        assert lay.dims == tuple(("tp",) if d == dim else () for d in range(rank))
        assert lay.partial == () and not lay.padded


def test_indices_tuples_and_reduce():
    assert S((1,), ("tp",)).layout(3).dims == ((), ("tp",), ())
    assert S((-1,), ("tp",)).layout(3).dims == ((), (), ("tp",))
    assert S(0, "tp").layout(2).dims == (("tp",), ())  # bare entries are one-element tuples
    lay = S(("row", "col"), ("tp", "pp")).layout(2)
    assert lay.dims == (("tp",), ("pp",)) and str(lay) == "#shard<[tp, pp]>"
    lay = S(("row",), (("dp", "tp"),)).layout(2)
    assert lay.dims == (("dp", "tp"), ()) and str(lay) == "#shard<[dp+tp, *]>"
    lay = S(("row",), ("dp", "tp"), reduce="sum").layout(2)
    assert lay.dims == (("dp",), ()) and lay.partial == ("tp",) and str(lay) == "#shard<[dp, *], partial(tp)>"
    lay = S(None, ("tp",), reduce="sum").layout(2)
    assert lay.dims == ((), ()) and lay.partial == ("tp",)
    lay = S(None, ("tp", ("dp", "pp")), reduce="max").layout(1)
    assert lay.partial == ("tp", "dp", "pp") and lay.partial_op == "max"
    assert str(lay) == "#shard<[*], partial(tp, dp, pp, op=max)>"
    assert S(None, replicate=True).layout(3) == ShardLayout.replicated(3) == S().layout(3)
    lay = S(("row",), ("tp",), pad=True).layout(2)
    assert lay.padded and str(lay) == "#shard<[tp, *], padded>"
    assert S(("row",), ("tp",)).partial_axes == () and S(None, ("tp",), reduce="sum").partial_axes == ("tp",)


def _fix(exc_type, fn):
    with pytest.raises(exc_type) as info:
        fn()
    assert isinstance(info.value, TesseraError) and info.value.fix, info.value
    return info.value


def test_spec_errors():
    mesh = dist.Mesh(("tp", "dp"), range(8), (4, 2))
    _fix(LayoutError, lambda: S(("col",), ("tp",)).layout(1))                  # col of a vector
    _fix(LayoutError, lambda: S(("row",), ("tp",), replicate=True))            # both
    _fix(LayoutError, lambda: S(("row", "col"), ("tp",)))                      # too few axes
    _fix(LayoutError, lambda: S(("row",), ("tp", "dp")))                       # extra axes without reduce
    _fix(LayoutError, lambda: S(None, ("tp",), reduce="mean"))                 # not a reduction
    _fix(LayoutError, lambda: S(("row",), ("tp",), reduce="sum"))              # reduce names no axis
    _fix(LayoutError, lambda: S(("batch", "row"), ("tp", "dp")).layout(2))     # one dimension twice
    _fix(LayoutError, lambda: S(("diag",), ("tp",)).layout(2))                 # unknown name
    _fix(LayoutError, lambda: S((2,), ("tp",)).layout(2))                      # index out of range
    _fix(LayoutError, lambda: S(("row", "col"), ("tp", "tp")).layout(2))       # axis used twice
    e = _fix(LayoutError, lambda: dist.tensor((6, 4), S(("row",), ("tp",)), mesh))  # uneven, no pad
    assert "6" in str(e) and "pad=True" in e.fix
    e = _fix(MeshError, lambda: dist.tensor((8, 4), S(("row",), ("pp",)), mesh))    # axis not in mesh
    assert "'pp'" in str(e)
    _fix(LayoutError, lambda: dist.tensor((8, 4), ShardLayout(((),)), mesh))        # wrong rank
    _fix(LayoutError, lambda: dist.tensor((8, 4), "row", mesh))                     # not a spec
    _fix(LayoutError, lambda: dist.tensor((8, 4), None, "mesh"))                    # not a mesh


def test_uneven_split_with_pad():
    mesh = dist.Mesh(("tp", "dp"), range(8), (4, 2))
    t = dist.tensor((6, 4), S(("row",), ("tp",), pad=True), mesh)
    assert t.local_shape == (2, 4) and t.layout.padded


# -- the #shard<...> syntax (MESH-LAYOUT-1) ------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "tensor<1024x1024xbf16, #shard<[*, *], partial(tp)>>",
    "tensor<576x1152xf32, #shard<[dp, tp]>>",
    "tensor<8xf32, #shard<[dp+tp]>>",
    "tensor<7x3xf32, #shard<[tp, *], padded>>",
    "tensor<4x4xf32, #shard<[*, *], partial(dp, tp, op=max)>>",
    "tensor<2x3x4xf16, #shard<[dp, *, tp+pp], partial(ep), padded>>",
    "tensor<[B]x64xbf16, #shard<[dp, *]>>",
    "tensor<f32, #shard<[]>>",
    "tensor<4x4xfp8_e4m3, #policy<accum=f16>, #shard<[tp, *]>>",
])
def test_text_round_trip(text):
    t = parse_type(text)
    assert str(t) == text
    assert parse_type(str(t)) == t
    assert isinstance(t.layout, ShardLayout)


def test_text_meaning():
    t = parse_type("tensor<8x8xbf16, #shard<[dp+tp, *], partial(pp, op=min), padded>>")
    assert t.layout == ShardLayout((("dp", "tp"), ()), ("pp",), "min", True)
    assert t.layout.split_axes == ("dp", "tp") and t.layout.varying_axes == {"dp", "tp", "pp"}
    assert t.layout.dim_of("tp") == 0 and t.layout.dim_of("pp") is None
    assert parse_type("tensor<8xf32>").layout is None
    # an unsharded type and a replicated one are different types
    assert parse_type("tensor<8xf32, #shard<[*]>>") != parse_type("tensor<8xf32>")


@pytest.mark.parametrize("text", [
    "tensor<8x8xf32, #shard<[tp]>>",                     # rank mismatch
    "tensor<8x8xf32, #shard<[tp, tp]>>",                 # axis twice
    "tensor<8x8xf32, #shard<[tp, *], partial(tp)>>",     # split and pending over one axis
    "tensor<8x8xf32, #shard<[tp, *], partial(dp, op=mean)>>",
])
def test_meaningless_layout_text_is_an_ir_error_with_a_fix(text):
    with pytest.raises(IRError) as info:
        parse_type(text)
    assert info.value.fix


@pytest.mark.parametrize("text, marker", [
    ("tensor<8x8xf32, #shard<[tp, *], sharded>>", "sharded"),
    ("tensor<8x8xf32, #shard<tp, *>>", "tp, *>"),
    ("tensor<8x8xf32, #shard<[tp, 3]>>", "3]"),
    ("tensor<8x8xf32, #shard<[tp, *]>", None),
    ("tensor<8x8xf32, #shard<[tp+, *]>>", ", *"),
])
def test_malformed_layout_text_points_at_the_error(text, marker):
    with pytest.raises(IRParseError) as info:
        parse_type(text)
    column = (text.index(marker) if marker else len(text)) + 1
    assert (info.value.line, info.value.column) == (1, column), str(info.value)


_AXES = ("dp", "tp", "pp", "ep", "sp")


@st.composite
def layouts(draw):
    rank = draw(st.integers(0, 4))
    axes = list(draw(st.permutations(_AXES)))
    dims = []
    for _ in range(rank):
        k = draw(st.integers(0, 2))
        dims.append(tuple(axes[:k]))
        del axes[:k]
    partial = tuple(axes[: draw(st.integers(0, len(axes)))])
    op = draw(st.sampled_from(PARTIAL_OPS)) if partial else "sum"
    return ShardLayout(tuple(dims), partial, op, draw(st.booleans()))


@given(layouts(), st.sampled_from(["f32", "bf16", "fp8_e4m3", "f16"]), st.data())
def test_random_layouts_round_trip(layout, fmt, data):
    shape = tuple(data.draw(st.integers(1, 64)) for _ in range(layout.rank))
    t = TensorType(shape, fmt, layout)
    u = parse_type(str(t))
    assert u == t and str(u) == str(t) and u.layout.partial_op == layout.partial_op


def test_layout_equality_ignores_nothing_but_spelling():
    a = ShardLayout(("tp", ()))
    assert a == ShardLayout((("tp",), ())) and hash(a) == hash(ShardLayout((("tp",), ())))
    assert a != ShardLayout((("tp",), ()), padded=True)
    assert a.replace(partial=("dp",)).partial_op == "sum"
    # a layout without a pending reduction has no reduction op: its text and value agree
    assert ShardLayout(((),), (), "max") == ShardLayout(((),))
    with pytest.raises(IRError):
        ShardLayout(((),), ("dp",), "mean")
    with pytest.raises(IRError):
        ShardLayout((("1x",),))


def test_policy_and_layout_in_one_type():
    p = Policy("bf16", reduction="exact")
    t = TensorType((4, 8), p, ShardLayout((("tp",), ()), ("dp",)))
    assert parse_type(str(t)) == t
    assert "#shard<[tp, *], partial(dp)>" in str(t)
    assert np.dtype(t.dtype).itemsize == 2
