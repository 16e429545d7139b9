"""Independent references for the Graph IR op clauses, written from the spec text.

Values travel as f64 arrays holding numbers of the ``accum`` format ``A`` (f32, f64, bf16 or
f16). An IEEE operation ``⊕ ⊖ ⊗ ⊘ √`` in ``A`` is computed in f64 and rounded once into ``A``
by :mod:`._formats`: for A ⊂ f32 this double rounding is innocuous (53 ≥ 2·24 + 2), so the
result is the correctly rounded one. ``fma`` in f32 is emulated exactly (the f64 product of
two f32 numbers is exact; TwoSum recovers the sum's error, which decides the f32 rounding
only when the f64 sum lies exactly on an f32 midpoint); in f64 it uses exact fractions.
Nothing here imports ``tessera_ref``.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from . import _xmath as X
from ._formats import round_values, values_of

__all__ = ["acc", "add", "sub", "mul", "div", "sqrt", "fma", "maximum", "minimum", "max_along", "min_along",
           "lane_sum", "lane_mean", "dot", "matmul", "to_storage", "exp_A", "rsqrt_A", "math_op",
           "philox", "key_words", "fold", "random_bits", "uniform32", "uniform64", "normal", "poisson",
           "softmax", "layernorm", "rmsnorm", "flash_attention", "conv2d", "cholesky", "svd", "spmm",
           "fft", "ifft", "exact_sum"]


# ---------------------------------------------------------------------------------------
# one operation at a time in the accum format

def acc(x, A: str) -> np.ndarray:
    """f64 values rounded once (RNE) into ``A``; a NaN becomes the canonical +NaN (NUM-EW-1)."""
    x = np.asarray(x, np.float64)
    out = x.copy() if A == "f64" else values_of(round_values(x, A))
    return np.where(np.isnan(out), np.nan, out)


def _op(fn):
    def run(A, *args):
        with np.errstate(all="ignore"):
            return acc(fn(*(np.asarray(a, np.float64) for a in args)), A)
    return run


add = _op(np.add)
sub = _op(np.subtract)
mul = _op(np.multiply)
div = _op(np.divide)
sqrt = _op(np.sqrt)


def _fma32(a, b, c):
    with np.errstate(all="ignore"):
        p = a * b
        s = p + c
        bb = s - p
        e = (p - (s - bb)) + (c - bb)
        r = s.astype(np.float32)
        toward = np.nextafter(r, np.where(s > r, np.float32(np.inf), np.float32(-np.inf))).astype(np.float64)
        r = r.astype(np.float64)
        mid = np.isfinite(s) & np.isfinite(r) & (e != 0) & (s != r) & ((s - r) * 2 == (toward - r))
        r = np.where(mid & (np.sign(e) == np.sign(s - r)), toward, r)
    return np.where(np.isnan(r), np.nan, r)


def _fma_exact(a, b, c, A):
    def one(x, y, z):
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
            with np.errstate(all="ignore"):
                return float(np.float64(x) * np.float64(y) + np.float64(z))
        v = Fraction(x) * Fraction(y) + Fraction(z)
        if v == 0:
            return -0.0 if (math.copysign(1, x * y) < 0 and math.copysign(1, z) < 0 and x * y == 0) else 0.0
        return float(v) if A == "f64" else float(values_of(round_values(np.array(float(v)), A)))
    out = np.vectorize(one, otypes=[np.float64])(a, b, c)
    return np.where(np.isnan(out), np.nan, out)


def fma(A, a, b, c):
    """One fused multiply-add in ``A`` (NUM-EW-2): the exact a·b + c rounded once."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, c)))
    if A == "f32":
        return _fma32(a, b, c)
    if A == "f64":
        return _fma_exact(a, b, c, A)
    raise NotImplementedError(A)


