"""MESH-SHARD-TAKE-1: take with the table split along its gather axis is a pending sum over
that axis whose fold is the unsharded take bit for bit; split ids keep their split; scatter_add
over split ids is a pending sum."""
import numpy as np

from tessera_ref import dist, op
from tessera_conformance import assert_bits, clause

from ._reference import AXES, largest_axis, mesh_of, observe

S = dist.ShardSpec


def _other(mesh_shape, big):
    return next((a for a, n in zip(AXES, mesh_shape) if a != big and n > 1), None)


@clause("MESH-SHARD-TAKE-1")
def test_vocab_parallel_take_is_a_pending_sum_equal_to_the_unsharded_take(backend, mesh_shape):
    mesh, big = mesh_of(mesh_shape), largest_axis(mesh_shape)
    other = _other(mesh_shape, big)
    v = 3 * mesh.axis_size(big)
    table = np.random.default_rng(5).standard_normal((v, 4)).astype(np.float32)
    table[1, 2] = -0.0
    ids = np.random.default_rng(6).integers(0, v, (2 * (mesh.axis_size(other) if other else 1), 3)).astype(np.int32)
    ids[0, 0] = 1
    T = dist.tensor(table.shape, S(("row",), (big,)), mesh, data=table)
    I = dist.tensor(ids.shape, S(("row",), (other,)) if other else None, mesh, data=ids)
    value, facts = observe(backend, lambda: op.take(T, I))
    assert facts["partial"] == (big,)
    assert facts["layout"].dims == (((other,) if other else ()), (), ())
    assert_bits(value, table[ids])


@clause("MESH-SHARD-TAKE-1")
def test_replicated_table_with_split_ids_is_local_and_scatter_add_is_pending(backend, mesh_shape):
    mesh, big = mesh_of(mesh_shape), largest_axis(mesh_shape)
    n = mesh.axis_size(big)
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    ids = (np.arange(2 * n * 3).reshape(2 * n, 3) % 5).astype(np.int64)
    T = dist.tensor(table.shape, None, mesh, data=table)
    I = dist.tensor(ids.shape, S(("row",), (big,)), mesh, data=ids)
    value, facts = observe(backend, lambda: op.take(T, I))
    assert facts["partial"] == () and facts["layout"].dims == ((big,), (), ())
    assert_bits(value, table[ids])
    U = dist.tensor(ids.shape + (4,), S((0,), (big,)), mesh, data=table[ids])
    value, facts = observe(backend, lambda: op.scatter_add(U, I, 5))
    assert facts["partial"] == (big,)
    counts = np.bincount(ids.reshape(-1), minlength=5).astype(np.float32)
    assert_bits(value, table * counts[:, None])  # small integers: every order gives these bits
