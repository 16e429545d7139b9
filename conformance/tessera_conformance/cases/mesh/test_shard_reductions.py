"""MESH-SHARD-3: reductions over split dimensions leave a pending reduction of block results
(NUM-RED-2 per block, then the rank-order fold); the order-free ones give the unsharded bits."""
import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_ref.numerics import Policy
from tessera_conformance import assert_bits, clause, eager, run

from ._reference import (AXES, block_index, exact_sum_f32, fold, largest_axis, mesh_of, observe, rank_orders,
                         sum_ref, wide)

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")


def _data(rows, cols, seed):
    """Wide-range values with cancelling big terms spread over the rows."""
    x = wide(np.random.default_rng(seed), (rows, cols), -12, 13)
    x[::3] *= np.float32(2.0 ** 12)
    return x


def _block_sums(x, split_axes, mesh_shape, axes, dim=0):
    """Each rank's block of dimension ``dim`` summed by NUM-RED-2, in rank order over the axes."""
    sizes = dict(zip(axes, mesh_shape))
    p = int(np.prod([sizes[a] for a in split_axes]))
    n = x.shape[dim] // p
    out = []
    for coords in rank_orders(axes, mesh_shape, split_axes):
        b = block_index(coords, split_axes, sizes)
        out.append(sum_ref(np.take(x, np.arange(b * n, (b + 1) * n), axis=dim), dim))
    return out


@clause("MESH-SHARD-3")
def test_sum_over_a_split_dimension(backend, mesh_shape):
    """Each block summed in the canonical order, the block sums folded in rank order — for a
    dimension split over one axis and over all of them (folded row-major in mesh order)."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    x = _data(4 * mesh.size, 5, 70)
    for split in ((largest_axis(mesh_shape),), axes, tuple(reversed(axes))):
        X = dist.tensor(x.shape, S((0,), (split,)), mesh, data=x)
        value, facts = observe(backend, lambda: op.sum(X, axis=0))
        assert set(facts["partial"]) == set(split) and facts["layout"].dims == ((),)
        assert_bits(value, fold(_block_sums(x, split, mesh_shape, axes)), f"split over {split}")
    X = dist.tensor(x.shape, S((0,), (axes,)), mesh, data=x)
    assert_bits(run(backend, lambda v: dist.all_reduce(op.sum(v, axis=0), axes), X),
                fold(_block_sums(x, axes, mesh_shape, axes)))


@clause("MESH-SHARD-3")
def test_sum_over_two_split_dimensions_flattens_each_block(backend, mesh_shape):
    """A sum over every dimension of a 2-D split: each block flattened row-major and summed."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    a0, a1 = axes[0], axes[-1]
    if a0 == a1:
        a1 = None
    sizes = dict(zip(axes, mesh_shape))
    x = _data(4 * sizes[a0], 3 * (sizes[a1] if a1 else 1), 71)
    X = dist.tensor(x.shape, S(("row", "col"), (a0, a1)) if a1 else S(("row",), (a0,)), mesh, data=x)
    value, facts = observe(backend, lambda: op.sum(X))
    split = (a0, a1) if a1 else (a0,)
    assert set(facts["partial"]) == set(split) and facts["shape"] == ()
    parts = []
    for c in rank_orders(axes, mesh_shape, split):
        r, k = c[a0], c[a1] if a1 else 0
        block = x[4 * r:4 * r + 4, 3 * k:3 * k + 3]
        parts.append(sum_ref(block.reshape(-1)))
    assert_bits(value, fold(parts))


@clause("MESH-SHARD-3")
def test_a_pending_sum_stays_pending_under_sum(backend, mesh_shape):
    """sum of a pending sum: still pending; the value folds the per-rank sums."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    c = [_data(6, 40, 72 + r) for r in range(mesh.axis_size(axis))]
    P = dist.from_shards([c[mesh.coords(d)[axis]] for d in range(mesh.size)], S(None, (axis,), reduce="sum"), mesh)
    value, facts = observe(backend, lambda: op.sum(P, axis=1))
    assert facts["partial"] == (axis,)
    assert_bits(value, fold([sum_ref(v, 1) for v in c]))


@pytest.mark.parametrize("name", ["max", "min", "mean", "argmax", "argmin"])
@clause("MESH-SHARD-3")
def test_order_free_reductions_give_the_unsharded_bits(backend, mesh_shape, name):
    """max/min leave a pending max/min; mean, argmax, argmin gather first; all equal the
    unsharded result on the oracle."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    x = _data(4 * mesh.axis_size(axis), 6, 73)
    x[1, 0], x[-1, 1], x[0, 2], x[-2, 2] = np.nan, np.nan, -0.0, 0.0
    X = dist.tensor(x.shape, S(("row",), (axis,)), mesh, data=x)
    value, facts = observe(backend, lambda: getattr(op, name)(X, axis=0))
    if name in ("max", "min"):
        assert facts["partial"] == (axis,) and facts["layout"].partial_op == name
    else:
        assert facts["partial"] == ()
    assert_bits(value, eager("interp", lambda: getattr(op, name)(x, axis=0)))


@pytest.mark.parametrize("name", ["sum", "max", "mean"])
@clause("MESH-SHARD-3")
def test_unsplit_and_padded_dimensions_give_the_unsharded_bits(backend, mesh_shape, name):
    """A reduction over a dimension that is not split keeps the other split and gives the
    unsharded bits; so does any reduction of a padded split dimension (made whole first)."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    x = _data(4 * p, 70, 74)
    X = dist.tensor(x.shape, S(("row",), (axis,)), mesh, data=x)
    value, facts = observe(backend, lambda: getattr(op, name)(X, axis=1))
    assert facts["layout"].dims == ((axis,),) and facts["partial"] == ()
    assert_bits(value, eager("interp", lambda: getattr(op, name)(x, axis=1)))
    if name == "sum":
        assert_bits(value, sum_ref(x, 1))
    y = _data(2 * p + 1, 3, 75)
    Y = dist.tensor(y.shape, S(("row",), (axis,), pad=True), mesh, data=y)
    value, facts = observe(backend, lambda: getattr(op, name)(Y, axis=0))
    assert facts["partial"] == ()
    assert_bits(value, eager("interp", lambda: getattr(op, name)(y, axis=0)))


@clause("MESH-SHARD-3")
def test_exact_sum_over_a_split_dimension(backend, mesh_shape):
    """Under exact mode the split sum is the exact sum rounded once, whatever the split."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    x = _data(2 * mesh.size, 3, 76)
    want = exact_sum_f32(list(x))
    for split in ((largest_axis(mesh_shape),), axes):
        X = dist.tensor(x.shape, S((0,), (split,)), mesh, dtype=EXACT, data=x)
        assert_bits(eager(backend, lambda: dist.all_reduce(op.sum(X, axis=0), split)), want, str(split))
