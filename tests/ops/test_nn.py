"""Neural-network ops (GRAPH-SOFTMAX-1, GRAPH-LAYERNORMSAFE-1, GRAPH-RMSNORMSAFE-1,
GRAPH-FLASHATTENTION-1, GRAPH-CONV2D-1): float64 references, bit-level re-implementations of
the clauses, errors, eager == jit, and IR round trips."""
from fractions import Fraction

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_ref.interp import run_function
from tessera_ref.ir import TensorType, parse_module
from tessera_ref.numerics import xmath
from tessera_ref.ops.bind import bind
from tessera_ref.ops.primitive import primitive

F32 = np.float32
U32 = 2.0 ** -24  # unit roundoff of f32
U_STORE = {"f32": U32, "bf16": 2.0 ** -8, "f16": 2.0 ** -11, "fp8": 2.0 ** -4}
TINY = {"f32": 2.0 ** -150, "bf16": 2.0 ** -134, "f16": 2.0 ** -25, "fp8": 2.0 ** -10}  # ½ min subnormal


def storage_error(ref, policy):
    """The error of rounding ``ref`` once into ``policy``'s storage (relative, or absolute
    among the subnormals)."""
    return U_STORE[policy] * np.abs(ref) + TINY[policy]


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a)).view(np.uint8)


def f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def store(x, policy):
    """x rounded into ``policy``'s storage; the reference then works on exactly these values."""
    return tr.asarray(x, policy=policy)


# ---------------------------------------------------------------------------------------
# independent re-implementations of the building blocks the clauses name (f32 accum)

def warp_sum(values) -> F32:
    """NUM-RED-2 sum of f32 values: 32 lanes from -0, lane l folds l, l+32, ..., xor butterfly."""
    lanes = [F32(-0.0)] * 32
    for i, v in enumerate(values):
        lanes[i % 32] = F32(lanes[i % 32] + F32(v))
    for off in (16, 8, 4, 2, 1):
        lanes = [F32(lanes[l] + lanes[l ^ off]) for l in range(32)]
    return lanes[0]


def exp32(x) -> F32:
    """NUM-MATH exp in f64, rounded once to f32."""
    return F32(xmath.exp(np.float64(x)))


def rsqrt32(x) -> F32:
    """NUM-MATH-11 rsqrt (1 / sqrt in f64), rounded once to f32."""
    return F32(1.0 / np.sqrt(np.float64(x)))


