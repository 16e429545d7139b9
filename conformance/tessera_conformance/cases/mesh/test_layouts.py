"""MESH-LAYOUT-1, MESH-SPEC-1, MESH-SPEC-2: the ``#shard<…>`` text and its meaning, ShardSpec."""
import math

import numpy as np
import pytest

from tessera_ref import dist, jit, op
from tessera_ref.errors import LayoutError, MeshError
from tessera_ref.ir import ShardLayout, parse_module, parse_type
from tessera_ref.ir.errors import IRError, IRParseError
from tessera_conformance import assert_bits, clause, eager, not_applicable, oracle_only

from ._reference import AXES, expected_shard, fold, mesh_of

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("layouts, their text and ShardSpec are dist's (MESH-LAYOUT); no backend takes part")

S = dist.ShardSpec


def _layout_texts(axes: tuple) -> list:
    """Rank-2 layouts over the mesh axes: replicated, one axis, all axes major-first both ways,
    one axis per dimension."""
    texts = ["[*, *]", f"[{axes[-1]}, *]", f"[*, {axes[0]}]", f"[{'+'.join(axes)}, *]",
             f"[*, {'+'.join(reversed(axes))}]"]
    if len(axes) > 1:
        texts.append(f"[{axes[0]}, {'+'.join(axes[1:])}]")
    return texts


@LIBRARY
@pytest.mark.parametrize("text", [
    "tensor<1024x1024xbf16, #shard<[*, *], partial(tp)>>",
    "tensor<576x1152xf32, #shard<[dp, tp]>>",
    "tensor<8xf32, #shard<[dp+tp]>>",
    "tensor<7x3xf32, #shard<[tp, *], padded>>",
    "tensor<4x4xf32, #shard<[*, *], partial(dp, tp, op=max)>>",
    "tensor<2x3x4xf16, #shard<[dp, *, tp+pp], partial(ep, op=prod), padded>>",
    "tensor<f32, #shard<[]>>",
])
@clause("MESH-LAYOUT-1")
def test_print_parse_round_trip(backend, text):
    """Printing then parsing gives the same type and the same text."""
    t = parse_type(text)
    assert str(t) == text and parse_type(str(t)) == t


@LIBRARY
@clause("MESH-LAYOUT-1")
def test_text_meaning(backend):
    """Entries list the splitting axes major first; partial names the pending op; padded."""
    t = parse_type("tensor<8x8xbf16, #shard<[dp+tp, *], partial(pp, op=min), padded>>")
    assert t.layout == ShardLayout((("dp", "tp"), ()), ("pp",), "min", True)
    assert parse_type("tensor<8x8xf32, #shard<[*, *], partial(tp)>>").layout.partial_op == "sum"
    assert parse_type("tensor<8xf32, #shard<[*]>>") != parse_type("tensor<8xf32>")  # replicated ≠ one device
    assert ShardLayout(((),), (), "max") == ShardLayout(((),))  # nothing pending: no reduction op
    with pytest.raises(IRError):
        parse_type("tensor<8x8xf32, #shard<[tp, tp]>>")  # an axis at most once
    with pytest.raises(IRError):
        parse_type("tensor<8x8xf32, #shard<[tp, *], partial(tp)>>")


@LIBRARY
@pytest.mark.parametrize("text, marker", [
    ("tensor<8x8xf32, #shard<[tp, *], sharded>>", "sharded"),
    ("tensor<8x8xf32, #shard<tp, *>>", "tp, *>"),
    ("tensor<8x8xf32, #shard<[tp, 3]>>", "3]"),
    ("tensor<8x8xf32, #shard<[tp+, *]>>", ", *"),
])
@clause("MESH-LAYOUT-1")
def test_malformed_text_is_a_parse_error_at_its_column(backend, text, marker):
    """Malformed layout text is an IRParseError at its line and column."""
    with pytest.raises(IRParseError) as info:
        parse_type(text)
    assert (info.value.line, info.value.column) == (1, text.index(marker) + 1)


