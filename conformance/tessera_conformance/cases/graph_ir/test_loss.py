"""GRAPH-LOGSOFTMAX-1, GRAPH-CROSSENTROPY-1, GRAPH-STOPGRAD-1 and their derivatives
(AD-LOGSOFTMAX-1, AD-CROSSENTROPY-1, AD-STOPGRAD-1): bits against the step-by-step reference
in the accumulation format; derivatives against PyTorch within a tolerance."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import grad, op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_conformance import assert_close, clause, eager, run

from . import _reference as R
from ._cases import check, normal_values as _data
from ._formats import round_values


@clause("GRAPH-LOGSOFTMAX-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_log_softmax_steps(backend, fmt):
    x = _data((5, 70), fmt, 11)
    x[1, ::4] = -np.inf
    check(backend, op.log_softmax, (round_values(x, fmt),), round_values(R.log_softmax("f32", x, -1), fmt), what=fmt)
    y = _data((40, 3), fmt, 12)
    check(backend, lambda v: op.log_softmax(v, axis=0), (round_values(y, fmt),),
          round_values(R.log_softmax("f32", y, 0), fmt))


@clause("GRAPH-CROSSENTROPY-1")
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_cross_entropy_steps(backend, fmt, reduction):
    x = _data((3, 4, 50), fmt, 13)
    labels = np.random.default_rng(14).integers(0, 50, (3, 4)).astype(np.int32)
    want = round_values(R.cross_entropy("f32", x, labels, reduction), fmt)
    check(backend, lambda v, t: op.cross_entropy(v, t, reduction=reduction), (round_values(x, fmt), labels), want)


def _lse64(x):
    x = x.astype(np.float64)
    m = x.max(-1)
    return m + np.log(np.exp(x - m[:, None]).sum(-1))


@clause("GRAPH-CROSSENTROPY-1")
def test_cross_entropy_matches_torch_and_refuses_bad_labels(backend):
    x = _data((8, 33), "f32", 15).astype(np.float32)
    labels = np.random.default_rng(16).integers(0, 33, 8)
    got = run(backend, op.cross_entropy, x, labels)
    want = np.mean(_lse64(x) - x.astype(np.float64)[np.arange(8), labels])  # torch's definition, in f64
    assert_close(got, want, rel=1e-6)
    with pytest.raises(OpError, match="label 33 is out of range for 33 classes"):
        run(backend, op.cross_entropy, x, np.where(labels == labels[0], 33, labels))
    with pytest.raises(ShapeError):
        run(backend, op.cross_entropy, x, labels[:4])
    with pytest.raises(DTypeError):
        run(backend, op.cross_entropy, x, labels.astype(np.float32))


@clause("AD-LOGSOFTMAX-1", "AD-CROSSENTROPY-1")
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_derivatives_match_torch(backend, reduction):
    x = _data((6, 17), "f32", 17).astype(np.float32)
    labels = np.random.default_rng(18).integers(0, 17, 6).astype(np.int32)
    got = eager(backend, lambda v: grad(lambda a: op.cross_entropy(a, labels, reduction=reduction))(tr.asarray(v)), x)
    p = np.exp(x.astype(np.float64) - _lse64(x)[:, None])  # softmax in f64
    want = (p - np.eye(17)[labels]) / (6 if reduction == "mean" else 1)
    assert_close(got, want, rel=1e-6)
    w = _data((6, 17), "f32", 19).astype(np.float32)
    got = eager(backend, lambda v: grad(lambda a: op.sum(op.log_softmax(a) * w))(tr.asarray(v)), x)
    assert_close(got, w - p * w.astype(np.float64).sum(-1, keepdims=True), rel=1e-6)


@clause("GRAPH-STOPGRAD-1", "AD-STOPGRAD-1")
def test_stop_gradient_is_the_identity_with_zero_derivative(backend):
    x = _data((3, 5), "f32", 20).astype(np.float32)
    x[0, 0] = -0.0
    check(backend, op.stop_gradient, (x,), x)
    g = eager(backend, lambda v: grad(lambda a: op.sum(a * op.stop_gradient(a)))(tr.asarray(v)), x)
    assert np.asarray(g).tobytes() == x.tobytes()  # d/da of a·c with c = a held constant is c
