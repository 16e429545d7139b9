"""The conventions the adjoint rules state (docs/spec/_autodiff_rules.md), checked against
hand-derived values and independent float64 NumPy references, and the cotangent types of
the rules on a narrow policy."""
import numpy as np
import pytest

from tessera_ref import op
from tessera_ref.numerics import as_policy
from tessera_ref.ops import PRIMITIVES, asarray
from tessera_ref.ops.adjoint import accum_policy
from tessera_ref.ops.typecheck import SEED_ATTR

from adjoint_cases import CASES, call, full_attrs, random_like, rng


def vjp(name, operands, cts, **given):
    operands = [asarray(x) for x in operands]
    attrs = full_attrs(name, operands, given)
    results = call(name, operands, attrs)
    return PRIMITIVES[name].vjp(attrs, tuple(operands), results, tuple(asarray(c) for c in cts))


def test_max_sends_the_gradient_to_the_first_maximum_in_row_major_order():
    """AD-MAX-1: ties go to the first of the reduced axes flattened; a NaN takes it."""
    x = np.array([[[1.0, 7.0], [7.0, 0.0]], [[2.0, 2.0], [np.nan, 2.0]]])  # [2, 2, 2]
    (bar,) = vjp("max", [x], [np.array([10.0, 20.0])], axis=(1, 2))
    expected = np.zeros_like(x)
    expected[0, 0, 1], expected[1, 1, 0] = 10.0, 20.0
    np.testing.assert_array_equal(np.asarray(bar), expected)
    (bar,) = vjp("min", [np.array([[3.0, -0.0, 0.0, -0.0]])], [np.array([5.0])], axis=1)
    np.testing.assert_array_equal(np.asarray(bar), [[0.0, 5.0, 0.0, 0.0]])  # −0 < +0, first −0


def test_max_over_a_middle_axis_keeps_the_other_axes_in_place():
    x = rng(1).standard_normal((3, 4, 2))
    (bar,) = vjp("max", [x], [np.ones((3, 1, 2))], axis=1, keepdims=True)
    np.testing.assert_array_equal(np.asarray(bar), (x == x.max(axis=1, keepdims=True)).astype(float))


def test_dropout_backward_replays_the_forward_mask():
    """AD-DROPOUT-1: the cotangent is zero exactly where forward dropped, scaled like forward."""
    x = np.full((64,), 3.0)
    y = np.asarray(op.dropout(x, 0.25, seed=11, stream=3))
    (bar,) = vjp("dropout", [x], [np.full((64,), 3.0)], rate=0.25, seed=11, stream=3)
    np.testing.assert_array_equal(np.asarray(bar), y)
    assert 0 < np.count_nonzero(y == 0) < 64


def test_fft_cotangents_match_numpy_adjoints():
    """AD-FFT-1: fft's adjoint is n·ifft (no factor of its own), ifft's is fft/n; a real
    operand gets the real part. Reference: NumPy's float64 FFT."""
    g = rng(2).standard_normal((3, 8)) + 1j * rng(3).standard_normal((3, 8))
    z = rng(4).standard_normal((3, 8)) + 0j
    (bar,) = vjp("fft", [z.astype(np.complex64)], [g.astype(np.complex64)])
    np.testing.assert_allclose(np.asarray(bar), 8 * np.fft.ifft(g.astype(np.complex64)), rtol=0, atol=2e-5 * 8)
    (bar,) = vjp("ifft", [z.astype(np.complex64)], [g.astype(np.complex64)])
    np.testing.assert_allclose(np.asarray(bar), np.fft.fft(g.astype(np.complex64)) / 8, rtol=0, atol=2e-5)
    (bar,) = vjp("fft", [z.real.astype(np.float32)], [g.astype(np.complex64)])
    assert np.asarray(bar).dtype == np.float32
    np.testing.assert_allclose(np.asarray(bar), (8 * np.fft.ifft(g.astype(np.complex64))).real, atol=2e-5 * 8)


def test_cholesky_gradient_lives_on_the_lower_triangle():
    """AD-CHOLESKY-1: the upper triangle of Ā is +0, and for a symmetric perturbation E the
    directional derivative is ⟨Ā, E⟩ (the off-diagonal entries count for both positions)."""
    a = rng(5).standard_normal((4, 4))
    spd = a @ a.T + 4 * np.eye(4)
    g = np.tril(rng(6).standard_normal((4, 4)))
    (bar,) = vjp("cholesky", [spd], [g])
    bar = np.asarray(bar)
    assert not np.triu(bar, 1).any()
    e = rng(7).standard_normal((4, 4))
    e = e + e.T
    h = 1e-6
    fd = (np.linalg.cholesky(spd + h * e) - np.linalg.cholesky(spd - h * e)) / (2 * h)  # independent reference
    np.testing.assert_allclose(np.sum(bar * np.tril(e)), np.sum(g * fd), rtol=1e-7)


