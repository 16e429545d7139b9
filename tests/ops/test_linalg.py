"""matmul/gemm, cholesky and svd (GRAPH-MATMUL-1, GRAPH-CHOLESKY-1, GRAPH-SVD-1).

The bit-level references below re-implement the clauses with exact rational arithmetic
(``fractions.Fraction``) and NumPy float32 scalar operations (single IEEE operations); the
accuracy checks compare with NumPy's float64 LAPACK/BLAS under stated error bounds.
"""
import math
import time
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from numerics_reference import round_f32

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_ref.interp import run_function
from tessera_ref.ir import TensorType, parse_module
from tessera_ref.numerics import Policy
from tessera_ref.numerics.reduce import dot_tiled
from tessera_ref.ops import Call, primitive

U32 = 2.0 ** -24  # unit roundoff of f32
U_BF16 = 2.0 ** -8
HERE = "test_linalg.py:"


def bits(x):
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)



def fma_f32(a, b, c) -> np.float32:
    """f32 fused multiply-add: the exact a·b + c rounded once."""
    return round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def seq_dot(x, y, c=0.0) -> np.float32:
    """NUM-RED-1 in f32: acc = c, acc = fma(x_k, y_k, acc) for k ascending."""
    acc = np.float32(c)
    for xk, yk in zip(x, y):
        acc = fma_f32(xk, yk, acc)
    return acc


def check_traced(fn, *args):
    """Eager == jit == the parsed, re-run module, bit for bit; the module round-trips as text."""
    eager = fn(*args)
    eager = eager if isinstance(eager, tuple) else (eager,)
    jitted = tr.jit(fn)
    traced = jitted(*args)
    traced = traced if isinstance(traced, tuple) else (traced,)
    for e, t in zip(eager, traced):
        assert np.array_equal(bits(e), bits(t))
    m = jitted.trace(*args)
    parsed = parse_module(str(m))
    assert str(parsed) == str(m)
    again = run_function(parsed.body.first_op, *[np.asarray(a) for a in args])
    for e, r in zip(eager, again):
        assert np.array_equal(bits(e), bits(r))


# ---------------------------------------------------------------------------------------
# matmul

def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_matmul_f32_bits_are_sequential_fma_not_blas():
    rng = np.random.default_rng(1)
    a, b = _f32(rng, 6, 48), _f32(rng, 48, 5)
    ref = np.array([[seq_dot(a[i], b[:, j]) for j in range(5)] for i in range(6)], dtype=np.float32)
    got = np.asarray(op.matmul(a, b))
    assert np.array_equal(bits(got), bits(ref))
    # the order (and the fusing) matter on this input: BLAS and multiply-then-add differ
    assert not np.array_equal(bits(a @ b), bits(ref))
    unfused = np.zeros((6, 5), np.float32)
    for k in range(48):
        unfused = unfused + a[:, k:k + 1] * b[k:k + 1, :]
    assert not np.array_equal(bits(unfused), bits(ref))


def test_matmul_bf16_storage_rounds_once_from_f32_accumulation():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 40)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((40, 3)).astype(ml_dtypes.bfloat16)
    acc = np.array([[seq_dot(a[i].astype(np.float32), b[:, j].astype(np.float32)) for j in range(3)]
                    for i in range(4)], dtype=np.float32)
    got = op.matmul(a, b)
    assert got.type.format.name == "bf16"
    assert np.array_equal(bits(got), bits(acc.astype(ml_dtypes.bfloat16)))  # ml_dtypes: RNE