def maximum(a, b):
    """IEEE 754-2019 maximum: NaN wins, −0 < +0."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    pick_b = (b > a) | ((b == a) & np.signbit(a) & ~np.signbit(b))
    return np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(pick_b, b, a))


def minimum(a, b):
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    pick_b = (b < a) | ((b == a) & ~np.signbit(a) & np.signbit(b))
    return np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(pick_b, b, a))


def lane_sum(A, x, axis=-1):
    """NUM-RED-2 along ``axis``: 32 lanes folded left to right from −0, then the xor butterfly."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    L = x.shape[-1]
    pad = (-L) % 32
    x = np.concatenate([x, np.full(x.shape[:-1] + (pad,), -0.0)], axis=-1)
    chunks = x.reshape(x.shape[:-1] + (-1, 32))
    lanes = np.full(x.shape[:-1] + (32,), -0.0)
    step = add
    with np.errstate(all="ignore"):
        if A == "f32" and np.array_equal(x.astype(np.float32), x, equal_nan=True):
            # the terms are binary32 numbers: one correctly rounded binary32 addition a step is
            # NumPy's float32 add (the same bits as add's f64 sum rounded once; long rows are fast)
            chunks, lanes = chunks.astype(np.float32), lanes.astype(np.float32)
            step = lambda _, a, b: a + b  # noqa: E731
        for j in range(chunks.shape[-2]):
            lanes = step(A, lanes, chunks[..., j, :])
        idx = np.arange(32)
        for off in (16, 8, 4, 2, 1):
            lanes = step(A, lanes, lanes[..., idx ^ off])
    return acc(lanes[..., 0].astype(np.float64), A)


def lane_mean(A, x, axis=-1):
    """The canonical mean: the lane sum divided once, correctly rounded, by the exact length."""
    L = np.shape(x)[axis]
    s = lane_sum(A, x, axis)
    with np.errstate(all="ignore"):
        return acc(s / L if L else np.full_like(s, np.nan), A)


def exact_sum(values) -> Fraction | float:
    """The exact real sum of finite f64 values (NaN/inf handled by NUM-RED-4's rules)."""
    v = np.asarray(values, np.float64).ravel()
    if np.isnan(v).any() or (np.isposinf(v).any() and np.isneginf(v).any()):
        return math.nan
    if np.isinf(v).any():
        return float(v[np.isinf(v)][0])
    return sum((Fraction(float(t)) for t in v), Fraction(0))


def dot(A, x, y, c=None):
    """The canonical dot along the last axis: acc = c (or +0), acc = fma(x_k, y_k, acc), k ascending."""
    x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
    out = np.zeros(x.shape[:-1]) if c is None else np.broadcast_to(np.asarray(c, np.float64), x.shape[:-1])
    for k in range(x.shape[-1]):
        out = fma(A, x[..., k], y[..., k], out)
    return out


