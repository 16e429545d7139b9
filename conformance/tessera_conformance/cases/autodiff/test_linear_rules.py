"""AD-RESHAPE … AD-SUM, AD-TAKE, AD-MATMUL, AD-SPMM, AD-CONV2D, AD-FFT, AD-COMPLEX, AD-DROPOUT: rules of linear
(or bilinear) ops on small integers (or powers of two), where every value is exact. The independent reference is the
op written in NumPy from its GRAPH clause: its tangent is the op on the tangent, and its
cotangent is ``Jᵀ·u`` with ``J`` the NumPy function's explicit Jacobian; the adjoint law
``⟨J v, u⟩ = ⟨v, Jᵀ u⟩`` is evaluated in exact rationals."""
import re

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_conformance import assert_bits, clause, eager

from ._reference import exact_inner, ints, jacobian, jvp_on, pow2, vjp_on


def _split_qkv(x, heads, groups=1):
    """GRAPH-SPLITQKV-1 by its index formula."""
    *lead, s, e3 = x.shape
    e, d = e3 // 3, e3 // 3 // heads
    hg = heads // groups
    out = [np.zeros((*lead, heads, s, d)) for _ in range(3)]
    for g in range(groups):
        for h in range(hg):
            for j in range(3):
                start = g * e3 // groups + j * e // groups + h * d
                out[j][..., g * hg + h, :, :] = x[..., :, start:start + d]
    return tuple(out)


def _conv_nchw(x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)):
    """GRAPH-CONV2D-1 (NCHW) by its defining sum."""
    (sh, sw), (top, bottom, left, right), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, hh, ww = xp.shape
    o, _, kh, kw = w.shape
    oh, ow = (hh - dh * (kh - 1) - 1) // sh + 1, (ww - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, o, oh, ow))
    for a in range(oh):
        for b in range(ow):
            patch = xp[:, :, a * sh:a * sh + dh * (kh - 1) + 1:dh, b * sw:b * sw + dw * (kw - 1) + 1:dw]
            y[:, :, a, b] = np.einsum("nckl,ockl->no", patch, w)
    return y


def _spmm(indptr, indices, data, dense):
    m = len(indptr) - 1
    y = np.zeros((m, dense.shape[1]))
    for i in range(m):
        for p in range(indptr[i], indptr[i + 1]):
            y[i] += data[p] * dense[indices[p]]
    return y


def _scatter(u, ids, size):
    """GRAPH-SCATTER-1 by its defining sum."""
    out = np.zeros((size,) + u.shape[ids.ndim:], u.dtype)
    for j, r in enumerate(ids.reshape(-1)):
        out[r] = out[r] + u.reshape((-1,) + u.shape[ids.ndim:])[j]
    return out


_IDS = np.array([[3, 0, 3], [1, 3, 4]], np.int32)  # repeated ids: their cotangents add up
INDPTR = np.array([0, 2, 2, 5, 6], np.int64)
INDICES = np.array([3, 0, 1, 1, 4, 2], np.int64)  # an unsorted row, a repeated column in row 2


def case(clause_id, label, f, f_np, *shapes, dtype=np.float64, traced=True):
    return pytest.param(f, f_np, shapes, dtype, traced, id=label, marks=clause(clause_id))


