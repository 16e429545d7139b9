"""Ops on distributed tensors (MESH-SHARD-1 … 5): every result's global value is the unsharded
op's, bit for bit — except where a split sum leaves a pending reduction, whose value is checked
against "each device's block in the canonical order, then the blocks folded in rank order"
computed here with dot_canonical / reduce_canonical and NumPy float32 adds."""
import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mesh_reference import block_index, fold_f32, same_bits
from tessera_ref import dist, op
from tessera_ref.errors import LayoutError
from tessera_ref.ir import ShardLayout
from tessera_ref.numerics import Policy
from tessera_ref.numerics.reduce import dot_canonical, reduce_canonical
from tessera_ref.ops.values import asarray

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")
MESH = dist.Mesh(("dp", "tp", "pp"), range(12), (2, 3, 2))


def rnd(*shape, seed=0):
    rng = np.random.default_rng(seed + 100 * len(shape) + sum(shape))
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(-8, 9, shape)).astype(np.float32)


def T(x, spec, mesh=MESH, dtype=None):
    return dist.tensor(np.shape(x), spec, mesh, dtype=dtype, data=x)


def partial_from(contributions, axis="tp", mesh=MESH, reduce="sum"):
    shards = [contributions[mesh.coords(i)[axis]] for i in range(mesh.size)]
    return dist.from_shards(shards, S(None, (axis,), reduce=reduce), mesh)


def ranks(mesh, axes):
    """Coordinates of one group over ``axes``, in rank order (row-major over the mesh axes)."""
    axes = [a for a in mesh.axes if a in axes]
    return [dict(zip(axes, c)) for c in itertools.product(*(range(mesh.axis_size(a)) for a in axes))]


# -- elementwise (MESH-SHARD-2) -----------------------------------------------------------------------

@pytest.mark.parametrize("spec", [S(), S(("row",), ("tp",)), S(("col",), ("pp",)),
                                  S(("row", "col"), ("dp", ("tp", "pp"))), S((0,), (("pp", "dp"),))])
def test_elementwise_with_broadcasting_and_scalars(spec):
    x, y, z = rnd(12, 6), rnd(6), rnd(12, 1, seed=1)
    X = T(x, spec)
    Y = T(y, S((0,), ("tp",)))
    got = op.maximum(op.exp(X * Y + 2.0) / z, X - 1.5)
    want = op.maximum(op.exp(op.add(op.mul(x, y), 2.0)) / z, op.sub(x, 1.5))
    assert got.shape == (12, 6) and not got.layout.partial
    assert same_bits(got.numpy(), np.asarray(want))
    assert same_bits((2.0 - X).numpy(), np.asarray(op.sub(2.0, x)))
    assert same_bits((-X).numpy(), np.asarray(op.neg(x)))


def test_operands_split_differently():
    x, y = rnd(12, 6), rnd(12, 6, seed=2)
    got = T(x, S(("row",), ("tp",))) * T(y, S(("col",), ("dp",)))
    assert same_bits(got.numpy(), np.asarray(op.mul(x, y)))
    got = T(x, S(("row",), ("tp",))) + T(y, S(("row",), ("pp",)))
    assert same_bits(got.numpy(), np.asarray(op.add(x, y)))


def test_partial_plus_replicated_adds_the_replicated_value_once():
    c = [rnd(4, 5, seed=s) for s in range(3)]
    r = rnd(4, 5, seed=9)
    P = partial_from(c)
    got = P + T(r, S())
    assert not got.layout.partial
    want = np.asarray(op.add(P.numpy(), r))  # the unsharded program: (the pending sum) + r
    assert same_bits(got.numpy(), want)
    once_per_rank = fold_f32([v + r for v in c])
    assert not np.allclose(got.numpy(), once_per_rank)  # what adding on every rank would give
    assert same_bits((r + P).numpy(), np.asarray(op.add(r, P.numpy())))
    assert same_bits((P + 1.0).numpy(), np.asarray(op.add(P.numpy(), 1.0)))