@pytest.mark.parametrize("shape_a, shape_b", [((7, 9), (9, 4)), ((2, 1, 3, 5), (4, 5, 2)), ((3, 16, 8), (8, 1))])
@pytest.mark.parametrize("dtype, u", [(np.float32, U32), (ml_dtypes.bfloat16, U_BF16), (np.float16, 2.0 ** -11)])
def test_matmul_agrees_with_float64(shape_a, shape_b, dtype, u):
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape_a).astype(dtype)
    b = rng.standard_normal(shape_b).astype(dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    got = np.asarray(op.matmul(a, b)).astype(np.float64)
    k = shape_a[-1]
    # K fma roundings in f32: |err| <= K·u32·(|a|@|b|) (Higham γ_K); then one rounding into
    # storage: u·|exact| (+ the accumulation error, scaled by 1 + u)
    bound = (1 + u) * k * U32 * (np.abs(a64) @ np.abs(b64)) + u * np.abs(a64 @ b64) + 1e-30
    assert got.shape == np.broadcast_shapes(shape_a[:-2], shape_b[:-2]) + (shape_a[-2], shape_b[-1])
    assert (np.abs(got - a64 @ b64) <= bound).all()


def test_matmul_transpose_flags_equal_the_transposed_operands():
    rng = np.random.default_rng(4)
    a, b = _f32(rng, 2, 12, 5), _f32(rng, 7, 12)
    plain = op.matmul(np.ascontiguousarray(a.swapaxes(-1, -2)), np.ascontiguousarray(b.T))
    flagged = op.matmul(a, b, transpose_a=True, transpose_b=True)
    assert np.array_equal(bits(plain), bits(flagged))
    assert flagged.shape == (2, 5, 7)


def test_matmul_tile_shape_changes_no_bit():
    rng = np.random.default_rng(5)
    a, b = _f32(rng, 9, 20), _f32(rng, 20, 11)
    tiled = dot_tiled(a, b, accum="f32", tile_m=4, tile_n=3, tile_k=7)
    assert np.array_equal(bits(op.matmul(a, b, tile_shape=(4, 3, 7))), bits(tiled))
    assert np.array_equal(bits(op.matmul(a, b)), bits(tiled))


def test_gemm_accumulates_into_c_with_one_rounding():
    rng = np.random.default_rng(6)
    a, b, c = _f32(rng, 3, 10), _f32(rng, 10, 4), _f32(rng, 4) * 100
    ref = np.array([[seq_dot(a[i], b[:, j], c[j]) for j in range(4)] for i in range(3)], dtype=np.float32)
    assert np.array_equal(bits(op.gemm(a, b, c)), bits(ref))
    assert np.array_equal(bits(op.gemm(a, b)), bits(op.matmul(a, b)))


def test_matmul_exact_reduction_rounds_the_exact_sum_once():
    pol = Policy("f32", reduction="exact")
    a = tr.asarray(np.array([[1e8, 1.0, -1e8, 3.0]], np.float32), policy=pol)
    b = tr.asarray(np.array([[1.0], [1.0], [1.0], [2.0 ** -30]], np.float32), policy=pol)
    # exact: 1 + 3·2^-30, rounded once to f32; the canonical order loses the 1 (1e8 + 1 = 1e8)
    assert float(np.asarray(op.matmul(a, b))[0, 0]) == float(round_f32(Fraction(1) + Fraction(3, 2 ** 30)))
    canonical = op.matmul(np.asarray(a), np.asarray(b))
    assert float(np.asarray(canonical)[0, 0]) == np.float32(3.0 * 2.0 ** -30)


def test_matmul_operator_and_cost():
    rng = np.random.default_rng(7)
    a, b = _f32(rng, 2, 3, 4), _f32(rng, 4, 5)
    x = tr.asarray(a)
    assert np.array_equal(bits(x @ b), bits(op.matmul(a, b)))
    assert np.array_equal(bits(a @ tr.asarray(b)), bits(op.matmul(a, b)))
    prim = primitive("matmul")
    ta, tb, to = TensorType((2, 3, 4), "f32"), TensorType((4, 5), "f32"), TensorType((2, 3, 5), "f32")
    cost = prim.cost(Call(prim, {"transpose_a": False, "transpose_b": False}, (ta, tb), (to,)))
    assert cost.flops == 2 * 2 * 3 * 5 * 4
    assert cost.bytes == 4 * (24 + 20 + 30)


@pytest.mark.parametrize("make, err, words", [
    (lambda: op.matmul(np.ones(3, np.float32), np.ones((3, 2), np.float32)), ShapeError, ["tensor<3xf32>", "rank 1"]),
    (lambda: op.matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)), ShapeError,
     ["tensor<2x3xf32>", "tensor<4x2xf32>", "K=3", "K=4"]),
    (lambda: op.matmul(np.ones((2, 2, 3), np.float32), np.ones((3, 3, 2), np.float32)), ShapeError,
     ["batch", "tensor<2x2x3xf32>", "tensor<3x3x2xf32>"]),
    (lambda: op.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float16)), DTypeError,
     ["tensor<2x3xf32>", "tensor<3x2xf16>"]),
    (lambda: op.gemm(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), np.ones((3, 2), np.float32)),
     ShapeError, ["C", "tensor<3x2xf32>"]),
    (lambda: op.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), tile_shape=(4, 0, 2)), OpError,
     ["tile_shape"]),
    (lambda: tr.ops.bind(primitive("matmul"), np.ones((1, 1), np.float32), np.ones((1, 1), np.float32),
                         transpose_c=True), OpError, ["transpose_c"]),
])
def test_matmul_errors_name_types_and_line(make, err, words):
    with pytest.raises(err) as info:
        make()
    text = str(info.value)
    assert HERE in text
    for w in words:
        assert w in text