def matmul(A, a, b, c=None):
    """GRAPH-MATMUL-1: out[..., m, n] = dot(C; a[..., m, :]; b[..., :, n]), batch axes broadcast."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return dot(A, a[..., :, None, :], np.swapaxes(b, -1, -2)[..., None, :, :], c)


def to_storage(values, fmt, rounding="rne", overflow="native", u=None):
    """The one conversion into storage (NUM-CVT)."""
    return round_values(values, fmt, rounding, overflow, u)


def math_op(name, x, A="f32", *args):
    """GRAPH-MATH-1 steps 2–3: the NUM-MATH algorithm on the exact accum value, rounded into A."""
    with np.errstate(all="ignore"):
        return acc(getattr(X, name)(np.asarray(x, np.float64), *args), A)


def exp_A(A, x):
    return math_op("exp", x, A)


def rsqrt_A(A, x):
    return math_op("rsqrt", x, A)


# ---------------------------------------------------------------------------------------
# random numbers (NUM-RNG-1…7)

_M32 = np.uint64(0xFFFFFFFF)


def philox(counter, key) -> np.ndarray:
    """Philox4x32-10 on uint64 arrays holding 32-bit words: counter (..., 4), key (..., 2)."""
    c = [np.asarray(counter, np.uint64)[..., i] for i in range(4)]
    k0, k1 = (np.asarray(key, np.uint64)[..., i] for i in range(2))
    c = np.broadcast_arrays(*c, k0)[:4]
    k0, k1 = np.broadcast_to(k0, c[0].shape), np.broadcast_to(k1, c[0].shape)
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & _M32, (k1 + np.uint64(0xBB67AE85)) & _M32
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & _M32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & _M32]
    return np.stack(c, axis=-1)


KEY_TAG = 0x6B657973


def _derive(words, s: int):
    out = philox(np.array([s & 0xFFFFFFFF, s >> 32, 0, KEY_TAG], np.uint64), np.array(words, np.uint64))
    return int(out[0]), int(out[1])


def key_words(seed: int, stream: int = 0):
    """RNGKey(seed, stream).words (NUM-RNG-2)."""
    return _derive((seed & 0xFFFFFFFF, seed >> 32), stream)


def fold(words, s: int):
    return _derive(words, s)


def _block(words, n, w2, w3):
    n = np.asarray(n, np.uint64)
    ctr = np.stack([n & _M32, n >> np.uint64(32), np.full_like(n, w2), np.full_like(n, w3)], axis=-1)
    return philox(ctr, np.array(words, np.uint64))


def random_bits(words, i):
    i = np.asarray(i, np.uint64)
    blk = _block(words, i // np.uint64(4), 0, 0)
    return np.take_along_axis(blk, (i % np.uint64(4)).astype(np.int64)[..., None], -1)[..., 0]


def uniform32(words, i):
    return (random_bits(words, i) >> np.uint64(8)).astype(np.float64) * 2.0 ** -24


def _u53(a, b):
    return ((a >> np.uint64(5)).astype(np.float64) * 2.0 ** 26 + (b >> np.uint64(6)).astype(np.float64)) * 2.0 ** -53


def uniform64(words, i):
    i = np.asarray(i, np.uint64)
    blk = _block(words, i // np.uint64(2), 1, 0)
    j = (2 * (i % np.uint64(2))).astype(np.int64)[..., None]
    return _u53(np.take_along_axis(blk, j, -1)[..., 0], np.take_along_axis(blk, j + 1, -1)[..., 0])


def normal(words, i):
    """Box–Muller (NUM-RNG-6), f64."""
    blk = _block(words, i, 2, 0)
    u1, u2 = _u53(blk[..., 0], blk[..., 1]), _u53(blk[..., 2], blk[..., 3])
    c = X.sincos_turns(u2)[1]
    return np.sqrt(-2.0 * X.log(1.0 - u1)) * c


def poisson(words, i: int, lam: float) -> int:
    """NUM-RNG-7 for one element (Knuth below 10, PTRS from 10)."""
    def rounds():
        for d in range(256):
            blk = _block(words, np.array([i]), 3, d)[0]
            yield float(_u53(blk[0], blk[1])), float(_u53(blk[2], blk[3]))
    if lam < 10:
        L, p, k = float(X.exp(np.array(-lam))), 1.0, 0
        for a, b in rounds():
            for u in (a, b):
                p = p * u
                if p > L:
                    k += 1
                else:
                    return k
        raise AssertionError("no result in 256 rounds")
    slam, loglam = math.sqrt(lam), float(X.log(np.array(lam)))
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    invalpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)
    for A_, B_ in rounds():
        U, V = A_ - 0.5, B_
        us = 0.5 - abs(U)
        k = -math.inf if us == 0 else math.floor(((((2 * a) / us) + b) * U + lam) + 0.43)
        if us >= 0.07 and V <= vr:
            return int(k)
        if k < 0 or (us < 0.013 and V > us):
            continue
        log = lambda v: float(X.log(np.array(v)))  # noqa: E731
        lhs = (log(V) + log(invalpha)) - log((a / (us * us)) + b)
        if lhs <= ((-lam) + k * loglam) - X.log_factorial(float(k)):
            return int(k)
    raise AssertionError("no result in 256 rounds")


# ---------------------------------------------------------------------------------------
# neural-network ops (GRAPH-SOFTMAX-1 … GRAPH-CONV2D-1)

def _extreme(fn, x, axis, identity):
    """``fn`` (:func:`maximum` or :func:`minimum`: associative and commutative, NaN and ±0
    included, so any order gives the same value) over ``axis``, by halving."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, 0)
    if not x.shape[0]:
        return np.full(x.shape[1:], identity)
    while x.shape[0] > 1:
        if x.shape[0] % 2:
            x = np.concatenate([x, np.full((1,) + x.shape[1:], identity)])
        x = fn(x[: x.shape[0] // 2], x[x.shape[0] // 2:])
    return x[0]


def max_along(x, axis=-1):
    """GRAPH-MAX-1: IEEE 754-2019 maximum over ``axis`` (NaN if any term is; −0 < +0; −inf if empty)."""
    return _extreme(maximum, x, axis, -np.inf)


def min_along(x, axis=-1):
    """GRAPH-MIN-1: minimum over ``axis`` (NaN if any term is; −0 < +0; +inf if empty)."""
    return _extreme(minimum, x, axis, np.inf)


def softmax(A, x, axis=-1):
    m = np.expand_dims(max_along(x, axis), axis)
    e = exp_A(A, sub(A, x, m))
    s = np.expand_dims(lane_sum(A, e, axis), axis)
    return div(A, e, s)


def log_softmax(A, x, axis=-1):
    """GRAPH-LOGSOFTMAX-1: z = x ⊖ max, l = log(lane sum of exp(z)), y = z ⊖ l, all in A."""
    z = sub(A, x, np.expand_dims(max_along(x, axis), axis))
    return sub(A, z, np.expand_dims(math_op("log", lane_sum(A, exp_A(A, z), axis), A), axis))


def cross_entropy(A, x, labels, reduction="mean"):
    """GRAPH-CROSSENTROPY-1: per row l ⊖ z[label] (classes last), then the lane sum or mean of all rows."""
    z = sub(A, x, np.expand_dims(max_along(x, -1), -1))
    l = math_op("log", lane_sum(A, exp_A(A, z), -1), A)
    picked = np.take_along_axis(z, np.asarray(labels, np.int64)[..., None], -1)[..., 0]
    rows = sub(A, l, picked)
    if reduction == "none":
        return rows
    return (lane_sum if reduction == "sum" else lane_mean)(A, rows.reshape(-1))


def layernorm(A, x, weight=None, bias=None, eps=1e-5):
    mu = lane_mean(A, x)[..., None]
    c = sub(A, x, mu)
    v = lane_mean(A, mul(A, c, c))[..., None]
    r = rsqrt_A(A, add(A, v, acc(eps, A)))
    y = mul(A, c, r)
    if weight is not None:
        y = mul(A, y, weight)
    if bias is not None:
        y = add(A, y, bias)
    return y


def rmsnorm(A, x, weight=None, eps=1e-6):
    ms = lane_mean(A, mul(A, x, x))[..., None]
    y = mul(A, x, rsqrt_A(A, add(A, ms, acc(eps, A))))
    return y if weight is None else mul(A, y, weight)


def _attention_setup(A, q, k, v, scale):
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q, k, v = (np.broadcast_to(t, batch + t.shape[-2:]) for t in (q, k, v))
    sigma = acc(scale, A) if scale is not None else rsqrt_A(A, float(q.shape[-1]))
    return q, k, v, batch, sigma


def _scores(A, q, k, t, rows, sigma, causal):
    """The scores of keys ``t`` (mask applied) for query rows ``rows``."""
    Sq, Sk = q.shape[-2], k.shape[-2]
    s = mul(A, dot(A, q[..., rows, None, :], k[..., None, t, :]), sigma)
    if causal:
        s = np.where(t[None, :] > rows[:, None] + (Sk - Sq), -np.inf, s)
    return s


def _online(A, q, k, v, causal, scale, block_k):
    """``(m, l, out)`` of the blocked online softmax of GRAPH-FLASHATTENTION-1."""
    q, k, v, batch, sigma = _attention_setup(A, q, k, v, scale)
    Sq, Sk, Dv = q.shape[-2], k.shape[-2], v.shape[-1]
    m = np.full(batch + (Sq,), -np.inf)
    l = np.zeros(batch + (Sq,))
    out = np.zeros(batch + (Sq, Dv))
    for j0 in range(0, Sk, block_k):
        t = np.arange(j0, min(j0 + block_k, Sk))
        s = _scores(A, q, k, t, np.arange(Sq), sigma, causal)
        m_new = maximum(m, max_along(s, -1))
        m_t = np.where(m_new == -np.inf, 0.0, m_new)
        p = exp_A(A, sub(A, s, m_t[..., None]))
        alpha = exp_A(A, sub(A, m, m_t))
        l = add(A, mul(A, alpha, l), lane_sum(A, p, -1))
        pv = dot(A, p[..., :, None, :], np.swapaxes(v[..., t, :], -1, -2)[..., None, :, :])
        out = add(A, mul(A, alpha[..., None], out), pv)
        m = m_new
    return m, l, out


def flash_attention(A, q, k, v, causal=False, scale=None, block_k=64):
    """The blocked online softmax of GRAPH-FLASHATTENTION-1 (batch axes broadcast)."""
    m, l, out = _online(A, q, k, v, causal, scale, block_k)
    return div(A, out, l[..., None])


def flash_attention_lse(A, q, k, causal=False, scale=None, block_k=64):
    """GRAPH-FLASHATTENTIONLSE-1: ``m ⊕ log l`` of the forward's recurrence."""
    m, l, _ = _online(A, q, k, k, causal, scale, block_k)
    return add(A, m, math_op("log", l, A))


def flash_attention_bwd(A, q, k, v, o, lse, do, causal=False, scale=None, block_k=64, block_q=64):
    """GRAPH-FLASHATTENTIONBWD-1: ``(q̄, k̄, v̄)`` in ``A`` before the rounding into storage,
    for operands of one batch shape (no sum over broadcast axes)."""
    q, k, v, batch, sigma = _attention_setup(A, q, k, v, scale)
    o, lse, do = (np.asarray(t, np.float64) for t in (o, lse, do))
    Sq, D, Sk, Dv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    delta = lane_sum(A, mul(A, do, o), -1)
    dq, dk, dv = np.zeros(batch + (Sq, D)), np.zeros(batch + (Sk, D)), np.zeros(batch + (Sk, Dv))
    sw = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    for j0 in range(0, Sk, block_k):
        t = np.arange(j0, min(j0 + block_k, Sk))
        for i0 in range(0, Sq, block_q):
            r = np.arange(i0, min(i0 + block_q, Sq))
            s = _scores(A, q, k, t, r, sigma, causal)
            p = exp_A(A, sub(A, s, lse[..., r, None]))
            dv[..., t, :] = add(A, dv[..., t, :], dot(A, sw(p)[..., :, None, :], sw(do[..., r, :])[..., None, :, :]))
            dp = dot(A, do[..., r, None, :], v[..., None, t, :])
            ds = mul(A, p, sub(A, dp, delta[..., r, None]))
            dk[..., t, :] = add(A, dk[..., t, :], dot(A, sw(ds)[..., :, None, :], sw(q[..., r, :])[..., None, :, :]))
            dq[..., r, :] = add(A, dq[..., r, :], dot(A, ds[..., :, None, :], sw(k[..., t, :])[..., None, :, :]))
    return mul(A, dq, sigma), mul(A, dk, sigma), dv


def norm_safe_bwd(A, x, g, weight=None, eps=1e-5, center=True):
    """GRAPH-NORMSAFEBWD-1 for a 2-D ``x`` normalized along its last axis: ``(x̄, weight̄, bias̄)``
    in ``A`` (the feature sums over the rows, NUM-RED-2)."""
    x, g = np.asarray(x, np.float64), np.asarray(g, np.float64)
    c = sub(A, x, lane_mean(A, x)[..., None]) if center else x
    r = rsqrt_A(A, add(A, lane_mean(A, mul(A, c, c))[..., None], acc(eps, A)))
    xh = mul(A, c, r)
    h = g if weight is None else mul(A, g, weight)
    d = mul(A, r, sub(A, h, mul(A, xh, lane_mean(A, mul(A, xh, h))[..., None])))
    xbar = sub(A, d, lane_mean(A, d)[..., None]) if center else d
    return xbar, lane_sum(A, mul(A, g, xh), 0), lane_sum(A, g, 0)


def conv2d(A, x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)):
    """GRAPH-CONV2D-1 in NCHW: taps r = (c, kh, kw) row-major, padded taps as +0 inputs."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    N, Cin, H, W = x.shape
    O, _, KH, KW = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    top, bottom, left, right = padding
    xp = np.zeros((N, Cin, H + top + bottom, W + left + right))
    xp[:, :, top:top + H, left:left + W] = x
    OH = (H + top + bottom - dh * (KH - 1) - 1) // sh + 1
    OW = (W + left + right - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((N, O, OH, OW))
    a, b = np.arange(OH) * sh, np.arange(OW) * sw
    for c in range(Cin):
        for kh in range(KH):
            for kw in range(KW):
                tap = xp[:, c][:, (a + kh * dh)[:, None], (b + kw * dw)[None, :]]   # N, OH, OW
                out = fma(A, tap[:, None], w[:, c, kh, kw][None, :, None, None], out)
    return out


# ---------------------------------------------------------------------------------------
# linear algebra (GRAPH-CHOLESKY-1, GRAPH-SVD-1, GRAPH-SPMM-1)

def cholesky(A, a):
    a = np.asarray(a, np.float64)
    n = a.shape[-1]
    L = np.zeros(a.shape)
    for j in range(n):
        for i in range(j, n):
            s = dot(A, -L[..., i, :j], L[..., j, :j], a[..., i, j])
            if i == j:
                with np.errstate(invalid="ignore"):
                    L[..., j, j] = np.where(s > 0, sqrt(A, np.where(s > 0, s, 1.0)), np.nan)
            else:
                L[..., i, j] = div(A, s, L[..., j, j])
    return L


def _pairs(q: int):
    s = 2 * ((q + 1) // 2) - 1
    for r in range(s):
        pairs = [((r - i) % s, (r + i) % s) for i in range(1, (s - 1) // 2 + 1)] + [(r, s)]
        yield [(min(p), max(p)) for p in pairs if max(p) < q]


def _svd_one(A, a):
    m, n = a.shape
    X_ = a if m >= n else a.T
    p, q = X_.shape
    W, V = X_.copy(), np.eye(q)
    M = {"f32": 23, "f64": 52}[A]
    tau = acc(math.ceil(math.sqrt(p)) * 2.0 ** -M, A)
    for _sweep in range(30):
        rotated = False
        for rnd in _pairs(q):
            for P, Qc in rnd:
                wp, wq = W[:, P], W[:, Qc]
                al, be, ga = dot(A, wp, wp), dot(A, wq, wq), dot(A, wp, wq)
                thr = mul(A, tau, mul(A, sqrt(A, al), sqrt(A, be)))
                if not abs(ga) > thr:
                    continue
                rotated = True
                zeta = div(A, sub(A, be, al), add(A, ga, ga))
                sg = -1.0 if zeta < 0 else 1.0
                t = div(A, sg, add(A, abs(zeta), sqrt(A, add(A, 1.0, mul(A, zeta, zeta)))))
                c = div(A, 1.0, sqrt(A, add(A, 1.0, mul(A, t, t))))
                s = mul(A, c, t)
                for Mx in (W, V):
                    xp, xq = Mx[:, P].copy(), Mx[:, Qc].copy()
                    Mx[:, P] = sub(A, mul(A, c, xp), mul(A, s, xq))
                    Mx[:, Qc] = add(A, mul(A, s, xp), mul(A, c, xq))
        if not rotated:
            break
    sig = np.array([sqrt(A, dot(A, W[:, j], W[:, j])) for j in range(q)], np.float64).reshape(q)
    order = sorted(range(q), key=lambda j: (math.isnan(sig[j]), -sig[j] if not math.isnan(sig[j]) else 0.0, j))
    sig, W, V = sig[order], W[:, order], V[:, order]
    Ucols = np.stack([div(A, W[:, j], sig[j]) if sig[j] > 0 else np.zeros(p) for j in range(q)], axis=1)
    if m >= n:
        U, Vt = Ucols, V.T.copy()
    else:
        U, Vt = V.copy(), Ucols.T.copy()
    for j in range(Vt.shape[0]):
        row = Vt[j]
        big = int(np.argmax(np.abs(row)))
        if row[big] < 0:
            Vt[j] = -row
            U[:, j] = -U[:, j]
    return U, sig, Vt


def svd(A, a):
    """One-sided Jacobi (Hestenes), per batch element: (U, S, Vt) as f64 values in A."""
    a = np.asarray(a, np.float64)
    batch = a.shape[:-2]
    outs = [_svd_one(A, a[idx]) for idx in np.ndindex(*batch)] if batch else [_svd_one(A, a)]
    if not batch:
        return outs[0]
    return tuple(np.stack([o[i] for o in outs]).reshape(batch + outs[0][i].shape) for i in range(3))


def spmm(A, indptr, indices, data, dense):
    m, n = len(indptr) - 1, dense.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        p0, p1 = indptr[i], indptr[i + 1]
        if p1 > p0:
            out[i] = dot(A, np.broadcast_to(data[p0:p1], (n, p1 - p0)), dense[indices[p0:p1]].T)
    return out


# ---------------------------------------------------------------------------------------
# FFT (GRAPH-FFT-1, GRAPH-IFFT-1): f32 operations, no fma

def _r32(x):
    return acc(x, "f32")


def _cmul(ar, ai, br, bi):
    """a ⊠ b: four rounded products, then two rounded sums."""
    return (_r32(_r32(ar * br) - _r32(ai * bi)), _r32(_r32(ar * bi) + _r32(ai * br)))


def _twiddles(n: int, inverse: bool):
    m = np.arange(n, dtype=np.float64)
    t = m / n
    s, c = X.sincos_turns(t if inverse else -t)
    return _r32(c), _r32(s)


def _fft_last(re, im, inverse: bool):
    n = re.shape[-1]
    if n == 0:
        return re, im
    wr, wi = _twiddles(n, inverse)
    if n & (n - 1) == 0:
        p = n.bit_length() - 1
        rev = np.array([int(format(j, f"0{p}b")[::-1], 2) if p else 0 for j in range(n)])
        yr, yi = re[..., rev].copy(), im[..., rev].copy()
        h = 1
        while h < n:
            for g in range(0, n, 2 * h):
                for kk in range(h):
                    j, w = g + kk, kk * n // (2 * h)
                    tr_, ti_ = _cmul(wr[w], wi[w], yr[..., j + h], yi[..., j + h])
                    ur, ui = yr[..., j].copy(), yi[..., j].copy()
                    yr[..., j + h], yi[..., j + h] = _r32(ur - tr_), _r32(ui - ti_)
                    yr[..., j], yi[..., j] = _r32(ur + tr_), _r32(ui + ti_)
            h *= 2
        return yr, yi
    outr, outi = np.zeros_like(re), np.zeros_like(im)
    for kk in range(n):
        sr, si = _cmul(re[..., 0], im[..., 0], wr[0], wi[0])
        for j in range(1, n):
            w = (j * kk) % n
            tr_, ti_ = _cmul(re[..., j], im[..., j], wr[w], wi[w])
            sr, si = _r32(sr + tr_), _r32(si + ti_)
        outr[..., kk], outi[..., kk] = sr, si
    return outr, outi


def fft(z, axis=-1, inverse=False) -> np.ndarray:
    """GRAPH-FFT-1 / GRAPH-IFFT-1 on a complex (or real) array; returns complex64."""
    z = np.asarray(z)
    re = np.real(z).astype(np.float64)
    im = np.imag(z).astype(np.float64) if np.iscomplexobj(z) else np.zeros_like(re)
    re, im = np.moveaxis(re, axis, -1), np.moveaxis(im, axis, -1)
    yr, yi = _fft_last(re, im, inverse)
    if inverse:
        n = re.shape[-1]
        yr, yi = _r32(yr / n), _r32(yi / n)
    out = np.empty(yr.shape, np.complex64)
    out.real, out.imag = yr.astype(np.float32), yi.astype(np.float32)
    return np.moveaxis(out, -1, axis)


def ifft(z, axis=-1) -> np.ndarray:
    return fft(z, axis, inverse=True)