def test_linear_ops_keep_pending_sums():
    """add/sub of pending sums over one axis, mul by a whole value and div by one stay pending;
    the value is the fold of the per-rank results (MESH-SHARD-2)."""
    c, d = [rnd(4, 5, seed=s) for s in range(3)], [rnd(4, 5, seed=10 + s) for s in range(3)]
    w = rnd(5, seed=20)
    P, Q, W = partial_from(c), partial_from(d), T(w, S())
    cases = [(P + Q, [a + b for a, b in zip(c, d)]), (P - Q, [a - b for a, b in zip(c, d)]),
             (P * W, [a * w for a in c]), (W * P, [w * a for a in c]), (P / W, [a / w for a in c]),
             (-P, [-a for a in c]), (P * 3.0, [a * np.float32(3) for a in c])]
    for got, per_rank in cases:
        assert got.layout.partial == ("tp",)
        assert same_bits(got.numpy(), fold_f32(per_rank))
        assert same_bits(dist.all_reduce(got, "tp").numpy(), fold_f32(per_rank))


def test_nonlinear_ops_reduce_pending_sums_first():
    c, d = [rnd(4, 5, seed=s) for s in range(3)], [rnd(4, 5, seed=10 + s) for s in range(3)]
    P, Q = partial_from(c), partial_from(d)
    for got, want in [(P * Q, op.mul(fold_f32(c), fold_f32(d))), (op.exp(P), op.exp(fold_f32(c))),
                      (T(rnd(5), S()) / P, op.div(rnd(5), fold_f32(c))),
                      (op.maximum(P, 0.0), op.maximum(fold_f32(c), 0.0))]:
        assert not got.layout.partial
        assert same_bits(got.numpy(), np.asarray(want))
    # a pending max is carried out first; a pending sum times (or over) the result stays pending
    M = partial_from(d, reduce="max")
    m = fold_f32(d, "max")
    for got, per_rank in [(M * P, [m * v for v in c]), (P * M, [v * m for v in c]), (P / M, [v / m for v in c])]:
        assert got.layout.partial == ("tp",) and got.layout.partial_op == "sum"
        assert same_bits(got.numpy(), fold_f32(per_rank))
    got = M + P
    assert not got.layout.partial and same_bits(got.numpy(), np.asarray(op.add(m, fold_f32(c))))


def test_padded_elementwise():
    x = rnd(7, 3)
    X = T(x, S(("row",), ("tp",), pad=True))
    for got, want in [(X + 1.0, op.add(x, 1.0)), (op.exp(X), op.exp(x)), (X * T(x, S()), op.mul(x, x)),
                      (X * T(x, S(("row",), ("tp",), pad=True)), op.mul(x, x))]:
        assert got.layout.padded and got.layout.dims == (("tp",), ())
        assert same_bits(got.numpy(), np.asarray(want))


# -- matmul (MESH-SHARD-4) ---------------------------------------------------------------------------

def _spec(splits: dict, names: tuple) -> S:
    """A ShardSpec from ``{logical dim name: mesh axes}`` and the operand's dims by name."""
    dims = [names.index(k) for k in splits]
    return S(tuple(dims), tuple(splits[k] for k in splits)) if splits else S()


A_SPLITS = [{}, {"M": "tp"}, {"K": "tp"}, {"M": "dp", "K": "tp"}, {"K": ("tp", "pp")}, {"K": ("pp", "tp")},
            {"M": ("dp", "pp")}, {"batch": "dp", "K": "pp"}]
B_SPLITS = [{}, {"N": "pp"}, {"K": "tp"}, {"N": "dp", "K": "tp"}, {"K": ("pp", "tp")}]


