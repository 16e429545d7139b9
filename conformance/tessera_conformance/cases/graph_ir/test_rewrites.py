"""GRAPH-RW-1 … GRAPH-RW-4: the rewrites fire where the clauses say, and all but the attention
fusion change no bit (compared with the same program traced without rewrites and with an
independent reference)."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_conformance import assert_bits, clause

from . import _reference as R
from . import _xmath as X
from ._cases import jit, operand, policy, values
from ._formats import round_values


def _ops(text: str) -> list:
    return sorted(ln.split('"tessera.graph.')[1].split('"')[0] for ln in text.splitlines() if '"tessera.graph.' in ln)


def _both(backend, fn, *args):
    """(optimized result, result without rewrites, optimized ops)."""
    opt = jit(backend, fn)
    got = opt(*args)
    plain = jit(backend, fn, rewrite=False)(*args)
    as_np = (lambda r: [np.asarray(v) for v in r]) if isinstance(got, tuple) else np.asarray
    return as_np(got), as_np(plain), _ops(opt.inspect_ir())


@clause("GRAPH-RW-1")
@pytest.mark.parametrize("p,q,left", [((1, 2, 0), (2, 0, 1), []), ((1, 0, 2), (0, 2, 1), ["transpose"]),
                                      ((2, 0, 1), (2, 0, 1), ["transpose"])])
def test_transpose_pairs(backend, p, q, left):
    """transpose(transpose(x, p), q) becomes transpose(x, r) with r[j] = p[q[j]], or x."""
    x = values(operand(np.random.default_rng(0).standard_normal((2, 3, 4)), "f32"))
    got, plain, ops = _both(backend, lambda v: op.mul(op.transpose(op.transpose(v, p), q), 2.0), round_values(x, "f32"))
    assert ops == sorted(left + ["mul", "constant"])
    want = round_values(np.transpose(np.transpose(x, p), q) * 2.0, "f32")
    assert_bits(got, want)
    assert_bits(plain, want)
    if left:
        opt = jit(backend, lambda v: op.transpose(op.transpose(v, p), q))
        opt(round_values(x, "f32"))
        r = [p[q[j]] for j in range(3)]
        assert f"perm = [{r[0]}, {r[1]}, {r[2]}]" in opt.inspect_ir()


@clause("GRAPH-RW-2")
def test_transposed_matmul_operands_fold_into_flags(backend):
    """A last-two-axes transpose feeding matmul becomes its flag, same bits; others stay."""
    a = values(operand(np.random.default_rng(1).standard_normal((2, 5, 33)), "f32"))
    b = values(operand(np.random.default_rng(2).standard_normal((2, 6, 33)), "f32"))
    fn = lambda x, y: op.matmul(x, op.transpose(y, (0, 2, 1)))  # noqa: E731
    got, plain, ops = _both(backend, fn, round_values(a, "f32"), round_values(b, "f32"))
    assert ops == ["matmul"]
    opt = jit(backend, fn)
    opt(round_values(a, "f32"), round_values(b, "f32"))
    assert "transpose_b = true" in opt.inspect_ir()
    want = round_values(R.matmul("f32", a, np.swapaxes(b, -1, -2)), "f32")
    assert_bits(got, want)
    assert_bits(plain, want)
    c = np.ascontiguousarray(np.transpose(round_values(b, "f32"), (2, 0, 1)))   # [33, 2, 6]
    got, plain, ops = _both(backend, lambda x, y: op.matmul(x, op.transpose(y, (1, 0, 2))), round_values(a, "f32"), c)
    assert "transpose" in ops
    assert_bits(got, plain)


@clause("GRAPH-RW-3")
def test_constant_folding_uses_the_ops_own_bits(backend):
    """All-constant ops (<= 4096 elements) fold to their clause's bits; random ops never."""
    c = np.linspace(0.1, 1.0, 16, dtype=np.float32)
    got, plain, ops = _both(backend, lambda x: x + op.exp(op.mul(c, 3.0)), np.ones(16, np.float32))
    assert ops == ["add", "constant"]
    e = R.acc(X.exp(R.mul("f32", c, 3.0)), "f32")
    want = round_values(R.add("f32", 1.0, e), "f32")
    assert_bits(got, want)
    assert_bits(plain, want)
    big = np.ones(4097, np.float32)
    _, _, ops = _both(backend, lambda x: x + op.mul(big, 3.0), np.ones(4097, np.float32))
    assert "mul" in ops
    _, _, ops = _both(backend, lambda x: x + op.rand((4,), seed=1), np.ones(4, np.float32))
    assert "rand" in ops


def _attention(q, k, v):
    return op.matmul(op.softmax(op.matmul(q, k, transpose_b=True), axis=-1), v)


def _qkv(pol):
    g = np.random.default_rng(3)
    vals = [values(operand(g.standard_normal((24, 8)), "f32")) for _ in range(3)]
    return vals, [tr.asarray(round_values(v, "f32"), policy=pol) for v in vals]


@clause("GRAPH-RW-4")
def test_attention_fused_under_reassociate(backend):
    """Under reassociate, attention becomes flash_attention(scale=1.0) with its bits."""
    (q, k, v), args = _qkv(policy("f32", reduction="reassociate"))
    jf = jit(backend, _attention)
    got = np.asarray(jf(*args))
    assert _ops(jf.inspect_ir()) == ["flash_attention"]
    assert_bits(got, round_values(R.flash_attention("f32", q, k, v, scale=1.0), "f32"))


@clause("GRAPH-RW-4")
@pytest.mark.parametrize("reduction", ["canonical", "exact"])
def test_attention_left_as_written(backend, reduction):
    """Under canonical/exact, and with a shared softmax, attention is left as the three ops."""
    (q, k, v), args = _qkv(policy("f32", reduction=reduction))
    jf = jit(backend, _attention)
    got = np.asarray(jf(*args))
    assert "flash_attention" not in _ops(jf.inspect_ir())
    if reduction == "canonical":
        s = R.matmul("f32", q, k.T)
        want = round_values(R.matmul("f32", R.softmax("f32", s), v), "f32")
        assert_bits(got, want)
    (q, k, v), args = _qkv(policy("f32", reduction="reassociate"))

    def shared(a, b, c):
        s = op.softmax(op.matmul(a, b, transpose_b=True))
        return op.matmul(s, c), s

    jf = jit(backend, shared)
    jf(*args)
    assert "flash_attention" not in _ops(jf.inspect_ir())