def test_matmul_traced_and_round_trip():
    rng = np.random.default_rng(8)
    a, b, c = _f32(rng, 2, 4, 6), _f32(rng, 6, 3), _f32(rng, 3)

    def f(a, b, c):
        return op.gemm(a, b, c, tile_shape=(2, 2, 4)), op.matmul(a, b, transpose_a=False)
    check_traced(f, a, b, c)
    check_traced(f, a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), c.astype(ml_dtypes.bfloat16))


# ---------------------------------------------------------------------------------------
# cholesky

def _spd(rng, n, batch=()):
    x = rng.standard_normal(batch + (n, n))
    return (x @ x.swapaxes(-1, -2) + n * np.eye(n)).astype(np.float32)


def ref_cholesky(a: np.ndarray) -> np.ndarray:
    """GRAPH-CHOLESKY-1 in f32, element by element in the clause's order (Banachiewicz, row by
    row). sqrt: the f64 square root of an f32 rounded to f32 — double rounding is innocuous
    for sqrt since 53 >= 2·24 + 2 — division: the exact quotient rounded once."""
    n = a.shape[0]
    L = np.zeros((n, n), np.float32)
    for i in range(n):
        for j in range(i + 1):
            acc = np.float32(a[i, j])
            for k in range(j):
                acc = fma_f32(-L[i, k], L[j, k], acc)
            if i == j:
                L[i, i] = np.float32(math.sqrt(float(acc))) if acc > 0 else np.nan
            else:
                L[i, j] = round_f32(Fraction(float(acc)) / Fraction(float(L[j, j])))
    return L


def test_cholesky_bits_follow_the_clause():
    rng = np.random.default_rng(10)
    a = _spd(rng, 9)
    got = np.asarray(op.cholesky(a))
    assert np.array_equal(bits(got), bits(ref_cholesky(a)))
    # another natural order (sum the products first, then subtract from A) gives other bits
    other = ref_cholesky(a)
    L = np.zeros_like(other)
    for i in range(9):
        for j in range(i + 1):
            acc = np.float32(a[i, j]) - seq_dot(L[i, :j], L[j, :j])
            L[i, j] = np.float32(np.sqrt(acc)) if i == j else np.float32(acc / L[j, j])
    assert not np.array_equal(bits(L), bits(got))