def _k_split_reference(a, b, k_axes, mesh, storage="f32"):
    """Each device's K block by dot_canonical (NUM-RED-1), rounded into storage, then the ranks of
    the K axes folded in rank order (row-major over the mesh) in f32 and rounded once."""
    sizes = mesh.sizes
    p = math.prod(sizes[x] for x in k_axes)
    K = a.shape[-1]
    parts = []
    for coords in ranks(mesh, k_axes):
        blk = block_index(coords, k_axes, sizes)
        ks = slice(blk * K // p, (blk + 1) * K // p)
        part = dot_canonical(a[..., ks], b[..., ks, :], accum="f32")
        parts.append(part.astype(ml_dtypes.bfloat16).astype(np.float32) if storage == "bf16" else part)
    out = fold_f32(parts)
    return out.astype(ml_dtypes.bfloat16) if storage == "bf16" else out


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("batched", [False, True])
def test_matmul_splits(ta, tb, batched):
    a, b = rnd(2, 12, 12) if batched else rnd(12, 12), rnd(2, 12, 4, seed=3) if batched else rnd(12, 4, seed=3)
    want = np.asarray(op.matmul(a, b))
    want_exact = np.asarray(op.matmul(asarray(a, policy=EXACT), asarray(b, policy=EXACT)))
    a_arg = np.swapaxes(a, -1, -2).copy() if ta else a
    b_arg = np.swapaxes(b, -1, -2).copy() if tb else b
    lead = ("batch",) if batched else ()
    a_names = lead + (("K", "M") if ta else ("M", "K"))
    b_names = lead + (("N", "K") if tb else ("K", "N"))
    seen_partial = 0
    for sa, sb in itertools.product(A_SPLITS, B_SPLITS):
        if "batch" in sa and not batched:
            continue
        A, B = T(a_arg, _spec(sa, a_names)), T(b_arg, _spec(sb, b_names))
        C = op.matmul(A, B, transpose_a=ta, transpose_b=tb)
        assert C.shape == want.shape
        if not C.layout.partial:  # K whole on every device: the canonical order is untouched
            assert same_bits(C.numpy(), want), (sa, sb)
        else:
            seen_partial += 1
            k_axes = sa.get("K") or sb.get("K")
            k_axes = (k_axes,) if isinstance(k_axes, str) else k_axes
            assert set(C.layout.partial) == set(k_axes)
            ref = _k_split_reference(a, b, k_axes, MESH)
            assert same_bits(C.numpy(), ref), (sa, sb)
            R = dist.all_reduce(C, C.layout.partial)
            assert same_bits(R.numpy(), ref) and not R.layout.partial
        # under reduction="exact" every split gives the unsharded exact bits
        AX, BX = T(a_arg, _spec(sa, a_names), dtype=EXACT), T(b_arg, _spec(sb, b_names), dtype=EXACT)
        CX = op.matmul(AX, BX, transpose_a=ta, transpose_b=tb)
        assert same_bits(CX.numpy(), want_exact), (sa, sb)
    assert seen_partial >= 10


def test_k_split_changes_the_bits_and_exact_mode_does_not():
    """Rank order of a K split over ('pp', 'tp') is row-major over the mesh (tp before pp), not K order."""
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((4, 24)) * 2.0 ** rng.integers(-20, 21, (4, 24))).astype(np.float32)
    b = (rng.standard_normal((24, 3)) * 2.0 ** rng.integers(-20, 21, (24, 3))).astype(np.float32)
    one = np.asarray(op.matmul(a, b))
    results = set()
    for k in ("tp", "pp", ("tp", "pp"), ("pp", "tp"), ("dp", "tp", "pp")):
        axes = (k,) if isinstance(k, str) else k
        C = op.matmul(T(a, S((1,), (k,))), T(b, S((0,), (k,))))
        got = dist.all_reduce(C, axes).numpy()
        assert same_bits(got, _k_split_reference(a, b, axes, MESH))
        results.add(got.tobytes())
        CX = op.matmul(T(a, S((1,), (k,)), dtype=EXACT), T(b, S((0,), (k,)), dtype=EXACT))
        assert same_bits(dist.all_reduce(CX, axes).numpy(),
                         np.asarray(op.matmul(asarray(a, policy=EXACT), asarray(b, policy=EXACT))))
    results.add(one.tobytes())
    assert len(results) >= 3


def test_bf16_k_split_rounds_each_block_into_storage():
    a, b = rnd(4, 12).astype(ml_dtypes.bfloat16), rnd(12, 5, seed=5).astype(ml_dtypes.bfloat16)
    C = op.matmul(T(a, S(("col",), ("tp",)), dtype="bf16"), T(b, S(("row",), ("tp",)), dtype="bf16"))
    assert C.layout.partial == ("tp",)
    assert same_bits(C.numpy(), _k_split_reference(a, b, ("tp",), MESH, storage="bf16"))


