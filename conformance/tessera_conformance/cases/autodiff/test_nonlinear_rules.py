"""AD-SOFTMAX-1, AD-LAYERNORMSAFE-1, AD-RMSNORMSAFE-1, AD-FLASHATTENTION-1, AD-CHOLESKY-1,
AD-SVD-1: rules of nonlinear ops, in float64 against the clause's closed form written in NumPy
and against central finite differences of a NumPy (LAPACK) forward; the adjoint law between
the jvp and vjp rules to a few float64 roundings. Bounds: closed forms 1e-12 of the largest
magnitude (a handful of f64 roundings of O(1) values), finite differences 1e-6 (h = 1e-6:
O(h²) truncation and O(ε/h) cancellation), the law 1e-12 of Σ|a|·|b|. Narrow policies: the
rule computes in f32 and rounds once, so it is within one storage rounding (2⁻⁸ in bf16) of
the float64 value, plus 2⁻²⁰ of the largest magnitude."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_conformance import assert_bits, assert_close, clause, eager

from ._reference import fd_jvp, jvp_on, same_as_oracle, vjp_on

BF16 = ml_dtypes.bfloat16


def _normal(shape, seed, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def _as_list(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def check_rules(backend, f, f_np, primals, closed_form=None, fd_rel=1e-6):
    """The jvp against the finite difference, the adjoint law, the vjp against ``closed_form``, the oracle."""
    tangents = [_normal(p.shape, 100 + i) for i, p in enumerate(primals)]
    jv = _as_list(jvp_on(backend, f, tuple(primals), tuple(tangents)))
    fd = _as_list(fd_jvp(f_np, primals, tangents))
    for i, (t, d) in enumerate(zip(jv, fd)):
        assert_close(t, d, rel=fd_rel, what=f"tangent {i} against the finite difference")
    cts = [_normal(np.shape(t), 200 + i) for i, t in enumerate(jv)]
    ct = cts if len(cts) > 1 else cts[0]
    bars = _as_list(vjp_on(backend, f, tuple(primals), ct))
    same_as_oracle(backend, bars, lambda b: _as_list(vjp_on(b, f, tuple(primals), ct)), "cotangents")
    same_as_oracle(backend, jv, lambda b: _as_list(jvp_on(b, f, tuple(primals), tuple(tangents))), "tangents")
    lhs = sum(float(np.sum(t * c)) for t, c in zip(jv, cts))
    rhs = sum(float(np.sum(v * b)) for v, b in zip(tangents, bars))
    scale = sum(float(np.sum(np.abs(t * c))) for t, c in zip(jv, cts)) + \
        sum(float(np.sum(np.abs(v * b))) for v, b in zip(tangents, bars))
    assert abs(lhs - rhs) <= 1e-12 * scale, f"<J v, u> = {lhs!r} but <v, J^T u> = {rhs!r}"
    if closed_form is not None:
        for i, (b, w) in enumerate(zip(bars, closed_form(*primals, *cts))):
            assert_close(b, w, rel=1e-12, what=f"cotangent {i} against the closed form")
    return bars


# -- softmax -----------------------------------------------------------------------------------
@clause("AD-SOFTMAX-1")
@pytest.mark.parametrize("shape, axis", [((3, 5), -1), ((4, 3), 0)])
def test_softmax_rule(backend, shape, axis):
    """``x̄ = y ⊗ (ḡ ⊖ Σ ḡ ⊗ y)``; the Jacobian is symmetric, so the jvp is the same expression."""
    def f_np(x):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def closed(x, g):
        y = f_np(x)
        return (y * (g - (g * y).sum(axis=axis, keepdims=True)),)
    check_rules(backend, lambda x: op.softmax(x, axis=axis), f_np, [_normal(shape, 1)], closed)


@clause("AD-SOFTMAX-1")
def test_bf16_softmax_cotangent_rounds_once(backend):
    """bf16 softmax: computed in f32, rounded once (within 2⁻⁸ of float64, plus 2⁻²⁰)."""
    x, g = (_normal((6, 40), s).astype(BF16) for s in (2, 3))
    xa, ga = tr.asarray(x, policy="bf16"), tr.asarray(g, policy="bf16")
    y = eager(backend, op.softmax, xa).astype(np.float64)
    (bar,) = vjp_on(backend, op.softmax, (xa,), ga)
    assert bar.dtype == BF16
    g64 = g.astype(np.float64)
    ref = y * (g64 - (g64 * y).sum(-1, keepdims=True))
    err = np.abs(bar.astype(np.float64) - ref)
    assert np.all(err <= 2.0 ** -8 * np.abs(ref) + 2.0 ** -20 * np.max(np.abs(ref)))


# -- normalizations ----------------------------------------------------------------------------
def _layernorm(x, w=None, b=None, eps=1e-5, axis=-1):
    mu = x.mean(axis, keepdims=True)
    xh = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis, keepdims=True) + eps)
    return xh * (1 if w is None else _along(w, x, axis)) + (0 if b is None else _along(b, x, axis))


def _rmsnorm(x, w=None, eps=1e-5, axis=-1):
    xh = x / np.sqrt((x * x).mean(axis, keepdims=True) + eps)
    return xh * (1 if w is None else _along(w, x, axis))


def _along(w, x, axis):
    shape = [1] * x.ndim
    shape[axis] = -1
    return w.reshape(shape)


def _norm_closed(center, eps, axis=-1):
    """The textbook gradient of the (layer|rms)norm with weight w and bias b, in float64."""
    def closed(x, w, *rest):
        g = rest[-1]
        c = x - x.mean(axis, keepdims=True) if center else x
        r = 1 / np.sqrt((c * c).mean(axis, keepdims=True) + eps)
        xh = c * r
        h = g * _along(w, x, axis)
        d = r * (h - xh * (xh * h).mean(axis, keepdims=True))
        xbar = d - d.mean(axis, keepdims=True) if center else d
        others = tuple(a for a in range(x.ndim) if a != axis % x.ndim)
        out = [xbar, (g * xh).sum(axis=others)]
        if center:
            out.append(g.sum(axis=others))
        return out
    return closed


@clause("AD-LAYERNORMSAFE-1")
@pytest.mark.parametrize("eps, axis", [(1e-5, -1), (0.1, -1), (0.3, 0)])
def test_layernorm_rule(backend, eps, axis):
    """layernorm: ``x̄ = d ⊖ mean d``, ``w̄ = Σ ḡ ⊗ x̂``, ``b̄ = Σ ḡ``, eps inside ``r``."""
    shape = (3, 6) if axis == -1 else (5, 2)
    n = shape[axis]
    x, w, b = _normal(shape, 4), _normal(n, 5), _normal(n, 6)
    check_rules(backend, lambda x, w, b: op.layernorm_safe(x, w, b, eps=eps, axis=axis),
                lambda x, w, b: _layernorm(x, w, b, eps, axis), [x, w, b], _norm_closed(True, eps, axis))


@clause("AD-RMSNORMSAFE-1")
@pytest.mark.parametrize("eps, axis", [(1e-5, -1), (0.1, 0)])
def test_rmsnorm_rule(backend, eps, axis):
    """AD-LAYERNORMSAFE-1 without centering: ``x̄ = d``, no bias."""
    shape = (3, 6) if axis == -1 else (5, 2)
    x, w = _normal(shape, 7), _normal(shape[axis], 8)
    check_rules(backend, lambda x, w: op.rmsnorm_safe(x, w, eps=eps, axis=axis),
                lambda x, w: _rmsnorm(x, w, eps, axis), [x, w], _norm_closed(False, eps, axis))


@clause("AD-LAYERNORMSAFE-1", "AD-RMSNORMSAFE-1")
@pytest.mark.parametrize("name", ["layernorm_safe", "rmsnorm_safe"])
def test_norm_of_constant_rows_in_fp8_is_finite(backend, name):
    """fp8: eps enters in accum (not storage, where it is 0): constant rows get finite gradients."""
    w = np.array([0.25, -0.125, 0.0625, 0.375])  # exact in fp8
    x = tr.asarray(np.full((2, 4), 0.0 if name == "rmsnorm_safe" else 1.5), policy="fp8_e4m3")
    wa = tr.asarray(w, policy="fp8_e4m3")
    f = getattr(op, name)
    g = eager(backend, lambda x, w: tr.grad(lambda a: op.sum(f(a, w, eps=1e-4)))(x), x, wa).astype(np.float64)
    h = w - w.mean() if name == "layernorm_safe" else w
    ref = np.broadcast_to(h / np.sqrt(1e-4), (2, 4))
    assert np.all(np.abs(g - ref) <= 2.0 ** -4 * np.abs(ref))


# -- attention ---------------------------------------------------------------------------------
def _attention(q, k, v, scale, causal):
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        sq, sk = q.shape[-2], k.shape[-2]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def _attention_closed(scale, causal):
    def closed(q, k, v, g):
        p = _attention(q, k, v, scale, causal)
        dp = g @ np.swapaxes(v, -1, -2)
        ds = scale * p * (dp - (dp * p).sum(-1, keepdims=True))
        qb, kb, vb = ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ g
        return [qb.reshape(-1, *q.shape[-2:]).sum(0).reshape(q.shape) if qb.shape != q.shape else qb,
                kb.reshape(-1, *k.shape[-2:]).sum(0).reshape(k.shape) if kb.shape != k.shape else kb,
                vb.reshape(-1, *v.shape[-2:]).sum(0).reshape(v.shape) if vb.shape != v.shape else vb]
    return closed


@clause("AD-FLASHATTENTION-1")
@pytest.mark.parametrize("shapes, scale, causal, block_k", [
    (((2, 3, 4), (2, 5, 4), (2, 5, 3)), None, False, None),
    (((2, 3, 4), (2, 5, 4), (2, 5, 3)), 0.7, True, 2),
    (((1, 3, 4), (2, 3, 4), (1, 3, 2)), None, False, None),
], ids=["plain", "causal-scaled-blocked", "broadcast"])
def test_flash_attention_rule(backend, shapes, scale, causal, block_k):
    """flash_attention: the derivative of dense masked attention, summed over broadcast batch axes."""
    q, k, v = (_normal(s, 9 + i) for i, s in enumerate(shapes))
    sc = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    kw = {"causal": causal, **({"scale": scale} if scale else {}), **({"block_k": block_k} if block_k else {})}
    check_rules(backend, lambda q, k, v: op.flash_attention(q, k, v, **kw),
                lambda q, k, v: _attention(q, k, v, sc, causal) @ v, [q, k, v], _attention_closed(sc, causal))


@clause("AD-FLASHATTENTION-1")
def test_bf16_attention_uses_the_attribute_scale_in_accum(backend):
    """bf16 attention: scale 0.7 in f32 (not 0.69921875), each cotangent rounded once; the row
    term Δ = Σ ḡ ⊗ o reads the bf16 output o (FlashAttention-2), so q̄ and k̄ may also carry
    o's rounding (|δo| ≤ 2⁻⁹|o|) through P·δΔ·k·scale — and nothing more."""
    q, k, v, g = (_normal(s, 12 + i).astype(BF16).astype(np.float64) for i, s in
                  enumerate(((4, 96), (5, 96), (5, 8), (4, 8))))
    bars = vjp_on(backend, lambda q, k, v: op.flash_attention(q, k, v, scale=0.7, causal=True),
                  tuple(tr.asarray(t, policy="bf16") for t in (q, k, v)), tr.asarray(g, policy="bf16"))
    p = _attention(q, k, v, 0.7, True)
    e_delta = 2.0 ** -9 * (np.abs(g) * np.abs(p @ v)).sum(-1, keepdims=True)  # o's rounding, through Δ
    carried = (0.7 * (p * e_delta) @ np.abs(k), 0.7 * np.swapaxes(p * e_delta, -1, -2) @ np.abs(q), 0.0)
    for got, ref, extra in zip(bars, _attention_closed(0.7, True)(q, k, v, g), carried):
        assert got.dtype == BF16
        err = np.abs(got.astype(np.float64) - ref)
        assert np.all(err <= 2.0 ** -8 * np.abs(ref) + 1.01 * extra + 2.0 ** -20 * np.max(np.abs(ref)))


