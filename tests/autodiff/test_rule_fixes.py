"""Regression tests of the adjoint rules' rounding, keys and edge cases: scalars of a backward
pass enter in the accumulation format (AD-MEAN-1, AD-LAYERNORMSAFE-1, AD-RMSNORMSAFE-1,
AD-FLASHATTENTION-1), every rounding op of a derivative has a stochastic-rounding key of its
own (AD-REV-2), an unregistered op on the differentiated path is an error (AD-REV-1), max/min
over an empty axis (AD-MAX-1), and the causal mask's size in the IR. References are float64
NumPy values rounded by ml_dtypes, or hand-derived."""
import re

import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op
from tessera_ref.errors import AutodiffError
from tessera_ref.ir import OPS, register_op
from tessera_ref.numerics import as_policy
from tessera_ref.numerics.rng import RNGKey
from tessera_ref.ops.values import Tracer, current_trace

BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
STOCHASTIC = as_policy("bf16").with_(rounding="stochastic")


def _f64(a):
    return np.asarray(a).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# scalars in the accumulation format

@pytest.mark.parametrize("fmt, dtype, length", [("bf16", BF16, 257), ("fp8_e4m3", FP8, 17), ("f32", np.float32, 257)])
def test_mean_divides_by_the_exact_count_in_accum(fmt, dtype, length):
    """AD-MEAN-1: ``ḡ ⊘ L`` is one f32 division of the exact L, rounded once into storage — not a
    division by L rounded into storage (bf16 holds 256 and 258, fp8 16 and 18, not L)."""
    g = tr.grad(lambda x: op.mean(x))(tr.asarray(np.ones(length), policy=fmt))
    want = np.float32(1.0 / length).astype(dtype)  # the float64 quotient rounded into f32, then storage
    assert np.array_equal(np.asarray(g).view(np.uint8), np.full(length, want).view(np.uint8))


def test_rmsnorm_of_zero_rows_in_fp8_has_the_eps_gradient():
    """AD-RMSNORMSAFE-1: eps = 1e-4 rounds to 0 in fp8 but not in the accumulation format; of a
    zero row ``x̄ = w ⊗ ḡ / √eps`` (hand-derived: x̂ = 0), finite like the forward. Bound: one
    fp8 rounding (2⁻⁴ relative) of a value computed in f32."""
    w = np.array([0.25, -0.125, 0.0625, 0.375])  # exact in fp8
    g = tr.grad(lambda x: op.sum(op.rmsnorm_safe(x, tr.asarray(w, policy="fp8_e4m3"), eps=1e-4)))(
        tr.asarray(np.zeros((2, 4)), policy="fp8_e4m3"))
    ref = np.broadcast_to(w / np.sqrt(1e-4), (2, 4))
    assert np.all(np.abs(_f64(g) - ref) <= 2.0 ** -4 * np.abs(ref))


@pytest.mark.parametrize("fmt, dtype, bound", [("bf16", BF16, 2.0 ** -8), ("fp8_e4m3", FP8, 2.0 ** -4)])
def test_layernorm_of_constant_rows_is_finite_and_matches_float64(fmt, dtype, bound):
    """AD-LAYERNORMSAFE-1 on constant rows (x̂ = 0, r = 1/√eps): ``x̄ = (h ⊖ mean(h)) / √eps``
    with ``h = ḡ ⊗ w``, ``w̄ = Σ ḡ ⊗ x̂ = 0``. The default eps = 1e-5 rounds to 0 in fp8; the
    forward is finite, so must the gradient be. Bound: one rounding into storage (the unit
    roundoff ``bound``) of a value computed in f32, plus 2⁻²⁰ of the largest magnitude."""
    w = np.array([0.0625, 0.125, -0.25, 0.1875]).astype(dtype).astype(np.float64)
    x = tr.asarray(np.full((3, 4), 1.5), policy=fmt)
    wt = tr.asarray(w, policy=fmt)
    assert np.all(np.isfinite(_f64(op.layernorm_safe(x, wt))))
    gx, gw = tr.grad(lambda x, w: op.sum(op.layernorm_safe(x, w)), argnums=(0, 1))(x, wt)
    ref = np.broadcast_to((w - w.mean()) / np.sqrt(1e-5), (3, 4))
    err = np.abs(_f64(gx) - ref)
    assert np.all(err <= bound * np.abs(ref) + 2.0 ** -20 * np.max(np.abs(ref)))
    assert np.array_equal(_f64(gw), np.zeros(4))


