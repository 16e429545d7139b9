"""MESH-SHARD-4 and "Where sharding changes the summation order": which dimensions of a matmul
keep their splits, and the value of a K split (each block by NUM-RED-1, rounded into storage,
folded in rank order)."""
import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_ref.numerics import Policy
from tessera_conformance import assert_bits, clause, eager, not_applicable, run

from ._reference import (AXES, BF16, block_index, dot_ref, exact_dot_f32, fold, largest_axis, mesh_of, observe,
                         rank_orders, wide)

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")


def _operands(mesh, seed=80, m=4, n=3):
    rng = np.random.default_rng(seed)
    k = 16 * mesh.size  # long enough that a BLAS order differs from NUM-RED-1
    return wide(rng, (m, k), -12, 13), wide(rng, (k, n), -12, 13)


def _k_split(a, b, k_axes, mesh_shape, storage=np.float32):
    """The clause's definition: device blocks of K (block index by the layout's axis order) by
    NUM-RED-1, rounded into storage, folded in rank order (row-major over the axes in mesh order)."""
    axes = AXES[:len(mesh_shape)]
    sizes = dict(zip(axes, mesh_shape))
    p = int(np.prod([sizes[x] for x in k_axes]))
    kb = a.shape[-1] // p
    parts = []
    for coords in rank_orders(axes, mesh_shape, k_axes):
        blk = block_index(coords, k_axes, sizes)
        ks = slice(blk * kb, (blk + 1) * kb)
        parts.append(dot_ref(a[..., ks], b[..., ks, :]).astype(storage))
    return fold(parts, storage=storage)


def _k_cases(axes, big):
    """(a's K axes, b's K axes) pairs; None: that operand's K is whole."""
    out = [((big,), None), (None, (big,)), ((big,), (big,)), (axes, axes)]
    if len(axes) > 1:
        out += [(tuple(reversed(axes)), tuple(reversed(axes))), (axes[1:], None)]
    return out


@clause("MESH-SHARD-4")
def test_k_split_is_a_pending_sum_of_block_products(backend, mesh_shape):
    """K split over ``a``'s K axes, or ``b``'s when ``a``'s K is whole (the other operand sliced
    to match): a pending sum over the K axes whose value is the clause's fold."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    a, b = _operands(mesh)
    for ka, kb in _k_cases(axes, largest_axis(mesh_shape)):
        A = dist.tensor(a.shape, S(("col",), (ka,)) if ka else S(), mesh, data=a)
        B = dist.tensor(b.shape, S(("row",), (kb,)) if kb else S(), mesh, data=b)
        k_axes = ka or kb
        value, facts = observe(backend, lambda: op.matmul(A, B))
        assert set(facts["partial"]) == set(k_axes) and facts["layout"].dims == ((), ())
        assert_bits(value, _k_split(a, b, k_axes, mesh_shape), f"K over {ka} / {kb}")


@clause("MESH-SHARD-4")
def test_traced_k_split(backend, mesh_shape):
    """The traced program with an explicit all_reduce gives the same fold."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    a, b = _operands(mesh, 81)
    A = dist.tensor(a.shape, S(("col",), (axes,)), mesh, data=a)
    B = dist.tensor(b.shape, S(("row",), (axes,)), mesh, data=b)
    got = run(backend, lambda u, v: dist.all_reduce(op.matmul(u, v), axes), A, B)
    assert_bits(got, _k_split(a, b, axes, mesh_shape))


@clause("MESH-SHARD-4")
def test_k_made_whole_gives_the_unsharded_bits(backend, mesh_shape):
    """Both operands split K differently, or a C operand (gemm): K is made whole and the result
    is the single-device product (NUM-RED-1 over all of K, from C)."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    a, b = _operands(mesh, 82)
    c = wide(np.random.default_rng(83), (4, 3), -4, 5)
    A = dist.tensor(a.shape, S(("col",), (axes[0],)), mesh, data=a)
    B = dist.tensor(b.shape, S(("row",), (axes[-1],)), mesh, data=b)
    if axes[0] != axes[-1]:
        value, facts = observe(backend, lambda: op.matmul(A, B))
        assert facts["partial"] == ()
        assert_bits(value, dot_ref(a, b))
    value, facts = observe(backend, lambda: op.gemm(A, B, c))
    assert facts["partial"] == ()
    assert_bits(value, dot_ref(a, b, c))


@clause("MESH-SHARD-4")
def test_m_n_and_batch_splits(backend, mesh_shape):
    """M keeps ``a``'s split, N ``b``'s unless it uses an M or K axis, batch dimensions take
    ``a``'s splits; without a K split the result is the unsharded product bit for bit."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    a0, a1 = axes[0], axes[-1]
    n = 2 * mesh_shape[0] * mesh_shape[-1]
    rng = np.random.default_rng(84)
    a, b, ab = wide(rng, (n, 256), -12, 13), wide(rng, (256, n), -12, 13), wide(rng, (n, n, 256), -12, 13)
    A = dist.tensor(a.shape, S(("row",), (a0,)), mesh, data=a)
    B = dist.tensor(b.shape, S(("col",), (a1,)), mesh, data=b)
    Bm = dist.tensor(b.shape, S(("col",), (a0,)), mesh, data=b)
    AB = dist.tensor(ab.shape, S(("batch", "row"), (a0, a1)) if a0 != a1 else S(("batch",), (a0,)), mesh, data=ab)
    cases = [(lambda: op.matmul(A, B), ((a0,), (a1,) if a1 != a0 else ()), dot_ref(a, b)),
             (lambda: op.matmul(A, Bm), ((a0,), ()), dot_ref(a, b)),           # N would reuse M's axis
             # N takes b's split first; the batch dimension then takes a's unless that axis is taken
             (lambda: op.matmul(AB, B), ((a0,), (a1,), ()) if a1 != a0 else ((), (), (a0,)), dot_ref(ab, b))]
    for make, dims, want in cases:
        value, facts = observe(backend, make)
        assert facts["layout"].dims == dims and facts["partial"] == ()
        assert_bits(value, want)