@clause("MESH-LAYOUT-1")
def test_blocks_follow_the_layout(backend, mesh_shape):
    """The device at ``(c_a, c_b)`` holds block ``c_a·p_b + c_b`` of a dimension split over
    ``a+b``; every mesh with the axes takes the same layout text."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    n = math.prod(mesh_shape)
    x = np.arange(2 * n * n, dtype=np.float32).reshape(2 * n, n) - np.float32(n * n)
    for entries in _layout_texts(axes):
        ty = parse_type(f"tensor<{2 * n}x{n}xf32, #shard<{entries}>>")
        t = dist.tensor(x.shape, ty.layout, mesh, data=x)
        assert str(t.type) == str(ty)
        for d in range(mesh.size):
            assert_bits(t.shard(d), expected_shard(x, ty.layout.dims, axes, mesh_shape, d), f"{entries} {d}")
        assert_bits(eager(backend, t.numpy), x)


@pytest.mark.parametrize("op_", ["sum", "max", "min", "prod"])
@clause("MESH-LAYOUT-1")
def test_pending_reduction_is_the_fold_of_local_values(backend, mesh_shape, op_):
    """``partial(axes, op=…)``: the global value folds the devices' local values (MESH-COLL-1)."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    rng = np.random.default_rng(2)
    c = [(np.float32(1) + rng.standard_normal(6).astype(np.float32) / np.float32(8)) for _ in range(mesh.size)]
    special = np.float32("nan") if op_ in ("max", "min") else np.float32(1.5)  # NaN wins max/min
    c[0][0], c[-1][1], c[0][2], c[-1][2] = np.float32(-0.0), special, np.float32(0.0), np.float32(-0.0)
    suffix = "" if op_ == "sum" else f", op={op_}"
    lay = parse_type(f"tensor<6xf32, #shard<[*], partial({', '.join(axes)}{suffix})>>").layout
    x = dist.from_shards(c, lay, mesh)
    assert_bits(eager(backend, x.numpy), fold(c, op_))


