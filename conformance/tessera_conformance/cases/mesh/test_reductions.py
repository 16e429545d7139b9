"""MESH-COLL-1, MESH-COLL-2: all_reduce and reduce_scatter fold in rank order in the accum format
and round once; exact mode is the exactly rounded sum on every mesh."""
import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_ref.errors import CollectiveError
from tessera_ref.numerics import Policy, as_policy
from tessera_conformance import assert_bits, clause, eager, not_applicable, run

from ._reference import (AXES, BF16, cancelling, exact_sum_f32, expected_shard, fold, fold_groups, largest_axis,
                         mesh_of)

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")


def _pending_all(mesh, contributions, dtype=None, op_="sum"):
    """A reduction pending over every mesh axis; device ``d`` contributes ``contributions[d]``."""
    return dist.from_shards(contributions, S(None, mesh.axes, reduce=op_), mesh, dtype=dtype)


def _subsets(axes):
    """Some non-empty subsets of the mesh axes: each one alone, the last two, all."""
    out = [(a,) for a in axes] + ([axes[-2:]] if len(axes) > 2 else []) + [axes]
    return list(dict.fromkeys(out))


#: Contribution shapes: a block, and one element (where a sum over the ranks is a contiguous one).
SHAPES = [(4, 3), (1,)]


@pytest.mark.parametrize("shape", SHAPES, ids=["block", "element"])
@clause("MESH-COLL-1")
def test_all_reduce_folds_each_group_in_rank_order(backend, mesh_shape, shape):
    """Reducing some axes folds each group in rank order and leaves the other axes pending
    (``numpy()`` then folds those); the global value shows both folds."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    c = cancelling(np.random.default_rng(10), mesh.size, shape)
    x = _pending_all(mesh, c)
    for sub in _subsets(axes):
        rest = tuple(a for a in axes if a not in sub)
        seen = {}

        def go():
            y = dist.all_reduce(x, sub)
            seen["partial"] = y.layout.partial
            return y

        got = eager(backend, go)
        step = fold_groups(c, axes, mesh_shape, sub)
        want = fold_groups(step, axes, mesh_shape, rest)[0] if rest else step[0]
        assert_bits(got, want, f"all_reduce over {sub}")
        assert seen["partial"] == rest


@clause("MESH-COLL-1")
def test_shards_after_a_partial_all_reduce(backend, mesh_shape):
    """After reducing one axis every device holds its group's fold (its remaining contribution)."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    c = cancelling(np.random.default_rng(11), mesh.size, (5,))
    x = _pending_all(mesh, c)
    want = fold_groups(c, axes, mesh_shape, axes[-1])
    with_backend = {}

    def go():
        y = dist.all_reduce(x, axes[-1])
        with_backend.update({d: y.shard(d) for d in range(mesh.size)})
        return y.numpy()

    eager(backend, go)
    for d in range(mesh.size):
        assert_bits(with_backend[d], want[d], f"device {d}")