def test_svd_gradient_of_the_singular_values_is_u_vt():
    """AD-SVD-1 on the singular values alone: ∂(Σ c_i s_i)/∂A = U·diag(c)·Vᵀ."""
    a = rng(8).standard_normal((5, 3))
    c = np.array([1.0, -2.0, 0.5])
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    (bar,) = vjp("svd", [a], [np.zeros((5, 3)), c, np.zeros((3, 3))])
    np.testing.assert_allclose(np.asarray(bar), u @ np.diag(c) @ vt, atol=1e-12)


def test_layernorm_gradient_matches_a_float64_reference():
    """AD-LAYERNORMSAFE-1 against the textbook formula written in NumPy."""
    x, w, b = rng(9).standard_normal((4, 6)), rng(10).standard_normal(6), rng(11).standard_normal(6)
    g = rng(12).standard_normal((4, 6))
    eps = 0.3
    bars = [np.asarray(t) for t in vjp("layernorm_safe", [x, w, b], [g], eps=eps)]
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    xh = (x - mu) / np.sqrt(var + eps)
    gh = g * w
    ref = (gh - gh.mean(-1, keepdims=True) - xh * (gh * xh).mean(-1, keepdims=True)) / np.sqrt(var + eps)
    np.testing.assert_allclose(bars[0], ref, atol=1e-12)
    np.testing.assert_allclose(bars[1], (g * xh).sum(0), atol=1e-12)
    np.testing.assert_allclose(bars[2], g.sum(0), atol=1e-12)


def test_flash_attention_gradient_matches_a_float64_reference():
    """AD-FLASHATTENTION-1 against dense attention differentiated by hand in NumPy (causal)."""
    q, k, v = (rng(s).standard_normal(shape) for s, shape in ((13, (3, 4)), (14, (5, 4)), (15, (5, 2))))
    g = rng(16).standard_normal((3, 2))
    bars = [np.asarray(t) for t in vjp("flash_attention", [q, k, v], [g], causal=True, block_k=2)]
    s = q @ k.T / 2.0
    s = np.where(np.arange(5)[None, :] <= np.arange(3)[:, None] + 2, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g @ v.T
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / 2.0
    for bar, ref in zip(bars, (ds @ k, ds.T @ q, p.T @ g)):
        np.testing.assert_allclose(bar, ref, atol=1e-12)


NARROW = [pytest.param(n, i, id=f"{n}-{i}") for n in sorted(CASES) for i, c in enumerate(CASES[n])
          if c.precision == "f64" and callable(PRIMITIVES[n].vjp)]


STOCHASTIC = as_policy("bf16").with_(rounding="stochastic")
IN_ACCUM = {("flash_attention_bwd", 4)}


@pytest.mark.parametrize("policy", [as_policy("bf16"), STOCHASTIC], ids=["bf16", "bf16-stochastic"])
@pytest.mark.parametrize("name, index", NARROW)
def test_cotangents_keep_a_narrow_policy(name, index, policy):
    """On bf16 operands the cotangents and tangents are bf16 tensors of the operands' and
    results' types; with stochastic rounding the rules run on keys derived from the call's seed."""
    c, prim = CASES[name][index], PRIMITIVES[name]
    seed = {"seed": 5} if prim.attrs.get("seed") is SEED_ATTR["seed"] else {}

    def narrow(x, wide=False):
        return asarray(np.asarray(x, dtype=np.float64), policy=accum_policy(policy) if wide else policy, seed=1) \
            if np.asarray(x).dtype.kind == "f" else asarray(x)
    # operands an op takes in the accumulation format (flash attention's row log-sum-exp)
    operands = [narrow(x, (name, i) in IN_ACCUM) for i, x in enumerate(c.operands)]
    attrs = full_attrs(name, operands, {**seed, **c.attrs})
    results = call(name, operands, attrs)
    g = rng(17)
    cts = tuple(narrow(random_like(np.asarray(r, dtype=np.float64), g), r.type.policy == accum_policy(policy))
                for r in results)
    for x, bar, d in zip(operands, prim.vjp(attrs, tuple(operands), results, cts), c.diff):
        assert (bar is None) == (not d)
        if d:
            assert bar.type == x.type
    tangents = tuple(narrow(random_like(np.asarray(x, dtype=np.float64), g)) if d else None
                     for x, d in zip(operands, c.diff))
    for r, t in zip(results, prim.jvp(attrs, tuple(operands), tangents, results)):
        assert t is None or t.type == r.type