@pytest.mark.parametrize("n, batch", [(1, ()), (5, ()), (16, (3,)), (7, (2, 2))])
def test_cholesky_agrees_with_float64(n, batch):
    rng = np.random.default_rng(11)
    a = _spd(rng, n, batch)
    L = np.asarray(op.cholesky(a)).astype(np.float64)
    a64 = a.astype(np.float64)
    absL = np.abs(L)
    # backward error (Higham, Thm 10.3): |A − L·Lᵀ| <= γ_{n+1}·|L|·|Lᵀ|, γ_m = m·u/(1 − m·u)
    gamma = (n + 1) * U32 / (1 - (n + 1) * U32)
    assert (np.abs(a64 - L @ L.swapaxes(-1, -2)) <= gamma * absL @ absL.swapaxes(-1, -2)).all()
    # forward: these matrices have κ(A) < 10, so |ΔL| <= 10·(n+1)·u·|A|^½-scale, checked loosely
    ref = np.linalg.cholesky(a64)
    assert np.abs(L - ref).max() <= 10 * (n + 1) * U32 * 4 * np.sqrt(np.abs(a64).max())
    assert (np.triu(L, 1) == 0).all() and not np.signbit(np.triu(L, 1)).any()


def test_cholesky_bf16_storage():
    rng = np.random.default_rng(12)
    a = _spd(rng, 8).astype(ml_dtypes.bfloat16)
    L = op.cholesky(a)
    assert L.type.format.name == "bf16"
    ref = np.linalg.cholesky(a.astype(np.float64))
    # f32 accumulation (error ~ 1e-5 relative here) then one bf16 rounding: <= u_bf16·|L| + small
    assert (np.abs(np.asarray(L).astype(np.float64) - ref) <= U_BF16 * np.abs(ref) + 1e-4).all()


def test_cholesky_reads_only_the_lower_triangle_and_nan_on_bad_pivot():
    rng = np.random.default_rng(13)
    a = _spd(rng, 6)
    garbage = a.copy()
    garbage[np.triu_indices(6, 1)] = np.nan
    assert np.array_equal(bits(op.cholesky(a)), bits(op.cholesky(garbage)))
    bad = a.copy()
    bad[3, 3] = -50.0
    L = np.asarray(op.cholesky(bad))
    assert np.isfinite(L[:, :3]).all() and np.isfinite(L[:3]).all()
    assert np.isnan(L[3:, 3:][np.tril_indices(3)]).all()
    assert np.array_equal(bits(L[:3, :3]), bits(np.asarray(op.cholesky(a))[:3, :3]))


def test_cholesky_batch_elements_are_independent():
    rng = np.random.default_rng(14)
    a = _spd(rng, 5, (3,))
    whole = np.asarray(op.cholesky(a))
    for i in range(3):
        assert np.array_equal(bits(whole[i]), bits(op.cholesky(a[i])))


@pytest.mark.parametrize("make, err, words", [
    (lambda: op.cholesky(np.ones((2, 3), np.float32)), ShapeError, ["square", "tensor<2x3xf32>"]),
    (lambda: op.cholesky(np.ones(3, np.float32)), ShapeError, ["tensor<3xf32>"]),
    (lambda: op.cholesky(np.ones((2, 2), np.int64)), DTypeError, ["tensor<2x2xindex>"]),
    (lambda: tr.ops.bind(primitive("cholesky"), np.eye(2, dtype=np.float32), upper=True), OpError, ["upper"]),
])
def test_cholesky_errors(make, err, words):
    with pytest.raises(err) as info:
        make()
    assert HERE in str(info.value)
    for w in words:
        assert w in str(info.value)


def test_cholesky_traced_and_round_trip():
    check_traced(lambda a: op.cholesky(a), _spd(np.random.default_rng(15), 5, (2,)))


# ---------------------------------------------------------------------------------------
# svd

def _f32_op(name, *args):
    """One IEEE operation on NumPy float32 scalars."""
    a = [np.float32(x) for x in args]
    with np.errstate(all="ignore"):
        return {"add": lambda: a[0] + a[1], "sub": lambda: a[0] - a[1], "mul": lambda: a[0] * a[1],
                "div": lambda: a[0] / a[1], "sqrt": lambda: np.sqrt(a[0])}[name]()