def test_matmul_m_n_batch_splits_layouts():
    a, b = rnd(2, 6, 12), rnd(12, 4, seed=3)
    C = op.matmul(T(a, S((0, 1), ("dp", "tp"))), T(b, S((1,), ("pp",))))
    assert C.layout.dims == (("dp",), ("tp",), ("pp",)) and not C.layout.partial
    assert same_bits(C.numpy(), np.asarray(op.matmul(a, b)))
    C = op.matmul(T(rnd(7, 12), S((0,), ("tp",), pad=True)), T(b, S()))  # padded M
    assert C.layout.dims == (("tp",), ()) and same_bits(C.numpy(), np.asarray(op.matmul(rnd(7, 12), b)))


@pytest.mark.parametrize("c_shape", [(6, 4), (4,), (6, 1)])
def test_gemm_splits_c_like_the_result(c_shape):
    a, b, c = rnd(6, 12), rnd(12, 4, seed=3), rnd(*c_shape, seed=4)
    for sa, sb in [(S(("row",), ("tp",)), S(("col",), ("dp",))), (S(("col",), ("tp",)), S(("row",), ("tp",)))]:
        got = op.gemm(T(a, sa), T(b, sb), c)
        assert not got.layout.partial  # C would be added once per rank: K is made whole
        assert same_bits(got.numpy(), np.asarray(op.gemm(a, b, c)))
    got = op.gemm(T(a, S(("row",), ("tp",))), T(b, S()), T(c, S((len(c_shape) - 1,), ("pp",)) if c_shape[-1] == 4
                                                               else S()))
    assert same_bits(got.numpy(), np.asarray(op.gemm(a, b, c)))


# -- reductions (MESH-SHARD-3) -----------------------------------------------------------------------

def test_sum_over_a_split_axis_is_pending_and_folds_block_sums():
    x = rnd(12, 5)
    X = T(x, S(("row",), ("tp",)))
    s = op.sum(X, axis=0)
    assert s.layout.partial == ("tp",) and s.layout.dims == ((),)
    blocks = [reduce_canonical(x[4 * r: 4 * r + 4], axis=0, op="sum", accum="f32") for r in range(3)]
    assert same_bits(s.numpy(), fold_f32(blocks))
    assert same_bits(dist.all_reduce(s, "tp").numpy(), fold_f32(blocks))
    sk = op.sum(X, axis=0, keepdims=True)
    assert sk.shape == (1, 5) and same_bits(sk.numpy(), fold_f32(blocks)[None])


def test_sum_over_all_axes_of_a_2d_split():
    x = rnd(12, 6)
    s = op.sum(T(x, S(("row", "col"), ("tp", "dp"))))
    assert set(s.layout.partial) == {"tp", "dp"} and s.shape == ()
    parts = []
    for c in ranks(MESH, ("dp", "tp")):
        blk = x[4 * c["tp"]: 4 * c["tp"] + 4, 3 * c["dp"]: 3 * c["dp"] + 3]
        parts.append(reduce_canonical(blk.reshape(-1), axis=0, op="sum", accum="f32"))
    assert same_bits(s.numpy(), fold_f32(parts))


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_reduction_over_an_unsplit_axis_is_unchanged(name):
    x = rnd(12, 6)
    got = getattr(op, name)(T(x, S(("row",), ("tp",))), axis=1)
    assert got.layout.dims == (("tp",),) and not got.layout.partial
    assert same_bits(got.numpy(), np.asarray(getattr(op, name)(x, axis=1)))


@pytest.mark.parametrize("name", ["max", "min", "mean", "argmax", "argmin"])
def test_order_free_reductions_over_a_split_axis(name):
    x = rnd(12, 6)
    x[3, 2], x[7, 2], x[0, 4] = np.nan, -0.0, 0.0
    got = getattr(op, name)(T(x, S(("row",), ("tp",))), axis=0)
    if name in ("max", "min"):
        assert got.layout.partial == ("tp",) and got.layout.partial_op == name
    else:
        assert not got.layout.partial
    assert same_bits(got.numpy(), np.asarray(getattr(op, name)(x, axis=0)))


def test_padded_reductions():
    x = rnd(7, 3)
    X = T(x, S(("row",), ("tp",), pad=True))
    for name in ("sum", "max", "min", "mean"):
        for axis in (0, 1):
            got = getattr(op, name)(X, axis=axis)
            assert same_bits(got.numpy(), np.asarray(getattr(op, name)(x, axis=axis))), (name, axis)


