"""MESH-COLL-3 … MESH-COLL-6: all_gather, broadcast, all_to_all and permute move data; the
global value is defined by the layout after each."""
import numpy as np
import pytest

from tessera_ref import dist
from tessera_ref.errors import CollectiveError, TesseraError
from tessera_conformance import assert_bits, clause, eager, not_applicable, run

from ._reference import AXES, expected_shard, largest_axis, mesh_of, wide

S = dist.ShardSpec


def _run_keep(backend, fn):
    """``fn()`` on the backend; returns (global value, layout, {device: shard}, shape)."""
    seen = {}

    def go():
        y = fn()
        seen.update(layout=y.layout, shape=y.shape, shards={d: y.shard(d) for d in range(y.mesh.size)})
        return y

    value = eager(backend, go)
    return value, seen["layout"], seen["shards"], seen["shape"]


def _data(mesh, rows_per_device=2, cols=3, seed=20):
    return wide(np.random.default_rng(seed), (rows_per_device * mesh.size, cols))


# -- all_gather (MESH-COLL-3) ----------------------------------------------------------------------

@clause("MESH-COLL-3")
def test_all_gather_joins_the_minor_axis(backend, mesh_shape):
    """Gathering a dimension's minor axis leaves its major axes; every rank of a group holds
    the joined block; the global value is unchanged."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    g = _data(mesh)
    x = dist.tensor(g.shape, S(("row",), (axes,)), mesh, data=g)
    dims = axes
    while dims:
        minor = dims[-1]
        value, layout, shards, _ = _run_keep(backend, lambda: dist.all_gather(x, minor))
        dims = dims[:-1]
        assert layout.dims == (dims, ())
        assert_bits(value, g)
        for d in range(mesh.size):
            assert_bits(shards[d], expected_shard(g, (dims, ()), axes, mesh_shape, d), f"{minor} device {d}")
        x = dist.tensor(g.shape, S(("row",), (dims,)), mesh, data=g) if dims else x
    if len(axes) > 1:
        y = dist.tensor(g.shape, S(("row",), (axes,)), mesh, data=g)
        with pytest.raises(TesseraError):
            eager(backend, lambda: dist.all_gather(y, axes[0]))  # not the minor axis


@clause("MESH-COLL-3")
def test_all_gather_removes_padding(backend, mesh_shape):
    """Once the dimension is whole the padding is gone; the traced gather agrees."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    n = 2 * p - 1 if p > 1 else 3
    g = wide(np.random.default_rng(21), (n, 2))
    x = dist.tensor(g.shape, S(("row",), (axis,), pad=True), mesh, data=g)
    value, layout, shards, shape = _run_keep(backend, lambda: dist.all_gather(x, axis))
    assert shape == (n, 2) and layout.dims == ((), ())
    assert_bits(value, g)
    for d in range(mesh.size):
        assert_bits(shards[d], g)
    assert_bits(run(backend, lambda v: dist.all_gather(v, axis), x), g)


# -- broadcast (MESH-COLL-4) -----------------------------------------------------------------------

@clause("MESH-COLL-4")
def test_broadcast_of_a_split_tensor_is_the_roots_block(backend, mesh_shape):
    """A tensor split over the axis becomes the root's block (its global shape the block's)."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    g = wide(np.random.default_rng(22), (2 * p, 3))
    x = dist.tensor(g.shape, S(("row",), (axis,)), mesh, data=g)
    root = p - 1
    value, layout, shards, shape = _run_keep(backend, lambda: dist.broadcast(x, axis, root=root))
    assert shape == (2, 3) and layout.dims == ((), ())
    assert_bits(value, g[2 * root:2 * root + 2])
    for d in range(mesh.size):
        assert_bits(shards[d], g[2 * root:2 * root + 2])


@clause("MESH-COLL-4")
def test_broadcast_of_a_pending_sum_is_the_roots_contribution(backend, mesh_shape):
    """A pending reduction over the axis becomes the root's contribution; the axis leaves partial."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    c = [wide(np.random.default_rng(23 + r), (4,)) for r in range(p)]
    x = dist.from_shards([c[mesh.coords(d)[axis]] for d in range(mesh.size)], S(None, (axis,), reduce="sum"), mesh)
    for root in range(p):
        value, layout, shards, _ = _run_keep(backend, lambda: dist.broadcast(x, axis, root=root))
        assert layout.partial == ()
        assert_bits(value, c[root])
        assert all(np.array_equal(s.view(np.uint32), c[root].view(np.uint32)) for s in shards.values())