@clause("AD-FLASHATTENTIONBWD-1")
@pytest.mark.parametrize("causal", [False, True])
def test_lse_and_backward_rules(backend, causal):
    """Second derivatives of attention: the rules of flash_attention_lse and flash_attention_bwd
    against finite differences of float64 NumPy, and the adjoint law."""
    q, k, v, o, do = (_normal(s, 30 + i) for i, s in enumerate(((2, 3, 4), (2, 5, 4), (2, 5, 3), (2, 3, 3), (2, 3, 3))))
    sc = 0.5

    def scores(q, k):
        s = q @ np.swapaxes(k, -1, -2) * sc
        return np.where(np.arange(5)[None, :] <= np.arange(3)[:, None] + 2, s, -np.inf) if causal else s

    def lse_np(q, k):
        s = scores(q, k)
        m = s.max(-1, keepdims=True)
        return (m + np.log(np.exp(s - m).sum(-1, keepdims=True)))[..., 0]

    def bwd_np(q, k, v, o, lse, do):
        p = np.exp(scores(q, k) - lse[..., None])
        ds = p * (do @ np.swapaxes(v, -1, -2) - (do * o).sum(-1, keepdims=True))
        return [sc * ds @ k, sc * np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ do]
    check_rules(backend, lambda q, k: op.flash_attention_lse(q, k, causal=causal, scale=sc, block_k=2), lse_np, [q, k])
    lse = lse_np(q, k)
    check_rules(backend, lambda *a: op.flash_attention_bwd(*a, causal=causal, scale=sc, block_k=2, block_q=2), bwd_np,
                [q, k, v, o, lse, do])


