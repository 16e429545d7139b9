"""Redistribution (MESH-REDIST-1): any layout to any layout keeps the global value, bit for bit."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mesh_reference import expected_shard, fold_f32, same_bits
from tessera_ref import dist
from tessera_ref.errors import LayoutError
from tessera_ref.ir import ShardLayout

S = dist.ShardSpec
MESH = dist.Mesh(("dp", "tp", "pp"), range(12), (2, 3, 2))


@st.composite
def split_layout(draw, rank, padded):
    axes = list(draw(st.permutations(MESH.axes)))
    dims = []
    for _ in range(rank):
        k = draw(st.integers(0, min(2, len(axes))))
        dims.append(tuple(axes[:k]))
        del axes[:k]
    return ShardLayout(tuple(dims), padded=padded), axes


@settings(max_examples=60)
@given(data=st.data(), seed=st.integers(0, 1000))
def test_any_layout_to_any_layout(data, seed):
    rank = data.draw(st.integers(1, 3))
    padded = data.draw(st.booleans())
    src, free = data.draw(split_layout(rank, padded))
    dst, dst_free = data.draw(split_layout(rank, padded))
    # uneven sizes only where both layouts split the dimension over at most one axis (MESH-TENSOR-2)
    shape = tuple(data.draw(st.integers(1, 7)) if padded and len(src.dims[d]) < 2 and len(dst.dims[d]) < 2
                  else 12 * data.draw(st.integers(1, 2)) for d in range(rank))
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    # a pending sum over some of the axes the source leaves free: contributions per rank
    pending = tuple(free[: data.draw(st.integers(0, len(free)))])
    src = src.replace(partial=pending)
    t = dist.tensor(shape, src, MESH, data=x)
    want = t.numpy()
    keep = tuple(a for a in pending if a in dst_free and data.draw(st.booleans()))
    dst = dst.replace(partial=keep)
    y = dist.redistribute(t, dst)
    assert y.layout == dst
    assert same_bits(y.numpy(), want)
    assert not (src.padded or dst.padded) or all(k != "all_to_all" for k, _, _ in dist.redistribution_plan(src, dst))
    if not keep:
        for i in range(MESH.size):
            assert same_bits(y.shard(i), expected_shard(want, dst.dims, MESH.axes, MESH.shape, i, padded))


def test_plans():
    lay = lambda *dims, partial=(): ShardLayout(tuple(dims), partial)  # noqa: E731
    plan = dist.redistribution_plan
    assert plan(lay((), (), partial=("tp",)), lay(("tp",), ())) == [("reduce_scatter", "tp", 0)]
    assert plan(lay((), (), partial=("tp",)), lay((), ())) == [("all_reduce", "tp", None)]
    assert plan(lay(("dp", "tp"), ()), lay(("dp",), ("tp",))) == [("all_to_all", "tp", (1, 0))]  # moves, no gather
    assert plan(lay(("tp",), ("dp",)), lay(("dp",), ("tp",))) == [  # a swap: dim 1 is not free yet for tp
        ("all_gather", "tp", 0), ("all_to_all", "dp", (0, 1)), ("slice", "tp", 1)]
    padded = ShardLayout((("tp",), ()), padded=True)
    assert plan(padded, padded.replace(dims=((), ("tp",)))) == [("all_gather", "tp", 0), ("slice", "tp", 1)]
    assert plan(lay(("tp",), ()), lay(("tp", "pp"), ())) == [("slice", "pp", 0)]
    assert plan(lay(("tp", "pp"), ()), lay((), ())) == [("all_gather", "pp", 0), ("all_gather", "tp", 0)]
    assert plan(lay((), (), partial=("tp", "dp")), lay((), (), partial=("dp",))) == [("all_reduce", "tp", None)]
    with pytest.raises(LayoutError):
        plan(lay((), ()), lay((), (), partial=("tp",)))


def test_redistribute_a_pending_sum():
    c = [np.random.default_rng(r).standard_normal((6, 4)).astype(np.float32) for r in range(3)]
    P = dist.from_shards([c[MESH.coords(i)["tp"]] for i in range(12)], S(None, ("tp",), reduce="sum"), MESH)
    y = P.redistribute(S(("row",), ("tp",)))
    assert y.layout == S(("row",), ("tp",)).layout(2)
    assert same_bits(y.numpy(), fold_f32(c))
    y = P.redistribute(S(("col",), ("dp",)))
    assert same_bits(y.numpy(), fold_f32(c))


def test_padded_round_trip():
    x = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    t = dist.tensor((7, 5), S(), MESH, data=x)
    p = t.redistribute(S(("row", "col"), ("tp", "dp"), pad=True))
    assert p.local_shape == (math.ceil(7 / 3), math.ceil(5 / 2))
    back = p.redistribute(S())
    assert back.layout == S().layout(2) and same_bits(back.numpy(), x)
    with pytest.raises(LayoutError):
        p.redistribute(S(("row",), ("tp",)))  # 7 rows do not split evenly over 3 without padding