@clause("MESH-COLL-4")
def test_broadcast_of_a_replicated_tensor_is_unchanged(backend, mesh_shape):
    """Replicated over the axis: unchanged, whatever the root."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    g = wide(np.random.default_rng(24), (3, 5))
    x = dist.tensor(g.shape, None, mesh, data=g)
    value, layout, _, shape = _run_keep(backend, lambda: dist.broadcast(x, axis, root=mesh.axis_size(axis) - 1))
    assert shape == g.shape and layout == x.layout
    assert_bits(value, g)


# -- all_to_all (MESH-COLL-5) ----------------------------------------------------------------------

@clause("MESH-COLL-5")
def test_all_to_all_moves_the_split(backend, mesh_shape):
    """Split along ``concat_dim`` over the axis in, split along ``split_dim`` out; same global value."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    g = wide(np.random.default_rng(25), (2 * p, 3 * p))
    x = dist.tensor(g.shape, S(("row",), (axis,)), mesh, data=g)
    value, layout, shards, _ = _run_keep(backend, lambda: dist.all_to_all(x, axis, split_dim=1, concat_dim=0))
    assert layout.dims == ((), (axis,))
    assert_bits(value, g)
    for d in range(mesh.size):
        assert_bits(shards[d], expected_shard(g, ((), (axis,)), axes, mesh_shape, d), f"device {d}")
    assert_bits(run(backend, lambda v: dist.all_to_all(v, axis, split_dim=1, concat_dim=0), x), g)
    with pytest.raises(TesseraError):
        eager(backend, lambda: dist.all_to_all(x, axis, split_dim=0, concat_dim=1))  # not split along dim 1


# -- permute (MESH-COLL-6) -------------------------------------------------------------------------

def _perm_cases(p):
    shift = 1 if p > 1 else 0
    return {"shift": (shift, {r: (r + shift) % p for r in range(p)}),
            "pairs": ([(0, p - 1)], {0: p - 1}),
            "dict": ({r: p - 1 - r for r in range(p)}, {r: p - 1 - r for r in range(p)})}


@pytest.mark.parametrize("kind", ["shift", "pairs", "dict"])
@clause("MESH-COLL-6")
def test_permute_moves_blocks(backend, mesh_shape, kind):
    """Rank ``s``'s block goes to rank ``d`` for each pair; a rank receiving nothing holds +0;
    the layout is kept and the global value is made of the moved blocks."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    perm, moves = _perm_cases(p)[kind]
    g = -np.abs(wide(np.random.default_rng(26), (2 * p, 3))) - np.float32(1)  # negative: a −0 fill would show
    x = dist.tensor(g.shape, S(("row",), (axis,)), mesh, data=g)
    value, layout, shards, _ = _run_keep(backend, lambda: dist.permute(x, axis, perm))
    assert layout == x.layout
    want = np.zeros_like(g)
    for s, d in moves.items():
        want[2 * d:2 * d + 2] = g[2 * s:2 * s + 2]
    assert_bits(value, want)
    for d in range(mesh.size):
        assert_bits(shards[d], expected_shard(want, ((axis,), ()), axes, mesh_shape, d))


@clause("MESH-COLL-6")
def test_permute_of_a_replicated_tensor_by_a_full_permutation_is_unchanged(backend, mesh_shape):
    """A full permutation of a tensor replicated over the axis leaves it unchanged."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    g = wide(np.random.default_rng(27), (3, 2))
    x = dist.tensor(g.shape, None, mesh, data=g)
    assert_bits(eager(backend, lambda: dist.permute(x, axis, 1)), g)


@clause("MESH-COLL-6")
def test_permute_mistakes(backend, mesh_shape):
    """Sending or receiving twice, a rank outside the axis, a pending reduction over the axis: errors."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    if p < 2:
        not_applicable("needs two ranks on an axis")
    g = np.ones((2 * p, 2), np.float32)
    x = dist.tensor(g.shape, S(("row",), (axis,)), mesh, data=g)
    pending = dist.from_shards([np.ones(2, np.float32)] * mesh.size, S(None, (axis,), reduce="sum"), mesh)
    for call in (lambda: dist.permute(x, axis, [(0, 1), (0, p - 1 if p > 2 else 0)]),
                 lambda: dist.permute(x, axis, [(0, 1), (p - 1, 1)]),
                 lambda: dist.permute(x, axis, [(0, p)]),
                 lambda: dist.permute(pending, axis, 1)):
        with pytest.raises(CollectiveError):
            eager(backend, call)
