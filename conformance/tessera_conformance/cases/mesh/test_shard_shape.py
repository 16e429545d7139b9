"""MESH-SHARD-5 … MESH-SHARD-9: transpose, reshape, split_qkv, slice, concat and split move or
keep splits as the clauses say; their values are pure data movement (NumPy slicing)."""
import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_ref.errors import LayoutError
from tessera_conformance import assert_bits, clause, eager, not_applicable

from ._reference import AXES, cancelling, expected_shard, fold, largest_axis, mesh_of, observe, wide

S = dist.ShardSpec


def _pending(mesh, axis, shape, seed):
    c = cancelling(np.random.default_rng(seed), mesh.axis_size(axis), shape)
    shards = [c[mesh.coords(d)[axis]] for d in range(mesh.size)]
    return dist.from_shards(shards, S(None, (axis,), reduce="sum"), mesh), fold(c)


def _check(backend, mesh_shape, make, want, dims, partial=()):
    """The result's layout and global value, and (no pending reduction) every device's block."""
    value, facts = observe(backend, make)
    assert facts["layout"].dims == dims, facts["layout"]
    assert facts["partial"] == partial
    assert_bits(value, want)
    if not partial:
        for d, shard in facts["shards"].items():
            assert_bits(shard, expected_shard(want, dims, AXES[:len(mesh_shape)], mesh_shape, d,
                                              facts["layout"].padded), f"device {d}")


def _mesh(mesh_shape):
    return mesh_of(mesh_shape), AXES[:len(mesh_shape)], largest_axis(mesh_shape)


# -- MESH-SHARD-5 --------------------------------------------------------------------------------

@clause("MESH-SHARD-5")
def test_transpose_moves_splits_with_their_dimensions(backend, mesh_shape):
    """Splits move with their dimensions; a pending sum stays pending."""
    mesh, axes, big = _mesh(mesh_shape)
    dims = tuple((a,) for a in axes) + ((),) * (3 - len(axes))
    shape = tuple(2 * mesh.axis_size(d[0]) if d else 3 for d in dims)
    x = wide(np.random.default_rng(100), shape)
    X = dist.tensor(shape, S((0, 1, 2)[:len(axes)], axes), mesh, data=x)
    perm = (2, 0, 1)
    _check(backend, mesh_shape, lambda: op.transpose(X, perm), np.transpose(x, perm), tuple(dims[p] for p in perm))
    P, total = _pending(mesh, big, (3, 4), 101)
    _check(backend, mesh_shape, lambda: op.transpose(P), total.T, ((), ()), (big,))


# -- MESH-SHARD-6 --------------------------------------------------------------------------------