@clause("MESH-COLL-1")
def test_all_at_once_differs_from_one_axis_at_a_time(backend, mesh_shape):
    """``numpy()`` of a tensor pending over several axes folds them at once in row-major rank
    order; reducing one axis at a time rounds after each (the data here tell them apart)."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    if len(axes) < 2:
        not_applicable("needs two mesh axes")
    c = cancelling(np.random.default_rng(12), mesh.size, (16,))
    x = _pending_all(mesh, c)
    assert_bits(eager(backend, x.numpy), fold(c))
    assert_bits(eager(backend, lambda: dist.all_reduce(x, axes)), fold(c))
    stepwise = eager(backend, lambda: dist.all_reduce(dist.all_reduce(x, axes[-1]), axes[:-1]))
    rows = fold_groups(c, axes, mesh_shape, axes[-1])
    want = fold([rows[d] for d in range(0, mesh.size, mesh_shape[-1])])
    assert_bits(stepwise, want)
    assert not np.array_equal(want, fold(c))


@pytest.mark.parametrize("shape", SHAPES, ids=["block", "element"])
@clause("MESH-COLL-1")
def test_traced_all_reduce(backend, mesh_shape, shape):
    """A traced ``all_reduce`` over every axis gives the rank-order fold."""
    mesh = mesh_of(mesh_shape)
    c = cancelling(np.random.default_rng(13), mesh.size, shape)
    x = _pending_all(mesh, c)
    assert_bits(run(backend, lambda v: dist.all_reduce(v, mesh.axes), x), fold(c))


@pytest.mark.parametrize("op_", ["avg", "max", "min", "prod"])
@clause("MESH-COLL-1")
def test_other_reductions(backend, mesh_shape, op_):
    """max/min are IEEE maximum/minimum (NaN wins, −0 < +0); prod multiplies in rank order;
    avg is the sum divided once by the group size in accum."""
    mesh = mesh_of(mesh_shape)
    rng = np.random.default_rng(14)
    if op_ == "prod":
        c = [np.float32(1) + rng.standard_normal(8).astype(np.float32) / np.float32(16) for _ in range(mesh.size)]
    else:
        c = cancelling(rng, mesh.size, (8,))
    if op_ in ("max", "min"):
        for v in c:
            v[5], v[6] = np.float32(0.0), np.float32(-0.0)
        c[-1][7] = np.float32("nan")
        c[0][6] = np.float32(0.0) if op_ == "max" else np.float32(-0.0)
    base = "sum" if op_ == "avg" else op_
    x = _pending_all(mesh, c, op_=base)
    got = eager(backend, lambda: dist.all_reduce(x, mesh.axes, op=op_))
    if op_ == "avg":
        want = np.divide(fold(c), np.float32(mesh.size), dtype=np.float32)
    else:
        want = fold(c, op_)
    assert_bits(got, want)


@clause("MESH-COLL-1")
def test_bf16_contributions_fold_in_f32_and_round_once(backend, mesh_shape):
    """bf16 storage: contributions converted to f32, folded there, rounded once to bf16."""
    mesh = mesh_of(mesh_shape)
    c = [v.astype(BF16) for v in cancelling(np.random.default_rng(15), mesh.size, (12,))]
    if mesh.size > 1:  # 1 + 2^-8 + 2^-9 rounds to 1 + 2^-7 once; rounded after each add it would stay 1
        c[0][0], c[1][0] = 1.0, 2.0 ** -8
        for v in c[2:]:
            v[0] = 0.0
        c[-1][0] = 2.0 ** -9 if mesh.size > 2 else c[-1][0]
    x = _pending_all(mesh, c, dtype="bf16")
    got = eager(backend, lambda: dist.all_reduce(x, mesh.axes))
    assert_bits(got, fold(c, storage=BF16))


@clause("MESH-COLL-1")
def test_exact_all_reduce_is_the_exact_sum_on_every_mesh(backend, mesh_shape):
    """``reduction="exact"``: the exact sum rounded once — the same bits for this mesh, for
    every split of a vector over its axes, and for one device."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    rng = np.random.default_rng(16)
    c = cancelling(rng, mesh.size, (6,))
    want = exact_sum_f32(c)
    x = _pending_all(mesh, c, dtype=EXACT)
    assert_bits(eager(backend, lambda: dist.all_reduce(x, mesh.axes)), want)
    assert_bits(run(backend, lambda v: dist.all_reduce(v, mesh.axes), x), want)
    v = np.concatenate([cc[None] for cc in c])  # (devices, 6): the same terms as one tensor
    whole = eager(backend, lambda: op.sum(dist.tensor(v.shape, None, mesh, dtype=EXACT, data=v), axis=0))
    assert_bits(whole, want)
    for split in [(a,) for a in axes] + [axes]:
        t = dist.tensor(v.shape, S((0,), (split,)), mesh, dtype=EXACT, data=v)
        got = eager(backend, lambda: dist.all_reduce(op.sum(t, axis=0), split))
        assert_bits(got, want, f"split over {split}")