@clause("AD-NORMSAFEBWD-1")
@pytest.mark.parametrize("center", [True, False])
def test_norm_backward_rules(backend, center):
    """Second derivatives of the normalizations: norm_safe_bwd's jvp (a Hessian-vector product)
    against finite differences of float64 NumPy; its vjp by the adjoint law."""
    x, g, w = _normal((3, 6), 40, 2.0), _normal((3, 6), 41), _normal((6,), 42)
    eps = 1e-3

    def f_np(x, g, w):
        c = x - x.mean(-1, keepdims=True) if center else x
        r = 1 / np.sqrt((c * c).mean(-1, keepdims=True) + eps)
        h = g * w
        d = r * (h - c * r * (c * r * h).mean(-1, keepdims=True))
        return [d - d.mean(-1, keepdims=True) if center else d, (g * c * r).sum(0), g.sum(0)]
    check_rules(backend, lambda x, g, w: op.norm_safe_bwd(x, g, w, eps=eps, center=center, bias=True), f_np, [x, g, w])


# -- linear algebra ----------------------------------------------------------------------------
def _spd(n, seed):
    a = _normal((n, n), seed)
    return a @ a.T + n * np.eye(n)


def _cholesky_closed(a, g):
    """AD-CHOLESKY-1's formula with NumPy inverses: ``S = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹``, ``Ā = Φ(S + Sᵀ)``."""
    L = np.linalg.cholesky(a)
    lbar = np.tril(g)
    phi = lambda x: np.tril(x) - 0.5 * np.diag(np.diag(x))  # noqa: E731
    inv = np.linalg.inv(L)
    s = inv.T @ phi(L.T @ lbar) @ inv
    return (phi(s + s.T),)