LINEAR = [
    case("AD-RESHAPE-1", "reshape", lambda x: op.reshape(x, (6, -1)), lambda x: x.reshape(6, -1), (2, 3, 4)),
    case("AD-TRANSPOSE-1", "transpose-3cycle", lambda x: op.transpose(x, (1, 2, 0)),
         lambda x: x.transpose(1, 2, 0), (2, 3, 4)),
    case("AD-TRANSPOSE-1", "transpose-swap", lambda x: op.transpose(x, (2, 1, 0)),
         lambda x: x.transpose(2, 1, 0), (2, 3, 2)),
    case("AD-BROADCASTTO-1", "broadcast-add-and-stretch", lambda x: op.broadcast_to(x, (2, 3, 5)),
         lambda x: np.broadcast_to(x, (2, 3, 5)), (3, 1)),
    case("AD-BROADCASTTO-1", "broadcast-implicit-add", lambda x, y: op.add(x, y),
         lambda x, y: x + y, (2, 1, 4), (3, 1)),
    case("AD-SLICE-1", "slice-steps", lambda x: op.slice(x, (1, 5), (7, None), (2, -2)),
         lambda x: x[1:7:2, 5::-2], (7, 6)),
    case("AD-SLICE-1", "slice-step3", lambda x: op.slice(x, (2, 0), (3, 4), (1, 3)),
         lambda x: x[2:3, 0:4:3], (5, 4)),
    case("AD-SLICE-1", "getitem", lambda x: x[1, ::-1], lambda x: x[1, ::-1], (3, 4)),
    case("AD-CONCAT-1", "concat", lambda a, b, c: op.concat([a, b, c], axis=1),
         lambda a, b, c: np.concatenate([a, b, c], axis=1), (2, 3), (2, 1), (2, 2)),
    case("AD-SPLIT-1", "split", lambda x: op.split(x, [1, 3, 2], axis=0),
         lambda x: (x[0:1], x[1:4], x[4:6]), (6, 2)),
    case("AD-SPLITQKV-1", "split_qkv", lambda x: op.split_qkv(x, heads=4), lambda x: _split_qkv(x, 4), (2, 3, 24)),
    case("AD-SPLITQKV-1", "split_qkv-groups", lambda x: op.split_qkv(x, heads=4, groups=2),
         lambda x: _split_qkv(x, 4, 2), (3, 24)),
    case("AD-SUM-1", "sum-axes", lambda x: op.sum(x, axis=(0, 2)), lambda x: x.sum(axis=(0, 2)), (3, 4, 5)),
    case("AD-SUM-1", "sum-keepdims", lambda x: op.sum(x, axis=1, keepdims=True),
         lambda x: x.sum(axis=1, keepdims=True), (3, 4)),
    case("AD-SUM-1", "sum-all", lambda x: op.sum(x), lambda x: x.sum(), (70,)),
    case("AD-COMPLEX-1", "complex-broadcast", lambda a, b: op.complex(a, b), lambda a, b: a + 1j * b,
         (3, 4), (4,), dtype=np.float32),
    case("AD-FFT-1", "fft-real-operand", lambda x: op.fft(x), lambda x: np.fft.fft(x), (2, 4), dtype=np.float32),
    case("AD-CONV2D-1", "conv2d-x", lambda x: op.conv2d(x, _W1), lambda x: _conv_nchw(x, _W1), (2, 2, 5, 4)),
    case("AD-CONV2D-1", "conv2d-w", lambda w: op.conv2d(_X2, w, stride=(2, 3), padding=(1, 2, 0, 1), dilation=(2, 1)),
         lambda w: _conv_nchw(_X2, w, (2, 3), (1, 2, 0, 1), (2, 1)), (3, 2, 2, 3), traced=False),  # see test_transforms
    case("AD-CONV2D-1", "conv2d-x-strided", lambda x: op.conv2d(x, _W2, stride=(2, 3), padding=(1, 2, 0, 1),
                                                               dilation=(2, 1)),
         lambda x: _conv_nchw(x, _W2, (2, 3), (1, 2, 0, 1), (2, 1)), (1, 2, 9, 8)),
    case("AD-CONV2D-1", "conv2d-nhwc-same", lambda x: op.conv2d(x, _W3, padding="same", layout="NHWC"),
         lambda x: _conv_nchw(x.transpose(0, 3, 1, 2), _W3, padding=(1, 1, 1, 1)).transpose(0, 2, 3, 1), (1, 4, 3, 2)),
    case("AD-SPMM-1", "spmm-data", lambda d: op.spmm((INDPTR, INDICES, d, (4, 5)), _DENSE),
         lambda d: _spmm(INDPTR, INDICES, d, _DENSE), (6,)),
    case("AD-SPMM-1", "spmm-dense", lambda b: op.spmm((INDPTR, INDICES, _DATA, (4, 5)), b),
         lambda b: _spmm(INDPTR, INDICES, _DATA, b), (5, 3)),
    case("AD-TAKE-1", "take-repeated-ids", lambda t: op.take(t, _IDS), lambda t: t[_IDS], (5, 3)),
    case("AD-TAKE-1", "take-axis1", lambda t: op.take(t, _IDS[0], axis=1), lambda t: t[:, _IDS[0]], (2, 5)),
    case("AD-TAKE-1", "scatter_add", lambda u: op.scatter_add(u, _IDS, 6), lambda u: _scatter(u, _IDS, 6), (2, 3, 2)),
    case("AD-MATMUL-1", "matmul-a", lambda a: op.matmul(a, _B), lambda a: a @ _B, (3, 4)),
    case("AD-MATMUL-1", "matmul-b-batched-transposed", lambda b: op.matmul(_A3, b, transpose_a=True, transpose_b=True),
         lambda b: np.swapaxes(_A3, -1, -2) @ b.T, (5, 4)),
    case("AD-MATMUL-1", "gemm-c", lambda c: op.gemm(_A2, _B2, c) - op.matmul(_A2, _B2),
         lambda c: np.broadcast_to(c, (2, 3, 5)), (5,)),
]
_W1 = ints((3, 2, 2, 2), 101)
_X2, _W2 = ints((1, 2, 9, 8), 102), ints((3, 2, 2, 3), 103)
_W3 = ints((3, 2, 3, 3), 104)
_DENSE, _DATA = ints((5, 3), 105), ints((6,), 106)
_B, _A3 = ints((4, 5), 107), ints((2, 4, 3), 108)
_A2, _B2 = ints((1, 3, 4), 109), ints((2, 4, 5), 110)