@clause("MESH-LAYOUT-1")
def test_padded_blocks_are_ceil_long(backend, mesh_shape):
    """``padded``: blocks of ``ceil(n/p)``; the global value ignores the padding."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    p = mesh_shape[-1]
    n = 2 * p + 1 if p > 1 else 3
    x = np.arange(1, 3 * n + 1, dtype=np.float32).reshape(n, 3)
    ty = parse_type(f"tensor<{n}x3xf32, #shard<[{axes[-1]}, *], padded>>")
    t = dist.tensor(x.shape, ty.layout, mesh, data=x)
    assert t.local_shape == (-(-n // p), 3)
    for d in range(mesh.size):
        assert_bits(t.shard(d), expected_shard(x, ty.layout.dims, axes, mesh_shape, d, padded=True))
    assert_bits(eager(backend, t.numpy), x)


@clause("MESH-LAYOUT-1")
def test_traced_ir_carries_the_layouts(backend, mesh_shape):
    """A traced sharded function prints its layouts in the types; the text parses back."""
    mesh = mesh_of(mesh_shape)
    axis = AXES[len(mesh_shape) - 1]
    n = mesh_shape[-1]
    x = dist.tensor((4 * n, 3), S(("row",), (axis,)), mesh, data=np.ones((4 * n, 3), np.float32))
    f = jit(lambda v: op.sum(v, axis=0), backend=backend)
    eager(backend, f, x)
    text = f.inspect_ir("graph")
    assert f"tensor<{4 * n}x3xf32, #shard<[{axis}, *]>>" in text
    assert f"tensor<3xf32, #shard<[*], partial({axis})>>" in text
    assert str(parse_module(text)) == text


# -- ShardSpec (MESH-SPEC-1) ------------------------------------------------------------------------

@LIBRARY
@pytest.mark.parametrize("spec, rank, text", [
    (S(("row",), ("dp", "tp"), reduce="sum"), 2, "#shard<[dp, *], partial(tp)>"),
    (S(None, ("tp",), reduce="sum"), 2, "#shard<[*, *], partial(tp)>"),
    (S(None, ("tp", ("dp", "pp")), reduce="max"), 1, "#shard<[*], partial(tp, dp, pp, op=max)>"),
    (S(("row", "col"), ("tp", "pp")), 2, "#shard<[tp, pp]>"),
    (S(("row",), (("dp", "tp"),)), 2, "#shard<[dp+tp, *]>"),
    (S((-1,), ("tp",)), 3, "#shard<[*, *, tp]>"),
    (S((1,), ("tp",)), 3, "#shard<[*, tp, *]>"),
    (S(None, replicate=True), 3, "#shard<[*, *, *]>"),
    (S(), 2, "#shard<[*, *]>"),
    (S(("row",), ("tp",), pad=True), 2, "#shard<[tp, *], padded>"),
])
@clause("MESH-SPEC-1")
def test_shardspec_spells_a_layout(backend, spec, rank, text):
    """ShardSpec resolved against a rank is the layout the spec names."""
    assert str(spec.layout(rank)) == text


@LIBRARY
@pytest.mark.parametrize("make", [
    lambda: S(("row",), ("tp",), replicate=True),           # partition and replicate
    lambda: S(("row", "col"), ("tp",)),                     # fewer axes than dimensions
    lambda: S(("row",), ("tp", "dp")),                      # extra axes without reduce
    lambda: S(("row",), ("tp",), reduce="sum"),             # reduce without extra axes
    lambda: S(None, ("tp",), reduce="mean"),                # not sum max min prod
    lambda: S(("batch", "row"), ("tp", "dp")).layout(2),    # a dimension twice
    lambda: S((2,), ("tp",)).layout(2),                     # a dimension the rank lacks
    lambda: S(("row", "col"), ("tp", "tp")).layout(2),      # an axis twice
])
@clause("MESH-SPEC-1")
def test_shardspec_mistakes_are_layout_errors(backend, make):
    """Each misuse listed by the clause is a LayoutError with a fix."""
    with pytest.raises(LayoutError) as info:
        make()
    assert info.value.fix


@LIBRARY
@clause("MESH-SPEC-1")
def test_axis_not_in_the_mesh_is_a_mesh_error(backend, mesh_shape):
    """An axis not in the mesh is a MeshError when the tensor is made."""
    mesh = mesh_of(mesh_shape)
    with pytest.raises(MeshError):
        dist.tensor((4, 4), S(("row",), ("ep",)), mesh, data=np.zeros((4, 4), np.float32))


@clause("MESH-SPEC-1")
def test_pending_spec_over_all_axes_folds(backend, mesh_shape):
    """``ShardSpec(("row",), (a, b…), reduce="sum")``: rows split over ``a``, a sum pending over the rest."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    if len(axes) < 2:
        not_applicable("needs a second mesh axis for the pending sum")
    spec = S(("row",), axes, reduce="sum")
    assert spec.layout(2) == ShardLayout(((axes[0],), ()), axes[1:])
    rng = np.random.default_rng(3)
    p0 = mesh_shape[0]
    blocks = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(mesh.size)]
    t = dist.from_shards(blocks, spec, mesh)
    assert t.shape == (2 * p0, 3)
    rows = []
    for c0 in range(p0):
        members = [d for d in range(mesh.size) if d // (mesh.size // p0) == c0]
        rows.append(fold([blocks[d] for d in members]))
    assert_bits(eager(backend, t.numpy), np.concatenate(rows))


# -- partition names (MESH-SPEC-2) -----------------------------------------------------------------

@LIBRARY
@pytest.mark.parametrize("rank, table", [
    (1, {"batch": 0, "row": 0, "col": None, "channel": None}),
    (2, {"batch": 0, "row": 0, "col": 1, "channel": 1}),
    (3, {"batch": 0, "row": 1, "col": 2, "channel": 1}),
    (4, {"batch": 0, "row": 2, "col": 3, "channel": 1}),
])
@clause("MESH-SPEC-2")
def test_partition_names(backend, rank, table):
    """batch, row, col, channel name the dimensions of the table; a vector has no col."""
    for name, dim in table.items():
        spec = S((name,), ("tp",))
        if dim is None:
            with pytest.raises(LayoutError):
                spec.layout(rank)
            continue
        assert spec.layout(rank).dims == tuple(("tp",) if d == dim else () for d in range(rank))


@LIBRARY
@clause("MESH-SPEC-2")
def test_partition_names_split_the_data(backend, mesh_shape):
    """``col`` of a rank-3 tensor splits its last dimension: the blocks say so."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    p = mesh_shape[-1]
    x = np.arange(2 * 3 * 2 * p, dtype=np.float32).reshape(2, 3, 2 * p)
    t = dist.tensor(x.shape, S(("col",), (axes[-1],)), mesh, data=x)
    for d in (0, mesh.size - 1):
        assert_bits(t.shard(d), expected_shard(x, ((), (), (axes[-1],)), axes, mesh_shape, d))
