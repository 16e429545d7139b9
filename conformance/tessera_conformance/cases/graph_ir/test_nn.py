"""GRAPH-SOFTMAX-1 … GRAPH-CONV2D-1: each op's formula in accum, one IEEE operation at a time,
NUM-RED-2 reductions and NUM-MATH exp/rsqrt, rounded once into storage."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, TesseraError
from tessera_conformance import clause, run

from . import _reference as R
from ._cases import check, normal_values as _data, operand, values
from ._formats import round_values


@clause("GRAPH-SOFTMAX-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_softmax_safe_formula(backend, fmt):
    """m = max, e = exp(x - m), s = lane sum, y = e / s; masked entries 0, bad rows NaN."""
    x = _data((6, 100), fmt, 1)
    x[1, ::3] = -np.inf
    x[2, :] = -np.inf
    x[3, 5] = np.nan
    x[4, 7] = np.inf
    xs = round_values(x, fmt)
    want = round_values(R.softmax("f32", x, -1), fmt)
    assert (values(want)[1, ::3] == 0).all() and np.isnan(values(want)[2:5]).all()
    check(backend, op.softmax, (xs,), want, what=fmt)
    y = _data((70, 3), fmt, 2)
    check(backend, lambda v: op.softmax(v, axis=0), (round_values(y, fmt),), round_values(R.softmax("f32", y, 0), fmt))


@clause("GRAPH-SOFTMAX-1", "GRAPH-LAYERNORMSAFE-1", "GRAPH-RMSNORMSAFE-1")
def test_nn_operands_share_one_policy(backend):
    """Operands of different policies are a DTypeError."""
    x = np.ones((2, 8), np.float32)
    w = tr.asarray(np.ones(8), dtype="bf16")
    with pytest.raises(DTypeError):
        run(backend, op.layernorm_safe, x, w)
    with pytest.raises(DTypeError):
        run(backend, op.rmsnorm_safe, x, w)
    with pytest.raises(DTypeError):
        run(backend, op.softmax, np.arange(8))


@clause("GRAPH-LAYERNORMSAFE-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_layernorm_two_pass(backend, fmt):
    """μ = mean, c = x ⊖ μ, v = mean(c ⊗ c), r = rsqrt(v ⊕ eps), y = c ⊗ r, then ⊗ weight, ⊕ bias."""
    x = _data((5, 77), fmt, 3) + 100.0 * (fmt == "f32")
    x = values(operand(x, fmt))
    w, b = _data(77, fmt, 4, 1.0), _data(77, fmt, 5, 1.0)
    xs, ws, bs = (round_values(v, fmt) for v in (x, w, b))
    check(backend, lambda a, c, d: (op.layernorm_safe(a, c, d), op.layernorm_safe(a), op.layernorm_safe(a, c, eps=0.1)),
          (xs, ws, bs), [round_values(R.layernorm("f32", x, w, b), fmt), round_values(R.layernorm("f32", x), fmt),
                         round_values(R.layernorm("f32", x, w, eps=0.1), fmt)], what=fmt)


@clause("GRAPH-LAYERNORMSAFE-1")
def test_layernorm_axis_bias_only_and_eps_zero(backend):
    """bias without weight uses ones; axis 0; eps = 0 on a constant row gives NaN (0 ⊗ inf)."""
    x = _data((40, 3), "f32", 6)
    b = _data(40, "f32", 7)
    want = np.moveaxis(R.layernorm("f32", np.moveaxis(x, 0, -1), None, b), -1, 0)
    check(backend, lambda a, c: op.layernorm_safe(a, bias=c, axis=0), (round_values(x, "f32"), round_values(b, "f32")),
          round_values(want, "f32"))
    const = np.full((2, 16), 3.0, np.float32)
    got = run(backend, lambda a: op.layernorm_safe(a, eps=0.0), const)
    assert np.isnan(got).all()


@clause("GRAPH-RMSNORMSAFE-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16", "fp8_e4m3"])
def test_rmsnorm(backend, fmt):
    """rsqrt(mean(x*x) + eps) * x (* weight) in accum: fp8 squares do not overflow."""
    x = _data((4, 50), fmt, 8, 150.0 if fmt == "fp8_e4m3" else 3.0)
    w = _data(50, fmt, 9, 1.0)
    xs, ws = round_values(x, fmt), round_values(w, fmt)
    check(backend, lambda a, c: (op.rmsnorm_safe(a), op.rmsnorm_safe(a, c, eps=1e-3)), (xs, ws),
          [round_values(R.rmsnorm("f32", x), fmt), round_values(R.rmsnorm("f32", x, w, eps=1e-3), fmt)], what=fmt)


FA = [dict(), dict(block_k=16), dict(block_k=8, causal=True), dict(block_k=32, scale=0.3, causal=True),
      dict(block_k=16, block_q=4), dict(block_k=7, causal=True)]


@clause("GRAPH-FLASHATTENTION-1")
@pytest.mark.parametrize("kw", FA, ids=[str(k) for k in FA])
def test_flash_attention_blocked_online_softmax(backend, kw):
    """The blocked online softmax with its causal mask, scale and block_k; block_q changes no bit."""
    q, k, v = _data((2, 8, 16), "f32", 10, 1.0), _data((2, 64, 16), "f32", 11, 1.0), _data((2, 64, 8), "f32", 12, 1.0)
    ref_kw = {n: kw[n] for n in ("block_k", "scale", "causal") if n in kw}
    want = round_values(R.flash_attention("f32", q, k, v, **ref_kw), "f32")
    check(backend, lambda a, b, c: op.flash_attention(a, b, c, **kw),
          tuple(round_values(t, "f32") for t in (q, k, v)), want)


@clause("GRAPH-FLASHATTENTION-1")
def test_flash_attention_block_k_is_part_of_the_definition(backend):
    """Different block_k give different bits (and each its own reference's)."""
    q, k, v = _data((12, 8), "f32", 13), _data((64, 8), "f32", 14), _data((64, 8), "f32", 15)
    args = tuple(round_values(t, "f32") for t in (q, k, v))
    wants = [round_values(R.flash_attention("f32", q, k, v, block_k=b), "f32") for b in (64, 8)]
    assert not np.array_equal(wants[0].view(np.uint32), wants[1].view(np.uint32))
    check(backend, lambda a, b, c: (op.flash_attention(a, b, c), op.flash_attention(a, b, c, block_k=8)), args, wants)


@clause("GRAPH-FLASHATTENTION-1")
def test_flash_attention_masked_rows_and_broadcast(backend):
    """Causal with Sq > Sk leaves the first Sq − Sk rows fully masked: NaN; batch axes broadcast."""
    q, k = _data((3, 1, 6, 4), "f32", 16, 1.0), _data((1, 2, 4, 4), "f32", 17, 1.0)
    v = _data((1, 2, 4, 5), "f32", 18, 1.0)
    want = round_values(R.flash_attention("f32", q, k, v, causal=True, block_k=2), "f32")
    assert want.shape == (3, 2, 6, 5) and np.isnan(values(want)[:, :, :2]).all()
    check(backend, lambda a, b, c: op.flash_attention(a, b, c, causal=True, block_k=2),
          tuple(round_values(t, "f32") for t in (q, k, v)), want)


@clause("GRAPH-FLASHATTENTION-1")
def test_flash_attention_without_keys_is_nan(backend):
    """Sk = 0: every row is fully masked, 0 ⊘ 0 = NaN."""
    got = run(backend, op.flash_attention, np.ones((4, 8), np.float32), np.ones((0, 8), np.float32),
              np.ones((0, 8), np.float32))
    assert got.shape == (4, 8) and np.isnan(got).all()


CONV = [dict(), dict(stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2)), dict(padding="same"),
        dict(padding=(1, 2), stride=2), dict(padding=1, dilation=2)]


