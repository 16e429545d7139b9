"""GRAPH-FLASHATTENTIONLSE-1, GRAPH-FLASHATTENTIONBWD-1, GRAPH-NORMSAFEBWD-1: flash attention's
row log-sum-exp, FlashAttention-2's backward and the normalizations' fused backward, bit for
bit against the clauses' recurrences written in NumPy (one IEEE operation at a time,
NUM-RED-1/2 orders), and against float64 derivatives."""
import numpy as np
import pytest

from tessera_ref import op
from tessera_conformance import clause

from . import _reference as R
from ._cases import check, operand, values
from ._formats import round_values


def _data(shape, seed, scale=1.0):
    return round_values(values(operand(np.random.default_rng(seed).standard_normal(shape) * scale, "f32")), "f32")


KW = [dict(), dict(block_k=8), dict(block_k=8, causal=True), dict(block_k=5, block_q=3, scale=0.3, causal=True),
      dict(block_k=16, block_q=4)]


def _operands(sq=12, sk=20, d=8, dv=6):
    return _data((2, sq, d), 40), _data((2, sk, d), 41), _data((2, sk, dv), 42), _data((2, sq, dv), 43)


@clause("GRAPH-FLASHATTENTIONLSE-1")
@pytest.mark.parametrize("kw", KW, ids=[str(k) for k in KW])
def test_lse_is_the_forward_statistic(backend, kw):
    """L = m ⊕ log l of the forward's blocked recurrence (same scale, mask and block_k)."""
    q, k, _, _ = _operands()
    kw = {n: kw[n] for n in ("block_k", "scale", "causal") if n in kw}
    want = round_values(R.flash_attention_lse("f32", q, k, **kw), "f32")
    check(backend, lambda a, b: op.flash_attention_lse(a, b, **kw), (q, k), want)


@clause("GRAPH-FLASHATTENTIONLSE-1")
def test_lse_of_a_fully_masked_row_is_minus_infinity(backend):
    """Causal with Sq > Sk: the first Sq − Sk rows see no key, L = −inf; bf16 operands give f32."""
    q, k = _data((6, 4), 44), _data((4, 4), 45)
    want = round_values(R.flash_attention_lse("f32", q, k, causal=True, block_k=2), "f32")
    assert np.isneginf(values(want)[:2]).all() and np.isfinite(values(want)[2:]).all()
    check(backend, lambda a, b: op.flash_attention_lse(a, b, causal=True, block_k=2), (q, k), want)


@clause("GRAPH-FLASHATTENTIONBWD-1")
@pytest.mark.parametrize("kw", KW, ids=[str(k) for k in KW])
def test_backward_recurrences(backend, kw):
    """dK/dV per key block over query blocks ascending, dQ over key blocks ascending; the bits
    of the clause's recurrence; within 1e-5 of float64 attention's derivative."""
    q, k, v, do = _operands()
    fkw = {n: kw[n] for n in ("block_k", "scale", "causal") if n in kw}
    o = round_values(R.flash_attention("f32", q, k, v, **fkw), "f32")
    lse = round_values(R.flash_attention_lse("f32", q, k, **fkw), "f32")
    wants = [round_values(w, "f32") for w in R.flash_attention_bwd("f32", q, k, v, o, lse, do, **kw)]
    check(backend, lambda *a: op.flash_attention_bwd(*a, **kw), (q, k, v, o, lse, do), wants)
    # independent of the recurrence: the float64 derivative of dense attention
    scale = kw.get("scale", 1 / np.sqrt(q.shape[-1]))
    Q, K, V, G = (values(t).astype(np.float64) for t in (q, k, v, do))
    s = Q @ np.swapaxes(K, -1, -2) * scale
    if kw.get("causal"):
        s = np.where(np.arange(K.shape[-2])[None, :] <= np.arange(Q.shape[-2])[:, None] + K.shape[-2] - Q.shape[-2],
                     s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = G @ np.swapaxes(V, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    for w, e in zip(wants, (ds @ K, np.swapaxes(ds, -1, -2) @ Q, np.swapaxes(p, -1, -2) @ G)):
        assert np.max(np.abs(values(w) - e)) <= 1e-5 * np.max(np.abs(e))


@clause("GRAPH-FLASHATTENTIONBWD-1")
def test_block_q_changes_the_key_cotangents_only_by_their_order(backend):
    """block_q is part of k̄'s and v̄'s definition (their sums over query blocks); q̄ keeps its bits."""
    q, k, v, do = _operands(sq=40, sk=24)
    o = round_values(R.flash_attention("f32", q, k, v), "f32")
    lse = round_values(R.flash_attention_lse("f32", q, k), "f32")
    a, b = (R.flash_attention_bwd("f32", q, k, v, o, lse, do, block_q=n) for n in (64, 3))
    assert np.array_equal(a[0], b[0]) and not np.array_equal(a[1], b[1])
    wants = [round_values(w, "f32") for w in b]
    check(backend, lambda *x: op.flash_attention_bwd(*x, block_q=3), (q, k, v, o, lse, do), wants)


NORM = [dict(center=True, weight=True, bias=True, eps=1e-5), dict(center=True, weight=False, bias=False, eps=0.1),
        dict(center=False, weight=True, bias=False, eps=1e-6), dict(center=False, weight=False, bias=False, eps=1e-6)]


@clause("GRAPH-NORMSAFEBWD-1")
@pytest.mark.parametrize("kw", NORM, ids=[str(k) for k in NORM])
def test_norm_backward(backend, kw):
    """x̄ = core(g ⊗ w) with the row statistics recomputed; w̄ = Σ g ⊗ x̂, b̄ = Σ g over the rows;
    within 1e-5 of the float64 derivative of the normalization."""
    x, g, w = _data((7, 40), 50, 3.0), _data((7, 40), 51), _data((40,), 52)
    center, eps = kw["center"], kw["eps"]
    ref = R.norm_safe_bwd("f32", x, g, w if kw["weight"] else None, eps=eps, center=center)
    n = 1 + kw["weight"] + kw["bias"]
    wants = [round_values(t, "f32") for t in ref[:n]]
    want = wants if n > 1 else wants[0]
    args = (x, g, w) if kw["weight"] else (x, g)
    check(backend, lambda *a: op.norm_safe_bwd(*a, eps=eps, center=center, bias=kw["bias"]), args, want)
    X, G, W = (values(t).astype(np.float64) for t in (x, g, w))
    c = X - X.mean(-1, keepdims=True) if center else X
    r = 1 / np.sqrt((c * c).mean(-1, keepdims=True) + eps)
    h = G * W if kw["weight"] else G
    d = r * (h - c * r * (c * r * h).mean(-1, keepdims=True))
    d = d - d.mean(-1, keepdims=True) if center else d
    for got, e in zip(wants, (d, (G * c * r).sum(0), G.sum(0))):
        assert np.max(np.abs(values(got) - e)) <= 1e-5 * np.max(np.abs(e))
