"""AD-FLASHATTENTION-1, AD-LAYERNORMSAFE-1: the fused ops differentiate as fused ops — the
backward is one flash_attention_bwd (one norm_safe_bwd), its IR holds no [Sq, Sk] value, and
the gradients agree with the decomposed attention's autodiff and with float64 NumPy."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op


def _inputs(seed, b=2, sq=33, sk=40, d=16, dv=8):
    g = np.random.default_rng(seed)
    return tuple(g.standard_normal(s).astype(np.float32) for s in ((b, sq, d), (b, sk, d), (b, sk, dv), (b, sq, dv)))


def _reference(q, k, v, w, causal):
    """Dense attention differentiated by hand in float64: (q̄, k̄, v̄) of Σ w ⊗ attention."""
    q, k, v, w = (t.astype(np.float64) for t in (q, k, v, w))
    scale = 1 / np.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = w @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    return ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ w


def _decomposed(q, k, v, causal):
    """The same attention as softmax and matmuls (what the old rule differentiated)."""
    s = op.mul(op.matmul(q, k, transpose_b=True), np.float32(1 / np.sqrt(q.shape[-1])))
    if causal:
        sq, sk = q.shape[-2], k.shape[-2]
        s = op.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, np.float32(-np.inf))
    return op.matmul(op.softmax(s, axis=-1), v)


@pytest.mark.parametrize("causal, block_k, block_q", [(False, 64, 64), (True, 8, 5), (True, 7, 16)])
def test_attention_gradients_agree_with_the_decomposed_and_float64(causal, block_k, block_q):
    q, k, v, w = _inputs(1)
    fused = tr.grad(lambda q, k, v: op.sum(op.mul(op.flash_attention(q, k, v, causal=causal, block_k=block_k,
                                                                       block_q=block_q), w)), argnums=(0, 1, 2))(q, k, v)
    plain = tr.grad(lambda q, k, v: op.sum(op.mul(_decomposed(q, k, v, causal), w)), argnums=(0, 1, 2))(q, k, v)
    for a, b, ref in zip(fused, plain, _reference(q, k, v, w, causal)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        top = np.max(np.abs(ref))
        assert np.max(np.abs(a - ref)) <= 1e-6 * top
        assert np.max(np.abs(a - b)) <= 1e-6 * top


def test_the_backward_is_one_fused_op_without_score_matrices():
    """jit(grad) of attention: one flash_attention_lse and one flash_attention_bwd, and no
    tensor type of the program ends in [Sq, Sk] (33 x 40)."""
    q, k, v, w = _inputs(2)
    g = tr.jit(tr.grad(lambda q, k, v: op.sum(op.mul(op.flash_attention(q, k, v, causal=True), w)), argnums=(0, 1, 2)))
    g(q, k, v)
    ir = g.inspect_ir()
    assert ir.count('"tessera.graph.flash_attention_bwd"') == 1 and ir.count('"tessera.graph.flash_attention_lse"') == 1
    assert "33x40x" not in ir and "33x40xf32" not in ir and "softmax" not in ir


def test_norm_backward_is_one_fused_op_with_the_decomposed_bits():
    """jit(grad) of a layer norm: one norm_safe_bwd; the gradient equals float64's within f32."""
    g = np.random.default_rng(3)
    x, w, b, c = (g.standard_normal(s).astype(np.float32) for s in ((4, 32), (32,), (32,), (4, 32)))
    f = tr.jit(tr.grad(lambda x, w, b: op.sum(op.mul(op.layernorm_safe(x, w, b), c)), argnums=(0, 1, 2)))
    gx, gw, gb = f(x, w, b)
    assert f.inspect_ir().count('"tessera.graph.norm_safe_bwd"') == 1
    X, W, C = (t.astype(np.float64) for t in (x, w, c))
    xc = X - X.mean(-1, keepdims=True)
    r = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5)
    h = C * W
    d = r * (h - xc * r * (xc * r * h).mean(-1, keepdims=True))
    for got, ref in zip((gx, gw, gb), (d - d.mean(-1, keepdims=True), (C * xc * r).sum(0), C.sum(0))):
        assert np.max(np.abs(np.asarray(got, np.float64) - ref)) <= 1e-5 * np.max(np.abs(ref))