def _as_list(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


@pytest.mark.parametrize("f, f_np, shapes, dtype, traced", LINEAR)
def test_linear_rule_is_the_exact_transpose(backend, f, f_np, shapes, dtype, traced):
    """jvp = the op on the tangent; vjp = Jᵀ·u of the NumPy op's Jacobian, bit for bit."""
    primals = [ints(s, 10 + i, dtype=dtype) for i, s in enumerate(shapes)]
    tangents = [ints(s, 20 + i, dtype=dtype) for i, s in enumerate(shapes)]
    outs = _as_list(f_np(*tangents))
    want_t = [np.asarray(o).astype(np.complex64 if np.iscomplexobj(o) else dtype) for o in outs]
    got_t = _as_list(jvp_on(backend, f, primals, tangents, traced))
    assert_bits(got_t, want_t, "tangent")
    cts = [ints(o.shape, 30 + i, dtype=dtype) + (1j * ints(o.shape, 40 + i, dtype=dtype) if np.iscomplexobj(o) else 0)
           for i, o in enumerate(want_t)]
    cts = [c.astype(w.dtype) for c, w in zip(cts, want_t)]
    bars = _as_list(vjp_on(backend, f, primals, cts if len(cts) > 1 else cts[0], traced))
    J = jacobian(f_np, *shapes)  # complex rows are pairs of real rows under ⟨a, b⟩ = Σ Re(conj(a)·b)
    u = np.concatenate([c.ravel() for c in cts])
    jt_u = (J.real.T @ u.real + J.imag.T @ u.imag) if np.iscomplexobj(J) or np.iscomplexobj(u) else J.T @ u
    want_b, start = [], 0
    for s in shapes:
        n = int(np.prod(s))
        want_b.append(np.asarray(jt_u[start:start + n]).reshape(s).astype(dtype))
        start += n
    assert_bits(bars, want_b, "cotangent")
    lhs = sum(exact_inner(t, c) for t, c in zip(got_t, cts))
    rhs = sum(exact_inner(t, b) for t, b in zip(tangents, bars))
    assert lhs == rhs, f"<J v, u> = {lhs} but <v, J^T u> = {rhs}"


# -- bilinear: matmul with both operands -------------------------------------------------------
@clause("AD-MATMUL-1")
@pytest.mark.parametrize("sa, sb, ta, tb", [((3, 4), (4, 5), False, False), ((2, 4, 3), (5, 4), True, True),
                                            ((1, 3, 4), (2, 4, 5), False, False), ((4, 3), (4, 5), True, False)])
def test_matmul_cotangents_of_both_operands(backend, sa, sb, ta, tb):
    """``Ā = ḡ·op(B)ᵀ``, ``B̄ = op(A)ᵀ·ḡ`` (orientation, batch sums); jvp ``Ȧ·op(B) + op(A)·Ḃ``."""
    a, b, va, vb = ints(sa, 1), ints(sb, 2), ints(sa, 3), ints(sb, 4)
    oa = np.swapaxes(a, -1, -2) if ta else a
    ob = np.swapaxes(b, -1, -2) if tb else b
    f = lambda a, b: op.matmul(a, b, transpose_a=ta, transpose_b=tb)  # noqa: E731
    y = oa @ ob
    g = ints(y.shape, 5)
    ga, gb = vjp_on(backend, f, (a, b), g)
    from .test_elementwise_rules import unb
    abar = g @ np.swapaxes(ob, -1, -2)
    bbar = np.swapaxes(oa, -1, -2) @ g
    abar = np.swapaxes(abar, -1, -2) if ta else abar
    bbar = np.swapaxes(bbar, -1, -2) if tb else bbar
    assert_bits([ga, gb], [unb(abar, sa), unb(bbar, sb)])
    with tr.backends.use(backend):  # vjp_on ran this program on the backend already
        _, pullback = tr.vjp(f, a, b)
        pullback(g)
    names = re.findall(r'"tessera\.graph\.(\w+)"', pullback.inspect_ir())
    assert names.count("matmul") == 2 and "transpose" not in names  # the flags orient each cotangent
    ova = np.swapaxes(va, -1, -2) if ta else va
    ovb = np.swapaxes(vb, -1, -2) if tb else vb
    assert_bits(jvp_on(backend, f, (a, b), (va, vb)), ova @ ob + oa @ ovb)


# -- complex: FFT of complex operands, real, imag ----------------------------------------------
def _cints(shape, seed):
    return (ints(shape, seed) + 1j * ints(shape, seed + 1)).astype(np.complex64)


@clause("AD-FFT-1")
@pytest.mark.parametrize("name, shape, kw", [("fft", (3, 4), {}), ("fft", (4, 2), {"axis": 0}), ("ifft", (2, 4), {}),
                                             ("fft2d", (2, 2, 4), {})])
def test_fft_cotangent_is_the_conjugated_transform(backend, name, shape, kw):
    """``x̄ = conj(F(conj(ḡ)))``: the same transform between two conjugations; the law exactly."""
    np_fn = {"fft": lambda z: np.fft.fft(z, axis=kw.get("axis", -1)), "ifft": np.fft.ifft,
             "fft2d": lambda z: np.fft.fft2(z)}[name]
    f = lambda z: getattr(op, name)(z, **kw)  # noqa: E731
    z, v, g = _cints(shape, 1), _cints(shape, 3), _cints(shape, 5)
    t = jvp_on(backend, f, (z,), (v,))
    assert t.dtype == np.complex64 and np.array_equal(t, np_fn(v.astype(np.complex128)))
    assert_bits(t, eager(backend, f, v), "tangent: the transform of the tangent")
    (bar,) = vjp_on(backend, f, (z,), g)
    assert bar.dtype == np.complex64 and np.array_equal(bar, np.conj(np_fn(np.conj(g.astype(np.complex128)))))
    assert_bits(bar, np.conj(eager(backend, f, np.conj(g))), "cotangent: conj(F(conj(g)))")
    assert exact_inner(t, g) == exact_inner(v, bar)


@clause("AD-COMPLEX-1")
@pytest.mark.parametrize("name", ["real", "imag"])
def test_real_and_imag_cotangents(backend, name):
    """``real(z)``: ``z̄ = complex(ḡ, +0)``; ``imag(z)``: ``z̄ = complex(+0, ḡ)`` (bits, +0 included)."""
    z = _cints((3, 4), 7)
    g = ints((3, 4), 9, dtype=np.float32)
    g.ravel()[0] = -0.0
    (bar,) = vjp_on(backend, getattr(op, name), (z,), g)
    parts = np.stack([g, np.zeros_like(g)] if name == "real" else [np.zeros_like(g), g], axis=-1)
    assert bar.dtype == np.complex64
    assert_bits(bar.view(np.float32).reshape(3, 4, 2), parts)
    v = _cints((3, 4), 11)
    assert_bits(jvp_on(backend, getattr(op, name), (z,), (v,)), getattr(np, name)(v))


# -- dropout -----------------------------------------------------------------------------------
@clause("AD-DROPOUT-1")
@pytest.mark.parametrize("rate, seed, stream", [(0.5, 7, 2), (0.75, 11, 0), (0.0, 1, 0)])
def test_dropout_backward_replays_the_forward_key(backend, rate, seed, stream):
    """``x̄ = dropout(ḡ)`` with the call's key: zero where the forward dropped; jvp likewise; law exact."""
    x = pow2((64,), 1)
    f = lambda a: op.dropout(a, rate, seed=seed, stream=stream)  # noqa: E731
    y = eager(backend, f, x)
    kept = y != 0
    if rate:
        assert 0 < kept.sum() < kept.size
    u = pow2((64,), 2)
    (bar,) = vjp_on(backend, f, (x,), u)
    assert_bits(bar, np.where(kept, u / (1 - rate), 0.0))
    v = pow2((64,), 3)
    t = jvp_on(backend, f, (x,), (v,))
    assert_bits(t, np.where(kept, v / (1 - rate), 0.0))
    assert exact_inner(t, u) == exact_inner(v, bar)