@clause("AD-CHOLESKY-1")
def test_cholesky_rule(backend):
    """cholesky: the clause's ``Φ(S + Sᵀ)`` on the lower triangle, zero above; jvp by finite difference."""
    a = _spd(4, 14)
    (bar,) = check_rules(backend, op.cholesky, lambda a: np.linalg.cholesky(np.tril(a) + np.tril(a, -1).T),
                         [a], _cholesky_closed)
    assert np.all(np.triu(bar, 1) == 0)


@clause("AD-CHOLESKY-1")
def test_cholesky_upper_triangle_is_plus_zero(backend):
    """The upper triangle of ``Ā`` is the constant +0 (bits), whatever the signs of ``S + Sᵀ``."""
    a = _spd(4, 14)
    g = np.tril(_normal((4, 4), 16))
    (bar,) = vjp_on(backend, op.cholesky, (a,), g)
    assert_bits(np.where(np.triu(np.ones((4, 4)), 1) == 1, bar, 0.0), np.zeros((4, 4)))


@clause("AD-SVD-1")
@pytest.mark.parametrize("shape", [(5, 3), (3, 5)])
def test_svd_rule(backend, shape):
    """svd with distinct nonzero singular values: finite differences of LAPACK's SVD with the op's signs."""
    a = _normal(shape, 15)

    def f_np(a):
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        sign = np.sign(vt[np.arange(len(s)), np.argmax(np.abs(vt), axis=1)])  # GRAPH-SVD-1's sign rule
        return u * sign, s, vt * sign[:, None]
    check_rules(backend, op.svd, f_np, [a])


@clause("AD-SVD-1")
@pytest.mark.parametrize("a", [np.eye(3), np.diag([2.0, 2.0, 1.0]), np.diag([3.0, 1.0, 0.0]),
                               np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])],
                         ids=["identity", "repeated", "zero", "rank-2"])
def test_svd_of_the_singular_values_alone_at_degenerate_points(backend, a):
    """A function of ``s`` alone gets ``U·diag(s̄)·Vᵀ`` — finite where values repeat or vanish."""
    w = np.array([1.0, 0.5, 0.25])
    u, s, vt = eager(backend, op.svd, a)
    g = eager(backend, lambda a: tr.grad(lambda x: op.sum(op.mul(op.svd(x)[1], w)))(a), a)
    assert np.isfinite(g).all()
    assert_close(g, u @ np.diag(w) @ vt, rel=1e-12)
