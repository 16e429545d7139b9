"""take / scatter_add (GRAPH-TAKE-1, GRAPH-SCATTER-1, AD-TAKE-1, MESH-SHARD-TAKE-1): values
against NumPy indexing and a float64 loop, errors, costs, and the vocab-parallel embedding's
gradient and communication on a mesh."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, grad, jit, op
from tessera_ref.autodiff import communication_plan
from tessera_ref.errors import OpError, ShapeError
from tessera_ref.ops import PRIMITIVES, Call


def test_embedding_lookup_by_indexing_and_take_is_exact():
    table = np.random.default_rng(0).standard_normal((11, 6)).astype(np.float32)
    ids = np.random.default_rng(1).integers(0, 11, (3, 4, 5)).astype(np.int32)
    E = tr.asarray(table)
    assert op.take(E, ids).data.tobytes() == table[ids].tobytes()
    assert E[tr.asarray(ids)].data.tobytes() == table[ids].tobytes()
    assert jit(lambda e, i: e[i])(E, ids).data.tobytes() == table[ids].tobytes()


def test_out_of_range_ids_name_the_users_line_the_largest_id_and_the_size():
    with pytest.raises(OpError) as info:
        op.take(tr.asarray(np.zeros((4, 2), np.float32)), np.array([[0, 3], [7, 5]]))
    text = str(info.value)
    assert "largest index is 7" in text and "[0, 4)" in text and "test_gather.py" in text


def test_scatter_add_matches_a_float64_loop_for_exact_values_and_rejects_bad_shapes():
    u = np.random.default_rng(2).integers(-8, 8, (4, 3, 2)).astype(np.float32)
    ids = np.array([[0, 2, 2], [5, 0, 2], [1, 1, 1], [5, 5, 0]], np.int64)
    want = np.zeros((6, 2))
    for j, r in enumerate(ids.reshape(-1)):
        want[r] += u.reshape(-1, 2)[j].astype(np.float64)
    got = op.scatter_add(tr.asarray(u), ids, 6).data
    assert got.dtype == np.float32 and (got == want).all()
    with pytest.raises(ShapeError, match="ids' shape"):
        op.scatter_add(tr.asarray(u), ids[:, :2], 6)


def test_take_costs_no_flops_and_far_fewer_than_the_one_hot_matmul():
    from tessera_ref.ir import TensorType
    v, d, n = 32000, 64, 512
    take = PRIMITIVES["take"]
    t = (TensorType((v, d), "f32"), TensorType((n,), "i32"))
    out = take.infer_types({"axis": 0}, t)
    cost = take.cost(Call(take, {"axis": 0}, t, out))
    assert cost.flops == 0 and cost.bytes == n * 4 + 2 * n * d * 4
    assert 2 * n * v * d >= 100 * max(cost.flops, 1)


def test_vocab_parallel_embedding_gradient_is_exact_and_gathers_nothing():
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("dp", "tp"), shape=(2, 2))
    table = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
    ids = np.array([[0, 5, 3], [2, 2, 1], [4, 0, 7], [1, 3, 3]], np.int32)
    E = dist.tensor(table.shape, dist.ShardSpec(("row",), ("tp",)), mesh, data=table)
    I = dist.tensor(ids.shape, dist.ShardSpec(("row",), ("dp",)), mesh, data=ids)
    y = op.take(E, I)
    assert y.layout.partial == ("tp",) and y.numpy().tobytes() == table[ids].tobytes()
    g = grad(lambda e, i: op.sum(op.take(e, i) * op.take(e, i)))
    ge = g(E, I)
    want = np.zeros((8, 4))
    for r in ids.reshape(-1):
        want[r] += 2 * table[r].astype(np.float64)
    assert ge.layout == E.layout and np.allclose(ge.numpy(), want, rtol=1e-6)
    plan = communication_plan(g)
    assert {c.kind for c in plan.collectives} <= {"all_reduce"}, plan


def test_vocab_parallel_take_under_exact_reduction_gathers_per_device_blocks():
    """An exact-reduction table runs the per-device blocks too (not the stacked exact-sum path)."""
    from tessera_ref.numerics import Policy, get_format
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("dp", "tp"), shape=(2, 2))
    table = np.random.default_rng(4).standard_normal((8, 4)).astype(np.float32)
    E = dist.tensor(table.shape, dist.ShardSpec(("row",), ("tp",)), mesh,
                    Policy(get_format("f32"), reduction="exact"), data=table)
    ids = np.array([[0, 5], [7, 2]], np.int32)
    assert op.take(E, ids).numpy().tobytes() == table[ids].tobytes()


def test_embedding_gradient_under_exact_reduction_has_the_bits_of_one_device():
    """MESH-SHARD-TAKE-1: under reduction="exact" scatter_add gathers the dp-split ids and
    updates, so each row is the canonical fold of all its contributions in ascending source
    index — the bits of one device (a sum of per-device folds would round differently)."""
    from tessera_ref.numerics import Policy
    exact = Policy("f32", reduction="exact")
    rng = np.random.default_rng(7)
    table = rng.standard_normal((6, 4)).astype(np.float32)
    ids = rng.integers(0, 3, (8, 16)).astype(np.int32)  # every row named many times in each block
    w = rng.standard_normal((8, 16, 4)).astype(np.float32)

    def f(e, i):
        return op.sum(op.take(e, i) * tr.asarray(w, policy=exact))
    one = np.asarray(grad(f)(tr.asarray(table, policy=exact), ids))
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    E = dist.tensor(table.shape, dist.ShardSpec(("row",), ("tp",)), mesh, exact, data=table)
    I = dist.tensor(ids.shape, dist.ShardSpec(("row",), ("dp",)), mesh, data=ids)
    assert grad(f)(E, I).numpy().tobytes() == one.tobytes()