def ref_pairs(q, cyclic=False):
    """One sweep's rounds of pairs: the clause's round-robin, or the row-major cyclic order."""
    if cyclic:
        return [[(p, r)] for p in range(q) for r in range(p + 1, q)]
    s = 2 * math.ceil(q / 2) - 1
    rounds = []
    for r in range(s):
        pairs = [tuple(sorted(((r - i) % s, (r + i) % s))) for i in range(1, (s - 1) // 2 + 1)]
        pairs.append((r, s))
        rounds.append([pq for pq in pairs if max(pq) < q])
    return rounds


def ref_svd(a: np.ndarray, cyclic=False):
    """GRAPH-SVD-1 in f32, scalar by scalar."""
    m, n = a.shape
    X = a.T.copy() if m < n else a.copy()
    p, q = X.shape
    W, V = X.astype(np.float32), np.eye(q, dtype=np.float32)
    tau = np.float32(math.ceil(math.sqrt(p)) * 2.0 ** -23)
    for _ in range(30):
        rotated = False
        for rnd in ref_pairs(q, cyclic):
            old_W, old_V = W.copy(), V.copy()
            for P, Q in rnd:
                al, be, ga = (seq_dot(old_W[:, x], old_W[:, y]) for x, y in ((P, P), (Q, Q), (P, Q)))
                if not abs(ga) > _f32_op("mul", tau, _f32_op("mul", np.sqrt(al), np.sqrt(be))):
                    continue
                rotated = True
                zeta = _f32_op("div", _f32_op("sub", be, al), _f32_op("add", ga, ga))
                sg = np.float32(-1 if zeta < 0 else 1)
                root = _f32_op("sqrt", _f32_op("add", 1, _f32_op("mul", zeta, zeta)))
                t = _f32_op("div", sg, _f32_op("add", abs(zeta), root))
                c = _f32_op("div", 1, _f32_op("sqrt", _f32_op("add", 1, _f32_op("mul", t, t))))
                s = _f32_op("mul", c, t)
                for M, old in ((W, old_W), (V, old_V)):
                    for row in range(M.shape[0]):
                        xp, xq = old[row, P], old[row, Q]
                        M[row, P] = _f32_op("sub", _f32_op("mul", c, xp), _f32_op("mul", s, xq))
                        M[row, Q] = _f32_op("add", _f32_op("mul", s, xp), _f32_op("mul", c, xq))
        if not rotated:
            break
    sigma = np.array([np.sqrt(seq_dot(W[:, j], W[:, j])) for j in range(q)], np.float32)
    order = sorted(range(q), key=lambda j: -sigma[j])  # Python's sort is stable
    sigma, W, V = sigma[order], W[:, order], V[:, order]
    Uw = np.zeros_like(W)
    for j in range(q):
        if sigma[j] > 0:
            Uw[:, j] = [_f32_op("div", w, sigma[j]) for w in W[:, j]]
    U, Vt = (V, Uw.T.copy()) if m < n else (Uw, V.T.copy())
    for j in range(q):
        lead = Vt[j, int(np.argmax(np.abs(Vt[j])))]
        if lead < 0:
            Vt[j], U[:, j] = -Vt[j], -U[:, j]
    return U, sigma, Vt


@pytest.mark.parametrize("shape", [(5, 4), (3, 5)])
def test_svd_bits_follow_the_clause(shape):
    a = _f32(np.random.default_rng(20), *shape)
    got = op.svd(a)
    ref = ref_svd(a)
    for g, r in zip(got, ref):
        assert np.array_equal(bits(g), bits(r))
    # the pair order is part of the definition: the row-major cyclic order gives other bits
    cyclic = ref_svd(a, cyclic=True)
    assert any(not np.array_equal(bits(g), bits(c)) for g, c in zip(got, cyclic))


@pytest.mark.parametrize("shape", [(6, 6), (9, 4), (4, 9), (2, 3, 5, 5), (40, 24)])
def test_svd_agrees_with_float64(shape):
    a = _f32(np.random.default_rng(21), *shape)
    U, S, Vt = (np.asarray(x).astype(np.float64) for x in op.svd(a))
    m, n = shape[-2:]
    k = min(m, n)
    assert U.shape == shape[:-2] + (m, k) and S.shape == shape[:-2] + (k,) and Vt.shape == shape[:-2] + (k, n)
    ref = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    smax = ref[..., :1]
    # Jacobi's backward error: each of the <= 30·(k−1) rotations of a column adds O(u), and
    # the stopping rule leaves off-diagonals <= τ = ⌈√p⌉·2u; 64·max(m, n)·u·σ_max bounds both
    # comfortably for these sizes (Weyl: |ΔS| <= ‖ΔA‖₂)
    bound = 64 * max(m, n) * U32 * smax
    assert (np.abs(S - ref) <= bound).all()
    assert (np.diff(S, axis=-1) <= 0).all()
    rec = (U * S[..., None, :]) @ Vt
    assert (np.abs(rec - a) <= bound[..., None]).all()
    eye = np.eye(k)
    assert np.abs(U.swapaxes(-1, -2) @ U - eye).max() <= 64 * max(m, n) * U32
    assert np.abs(Vt @ Vt.swapaxes(-1, -2) - eye).max() <= 64 * max(m, n) * U32
    lead = np.take_along_axis(Vt, np.argmax(np.abs(Vt), axis=-1)[..., None], -1)
    assert (lead > 0).all()


def test_svd_bf16_storage():
    a = np.random.default_rng(22).standard_normal((7, 5)).astype(ml_dtypes.bfloat16)
    U, S, Vt = op.svd(a)
    assert {x.type.format.name for x in (U, S, Vt)} == {"bf16"}
    a64 = a.astype(np.float64)
    ref = np.linalg.svd(a64, compute_uv=False)
    S64 = np.asarray(S).astype(np.float64)
    # the f32 computation is accurate to ~1e-5 relative; one bf16 rounding adds u_bf16·σ
    assert (np.abs(S64 - ref) <= U_BF16 * ref + 1e-4 * ref[0]).all()
    rec = (np.asarray(U).astype(np.float64) * S64) @ np.asarray(Vt).astype(np.float64)
    # three rounded factors: <= 3·u_bf16·Σ σ_j |u_j||v_j|, with |u_j||v_j| <= 1
    assert np.abs(rec - a64).max() <= 3 * U_BF16 * ref.sum()


def test_svd_rank_deficient_and_batch_independent():
    a = _f32(np.random.default_rng(23), 3, 6, 4)
    a[1, :, 2] = 0.0  # a zero column: one zero singular value, its U column is +0
    U, S, Vt = (np.asarray(x) for x in op.svd(a))
    assert S[1, -1] == 0 and (U[1, :, -1] == 0).all() and not np.signbit(U[1, :, -1]).any()
    for i in range(3):
        for whole, alone in zip((U, S, Vt), op.svd(a[i])):
            assert np.array_equal(bits(whole[i]), bits(alone))


def test_svd_64x64_is_fast_enough():
    a = _f32(np.random.default_rng(24), 64, 64)
    t0 = time.perf_counter()
    op.svd(a)
    assert time.perf_counter() - t0 < 3.0  # ~0.6 s here; generous for loaded CI machines


def test_svd_errors_and_round_trip():
    with pytest.raises(ShapeError) as info:
        op.svd(np.ones(4, np.float32))
    assert HERE in str(info.value) and "tensor<4xf32>" in str(info.value)
    with pytest.raises(OpError) as info:
        tr.ops.bind(primitive("svd"), np.ones((2, 2), np.float32), full_matrices=True)
    assert "full_matrices" in str(info.value)
    check_traced(lambda a: op.svd(a), _f32(np.random.default_rng(25), 2, 5, 3))