# -- ops that need whole dimensions, transpose (MESH-SHARD-1, 5) ---------------------------------------

@pytest.mark.parametrize("spec", [S(("row",), ("tp",)), S(("col",), ("tp",)), S(("row", "col"), ("tp", "dp"))])
def test_softmax_and_norms(spec):
    x, w, b = rnd(12, 6), rnd(6, seed=1), rnd(6, seed=2)
    X = T(x, spec)
    for got, want in [(op.softmax(X, axis=-1), op.softmax(x, axis=-1)), (op.softmax(X, axis=0), op.softmax(x, axis=0)),
                      (op.layernorm_safe(X, w, b), op.layernorm_safe(x, w, b)),
                      (op.rmsnorm_safe(X, w), op.rmsnorm_safe(x, w))]:
        assert same_bits(got.numpy(), np.asarray(want))
    got = op.softmax(T(x, S(("row",), ("tp",))), axis=-1)
    assert got.layout.dims == (("tp",), ())  # the softmax axis was whole: the split stays
    got = op.softmax(T(x, S(("col",), ("tp",))), axis=-1)
    assert got.layout.dims == ((), ())  # the softmax axis was gathered


def test_transpose_moves_splits():
    x = rnd(12, 6, 4)
    X = T(x, S((0, 1, 2), ("tp", "dp", "pp")))
    Y = op.transpose(X, (2, 0, 1))
    assert Y.layout.dims == (("pp",), ("tp",), ("dp",))
    assert same_bits(Y.numpy(), np.transpose(x, (2, 0, 1)))
    assert same_bits(X.T.numpy(), np.transpose(x))
    c = [rnd(4, 6, seed=s) for s in range(3)]
    P = partial_from(c)
    assert op.transpose(P).layout.partial == ("tp",)  # a pending sum stays pending
    assert same_bits(op.transpose(P).numpy(), fold_f32(c).T)


@pytest.mark.parametrize("shape, spec, new, dims", [
    ((6, 4, 3), S((1,), ("dp",)), (6, 12), ((), ("dp",))),          # [H, D] -> [H*D], H split: kept
    ((6, 4, 3), S((0,), ("tp",)), (2, 3, 12), ((), (), ())),         # 6 -> 2x3: a split cut in two, gathered
    ((6, 4, 3), S((0,), ("tp",)), (6, 12), (("tp",), ())),           # an unchanged dimension keeps its split
    ((6, 4, 3), S((0, 1), ("tp", "dp")), (72,), (("tp",),)),         # the leading split survives, the other is gathered
    ((6, 4, 3), S((2,), ("tp",)), (24, 3), ((), ("tp",))),           # merging the dims before it: still a run
    ((6, 4, 3), S((1,), ("dp",)), (6, 1, 12), ((), (), ("dp",))),    # size-1 dimensions in between
    ((12, 2), S((0,), ("tp",)), (3, 4, 2), (("tp",), (), ())),       # [H*D] -> [H, D], 3 blocks divide H=3
    ((2, 24), S((1,), ("tp",)), (2, 6, 4), ((), ("tp",), ())),       # un-merging the last dimension
    ((12, 2), S((0,), ("dp",)), (3, 4, 2), ((), (), ())),            # 2 blocks do not divide H=3: gathered
    ((12, 2), S((0,), (("dp", "tp"),)), (6, 2, 2), (("dp", "tp"), (), ())),  # 6 blocks over two axes
])
def test_reshape_keeps_splits_that_start_a_result_dimension(shape, spec, new, dims):
    import tessera_ref
    x = rnd(*shape)
    got = op.reshape(T(x, spec), new)
    assert got.layout.dims == dims
    assert same_bits(got.numpy(), x.reshape(new))
    traced = tessera_ref.jit(lambda X: op.reshape(X, new))(T(x, spec))  # the trace plans for the same mesh
    assert traced.type == got.type and same_bits(traced.numpy(), got.numpy())
    moved = got.layout.dims != ((),) * len(new)
    assert (MESH.axis_size(spec.mesh_axes[0]) * got.nbytes_per_device == got.nbytes) == moved  # no gather