def _attention_reference(q, k, v, g, scale, causal):
    """Dense attention differentiated by hand in float64."""
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        sq, sk = q.shape[-2], k.shape[-2]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    return ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ g


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_attention_gradients_round_once_with_the_exact_scale(causal):
    """AD-FLASHATTENTION-1: scale 0.7 enters in f32 (not as bf16 0.69921875) and the cotangents
    are computed in f32 and rounded once into bf16: within the bf16 unit roundoff 2⁻⁸ of the
    float64 reference on the bf16 inputs, plus 2⁻²⁰ of the largest magnitude — plus, for q̄ and
    k̄, the bf16 rounding of the output o that FlashAttention-2's row term Δ = Σ ḡ ⊗ o reads
    (|δΔ| ≤ Σ |ḡ| 2⁻⁹|o|, carried by scale ⊗ (P ⊗ δΔ)·|k| and its transpose·|q|)."""
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal(s).astype(BF16).astype(np.float64) for s in ((4, 96), (5, 96), (5, 8), (4, 8)))
    out, pullback = tr.vjp(lambda q, k, v: op.flash_attention(q, k, v, scale=0.7, causal=causal),
                           *(tr.asarray(t, policy="bf16") for t in (q, k, v)))
    s = q @ k.T * 0.7
    if causal:
        s = np.where(np.arange(5)[None, :] <= np.arange(4)[:, None] + 1, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    pd = p * (2.0 ** -9 * np.abs(g) * np.abs(_f64(out))).sum(-1, keepdims=True)
    carried = (0.7 * pd @ np.abs(k), 0.7 * pd.T @ np.abs(q), 0.0)
    for got, ref, extra in zip(pullback(tr.asarray(g, policy="bf16")), _attention_reference(q, k, v, g, 0.7, causal),
                               carried):
        assert np.all(np.abs(_f64(got) - ref) <= 2.0 ** -8 * np.abs(ref) + 1.01 * extra + 2.0 ** -20 * np.max(np.abs(ref)))


def test_bf16_softmax_gradient_rounds_once():
    """AD-SOFTMAX-1: ``y ⊗ (ḡ ⊖ Σ ḡ ⊗ y)`` in f32, rounded once into bf16: within the unit
    roundoff 2⁻⁸ of the float64 value on the bf16 operands, plus 2⁻²⁰ of the largest."""
    rng = np.random.default_rng(1)
    x, g = (rng.standard_normal((6, 40)).astype(BF16) for _ in range(2))
    y = op.softmax(tr.asarray(x, policy="bf16"))
    _, pullback = tr.vjp(op.softmax, tr.asarray(x, policy="bf16"))
    (bar,) = pullback(tr.asarray(g, policy="bf16"))
    yf, gf = _f64(y), _f64(g)
    ref = yf * (gf - (gf * yf).sum(-1, keepdims=True))
    assert np.all(np.abs(_f64(bar) - ref) <= 2.0 ** -8 * np.abs(ref) + 2.0 ** -20 * np.max(np.abs(ref)))


def test_scaled_policies_compute_their_rules_in_their_own_policy():
    """``cast`` does not convert into a block-scaled policy, so on one the rules compute in the
    policy itself (the documented exception): the gradients have the operand's type."""
    policy = as_policy("fp8_e4m3").with_(scaling="mx")
    x = tr.asarray(np.linspace(-1, 1, 64).reshape(2, 32), policy=policy)
    for f in (lambda x: op.mean(x), lambda x: op.sum(op.layernorm_safe(x) * x)):
        g = tr.grad(f)(x)
        assert g.type == x.type and np.all(np.isfinite(_f64(g)))


# ---------------------------------------------------------------------------------------------
# stochastic-rounding keys

def _seeds(text):
    return [int(s) for s in re.findall(r"seed = (\d+)", text)]


def _derivative_seed(seed, k):
    k0, k1 = RNGKey(seed).fold(k).words
    return int(k0) | int(k1) << 32


@pytest.mark.parametrize("mode", ["grad", "jvp"])
def test_derivative_ops_have_keys_of_their_own(mode):
    """AD-REV-2: no op of a derivative reuses its forward op's key, and no two share one; the
    k-th rounding op of a rule gets ``RNGKey(seed).fold(k)``, the cotangent sum ``fold(0)``."""
    x = tr.asarray(np.array([0.3, 1.7, -2.2, 0.45]), policy=STOCHASTIC, seed=1)

    def f(x):
        return op.sum(op.mul(op.tanh(x, seed=11), x, seed=12), seed=13)
    if mode == "grad":
        g = tr.grad(f)
        g(x)
    else:
        g = tr.jit(lambda x, t: tr.jvp(f, (x,), (t,))[1])
        g(x, x)
    seeds = _seeds(g.inspect_ir())
    assert 11 in seeds and all(seeds.count(s) <= 1 for s in (11, 12, 13))  # forward ops only (unused ones: DCE)
    assert len(set(seeds)) == len(seeds)
    assert _derivative_seed(12, 1) in seeds  # mul's rule: its first rounding op
    if mode == "grad":
        assert _derivative_seed(11, 0) in seeds  # x's second cotangent (from tanh, visited last) added


def test_a_backward_rounding_does_not_replay_the_forward_random_bits():
    """``y = x ⊗ w`` and, for ``ḡ = x``, ``x̄ = ḡ ⊗ w`` round the same product a·b (a = 1 + 2⁻⁷,
    b = 1.5 + 2⁻⁷: its fraction of a bf16 ulp is 1/2 + 2⁻⁷). With the forward's key reused,
    the two would round all 256 elements alike; with independent keys each element rounds alike
    with probability about 1/2. The results are the same on every run."""
    a, b = (tr.asarray(np.full(256, v), policy=STOCHASTIC, seed=0) for v in (1 + 2.0 ** -7, 1.5 + 2.0 ** -7))
    out, pullback = tr.vjp(lambda x: op.mul(x, b, seed=7), a)
    (bar,) = pullback(a)
    assert np.array_equal(np.asarray(pullback(a)[0]).view(np.uint16), np.asarray(bar).view(np.uint16))
    product = (1 + 2.0 ** -7) * (1.5 + 2.0 ** -7)
    assert set(_f64(out)) | set(_f64(bar)) <= {1.5 + 2.0 ** -6, 1.5 + 2.0 ** -6 + 2.0 ** -7} and product > 1.5
    assert 64 < np.count_nonzero(_f64(out) != _f64(bar)) < 192


# ---------------------------------------------------------------------------------------------
# unregistered ops, empty axes, the causal mask

def test_an_op_without_a_primitive_on_the_path_is_an_autodiff_error():
    """AD-REV-1: an op the registry has no primitive for, on the differentiated path, is an
    AutodiffError naming it — not a silent zero gradient."""
    name = "adtest.ident"
    register_op(name)
    try:
        def f(x):
            trace = current_trace()
            ident = trace.emit(name, [x.value], [x.type], {}, None)
            return op.sum(Tracer(ident.results[0], trace) * 2.0) + op.sum(x)
        with pytest.raises(AutodiffError, match=name):
            tr.grad(f)(np.array([1.0, 2.0]))
    finally:
        del OPS[name]


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_and_min_over_an_empty_axis_have_zero_derivatives(name):
    """AD-MAX-1 / AD-MIN-1: nothing is picked from an empty axis (the result is ∓inf)."""
    reduce = getattr(op, name)
    for shape, axis in (((0, 3), 0), ((2, 0), 1)):
        x = np.zeros(shape)
        g = tr.grad(lambda x: op.sum(reduce(x, axis=axis)))(x)
        assert np.asarray(g).shape == shape
        _, t = tr.jvp(lambda x: reduce(x, axis=axis), (x,), (np.ones(shape),))
        assert np.array_equal(np.asarray(t), np.zeros(np.asarray(reduce(x, axis=axis)).shape))


def test_the_causal_mask_of_a_long_attention_backward_is_small_in_the_ir():
    """AD-FLASHATTENTION-1: the mask is a comparison of an index column [Sq, 1] with a row
    [1, Sk], so the IR of the backward at L = 4096 (abstract tensors) stays small (an Sq×Sk
    constant printed 33 MB)."""
    mesh = dist.Mesh(("dp",), range(2), (2,))
    q, k, v = (dist.tensor((2, 4096, 64), dist.ShardSpec((0,), ("dp",)), mesh, dtype="bf16") for _ in range(3))
    g = tr.grad(lambda q: op.sum(op.flash_attention(q, k, v, causal=True)))
    assert g(q).is_abstract
    assert len(g.inspect_ir()) < 200_000