def _reshape_cases(p, ax):
    """(shape, split dimension, new shape, expected dims) by the clause's rule."""
    out = [((6, 2 * p, 3), 1, (6, 6 * p), ((), (ax,))),                 # [H, D] -> [H*D], H split: kept
           ((2 * p, 4, 3), 0, (2 * p, 12), ((ax,), ())),                 # an unchanged dimension
           ((6, 4, 2 * p), 2, (24, 2 * p), ((), (ax,))),                 # merging the dimensions before it
           ((2, 8 * p), 1, (2, 2 * p, 4), ((), (ax,), ())),              # un-merged, p | H = 2p
           ((6, 2 * p, 3), 1, (6, 1, 6 * p), ((), (), (ax,)))]           # a size-1 dimension in between
    if p > 1:
        h = next(h for h in (2, 3) if h % p)                             # p does not divide H: gathered
        out.append(((6 * p,), 0, (h, 6 * p // h), ((), ())))
    return out


@clause("MESH-SHARD-6")
def test_reshape_keeps_a_split_that_starts_a_result_dimension(backend, mesh_shape):
    """A split survives when a result dimension starts where it starts and is a multiple of it
    (or p divides it); every other split is gathered; the values are NumPy's reshape."""
    mesh, _, ax = _mesh(mesh_shape)
    p = mesh.axis_size(ax)
    for k, (shape, dim, new, dims) in enumerate(_reshape_cases(p, ax)):
        x = wide(np.random.default_rng(102 + k), shape)
        X = dist.tensor(shape, S((dim,), (ax,)), mesh, data=x)
        _check(backend, mesh_shape, lambda: op.reshape(X, new), x.reshape(new), dims)


@clause("MESH-SHARD-6")
def test_reshape_of_padded_and_pending(backend, mesh_shape):
    """A padded split is gathered first; a pending sum stays pending."""
    mesh, _, ax = _mesh(mesh_shape)
    p = mesh.axis_size(ax)
    x = wide(np.random.default_rng(110), (2 * p + 1, 4))
    X = dist.tensor(x.shape, S(("row",), (ax,), pad=True), mesh, data=x)
    _check(backend, mesh_shape, lambda: op.reshape(X, (4, 2 * p + 1)), x.reshape(4, 2 * p + 1), ((), ()))
    P, total = _pending(mesh, ax, (4, 6), 111)
    _check(backend, mesh_shape, lambda: op.reshape(P, (2, 12)), total.reshape(2, 12), ((), ()), (ax,))


# -- MESH-SHARD-7 --------------------------------------------------------------------------------

def _qkv_ref(x, heads, groups):
    """GRAPH-SPLITQKV-1: the last axis is [G, 3, H/G, D] row-major; results [..., H, S, D]."""
    *lead, s, e3 = x.shape
    d = e3 // 3 // heads
    y = x.reshape(*lead, s, groups, 3, heads // groups, d)
    y = np.moveaxis(y, -3, 0)                                    # [3, ..., S, G, Hg, D]
    y = y.reshape(3, *lead, s, heads, d)
    return [np.ascontiguousarray(np.swapaxes(t, -3, -2)) for t in y]  # [..., H, S, D]


@clause("MESH-SHARD-7")
def test_split_qkv_keeps_whole_groups_on_their_devices(backend, mesh_shape):
    """Last dimension split with groups > 1: the results are split over heads, no gather; the
    sequence split moves to the results' S dimension; groups = 1 gathers the last dimension."""
    mesh, axes, ax = _mesh(mesh_shape)
    p = mesh.axis_size(ax)
    other = next((a for a in axes if a != ax), None)
    s_len = 2 * (mesh.axis_size(other) if other else 1)
    for groups, heads in ((p, 2 * p), (2 * p, 2 * p), (1, 2 * p)):
        x = wide(np.random.default_rng(112 + groups), (2, s_len, 3 * heads * 2))
        spec = S((1, 2), (other, ax)) if other else S((2,), (ax,))
        X = dist.tensor(x.shape, spec, mesh, data=x)
        seq = (other,) if other else ()
        head_split = (ax,) if groups > 1 or p == 1 else ()
        if p == 1 and groups == 1:
            head_split = ()
        value_facts = [observe(backend, lambda i=i: op.split_qkv(X, heads=heads, groups=groups)[i]) for i in range(3)]
        for (value, facts), want in zip(value_facts, _qkv_ref(x, heads, groups)):
            assert facts["layout"].dims == ((), head_split, seq, ()), (groups, facts["layout"])
            assert_bits(value, want)


@clause("MESH-SHARD-7")
def test_split_qkv_split_not_dividing_groups_is_an_error(backend, mesh_shape):
    """A split of the last dimension that does not divide ``groups`` is a LayoutError."""
    mesh, _, ax = _mesh(mesh_shape)
    p = mesh.axis_size(ax)
    if p == 1:
        not_applicable("one block divides every group count")
    g = next(g for g in (3, 2, 4) if g % p)
    x = np.ones((2, 4, 3 * g * p), np.float32)
    X = dist.tensor(x.shape, S((2,), (ax,)), mesh, data=x)
    with pytest.raises(LayoutError):
        eager(backend, lambda: op.split_qkv(X, heads=g, groups=g))


# -- MESH-SHARD-8 --------------------------------------------------------------------------------

@clause("MESH-SHARD-8")
def test_slice_keeps_whole_taken_dimensions(backend, mesh_shape):
    """A dimension taken whole keeps its split; a cut one is gathered; indexing is a slice then a
    reshape on the mesh; a pending sum stays pending; a padded layout is gathered."""
    mesh, _, ax = _mesh(mesh_shape)
    p = mesh.axis_size(ax)
    x = wide(np.random.default_rng(120), (2 * p, 6))
    X = dist.tensor(x.shape, S(("row",), (ax,)), mesh, data=x)
    _check(backend, mesh_shape, lambda: X[:, 1:4], x[:, 1:4], ((ax,), ()))
    _check(backend, mesh_shape, lambda: op.slice(X, (0, 0), (2 * p, 6), (1, 2)), x[:, ::2], ((ax,), ()))
    _check(backend, mesh_shape, lambda: X[1:3], x[1:3], ((), ()))
    _check(backend, mesh_shape, lambda: X[:, 2], x[:, 2], ((ax,),))
    P, total = _pending(mesh, ax, (4, 6), 121)
    _check(backend, mesh_shape, lambda: P[:, ::2], total[:, ::2], ((), ()), (ax,))
    y = wide(np.random.default_rng(122), (2 * p + 1, 6))
    Y = dist.tensor(y.shape, S(("row",), (ax,), pad=True), mesh, data=y)
    _check(backend, mesh_shape, lambda: Y[:, 1:3], y[:, 1:3], ((), ()))


# -- MESH-SHARD-9 --------------------------------------------------------------------------------

@clause("MESH-SHARD-9")
def test_concat_keeps_the_first_operands_splits_off_its_axis(backend, mesh_shape):
    """concat: the first operand's splits of the other dimensions, every operand moved to them,
    the axis whole; pending sums carried out first; padded operands gathered whole."""
    mesh, _, ax = _mesh(mesh_shape)
    p = mesh.axis_size(ax)
    parts = [wide(np.random.default_rng(130 + k), (2 * p, 2 * p)) for k in range(3)]
    first = dist.tensor(parts[0].shape, S(("row",), (ax,)), mesh, data=parts[0])
    second = dist.tensor(parts[1].shape, S(("col",), (ax,)), mesh, data=parts[1])
    third = dist.tensor(parts[2].shape, None, mesh, data=parts[2])
    _check(backend, mesh_shape, lambda: op.concat([first, second, third], axis=1), np.concatenate(parts, 1), ((ax,), ()))
    _check(backend, mesh_shape, lambda: op.concat([first, second], axis=0), np.concatenate(parts[:2], 0), ((), ()))
    P, total = _pending(mesh, ax, (2 * p, 2 * p), 133)
    _check(backend, mesh_shape, lambda: op.concat([P, first], axis=1), np.concatenate([total, parts[0]], 1), ((), ()))
    y = wide(np.random.default_rng(134), (2 * p + 1, 3))
    Y = dist.tensor(y.shape, S(("row",), (ax,), pad=True), mesh, data=y)
    _check(backend, mesh_shape, lambda: op.concat([Y, Y], axis=1), np.concatenate([y, y], 1), ((), ()))


@clause("MESH-SHARD-9")
def test_split_makes_its_axis_whole_and_keeps_pending_sums(backend, mesh_shape):
    """split: the axis whole, the other splits kept in every part; a pending sum stays pending."""
    mesh, _, ax = _mesh(mesh_shape)
    p = mesh.axis_size(ax)
    x = wide(np.random.default_rng(135), (2 * p, 6))
    X = dist.tensor(x.shape, S(("row",), (ax,)), mesh, data=x)
    for i, want in enumerate((x[:, :2], x[:, 2:])):
        _check(backend, mesh_shape, lambda i=i: op.split(X, [2, 4], axis=1)[i], want, ((ax,), ()))
    _check(backend, mesh_shape, lambda: op.split(X, 2, axis=0)[1], x[p:], ((), ()))
    P, total = _pending(mesh, ax, (4, 6), 136)
    _check(backend, mesh_shape, lambda: op.split(P, 2, axis=0)[1], total[2:], ((), ()), (ax,))
