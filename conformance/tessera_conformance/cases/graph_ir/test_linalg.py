"""GRAPH-MATMUL-1, GRAPH-CHOLESKY-1, GRAPH-SVD-1, GRAPH-SPMM-1: canonical dots (sequential
fma in ascending k, emulated exactly), checked against a sequential reference — never BLAS."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_conformance import assert_bits, clause, run

from . import _reference as R
from ._cases import check, operand, policy, values
from ._formats import round_fraction, round_values


def _mixed(shape, seed, spread=10):
    """Values of very different magnitudes and both signs: long dots cancel, so any other
    summation order (BLAS blocking, pairwise) gives other bits."""
    g = np.random.default_rng(seed)
    return g.standard_normal(shape) * np.exp2(g.integers(-spread, spread, shape))


@clause("GRAPH-MATMUL-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_matmul_canonical_dot(backend, fmt):
    """acc = +0, acc = fma(a_k, b_k, acc) for k ascending in f32 (K = 320), one rounding into storage."""
    # column 0 alternates products ±2^24 with small ones: the f32 accumulator absorbs the small
    # terms depending on the order, so any reordering shows, even after rounding to bf16
    a = values(operand(_mixed((4, 320), 1), fmt))
    b = values(operand(_mixed((320, 5), 2), fmt))
    a[:, 0:256:2] = 2.0 ** 12 * np.where(np.arange(128) % 2, -1.0, 1.0)
    a[:, 1:256:2] = values(operand(np.random.default_rng(5).uniform(0.5, 1.5, (4, 128)), fmt))
    b[0:256:2, 0], b[1:256:2, 0] = 2.0 ** 12, 1.0
    if fmt == "bf16":  # bf16 products below 2^-126 need the fma's single rounding
        a[:, 312:] = values(operand(np.full((4, 8), 2.0 ** -70), fmt))
        b[312:, :] = values(operand(np.full((8, 5), -3 * 2.0 ** -66), fmt))
    want = round_values(R.matmul("f32", a, b), fmt)
    check(backend, op.matmul, (round_values(a, fmt), round_values(b, fmt)), want, what=fmt)


@clause("GRAPH-MATMUL-1", "GRAPH-RW-2")
def test_matmul_flags_and_tile_shape_change_no_bit(backend):
    """transpose_a/transpose_b, a folded transpose and tile_shape give the same bits."""
    a, b = values(operand(_mixed((6, 64), 3), "f32")), values(operand(_mixed((64, 7), 4), "f32"))
    want = round_values(R.matmul("f32", a, b), "f32")
    a32, b32 = round_values(a, "f32"), round_values(b, "f32")
    at, bt = np.ascontiguousarray(a32.T), np.ascontiguousarray(b32.T)
    check(backend, lambda x, y, xt, yt: (op.matmul(xt, y, transpose_a=True), op.matmul(x, yt, transpose_b=True),
                                         op.matmul(xt, yt, transpose_a=True, transpose_b=True),
                                         op.matmul(x, y, tile_shape=[2, 4, 8]), op.matmul(xt.T, yt.T)),
          (a32, b32, at, bt), [want] * 5)


@clause("GRAPH-MATMUL-1")
def test_matmul_batch_axes_broadcast(backend):
    """[2,1,3,K] @ [4,K,5] -> [2,4,3,5], every batch element its own canonical dots."""
    a = values(operand(_mixed((2, 1, 3, 40), 5), "f32"))
    b = values(operand(_mixed((4, 40, 5), 6), "f32"))
    want = round_values(R.matmul("f32", a, b), "f32")
    assert want.shape == (2, 4, 3, 5)
    check(backend, op.matmul, (round_values(a, "f32"), round_values(b, "f32")), want)


@clause("GRAPH-MATMUL-1")
def test_gemm_starts_from_c(backend):
    """gemm(a, b, c): the dot starts from C (broadcast to the result), one rounding at the end."""
    a, b = values(operand(_mixed((3, 50), 7), "f32")), values(operand(_mixed((50, 4), 8), "f32"))
    for cshape in ((3, 4), (1, 4)):
        c = values(operand(_mixed(cshape, 9, 16), "f32"))
        want = round_values(R.matmul("f32", a, b, np.broadcast_to(c, (3, 4))), "f32")
        check(backend, op.gemm, (round_values(a, "f32"), round_values(b, "f32"), round_values(c, "f32")), want)


@clause("GRAPH-MATMUL-1")
def test_matmul_f64_and_stochastic(backend):
    """f64 accum uses an f64 fma; stochastic storage rounding uses random_bits(seed, i)."""
    a, b = values(operand(_mixed((3, 24), 10, 30), "f64")), values(operand(_mixed((24, 2), 11, 30), "f64"))
    check(backend, op.matmul, (tr.asarray(a, dtype="f64"), tr.asarray(b, dtype="f64")), R.matmul("f64", a, b))
    pol = policy("bf16", rounding="stochastic")
    a, b = values(operand(_mixed((5, 64), 12), "bf16")), values(operand(_mixed((64, 6), 13), "bf16"))
    u = R.random_bits(R.key_words(4), np.arange(30)).reshape(5, 6)
    want = round_values(R.matmul("f32", a, b), "bf16", "stochastic", u=u)
    check(backend, lambda x, y: op.matmul(x, y, seed=4),
          (tr.asarray(round_values(a, "bf16"), policy=pol, seed=0), tr.asarray(round_values(b, "bf16"), policy=pol,
                                                                                seed=0)), want)


@clause("GRAPH-MATMUL-1")
def test_matmul_exact_mode(backend):
    """reduction="exact": C + Σ a_k·b_k as an exact real, rounded once into storage."""
    pol = policy("bf16", reduction="exact")
    a, b = values(operand(_mixed((3, 300), 14), "bf16")), values(operand(_mixed((300, 2), 15), "bf16"))
    want = np.array([[round_fraction(R.exact_sum(a[i] * b[:, j]), "bf16")[()] for j in range(2)] for i in range(3)])
    args = (tr.asarray(round_values(a, "bf16"), policy=pol), tr.asarray(round_values(b, "bf16"), policy=pol))
    check(backend, op.matmul, args, want)


@clause("GRAPH-MATMUL-1")
def test_matmul_errors(backend):
    """Rank < 2 and mismatched K are ShapeErrors; other policies or non-floats DTypeErrors."""
    m = np.ones((2, 3), np.float32)
    with pytest.raises(ShapeError):
        run(backend, op.matmul, np.ones(3, np.float32), np.ones((3, 2), np.float32))
    with pytest.raises(ShapeError):
        run(backend, op.matmul, m, m)
    with pytest.raises(DTypeError):
        run(backend, op.matmul, m, tr.asarray(np.ones((3, 2)), dtype="bf16"))
    with pytest.raises(DTypeError):
        run(backend, op.matmul, np.ones((2, 3), np.int64), np.ones((3, 2), np.int64))


def _spd(n, batch=(), seed=0):
    g = np.random.default_rng(seed)
    m = g.standard_normal(batch + (n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


@clause("GRAPH-CHOLESKY-1")
def test_cholesky_banachiewicz(backend):
    """Cholesky-Banachiewicz with canonical dots; upper triangle +0, only A's lower triangle read."""
    a = values(operand(_spd(6, (2,), 1), "f32"))
    a[..., 0, 5] = np.nan
    want = round_values(R.cholesky("f32", a), "f32")
    check(backend, op.cholesky, (round_values(a, "f32"),), want)
    assert not np.signbit(values(want)[:, 0, 1:]).any()


