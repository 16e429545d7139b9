"""Gradients of composite programs against central finite differences in float64 (issue 5,
item 5): an MLP with a normalization and a softmax cross-entropy, attention, a program with
broadcasting, where, pow and max; forward mode along random directions; and a planted
wrong rule that the comparison catches."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.ops import PRIMITIVES

def _r(seed, *shape, scale=1.0):
    """Standard normal values from their own generator: a test's inputs do not depend on
    which tests ran before it."""
    return np.random.default_rng(seed).standard_normal(shape) * scale


PARAMS = {"W1": _r(1, 5, 6, scale=0.5), "b1": _r(2, 6, scale=0.1), "W2": _r(3, 6, 3, scale=0.5)}
XS = _r(4, 4, 5)
LABELS = np.eye(3)[[0, 2, 1, 2]]


def mlp_loss(p, x, labels):
    h = op.gelu(op.matmul(x, p["W1"]) + p["b1"])
    h = op.rmsnorm_safe(h)
    logits = op.matmul(op.tanh(h), p["W2"])
    logp = op.log(op.softmax(logits))
    return op.neg(op.mean(op.sum(logp * labels, axis=-1)))


def attention_loss(q, k, v):
    s = op.matmul(q, k, transpose_b=True) * 0.5
    return op.sum(op.matmul(op.softmax(s), v) ** 2.0)


def mixed_loss(x, w):
    y = op.where(op.greater(x, 0.0), op.sqrt(x * x + 1.0), op.exp(x)) * w   # w broadcasts over rows
    return op.sum(op.maximum(y, op.sigmoid(y)) ** 1.5) + op.max(op.sin(x) * op.cos(w))


def _fd_grad(f, leaves, i, h=1e-6):
    """Central differences of ``f`` with respect to every element of ``leaves[i]``."""
    base = [np.array(a, dtype=np.float64) for a in leaves]
    out = np.zeros_like(base[i])
    for idx in np.ndindex(*base[i].shape):
        plus, minus = [a.copy() for a in base], [a.copy() for a in base]
        plus[i][idx] += h
        minus[i][idx] -= h
        out[idx] = (float(f(*plus)) - float(f(*minus))) / (2 * h)
    return out


def _check(f, args, rtol=1e-6):
    grads = tr.grad(f, argnums=tuple(range(len(args))))(*args)
    for i, g in enumerate(grads):
        fd = _fd_grad(f, args, i)
        err = np.max(np.abs(np.asarray(g) - fd))
        assert err <= rtol * (np.max(np.abs(fd)) + 1e-3), f"argument {i}: gradient off the finite difference by {err:.3g}"


def test_mlp_with_norm_and_softmax_cross_entropy():
    names = sorted(PARAMS)

    def flat(*leaves):
        return mlp_loss(dict(zip(names, leaves)), XS, LABELS)
    _check(flat, [PARAMS[n] for n in names])


def test_attention():
    _check(attention_loss, [_r(5, 2, 3, 4), _r(6, 2, 5, 4), _r(7, 2, 5, 4)])


def test_broadcasting_where_pow_and_max():
    _check(mixed_loss, [_r(8, 3, 4), _r(9, 4) + 2.0])


def test_forward_mode_along_random_directions():
    x, w = _r(10, 3, 4), _r(11, 4) + 2.0
    for trial in range(3):
        v = (_r(12 + 2 * trial, 3, 4), _r(13 + 2 * trial, 4))
        _, t = tr.jvp(mixed_loss, (x, w), v)
        h = 1e-6
        fd = (float(mixed_loss(x + h * v[0], w + h * v[1])) - float(mixed_loss(x - h * v[0], w - h * v[1]))) / (2 * h)
        assert float(t) == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_a_planted_wrong_rule_is_caught(monkeypatch):
    tanh = PRIMITIVES["tanh"]
    right = tanh.vjp

    def wrong(attrs, primals, results, cts):  # (1 - y²) replaced by (1 - y²)·1.001
        (g,) = right(attrs, primals, results, cts)
        return (op.mul(g, 1.001),)
    monkeypatch.setattr(tanh, "vjp", wrong)
    with pytest.raises(AssertionError, match="finite difference"):
        _check(lambda x: op.sum(op.tanh(x) * x), [_r(20, 3)])