@pytest.mark.parametrize("spec", [S(("row",), ("tp",)), S(("row", "col"), ("dp", "tp")), S(("col",), ("pp",))])
def test_concat_and_split_keep_the_splits_off_their_axis(spec):
    parts = [rnd(6, 6, seed=s) for s in range(3)]
    X = [T(p, spec) for p in parts]
    for axis in (0, 1):
        joined = op.concat(X, axis=axis)
        want = tuple(() if d == axis else a for d, a in enumerate(X[0].layout.dims))
        assert joined.layout.dims == want and same_bits(joined.numpy(), np.concatenate(parts, axis))
        back = op.split(joined, [6, 12], axis=axis)
        assert all(b.layout.dims == want for b in back)
        assert same_bits(back[1].numpy(), np.concatenate(parts[1:], axis))
    mixed = op.concat([X[0], T(parts[1], S())], axis=0)  # operands move to the first one's splits
    assert mixed.layout.dims == ((), X[0].layout.dims[1])
    c = [rnd(6, 6, seed=s) for s in range(3)]
    assert not op.concat([partial_from(c), X[0]], axis=0).layout.partial  # pending sums are carried out
    assert same_bits(op.concat([partial_from(c), X[0]], axis=0).numpy(), np.concatenate([fold_f32(c), parts[0]]))
    pending = op.split(partial_from(c), 2, axis=0)
    assert pending[0].layout.partial == ("tp",) and same_bits(pending[1].numpy(), fold_f32(c)[3:])


def test_reshape_of_a_pending_sum_stays_pending():
    c = [rnd(4, 6, seed=s) for s in range(3)]
    got = op.reshape(partial_from(c), (2, 12))
    assert got.layout.partial == ("tp",)
    assert same_bits(got.numpy(), fold_f32(c).reshape(2, 12))