@clause("GRAPH-CHOLESKY-1")
def test_cholesky_not_positive_definite(backend):
    """A pivot <= 0 makes column j and what depends on it NaN; earlier columns keep their values."""
    a = _spd(5, (), 2)
    a[2, 2] = -50.0
    a = values(operand(a, "f32"))
    want = round_values(R.cholesky("f32", a), "f32")
    wv = values(want)
    assert np.isnan(wv[2:, 2:][np.tril_indices(3)]).all() and np.isfinite(wv[:, :2][np.tril_indices(5, 0, 2)]).all()
    check(backend, op.cholesky, (round_values(a, "f32"),), want)


@clause("GRAPH-SVD-1")
@pytest.mark.parametrize("shape", [(6, 4), (3, 5), (2, 4, 3), (5, 5)])
def test_svd_one_sided_jacobi(backend, shape):
    """(U, S, Vt) from the specified Jacobi sweeps, ordering and sign rule, rounded once."""
    a = values(operand(np.random.default_rng(sum(shape)).standard_normal(shape), "f32"))
    U, S, Vt = R.svd("f32", a)
    want = [round_values(U, "f32"), round_values(S, "f32"), round_values(Vt, "f32")]
    got = run(backend, op.svd, round_values(a, "f32"))
    assert_bits(got, want, f"svd {shape}")
    recon = np.einsum("...ik,...k,...kj->...ij", values(got[0]), values(got[1]), values(got[2]))
    assert np.max(np.abs(recon - a)) < 1e-4 * np.max(np.abs(a))