@clause("GRAPH-CONV2D-1")
@pytest.mark.parametrize("kw", CONV, ids=[str(k) for k in CONV])
def test_conv2d_taps_in_row_major_order(backend, kw):
    """fma over taps (c, kh, kw) row-major from +0, padding as +0 taps; NHWC is NCHW permuted."""
    x = _data((2, 3, 7, 6), "f32", 19)
    w = _data((4, 3, 3, 2), "f32", 20)
    stride = kw.get("stride", 1)
    stride = (stride, stride) if isinstance(stride, int) else stride
    dil = kw.get("dilation", 1)
    dil = (dil, dil) if isinstance(dil, int) else dil
    pad = kw.get("padding", 0)
    if pad == "same":
        th, tw = dil[0] * 2, dil[1] * 1
        pad = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    elif isinstance(pad, int):
        pad = (pad,) * 4
    elif len(pad) == 2:
        pad = (pad[0], pad[0], pad[1], pad[1])
    want = round_values(R.conv2d("f32", x, w, stride, pad, dil), "f32")
    xs, ws = round_values(x, "f32"), round_values(w, "f32")
    check(backend, lambda a, b: op.conv2d(a, b, **kw), (xs, ws), want)
    check(backend, lambda a, b: op.conv2d(a, b, layout="NHWC", **kw), (np.ascontiguousarray(xs.transpose(0, 2, 3, 1)),
                                                                         ws), np.transpose(want, (0, 2, 3, 1)))


@clause("GRAPH-CONV2D-1")
def test_conv2d_padded_taps_meet_nonfinite_weights(backend):
    """Padded taps meet inf weights (NaN); groups != 1, bad padding/stride are errors."""
    x = np.ones((1, 1, 3, 3), np.float32)
    w = np.ones((1, 1, 3, 3), np.float32)
    w[0, 0, 0, 0] = np.inf
    want = round_values(R.conv2d("f32", x, w, (1, 1), (1, 1, 1, 1), (1, 1)), "f32")
    assert np.isnan(values(want)[0, 0, 0, 0]) and values(want)[0, 0, 1, 1] == np.inf
    check(backend, lambda a, b: op.conv2d(a, b, padding=1), (x, w), want)
    with pytest.raises(OpError):
        run(backend, lambda a, b: op.conv2d(a, b, groups=2), np.ones((1, 2, 3, 3), np.float32),
            np.ones((2, 1, 1, 1), np.float32))
    for kw in (dict(padding="same", stride=2), dict(padding=0, dilation=3)):   # "same" needs stride 1; OH < 1
        with pytest.raises(TesseraError):
            run(backend, lambda a, b: op.conv2d(a, b, **kw), x, w)