def _split_qkv_reference(x, heads, groups):
    """q, k, v from GRAPH-SPLITQKV-1's index formula, element by element."""
    S_, E = x.shape[-2], x.shape[-1] // 3
    D, Hg = E // heads, heads // groups
    out = np.empty((3,) + x.shape[:-2] + (heads, S_, D), x.dtype)
    for part, g, h, d in itertools.product(range(3), range(groups), range(Hg), range(D)):
        out[part, ..., g * Hg + h, :, d] = x[..., :, g * 3 * E // groups + part * E // groups + h * D + d]
    return out


@pytest.mark.parametrize("spec, groups, head_axes", [
    (S((2,), ("tp",)), 3, ("tp",)),      # each device holds one group: heads split, no communication
    (S((2,), ("tp",)), 6, ("tp",)),      # two groups per device
    (S((2,), ("tp",)), 1, ()),           # groups=1: q, k, v blocks span the devices, gathered first
    (S((0, 1), ("dp", "tp")), 3, ()),    # batch and sequence splits move to the results
])
def test_split_qkv_keeps_whole_groups_on_their_devices(spec, groups, head_axes):
    x = rnd(2, 6, 3 * 12)
    qkv = op.split_qkv(T(x, spec), heads=6, groups=groups)
    ref = _split_qkv_reference(x, 6, groups)
    for got, want in zip(qkv, ref):
        split = spec.layout(3).dims  # [B, S, 3E] -> [B, heads, S, D]
        assert got.layout.dims == (split[0], head_axes, split[1], ())
        assert same_bits(got.numpy(), want)


def test_split_qkv_groups_that_the_split_cuts_are_an_error():
    x = rnd(2, 6, 3 * 16)
    mesh = dist.Mesh(("tp",), range(4), (4,))
    with pytest.raises(LayoutError, match="does not divide groups=2"):
        op.split_qkv(T(x, S((2,), ("tp",)), mesh), heads=4, groups=2)


def test_fft_and_cholesky_give_the_unsharded_bits():
    x = rnd(6, 8)
    got = op.fft(T(x, S(("row", "col"), ("tp", "dp"))), axis=-1)
    assert got.layout.dims == (("tp",), ())  # the transformed axis is whole, the other keeps its split
    assert same_bits(got.numpy(), np.asarray(op.fft(x, axis=-1)))
    m = rnd(6, 6)
    spd = np.asarray(op.add(op.matmul(m, m, transpose_b=True), np.eye(6, dtype=np.float32) * 6))
    got = op.cholesky(T(spd, S(("row",), ("tp",))))
    assert got.layout == S().layout(2)
    assert same_bits(got.numpy(), np.asarray(op.cholesky(spd)))


def test_abstract_ops_propagate_layouts():
    A = dist.tensor((96, 4095), S(("col",), ("tp",)), MESH, dtype="bf16")
    B = dist.tensor((4095, 48), S(("row",), ("tp",)), MESH, dtype="bf16")
    C = op.matmul(A, B)
    assert C.is_abstract and str(C.type) == "tensor<96x48xbf16, #shard<[*, *], partial(tp)>>"
    assert C.nbytes_per_device == 96 * 48 * 2
    D = dist.reduce_scatter(C, "tp", dim=0)
    assert D.is_abstract and D.layout.dims == (("tp",), ()) and D.nbytes_per_device == 32 * 48 * 2
    E = op.softmax(D, axis=-1)
    assert E.is_abstract and E.layout == D.layout


# -- the seeds ----------------------------------------------------------------------------------------

def test_seed_003_sharded_matmul_with_reduce_scatter():
    """Seed 003 §3.5 (with sizes given to B, D, H and data=): C_partial is already split over tp,
    not a partial sum — the tool warns and reduce_scatter returns it unchanged."""
    Bn, D, H = 8, 12, 6
    a, b = rnd(Bn, D), rnd(D, H, seed=1)
    mesh = dist.Mesh(axes=["tp", "dp"], devices=range(8))
    A = dist.tensor((Bn, D), layout=dist.ShardSpec(("row",), ("dp",)), mesh=mesh, data=a)
    B = dist.tensor((D, H), layout=dist.ShardSpec(("col",), ("tp",)), mesh=mesh, data=b)
    C_partial = op.matmul(A, B)
    assert C_partial.layout.dims == (("dp",), ("tp",)) and not C_partial.layout.partial
    with pytest.warns(dist.CollectiveWarning, match="not a partial sum"):
        C = dist.collective.reduce_scatter(C_partial, axis="tp")
    assert C.layout == C_partial.layout
    assert same_bits(C.numpy(), np.asarray(op.matmul(a, b)))


def test_seed_004_tp_gemm_on_nvl72():
    """Seed 004 §2.7: y_local = x @ W_shard; y = all_gather(y_local, axis="tp") on the 4x9x2 mesh."""
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    x_, w_ = rnd(16, 64), rnd(64, 72, seed=1)
    x = dist.tensor((16, 64), None, mesh, data=x_)
    W_shard = dist.tensor(shape=(64, 72), layout=dist.ShardSpec(partition=("col",), mesh_axes=("tp",)),
                          mesh=mesh, data=w_)
    all_gather = dist.all_gather
    y_local = x @ W_shard                  # partial on each TP shard
    y = all_gather(y_local, axis="tp")     # full output assembled over NVLink/NVSwitch
    assert y_local.layout.dims == ((), ("tp",)) and y_local.local_shape == (16, 8)
    want = np.asarray(op.matmul(x_, w_))
    assert same_bits(y.numpy(), want)
    for i in (0, 17, 71):
        assert same_bits(y.shard(i), want)


# -- random layouts ---------------------------------------------------------------------------------------

@st.composite
def laid_out(draw, shape):
    axes = list(draw(st.permutations(MESH.axes)))
    dims = []
    for n in shape:
        k = draw(st.integers(0, min(2, len(axes))))
        pick = tuple(axes[:k])
        if n % math.prod(MESH.axis_size(a) for a in pick):
            pick = ()
        axes = [a for a in axes if a not in pick]
        dims.append(pick)
    return ShardLayout(tuple(dims))


UNARY = {"exp": op.exp, "tanh": op.tanh, "neg": op.neg, "sqrt_abs": lambda v: op.sqrt(op.abs(v))}
BINARY = {"add": op.add, "sub": op.sub, "mul": op.mul, "div": op.div, "maximum": op.maximum}
ORDER_FREE = {"max": op.max, "min": op.min, "mean": op.mean, "argmax": op.argmax, "argmin": op.argmin}


@settings(max_examples=40)
@given(data=st.data())
def test_random_layouts_give_unsharded_bits(data):
    shape = (12, 6, 4)
    x, y = rnd(*shape), rnd(*shape[data.draw(st.integers(0, 2)):], seed=1)
    X, Y = T(x, data.draw(laid_out(x.shape))), T(y, data.draw(laid_out(y.shape)))
    u = data.draw(st.sampled_from(sorted(UNARY)))
    b = data.draw(st.sampled_from(sorted(BINARY)))
    got = BINARY[b](UNARY[u](X), Y)
    want = BINARY[b](UNARY[u](x), y)
    assert same_bits(got.numpy(), np.asarray(want))
    r = data.draw(st.sampled_from(sorted(ORDER_FREE)))
    axis = data.draw(st.integers(0, 2))
    assert same_bits(ORDER_FREE[r](got, axis=axis).numpy(), np.asarray(ORDER_FREE[r](want, axis=axis)))
    assert same_bits(op.softmax(got, axis=axis).numpy(), np.asarray(op.softmax(want, axis=axis)))
    perm = tuple(data.draw(st.permutations(range(3))))
    assert same_bits(op.transpose(got, perm).numpy(), np.transpose(np.asarray(want), perm))


def test_worked_example_of_the_spec():
    """docs/spec/mesh.md, "Where sharding changes the summation order": a = (1, e, e, e), e = 2^-24."""
    e = np.float32(2.0 ** -24)
    a, b = np.array([[1.0, e, e, e]], np.float32), np.ones((4, 1), np.float32)
    assert np.asarray(op.matmul(a, b)).view(np.uint32)[0, 0] == 0x3F800000
    for p, canonical in ((1, 0x3F800000), (2, 0x3F800001), (4, 0x3F800000)):
        mesh = dist.Mesh(("tp",), range(p), (p,))
        for policy, want in (("f32", canonical), (EXACT, 0x3F800002)):
            C = op.matmul(T(a, S(("col",), ("tp",)), mesh, policy), T(b, S(("row",), ("tp",)), mesh, policy))
            got = dist.all_reduce(C, "tp") if C.layout.partial else C
            assert got.numpy().view(np.uint32)[0, 0] == want, (p, policy)


def test_traced_programs_match_eager():
    import tessera_ref
    a, b = rnd(12, 12), rnd(12, 4, seed=3)
    for dtype in (None, EXACT):
        A, B = T(a, S(("col",), ("tp",)), dtype=dtype), T(b, S(("row",), ("tp",)), dtype=dtype)

        def prog(A, B):
            C = op.matmul(A, B)
            return op.softmax(C + C, axis=0)
        eager, traced = prog(A, B), tessera_ref.jit(prog)(A, B)
        assert traced.type == eager.type and same_bits(traced.numpy(), eager.numpy())
    X = T(rnd(7, 3), S(("row",), ("tp",), pad=True))
    f = tessera_ref.jit(lambda X: op.sum(op.exp(X) + 1.0, axis=0))
    assert same_bits(f(X).numpy(), np.asarray(op.sum(op.add(op.exp(rnd(7, 3)), 1.0), axis=0)))


def test_operands_on_two_meshes_are_an_error():
    from tessera_ref.errors import MeshError
    other = dist.Mesh(("dp", "tp", "pp"), range(12, 24), (2, 3, 2))
    with pytest.raises(MeshError) as info:
        T(rnd(12, 6), S()) + T(rnd(12, 6), S(), other)
    assert info.value.fix


def test_indexing_a_distributed_tensor_stays_distributed():
    x = rnd(6, 4)
    X = T(x, S(("row",), ("tp",)))
    for index in (np.s_[1:3], np.s_[:, 1], np.s_[2], np.s_[..., None]):
        got = X[index]
        assert isinstance(got, dist.DistTensor) and got.mesh is MESH
        assert same_bits(got.numpy(), x[index])
    assert X[:, 1:3].layout.dims == (("tp",), ())  # MESH-SHARD-8: the rows are taken whole, their split stays
    assert X[1:3].layout.dims == ((), ())           # the cut dimension is gathered
    c = [rnd(4, 6, seed=s) for s in range(3)]
    got = partial_from(c)[:, ::2]
    assert got.layout.partial == ("tp",) and same_bits(got.numpy(), fold_f32(c)[:, ::2])
    abstract = dist.tensor((6, 4), S(("row",), ("tp",)), MESH, dtype="bf16")
    assert abstract[1:3].is_abstract and abstract[1:3].shape == (2, 4)