@clause("MESH-COLL-1")
def test_exact_pending_sum_is_held_exactly(backend, mesh_shape):
    """A pending sum made by an op under exact mode is not rounded until it is reduced: the
    sum over a split axis equals the exact sum, where rounding each block first would not."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    n = mesh.size
    v = np.zeros((2 * n,), np.float32)
    v[0], v[1] = np.float32(1.0), np.float32(2.0 ** -24)  # block 0: 1 + 2^-24 rounds to 1 if rounded
    v[-1] = np.float32(2.0 ** -24)
    want = exact_sum_f32([np.float32(t) for t in v])
    t = dist.tensor(v.shape, S((0,), (axes,)), mesh, dtype=EXACT, data=v)
    got = eager(backend, lambda: dist.all_reduce(op.sum(t), axes))
    assert_bits(got, want)
    if n > 1:
        assert want == np.float32(1.0) + np.float32(2.0 ** -23)


@clause("MESH-COLL-1")
def test_wrong_op_and_stochastic_rounding_are_errors(backend, mesh_shape):
    """The op must be the pending one (avg goes with sum); a stochastically rounding policy
    cannot be folded (no random key)."""
    mesh = mesh_of(mesh_shape)
    c = [np.ones(3, np.float32)] * mesh.size
    s = _pending_all(mesh, c)
    m = _pending_all(mesh, c, op_="max")
    for call in (lambda: dist.all_reduce(s, mesh.axes, op="max"), lambda: dist.all_reduce(m, mesh.axes, op="avg"),
                 lambda: dist.all_reduce(m, mesh.axes, op="sum")):
        with pytest.raises(CollectiveError):
            eager(backend, call)
    policy = as_policy("bf16").with_(rounding="stochastic")
    sr = dist.from_shards([v.astype(BF16) for v in c], S(None, mesh.axes, reduce="sum"), mesh, dtype=policy)
    for call in (lambda: dist.all_reduce(sr, mesh.axes), sr.numpy):
        with pytest.raises(CollectiveError):
            eager(backend, call)


# -- reduce_scatter (MESH-COLL-2) ------------------------------------------------------------------

@clause("MESH-COLL-2")
def test_reduce_scatter_is_a_slice_of_all_reduce(backend, mesh_shape):
    """The values are all_reduce's bit for bit; ``dim`` (default: the first whole dimension) is
    split over the axis, appended as its minor axis."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    axis = largest_axis(mesh_shape)
    rng = np.random.default_rng(17)
    rows = 2 * mesh.size
    c = cancelling(rng, mesh.axis_size(axis), (rows, 3))
    per_device = [c[mesh.coords(d)[axis]] for d in range(mesh.size)]
    x = dist.from_shards(per_device, S(None, (axis,), reduce="sum"), mesh)
    full = fold(c)
    for dim in (None, 0):
        y = eager(backend, lambda: dist.reduce_scatter(x, axis, dim=dim))
        assert_bits(y, full, f"dim={dim}")
    shards = {}

    def go():
        z = dist.reduce_scatter(x, axis)
        shards.update({d: z.shard(d) for d in range(mesh.size)})
        return z

    eager(backend, go)
    for d in range(mesh.size):
        assert_bits(shards[d], expected_shard(full, ((axis,), ()), axes, mesh_shape, d), f"device {d}")
    assert_bits(run(backend, lambda v: dist.reduce_scatter(v, axis, dim=0), x), full)


@clause("MESH-COLL-2")
def test_reduce_scatter_appends_the_minor_axis(backend, mesh_shape):
    """With the dimension already split over another axis, the reduced axis becomes its minor one."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    if len(axes) < 2:
        not_applicable("needs two mesh axes")
    major, axis = axes[0], axes[-1]
    rows = 2 * mesh.size
    rng = np.random.default_rng(18)
    c = cancelling(rng, mesh_shape[-1], (rows, 2))  # the global contributions of each tp rank
    per_device = []
    for d in range(mesh.size):
        k = mesh.coords(d)
        per_device.append(expected_shard(c[k[axis]], ((major,), ()), axes, mesh_shape, d))
    lay = S(("row",), (major, axis), reduce="sum")
    x = dist.from_shards(per_device, lay, mesh)
    full = fold(c)
    z = {}

    def go():
        y = dist.reduce_scatter(x, axis, dim=0)
        z["layout"] = y.layout
        z.update({d: y.shard(d) for d in range(mesh.size)})
        return y.numpy()

    assert_bits(eager(backend, go), full)
    assert z["layout"].dims == ((major, axis), ()) and z["layout"].partial == ()
    for d in range(mesh.size):
        assert_bits(z[d], expected_shard(full, ((major, axis), ()), axes, mesh_shape, d), f"device {d}")


@clause("MESH-COLL-2")
def test_exact_reduce_scatter(backend, mesh_shape):
    """Under exact mode reduce_scatter gives the exact sums, like all_reduce."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    c = cancelling(np.random.default_rng(19), p, (2 * p,))
    x = dist.from_shards([c[mesh.coords(d)[axis]] for d in range(mesh.size)], S(None, (axis,), reduce="sum"),
                         mesh, dtype=EXACT)
    assert_bits(eager(backend, lambda: dist.reduce_scatter(x, axis, dim=0)), exact_sum_f32(c))


@clause("MESH-COLL-2")
def test_reduce_scatter_pads_an_uneven_dimension_with_zeros(backend, mesh_shape):
    """A padded pending sum whose dimension the axis does not divide: each device holds
    ``ceil(n/p)`` rows, the rows past the end +0 (bits 0); the global value drops them."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    if p == 1:
        not_applicable("a one-device axis splits nothing")
    rows = 2 * p + 1
    g = cancelling(np.random.default_rng(20), 1, (rows, 3))[0]
    x = dist.tensor(g.shape, S(None, (axis,), reduce="sum", pad=True), mesh, data=g)
    shards = {}

    def go():
        y = dist.reduce_scatter(x, axis, dim=0)
        shards.update({d: y.shard(d) for d in range(mesh.size)})
        return y

    assert_bits(eager(backend, go), g)
    for d in range(mesh.size):
        assert_bits(shards[d], expected_shard(g, ((axis,), ()), axes, mesh_shape, d, padded=True), f"device {d}")