@pytest.mark.parametrize("ta, tb", [(True, False), (False, True)])
@clause("MESH-SHARD-4")
def test_transposed_operands(backend, mesh_shape, ta, tb):
    """K is found after ``transpose_a``/``transpose_b``; the split sum is the same fold."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    a, b = _operands(mesh, 85)
    a_arg, b_arg = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    A = dist.tensor(a_arg.shape, S((0 if ta else 1,), (axis,)), mesh, data=a_arg)
    B = dist.tensor(b_arg.shape, S((1 if tb else 0,), (axis,)), mesh, data=b_arg)
    value, facts = observe(backend, lambda: op.matmul(A, B, transpose_a=ta, transpose_b=tb))
    assert facts["partial"] == (axis,)
    assert_bits(value, _k_split(a, b, (axis,), mesh_shape))


@clause("MESH-SHARD-4")
def test_bf16_blocks_round_into_storage_before_the_fold(backend, mesh_shape):
    """A bf16 K split rounds each device's block to bf16, then folds in f32 and rounds once."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    a, b = (v.astype(BF16) for v in _operands(mesh, 86))
    A = dist.tensor(a.shape, S(("col",), (axis,)), mesh, dtype="bf16", data=a)
    B = dist.tensor(b.shape, S(("row",), (axis,)), mesh, dtype="bf16", data=b)
    value, _ = observe(backend, lambda: op.matmul(A, B))
    assert_bits(value, _k_split(a, b, (axis,), mesh_shape, storage=BF16))


@clause("MESH-SHARD-4")
def test_exact_k_split_is_the_same_on_every_mesh(backend, mesh_shape):
    """``reduction="exact"``: every K split gives the exact sum of products rounded once."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    a, b = _operands(mesh, 87, m=2, n=2)
    want = exact_dot_f32(a, b)
    for split in ((largest_axis(mesh_shape),), axes):
        A = dist.tensor(a.shape, S(("col",), (split,)), mesh, dtype=EXACT, data=a)
        B = dist.tensor(b.shape, S(("row",), (split,)), mesh, dtype=EXACT, data=b)
        assert_bits(eager(backend, lambda: dist.all_reduce(op.matmul(A, B), split)), want, str(split))


@pytest.mark.parametrize("p, bits", [(1, 0x3F800000), (2, 0x3F800001), (4, 0x3F800000)])
@clause("MESH-SHARD-4")
def test_worked_example(backend, p, bits):
    """The spec's table: a = (1, e, e, e), b = 1, e = 2^-24, K over tp = 1, 2, 4; exact: 0x3f800002."""
    e = np.float32(2.0 ** -24)
    a, b = np.array([[1.0, e, e, e]], np.float32), np.ones((4, 1), np.float32)
    mesh = dist.Mesh(("tp",), range(p), (p,))
    for policy, want in ((None, bits), (EXACT, 0x3F800002)):
        A = dist.tensor(a.shape, S(("col",), ("tp",)), mesh, dtype=policy, data=a)
        B = dist.tensor(b.shape, S(("row",), ("tp",)), mesh, dtype=policy, data=b)
        got = eager(backend, lambda: dist.all_reduce(op.matmul(A, B), "tp") if p > 1 else op.matmul(A, B))
        assert_bits(got.view(np.uint32), np.array([[want]], np.uint32), f"{policy}")


@clause("MESH-SHARD-4")
def test_multi_axis_k_folds_in_mesh_order_not_k_order(backend, mesh_shape):
    """``#shard<[*, pp+tp]>`` on ``(dp, tp, pp)``: block ``c_pp·p_tp + c_tp`` lives on the device
    with those coordinates and the fold visits ``(tp, pp)`` row-major — not K order."""
    if len(mesh_shape) < 3:
        not_applicable("needs the (dp, tp, pp) mesh")
    mesh = mesh_of(mesh_shape)
    rng = np.random.default_rng(88)
    k = 4 * mesh.size
    a = wide(rng, (2, k), -24, 25)
    b = np.ones((k, 1), np.float32)
    A = dist.tensor(a.shape, S(("col",), (("pp", "tp"),)), mesh, data=a)
    B = dist.tensor(b.shape, S(("row",), (("pp", "tp"),)), mesh, data=b)
    got = eager(backend, lambda: dist.all_reduce(op.matmul(A, B), ("tp", "pp")))
    want = _k_split(a, b, ("pp", "tp"), mesh_shape)
    assert_bits(got, want)
    sizes = dict(zip(AXES, mesh_shape))
    kb = k // (sizes["pp"] * sizes["tp"])
    k_order = fold([dot_ref(a[:, i * kb:(i + 1) * kb], b[i * kb:(i + 1) * kb]) for i in range(k // kb)])
    assert not np.array_equal(want, k_order), "the input should tell the two orders apart"