def fma32(a, b, c) -> F32:
    """a·b + c rounded once to f32 (exact rational arithmetic, ties to even; finite values)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    guess = F32(float(exact))
    cands = [guess, np.nextafter(guess, F32(np.inf)), np.nextafter(guess, F32(-np.inf))]
    return min(cands, key=lambda f: (abs(Fraction(float(f)) - exact), int(np.asarray(f).view(np.uint32)) & 1))


# ---------------------------------------------------------------------------------------
# softmax

def softmax64(x, axis=-1):
    x = f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("policy", ["f32", "bf16", "fp8"])
@pytest.mark.parametrize("shape,axis", [((4, 70), -1), ((3, 5, 9), 1), ((33,), 0)])
def test_softmax_matches_float64(policy, shape, axis):
    x = store(np.random.default_rng(1).standard_normal(shape) * 3, policy)
    y = f64(op.softmax(x, axis=axis))
    ref = softmax64(x, axis)
    # f32 steps: sub (u), exp (1 ulp + the sub's error amplified by |d| ≤ ~25: 26u), the
    # canonical sum (L·u), the division (u): relative error ≤ (L + 30)·u; then one rounding
    # into storage (u_storage).
    L = x.shape[axis]
    assert np.all(np.abs(y - ref) <= (L + 30) * U32 * ref + storage_error(ref, policy))


def softmax_clause(row) -> np.ndarray:
    """GRAPH-SOFTMAX-1 on one f32 row, scalar by scalar."""
    m = max(row)
    e = [exp32(F32(v - m)) for v in row]
    s = warp_sum(e)
    return np.array([F32(v / s) for v in e], dtype=F32)


def test_softmax_bits_follow_the_clause_and_the_sum_order_matters():
    x = (np.random.default_rng(7).standard_normal((6, 100)) * 4).astype(F32)
    y = np.asarray(op.softmax(x))
    for r in range(x.shape[0]):
        assert bits(y[r]).tolist() == bits(softmax_clause(x[r])).tolist()
    # a left-to-right sum gives other bits: the warp order is what makes the clause's result
    seq = []
    for row in x:
        e = np.array([exp32(F32(v - row.max())) for v in row], dtype=F32)
        s = F32(0)
        for v in e:
            s = F32(s + v)
        seq.append(e / s)
    assert not np.array_equal(bits(np.array(seq)), bits(y))


def test_softmax_masked_entries_and_all_masked_rows():
    x = np.array([[0.5, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0]], dtype=F32)
    y = np.asarray(op.softmax(x))
    assert bits(y[0, 1]).tolist() == bits(F32(0)).tolist()
    np.testing.assert_allclose(y[0, [0, 2]], softmax64(x[0, [0, 2]]), rtol=4 * U32)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all()


# ---------------------------------------------------------------------------------------
# layernorm_safe / rmsnorm_safe

def layernorm64(x, w=None, b=None, eps=1e-5, axis=-1):
    x = f64(x)
    mu = x.mean(axis=axis, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axis, keepdims=True)
    shape = [1] * x.ndim
    shape[axis] = -1
    y = (x - mu) / np.sqrt(var + eps)
    y = y * f64(w).reshape(shape) if w is not None else y
    return y + f64(b).reshape(shape) if b is not None else y


def rmsnorm64(x, w=None, eps=1e-6, axis=-1):
    x = f64(x)
    y = x / np.sqrt((x * x).mean(axis=axis, keepdims=True) + eps)
    return y * f64(w).reshape((-1,) + (1,) * (x.ndim - 1 - axis % x.ndim)) if w is not None else y


@pytest.mark.parametrize("policy", ["f32", "bf16", "fp8"])
@pytest.mark.parametrize("shape,axis", [((5, 96), -1), ((4, 40, 3), 1)])
def test_norms_match_float64(policy, shape, axis):
    rng = np.random.default_rng(2)
    x = store(rng.standard_normal(shape) * 2 + 1, policy)
    L = shape[axis]
    w, b = store(rng.standard_normal(L), policy), store(rng.standard_normal(L), policy)
    # Normalized values are O(√L) at most; each of mean, centre, square, mean, add, rsqrt
    # (≤ 2 ulp) and the products costs ≤ (L + 4)·u relative to the row's scale, weight and
    # bias add 2u of |y·w| + |b|; then one rounding into storage. Scale: |y|·|w| + |b| + 1.
    for y, ref in ((op.layernorm_safe(x, w, b, axis=axis), layernorm64(x, w, b, axis=axis)),
                   (op.rmsnorm_safe(x, w, axis=axis), rmsnorm64(x, w, axis=axis))):
        shape_w = [1] * len(shape)
        shape_w[axis] = -1
        scale = np.sqrt(L) * np.abs(f64(w)).reshape(shape_w) + np.abs(f64(b)).reshape(shape_w) + 1
        tol = (2 * L + 20) * U32 * scale + storage_error(ref, policy)
        assert np.all(np.abs(f64(y) - ref) <= tol)


def layernorm_clause(row, w, b, eps):
    L = len(row)
    mu = F32(warp_sum(row) / F32(L))  # L is exact in f32: one correctly rounded division
    c = [F32(v - mu) for v in row]
    var = F32(warp_sum([F32(v * v) for v in c]) / F32(L))
    r = rsqrt32(F32(var + F32(eps)))
    return np.array([F32(F32(F32(v * r) * wi) + bi) for v, wi, bi in zip(c, w, b)], dtype=F32)


def rmsnorm_clause(row, eps):
    ms = F32(warp_sum([F32(v * v) for v in row]) / F32(len(row)))
    r = rsqrt32(F32(ms + F32(eps)))
    return np.array([F32(v * r) for v in row], dtype=F32)


def test_norm_bits_follow_the_clauses():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 77)) * 3 + 5).astype(F32)
    w, b = rng.standard_normal(77).astype(F32), rng.standard_normal(77).astype(F32)
    ln = np.asarray(op.layernorm_safe(x, w, b, eps=1e-3))
    rms = np.asarray(op.rmsnorm_safe(x))
    for r in range(4):
        assert bits(ln[r]).tolist() == bits(layernorm_clause(x[r], w, b, 1e-3)).tolist()
        assert bits(rms[r]).tolist() == bits(rmsnorm_clause(x[r], 1e-6)).tolist()
    # the one-pass variance E[x²] − μ² (another natural order) gives other bits
    mu = np.array([F32(warp_sum(row) / F32(77)) for row in x])
    ex2 = np.array([F32(warp_sum([F32(v * v) for v in row]) / F32(77)) for row in x])
    one_pass = ((x - mu[:, None]) / np.sqrt(ex2 - mu * mu + F32(1e-3))[:, None]).astype(F32) * w + b
    assert not np.array_equal(bits(one_pass.astype(F32)), bits(ln))


def test_layernorm_bias_alone_equals_unit_weight_and_eps_zero_constant_row_is_nan():
    x = np.random.default_rng(4).standard_normal((3, 8)).astype(F32)
    b = np.arange(8, dtype=F32)
    assert np.array_equal(bits(op.layernorm_safe(x, bias=b)), bits(op.layernorm_safe(x, np.ones(8, F32), b)))
    assert np.isnan(np.asarray(op.layernorm_safe(np.ones((1, 4), F32), eps=0.0))).all()


# ---------------------------------------------------------------------------------------
# flash_attention

def attention64(q, k, v, scale, causal=False):
    q, k, v = f64(q), f64(k), f64(v)
    s = np.einsum("...id,...td->...it", q, k) * scale
    if causal:
        Sq, Sk = s.shape[-2:]
        allowed = np.arange(Sk)[None, :] <= np.arange(Sq)[:, None] + (Sk - Sq)
        s = np.where(allowed, s, -np.inf)
    with np.errstate(invalid="ignore"):
        return np.einsum("...it,...te->...ie", softmax64(s), v)


def _qkv(rng, batch, Sq, Sk, D, Dv, policy="f32"):
    return (store(rng.standard_normal(batch + (Sq, D)), policy), store(rng.standard_normal(batch + (Sk, D)), policy),
            store(rng.standard_normal(batch + (Sk, Dv)), policy))


@pytest.mark.parametrize("policy", ["f32", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dims,block_k", [(((2,), 7, 90, 16, 8), 32), (((1, 2), 12, 12, 8, 8), 5)])
def test_flash_attention_matches_float64(policy, causal, dims, block_k):
    batch, Sq, Sk, D, Dv = dims
    q, k, v = _qkv(np.random.default_rng(5), batch, Sq, Sk, D, Dv, policy)
    y = f64(op.flash_attention(q, k, v, causal=causal, block_k=block_k))
    ref = attention64(q, k, v, 1 / np.sqrt(D), causal)
    # Scores: dot of D terms (D·u·Σ|q||k|·σ) and the scale (u); the weights p = exp(s − m)
    # then carry relative error ≤ 2·(score error) + 2u, the rescalings α add 2u per block,
    # the sums of ≤ Sk terms Sk·u; out = Σ p·v / l adds (Sk + 2)·u·max|v| — all relative to
    # max|v|, since the weights sum to 1. Then one rounding into storage.
    s_err = D * U32 * np.einsum("...id,...td->...it", np.abs(f64(q)), np.abs(f64(k))).max() / np.sqrt(D)
    tol = (4 * s_err + (3 * Sk + 4 * Sk // block_k + 20) * U32) * np.abs(f64(v)).max()
    assert np.all(np.abs(y - ref) <= tol + storage_error(ref, policy))


def flash_clause(q, k, v, block_k, scale, causal):
    """GRAPH-FLASHATTENTION-1 for one head, scalar by scalar (f32 operands and accum)."""
    Sq, D = q.shape
    Sk, Dv = v.shape
    out = np.empty((Sq, Dv), dtype=F32)
    for i in range(Sq):
        m, ell, acc = F32(-np.inf), F32(0), [F32(0)] * Dv
        for t0 in range(0, Sk, block_k):
            keys = range(t0, min(t0 + block_k, Sk))
            s = []
            for t in keys:
                d = F32(0)
                for j in range(D):
                    d = fma32(q[i, j], k[t, j], d)
                s.append(F32(d * scale) if not (causal and t > i + Sk - Sq) else F32(-np.inf))
            m_new = max([m] + s)
            shift = F32(0) if m_new == -np.inf else m_new
            p = [exp32(F32(x - shift)) for x in s]
            alpha = exp32(F32(m - shift))
            ell = F32(F32(alpha * ell) + warp_sum(p))
            for e in range(Dv):
                pv = F32(0)
                for pt, t in zip(p, keys):
                    pv = fma32(pt, v[t, e], pv)
                acc[e] = F32(F32(alpha * acc[e]) + pv)
            m = m_new
        with np.errstate(invalid="ignore"):
            out[i] = [F32(a / ell) for a in acc]
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_bits_follow_the_clause(causal):
    rng = np.random.default_rng(6)
    # f32 storage (no final rounding to hide a difference); f16-valued data keeps the exact
    # rational fma of the re-implementation small
    q, k, v = (rng.standard_normal(s).astype(np.float16).astype(F32) for s in ((3, 4), (40, 4), (40, 3)))
    for block_k in (3, 16, 40):  # 40 > 32: the row sum's lanes and butterfly both matter
        y = np.asarray(op.flash_attention(q, k, v, causal=causal, block_k=block_k, scale=0.7))
        scale = F32(0.7)
        mine = flash_clause(q, k, v, block_k, scale, causal)
        assert bits(y).tolist() == bits(mine).tolist()
    # the default scale is rsqrt(D) rounded into f32 (here exactly 0.5)
    assert np.array_equal(bits(op.flash_attention(q, k, v)), bits(op.flash_attention(q, k, v, scale=0.5)))


def test_flash_attention_block_k_changes_bits_block_q_does_not():
    q, k, v = _qkv(np.random.default_rng(8), (2,), 9, 100, 16, 8)
    a = op.flash_attention(q, k, v, block_k=16)
    b = op.flash_attention(q, k, v, block_k=64)
    assert not np.array_equal(bits(a), bits(b))
    assert np.array_equal(bits(a), bits(op.flash_attention(q, k, v, block_k=16)))  # deterministic
    for block_q in (1, 4, 256):
        assert np.array_equal(bits(a), bits(op.flash_attention(q, k, v, block_k=16, block_q=block_q)))


def test_flash_attention_fully_masked_rows_are_nan():
    # causal with Sq > Sk: query i sees keys t <= i - 2, so rows 0 and 1 see none
    q, k, v = _qkv(np.random.default_rng(9), (), 5, 3, 4, 2)
    y = np.asarray(op.flash_attention(q, k, v, causal=True, block_k=2))
    assert np.isnan(y[:2]).all() and not np.isnan(y[2:]).any()
    ref = attention64(q, k, v, 0.5, causal=True)
    np.testing.assert_allclose(y[2:], ref[2:], rtol=0, atol=64 * U32 * np.abs(f64(v)).max())


# ---------------------------------------------------------------------------------------
# conv2d

def conv64(x, w, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1)):
    x, w = f64(x), f64(w)
    xp = np.pad(x, ((0, 0), (0, 0), pads[:2], pads[2:]))
    O, C, KH, KW = w.shape
    OH = (xp.shape[2] - dil[0] * (KH - 1) - 1) // stride[0] + 1
    OW = (xp.shape[3] - dil[1] * (KW - 1) - 1) // stride[1] + 1
    y = np.zeros((x.shape[0], O, OH, OW))
    for i in range(KH):
        for j in range(KW):
            patch = xp[:, :, i * dil[0]::stride[0], j * dil[1]::stride[1]][:, :, :OH, :OW]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return y


@pytest.mark.parametrize("policy", ["f32", "bf16", "fp8"])
@pytest.mark.parametrize("stride,padding,dilation,pads", [
    (1, 0, 1, (0, 0, 0, 0)), (2, 1, 1, (1, 1, 1, 1)), ((1, 2), (2, 0), (2, 1), (2, 2, 0, 0)),
    (1, (0, 1, 2, 0), 1, (0, 1, 2, 0)), (1, "same", 2, (2, 2, 2, 2))])
def test_conv2d_matches_float64(policy, stride, padding, dilation, pads):
    rng = np.random.default_rng(10)
    x, w = store(rng.standard_normal((2, 3, 9, 8)), policy), store(rng.standard_normal((4, 3, 3, 3)), policy)
    y = f64(op.conv2d(x, w, stride=stride, padding=padding, dilation=dilation))
    pair = lambda s: s if isinstance(s, tuple) else (s, s)  # noqa: E731
    ref = conv64(x, w, pair(stride), pads, pair(dilation))
    mag = conv64(np.abs(f64(x)), np.abs(f64(w)), pair(stride), pads, pair(dilation))
    # a K-term dot in f32, K = C·KH·KW: |error| ≤ K·u·Σ|x||w|; then one rounding into storage
    assert y.shape == ref.shape
    assert np.all(np.abs(y - ref) <= 27 * U32 * mag + storage_error(ref, policy))


def test_conv2d_bits_follow_the_canonical_order():
    rng = np.random.default_rng(11)
    # f32 tensors holding f16 values: every product is exact in f32, so the fma is
    # multiply-then-add, and the result is not rounded again (f32 storage)
    x = rng.standard_normal((1, 8, 5, 5)).astype(np.float16).astype(F32)
    w = rng.standard_normal((2, 8, 3, 3)).astype(np.float16).astype(F32)
    y = np.asarray(op.conv2d(x, w, padding=1))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    forward, backward = np.empty(y.shape, F32), np.empty(y.shape, F32)
    for o in range(2):
        for a in range(5):
            for b in range(5):
                terms = [F32(F32(xp[0, c, a + i, b + j]) * F32(w[o, c, i, j]))
                         for c in range(8) for i in range(3) for j in range(3)]
                for out, seq in ((forward, terms), (backward, terms[::-1])):
                    acc = F32(0)
                    for t in seq:
                        acc = F32(acc + t)
                    out[0, o, a, b] = acc
    assert bits(y).tolist() == bits(forward).tolist()
    assert not np.array_equal(bits(backward), bits(y))  # the order is visible in the bits


def test_conv2d_padded_taps_are_zero_inputs_and_nhwc_is_the_transpose():
    x = np.ones((1, 1, 3, 3), F32)
    w = np.zeros((1, 1, 3, 3), F32)
    w[0, 0, 0, 0] = np.inf  # the top-left tap: it reads padding for the first row and column
    y = np.asarray(op.conv2d(x, w, padding=1))
    assert np.isnan(y[0, 0, 0, :]).all() and np.isnan(y[0, 0, :, 0]).all()
    assert (y[0, 0, 1:, 1:] == np.inf).all()
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((2, 3, 6, 7)).astype(F32), rng.standard_normal((5, 3, 2, 3)).astype(F32)
    nchw = np.asarray(op.conv2d(x, w, stride=(2, 1), padding=(1, 2)))
    nhwc = np.asarray(op.conv2d(x.transpose(0, 2, 3, 1), w, stride=(2, 1), padding=(1, 2), layout="NHWC"))
    assert np.array_equal(bits(nhwc), bits(nchw.transpose(0, 2, 3, 1)))


# ---------------------------------------------------------------------------------------
# errors

def _raises(kind, fn, *names):
    with pytest.raises(kind) as info:
        fn()
    text = str(info.value)
    assert "test_nn.py:" in text
    for name in names:
        assert name in text
    return text


def test_shape_and_format_errors_name_the_types_and_the_line():
    x = np.zeros((2, 8), F32)
    _raises(ShapeError, lambda: op.softmax(x, axis=2), "tensor<2x8xf32>")
    _raises(DTypeError, lambda: op.softmax(tr.asarray(np.zeros(3, np.int64))), "softmax")
    _raises(ShapeError, lambda: op.layernorm_safe(x, np.ones(7, F32)), "tensor<7xf32>", "tensor<2x8xf32>")
    _raises(DTypeError, lambda: op.rmsnorm_safe(x, store(np.ones(8), "bf16")), "tensor<8xbf16>", "tensor<2x8xf32>")
    q, kk = np.zeros((2, 3, 4), F32), np.zeros((2, 5, 6), F32)
    _raises(ShapeError, lambda: op.flash_attention(q, kk, kk), "tensor<2x3x4xf32>", "tensor<2x5x6xf32>")
    _raises(DTypeError, lambda: op.flash_attention(q, q, store(q, "bf16")), "tensor<2x3x4xbf16>")
    img = np.zeros((1, 3, 5, 5), F32)
    _raises(ShapeError, lambda: op.conv2d(img, np.zeros((2, 4, 3, 3), F32)), "tensor<1x3x5x5xf32>", "tensor<2x4x3x3xf32>")
    _raises(ShapeError, lambda: op.conv2d(img, np.zeros((2, 3, 7, 3), F32)), "tensor<2x3x7x3xf32>")
    _raises(OpError, lambda: op.conv2d(img, np.zeros((2, 3, 3, 3), F32), groups=3), "groups")
    _raises(OpError, lambda: op.conv2d(img, np.zeros((2, 3, 3, 3), F32), padding="same", stride=2), "same")


def test_attribute_errors():
    x = np.zeros((2, 8), F32)
    text = _raises(OpError, lambda: bind(primitive("softmax"), x, axes=0), "axes")
    assert "axis" in text
    _raises(OpError, lambda: op.layernorm_safe(x, eps=-1.0), "eps")
    _raises(OpError, lambda: op.flash_attention(x, x, x, block_k=0), "block_k")
    _raises(OpError, lambda: op.conv2d(np.zeros((1, 1, 3, 3), F32), np.zeros((1, 1, 1, 1), F32),
                                       layout="NCWH"), "layout")
    stochastic = tr.Policy("bf16", rounding="stochastic")
    xs = tr.Array(np.zeros((2, 8), stochastic.storage.dtype), TensorType((2, 8), stochastic))
    _raises(OpError, lambda: op.softmax(xs), "seed")
    assert np.array_equal(bits(op.softmax(xs, seed=3)), bits(np.full((2, 8), 0.125, stochastic.storage.dtype)))


# ---------------------------------------------------------------------------------------
# eager == jit, and the IR round trip

def _programs():
    rng = np.random.default_rng(13)
    x = store(rng.standard_normal((2, 6, 8)), "bf16")
    w = store(rng.standard_normal(8), "bf16")
    img = rng.standard_normal((1, 2, 5, 5)).astype(F32)
    kern = rng.standard_normal((3, 2, 2, 2)).astype(F32)
    return [
        (lambda x: op.softmax(x, axis=1), (x,)),
        (lambda x, w: op.layernorm_safe(x, w, w, eps=1e-3), (x, w)),
        (lambda x, w: op.rmsnorm_safe(x, w), (x, w)),
        (lambda x: op.rmsnorm_safe(x), (x,)),
        (lambda x: op.flash_attention(x, x, x, causal=True, block_k=4, scale=0.25), (x,)),
        (lambda a, b: op.conv2d(a, b, stride=2, padding=(1, 0), dilation=(1, 2)), (img, kern)),
    ]


@pytest.mark.parametrize("index", range(6))
def test_eager_equals_jit_and_the_module_round_trips(index):
    fn, args = _programs()[index]
    eager = fn(*args)
    jitted = tr.jit(fn)
    assert np.array_equal(bits(jitted(*args)), bits(eager))
    m = jitted.trace(*args)
    text = str(m)
    assert str(parse_module(text)) == text
    (out,) = run_function(parse_module(text).body.first_op, *[np.asarray(a) for a in args])
    assert np.array_equal(bits(out), bits(eager))


def test_costs():
    from tessera_ref.ops.primitive import Call
    fa = primitive("flash_attention")
    tq, tk, tv = TensorType((2, 3, 10, 16), "bf16"), TensorType((2, 3, 40, 16), "bf16"), TensorType((2, 3, 40, 8), "bf16")
    attrs = fa.check_attrs({})
    call = Call(fa, attrs, (tq, tk, tv), fa.infer_types(attrs, (tq, tk, tv)))
    cost = fa.cost(call)
    assert cost.flops == 6 * (2 * 10 * 40 * 16 + 2 * 10 * 40 * 8 + 5 * 10 * 40)
    assert cost.bytes == 2 * (6 * 10 * 16 + 6 * 40 * 16 + 6 * 40 * 8 + 6 * 10 * 8)
    cv = primitive("conv2d")
    tx, tw = TensorType((2, 3, 9, 9), "f32"), TensorType((4, 3, 3, 3), "f32")
    attrs = cv.check_attrs({"padding": 1})
    call = Call(cv, attrs, (tx, tw), cv.infer_types(attrs, (tx, tw)))
    assert cv.cost(call).flops == 2 * 2 * 4 * 9 * 9 * 3 * 3 * 3