@clause("GRAPH-CHOLESKY-1", "GRAPH-SVD-1")
@pytest.mark.parametrize("reduction", ["exact", "reassociate"])
def test_canonical_order_under_every_reduction_mode(backend, reduction):
    """cholesky and svd compute in the canonical order whatever the policy's reduction mode."""
    pol = policy("f32", reduction=reduction)
    a = values(operand(_spd(4, (), 3), "f32"))
    check(backend, op.cholesky, (tr.asarray(round_values(a, "f32"), policy=pol),),
          round_values(R.cholesky("f32", a), "f32"))
    m = values(operand(np.random.default_rng(4).standard_normal((5, 3)), "f32"))
    got = run(backend, op.svd, tr.asarray(round_values(m, "f32"), policy=pol))
    assert_bits(got, [round_values(v, "f32") for v in R.svd("f32", m)])


@clause("GRAPH-SVD-1")
def test_svd_rank_deficient_columns_are_zero(backend):
    """A zero singular value gives a +0 column of U (m ≥ n); S is ordered descending."""
    a = np.zeros((4, 3))
    a[:, 0] = [1.0, 2.0, 0.0, -1.0]
    a[:, 2] = [0.5, 0.0, 3.0, 1.0]
    a = values(operand(a, "f32"))
    U, S, Vt = R.svd("f32", a)
    got = run(backend, op.svd, round_values(a, "f32"))
    assert_bits(got, [round_values(U, "f32"), round_values(S, "f32"), round_values(Vt, "f32")])
    assert values(got[1])[2] == 0 and not np.any(values(got[0])[:, 2]) and not np.signbit(values(got[0])[:, 2]).any()


CSR = (np.array([0, 3, 3, 7, 9]), np.array([4, 0, 4, 2, 1, 2, 0, 3, 1]))


@clause("GRAPH-SPMM-1")
def test_spmm_stored_order(backend):
    """Each row's stored entries in stored order (repeats separate), from +0; an empty row is +0."""
    indptr, indices = CSR
    data = values(operand(_mixed(9, 16, 12), "f32"))
    dense = values(operand(_mixed((5, 6), 17, 12), "f32"))
    want = round_values(R.spmm("f32", indptr, indices, data, dense), "f32")
    check(backend, lambda p, i, d, x: op.spmm((p, i, d, (4, 5)), x),
          (indptr, indices, round_values(data, "f32"), round_values(dense, "f32")), want)


@clause("GRAPH-SPMM-1")
def test_spmm_bf16_and_exact(backend):
    """bf16 data and dense: f32 accum, one rounding; under reduction="exact" the exact sum."""
    indptr, indices = CSR
    data = values(operand(_mixed(9, 18), "bf16"))
    dense = values(operand(_mixed((5, 3), 19), "bf16"))
    want = round_values(R.spmm("f32", indptr, indices, data, dense), "bf16")
    check(backend, lambda p, i, d, x: op.spmm((p, i, d, (4, 5)), x),
          (indptr, indices, round_values(data, "bf16"), round_values(dense, "bf16")), want)
    pol = policy("bf16", reduction="exact")
    exact = np.zeros((4, 3), dtype=want.dtype)
    for r in range(4):
        for j in range(3):
            p = range(indptr[r], indptr[r + 1])
            exact[r, j] = round_fraction(R.exact_sum([data[q] * dense[indices[q], j] for q in p]), "bf16")[()]
    check(backend, lambda p, i, d, x: op.spmm((p, i, d, (4, 5)), x),
          (indptr, indices, tr.asarray(round_values(data, "bf16"), policy=pol),
           tr.asarray(round_values(dense, "bf16"), policy=pol)), exact)


@clause("GRAPH-SPMM-1")
@pytest.mark.parametrize("indptr,indices", [
    ([1, 3, 3, 7, 9], None), ([0, 3, 2, 7, 9], None), ([0, 3, 3, 7, 8], None),
    (None, [4, 0, 4, 2, 1, 5, 0, 3, 1]), (None, [4, 0, 4, 2, -1, 2, 0, 3, 1])])
def test_spmm_structure_errors(backend, indptr, indices):
    """A bad indptr or column index is an OpError naming the row, raised when the op runs."""
    p = np.array(indptr if indptr is not None else CSR[0])
    i = np.array(indices if indices is not None else CSR[1])
    with pytest.raises(OpError, match="row"):
        run(backend, lambda pp, ii, d, x: op.spmm((pp, ii, d, (4, 5)), x), p, i, np.ones(9, np.float32),
            np.ones((5, 2), np.float32))


@clause("GRAPH-SPMM-1")
def test_spmm_indptr_without_m_plus_1_entries_is_a_shape_error(backend):
    """An indptr type of the wrong length is a ShapeError when the op is traced."""
    with pytest.raises(ShapeError, match="m [+] 1"):
        run(backend, lambda pp, ii, d, x: op.spmm((pp, ii, d, (4, 5)), x), np.array([0, 3, 3, 9]),
            np.array(CSR[1]), np.ones(9, np.float32), np.ones((5, 2), np.float32))
