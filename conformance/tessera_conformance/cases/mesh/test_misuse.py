"""MESH-COLL-8: collectives on operands that are not what they expect warn or fail, as tabled."""
import warnings

import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_ref.errors import CollectiveError, CollectiveWarning
from tessera_ref.numerics import Policy
from tessera_conformance import assert_bits, clause, eager, not_applicable

from ._reference import AXES, expected_shard, largest_axis, mesh_of, wide

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")


def _warns_here(backend, call):
    """``call()`` on the backend warns a CollectiveWarning attributed to this file; its value."""
    with pytest.warns(CollectiveWarning) as record:
        value = eager(backend, call)
    assert any(w.filename == __file__ for w in record), [w.filename for w in record]
    return value


@pytest.mark.parametrize("name, seed", [("all_reduce", 40), ("all_gather", 43)])
@clause("MESH-COLL-8")
def test_a_collective_with_nothing_to_do_over_the_axis_warns_and_keeps_the_value(backend, mesh_shape, name, seed):
    """all_reduce over an axis the tensor is replicated on, all_gather over an axis that splits
    nothing: a warning at the user's line, the value unchanged."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    g = wide(np.random.default_rng(seed), (3, 4))
    x = dist.tensor(g.shape, None, mesh, data=g)
    assert_bits(_warns_here(backend, lambda: getattr(dist, name)(x, axis)), g)


@clause("MESH-COLL-8")
def test_all_reduce_of_a_split_tensor_is_an_error(backend, mesh_shape):
    """all_reduce over an axis that splits the tensor: a CollectiveError; the tensor is intact."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    g = wide(np.random.default_rng(41), (2 * mesh.axis_size(axis), 3))
    x = dist.tensor(g.shape, S(("row",), (axis,)), mesh, data=g)
    with pytest.raises(CollectiveError) as info:
        eager(backend, lambda: dist.all_reduce(x, axis))
    assert info.value.fix
    assert_bits(eager(backend, x.numpy), g)


@clause("MESH-COLL-8")
def test_reduce_scatter_of_a_replicated_tensor_only_splits(backend, mesh_shape):
    """reduce_scatter of a replicated tensor: a warning; nothing reduced, split along ``dim``."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    axis = largest_axis(mesh_shape)
    g = wide(np.random.default_rng(42), (2 * mesh.axis_size(axis), 3))
    x = dist.tensor(g.shape, None, mesh, data=g)
    seen = {}

    def go():
        y = dist.reduce_scatter(x, axis, dim=0)
        seen.update(layout=y.layout, shards={d: y.shard(d) for d in range(mesh.size)})
        return y

    assert_bits(_warns_here(backend, go), g)
    assert seen["layout"].dims == ((axis,), ())
    for d in range(mesh.size):
        assert_bits(seen["shards"][d], expected_shard(g, ((axis,), ()), axes, mesh_shape, d))


@clause("MESH-COLL-8")
def test_reduce_scatter_of_a_split_tensor_is_unchanged(backend):
    """Seed 003 §3.5: ``C_partial`` of rows over dp by columns over tp is already split over tp;
    reduce_scatter warns and returns it unchanged — the unsharded product bit for bit."""
    mesh = dist.Mesh(axes=["tp", "dp"], devices=range(8))
    a = (np.arange(8 * 12, dtype=np.float32).reshape(8, 12) % 7) - np.float32(3)
    b = (np.arange(12 * 6, dtype=np.float32).reshape(12, 6) % 5) - np.float32(2)
    A = dist.tensor(a.shape, S(("row",), ("dp",)), mesh, data=a)
    B = dist.tensor(b.shape, S(("col",), ("tp",)), mesh, data=b)
    seen = {}

    def go():
        c = op.matmul(A, B)
        seen["before"] = c.layout
        d = dist.collective.reduce_scatter(c, axis="tp")
        seen["after"] = d.layout
        return d

    got = _warns_here(backend, go)
    assert seen["before"] == seen["after"] and seen["after"].dims == (("dp",), ("tp",))
    want = np.zeros((8, 6), np.float64)
    for k in range(12):  # small integers: every order gives the exact product
        want += np.outer(a[:, k], b[k, :])
    assert_bits(got, want.astype(np.float32))


@clause("MESH-COLL-8")
def test_all_gather_of_a_pending_sum_is_an_error(backend, mesh_shape):
    """Gathering contributions is not the value: a CollectiveError."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    x = dist.from_shards([np.ones(4, np.float32)] * mesh.size, S(None, (axis,), reduce="sum"), mesh)
    with pytest.raises(CollectiveError):
        eager(backend, lambda: dist.all_gather(x, axis))


@clause("MESH-COLL-8")
def test_moving_an_exact_pending_sum_is_an_error(backend, mesh_shape):
    """An exact pending sum (held exactly) may not be moved between devices before all_reduce."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    if len(axes) < 2:
        not_applicable("needs a second axis to move the pending sum over")
    pend, other = axes[-1], axes[0]
    n, m = 2 * mesh_shape[-1], 2 * mesh_shape[0]
    t = dist.tensor((n, m), S(("row",), (pend,)), mesh, dtype=EXACT, data=np.ones((n, m), np.float32))
    for call in (lambda s: dist.permute(s, other, 1), lambda s: dist.reduce_scatter(s, other, dim=0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CollectiveWarning)
            with pytest.raises(CollectiveError) as info:
                eager(backend, lambda: call(op.sum(t, axis=0)))
        assert "all_reduce" in info.value.fix
    assert_bits(eager(backend, lambda: dist.all_reduce(op.sum(t, axis=0), pend)), np.full(m, n, np.float32))


@pytest.mark.parametrize("name", ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "permute"])
@clause("MESH-COLL-8")
def test_an_axis_not_in_the_mesh_is_an_error_naming_the_axes(backend, mesh_shape, name):
    """Any collective over an axis the mesh lacks: a CollectiveError naming the mesh axes."""
    mesh = mesh_of(mesh_shape)
    x = dist.tensor((4, 4), None, mesh, data=np.ones((4, 4), np.float32))
    calls = {"all_reduce": lambda: dist.all_reduce(x, "ep"), "reduce_scatter": lambda: dist.reduce_scatter(x, "ep"),
             "all_gather": lambda: dist.all_gather(x, "ep"), "broadcast": lambda: dist.broadcast(x, "ep"),
             "all_to_all": lambda: dist.all_to_all(x, "ep", 0, 1), "permute": lambda: dist.permute(x, "ep", 1)}
    with pytest.raises(CollectiveError) as info:
        eager(backend, calls[name])
    assert all(repr(a) in info.value.fix or a in str(info.value) for a in mesh.axes)
