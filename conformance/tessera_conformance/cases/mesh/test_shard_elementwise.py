"""MESH-SHARD-2: elementwise and linear ops — how splits propagate, which pending sums are kept,
and the value of a kept one (the fold of the per-rank results)."""
import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_conformance import assert_bits, clause, eager, not_applicable, run

from ._reference import AXES, NAN, cancelling, fold, largest_axis, mesh_of, observe, wide

S = dist.ShardSpec


def _pending(mesh, axis, contributions, op_="sum"):
    """A reduction pending over ``axis``: rank ``r`` of each group holds ``contributions[r]``."""
    shards = [contributions[mesh.coords(d)[axis]] for d in range(mesh.size)]
    return dist.from_shards(shards, S(None, (axis,), reduce=op_), mesh)


def _f32(fn, *args):
    with np.errstate(all="ignore"):
        return fn(*[np.asarray(a, np.float32) for a in args]).astype(np.float32)


@clause("MESH-SHARD-2")
def test_splits_follow_the_first_operand_that_splits_each_dimension(backend, mesh_shape):
    """Operands align right; each output dimension takes the first split over an axis not yet
    taken; size-1 dimensions are whole; the values are the unsharded op's."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    a0, a1 = axes[0], axes[-1]
    n = 2 * mesh.size  # no size-1 dimension (those are whole)
    rng = np.random.default_rng(60)
    x, y, z, w = wide(rng, (2 * n, n)), wide(rng, (n,)), wide(rng, (2 * n, n)), wide(rng, (2 * n, 1))
    X = dist.tensor(x.shape, S(("row",), (a1,)), mesh, data=x)
    Y = dist.tensor(y.shape, S((0,), (a0,)), mesh, data=y)
    Z = dist.tensor(z.shape, S(("col",), (a1,)), mesh, data=z)
    W = dist.tensor(w.shape, S(("row",), (a1,)), mesh, data=w)
    col = (a0,) if a0 != a1 else ()
    cases = [(lambda: X * Y, np.multiply, (x, y), ((a1,), col)),
             (lambda: Y * X, np.multiply, (y, x), ((a1,), col)),
             (lambda: X + Z, np.add, (x, z), ((a1,), ())),
             (lambda: Z - X, np.subtract, (z, x), ((a1,), ())),
             (lambda: X / W, np.divide, (x, w), ((a1,), ())),
             (lambda: op.maximum(Z, Y), np.maximum, (z, y), ((), (a1,)))]
    for make, fn, args, dims in cases:
        value, facts = observe(backend, make)
        assert facts["layout"].dims == dims
        assert_bits(value, _f32(fn, *args))


@clause("MESH-SHARD-2")
def test_padded_carries_over(backend, mesh_shape):
    """A padded operand gives a padded result with the unsharded values."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    n = 2 * mesh.axis_size(axis) + 1
    x = wide(np.random.default_rng(61), (n, 3))
    X = dist.tensor(x.shape, S(("row",), (axis,), pad=True), mesh, data=x)
    value, facts = observe(backend, lambda: X * X + 1.0)
    assert facts["layout"].padded and facts["layout"].dims == ((axis,), ())
    assert_bits(value, _f32(lambda u: u * u + np.float32(1), x))


def _pair(mesh_shape, seed):
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    rng = np.random.default_rng(seed)
    p = mesh.axis_size(axis)
    c, d = cancelling(rng, p, (4, 6)), cancelling(rng, p, (4, 6))
    return mesh, axis, c, d, wide(rng, (6,), -4, 5)


@clause("MESH-SHARD-2")
def test_linear_ops_keep_a_pending_sum(backend, mesh_shape):
    """add/sub/neg of pending sums, mul by one whole operand, div of a pending dividend: still
    pending; the value folds the per-rank results, each rounded into storage first."""
    mesh, axis, c, d, w = _pair(mesh_shape, 62)
    P, Q = _pending(mesh, axis, c), _pending(mesh, axis, d)
    W = dist.tensor(w.shape, None, mesh, data=w)
    cases = [(lambda: P + Q, [_f32(np.add, a, b) for a, b in zip(c, d)]),
             (lambda: P - Q, [_f32(np.subtract, a, b) for a, b in zip(c, d)]),
             (lambda: -P, [-a for a in c]),
             (lambda: P * W, [_f32(np.multiply, a, w) for a in c]),
             (lambda: W * P, [_f32(np.multiply, w, a) for a in c]),
             (lambda: P * 3.0, [_f32(np.multiply, a, np.float32(3)) for a in c]),
             (lambda: P / W, [_f32(np.divide, a, w) for a in c])]
    for make, per_rank in cases:
        value, facts = observe(backend, make)
        assert facts["partial"] == (axis,)
        assert_bits(value, fold(per_rank))


@clause("MESH-SHARD-2")
def test_other_cases_carry_the_reduction_out_first(backend, mesh_shape):
    """A whole operand of add, a pending divisor, a product of two pending sums, a non-linear op:
    the pending sum is folded first and the op sees the reduced value."""
    mesh, axis, c, d, w = _pair(mesh_shape, 63)
    P, Q = _pending(mesh, axis, c), _pending(mesh, axis, d)
    W = dist.tensor(w.shape, None, mesh, data=w)
    sc, sd = fold(c), fold(d)
    cases = [(lambda: P + W, _f32(np.add, sc, w)), (lambda: W / P, _f32(np.divide, w, sc)),
             (lambda: P * Q, _f32(np.multiply, sc, sd)), (lambda: op.maximum(P, 0.0), _f32(np.maximum, sc, 0.0))]
    for make, want in cases:
        value, facts = observe(backend, make)
        assert facts["partial"] == ()
        assert_bits(value, want)
    value, facts = observe(backend, lambda: op.exp(P))
    assert facts["partial"] == ()
    assert_bits(value, eager("interp", lambda: op.exp(sc)))  # the oracle's exp of the reduced value


@clause("MESH-SHARD-2")
def test_a_pending_max_is_carried_out_next_to_a_pending_sum(backend, mesh_shape):
    """A pending max times a pending sum: the max is reduced, the sum stays pending."""
    mesh, axis, c, d, _ = _pair(mesh_shape, 64)
    P, M = _pending(mesh, axis, c), _pending(mesh, axis, d, "max")
    m = fold(d, "max")
    value, facts = observe(backend, lambda: M * P)
    assert facts["partial"] == (axis,) and facts["layout"].partial_op == "sum"
    assert_bits(value, fold([_f32(np.multiply, m, a) for a in c]))
    value, facts = observe(backend, lambda: M + P)
    assert facts["partial"] == ()
    assert_bits(value, _f32(np.add, m, fold(c)))


@clause("MESH-SHARD-2")
def test_a_non_finite_per_rank_result_gives_the_folds_value(backend, mesh_shape):
    """``P · ∞`` with a zero contribution: the per-rank NaN folds to NaN where reducing first
    would give ∞."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    if p < 2:
        not_applicable("needs two ranks")
    c = [np.full(2, 1.0 if r == 0 else 0.0, np.float32) for r in range(p)]
    value, facts = observe(backend, lambda: _pending(mesh, axis, c) * np.float32(np.inf))
    assert facts["partial"] == (axis,)
    assert_bits(value, np.full(2, NAN))


@clause("MESH-SHARD-2")
def test_traced_linear_ops(backend, mesh_shape):
    """The traced program keeps the same pending sums and gives the same bits."""
    mesh, axis, c, d, _ = _pair(mesh_shape, 65)
    P, Q = _pending(mesh, axis, c), _pending(mesh, axis, d)
    got = run(backend, lambda u, v: dist.all_reduce((u + v) * 2.0 - u, axis), P, Q)
    per_rank = [_f32(lambda a, b: (a + b) * np.float32(2) - a, a, b) for a, b in zip(c, d)]
    assert_bits(got, fold(per_rank))


@pytest.mark.parametrize("scalar", [2.5, np.float32(-0.0), 3])
@clause("MESH-SHARD-2")
def test_scalars_are_weak_and_replicated(backend, mesh_shape, scalar):
    """A Python or NumPy scalar operand is replicated and takes the tensor's format."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    x = wide(np.random.default_rng(66), (2 * mesh.axis_size(axis), 3))
    X = dist.tensor(x.shape, S(("row",), (axis,)), mesh, data=x)
    value, facts = observe(backend, lambda: X - scalar)
    assert facts["type"].format.name == "f32" and facts["layout"].dims == ((axis,), ())
    assert_bits(value, _f32(np.subtract, x, np.float32(scalar)))
