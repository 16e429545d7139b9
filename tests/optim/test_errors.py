"""Mistakes are OptimErrors naming the user's line, the values or paths and the fix
(OPTIM-ERR-1 hyperparameters, OPTIM-ERR-2 trees, OPTIM-CHAIN-1)."""
import numpy as np
import pytest

from tessera_conformance.cases.optim import _reference as ref
from tessera_ref import asarray, optim
from tessera_ref.errors import OptimError, TesseraError


def raises(match):
    return pytest.raises(OptimError, match=match)


@pytest.mark.parametrize("make,match", [
    (lambda: optim.adamw(-1e-3), r"lr=-0.001 is not a finite number ≥ 0"),
    (lambda: optim.adamw(1e-3, b1=1.0), r"b1=1.0 is not a finite number in \[0, 1\)"),
    (lambda: optim.adamw(1e-3, b2=-0.1), r"b2=-0.1"),
    (lambda: optim.adamw(1e-3, eps=float("nan")), r"eps=nan"),
    (lambda: optim.adamw(1e-3, weight_decay=True), r"weight_decay=True"),
    (lambda: optim.adamw("0.1"), r"lr='0.1'"),
    (lambda: optim.sgd(0.1, momentum=1.0), r"momentum=1.0"),
    (lambda: optim.sgd(0.1, nesterov=True), r"nesterov=True needs .* momentum > 0"),
    (lambda: optim.clip_by_global_norm(0.0), r"max_norm=0.0 is not a finite number > 0"),
    (lambda: optim.warmup_cosine(0.1, 10, 10), r"total_steps=10 must exceed warmup_steps=10"),
    (lambda: optim.linear_warmup(0.1, 2.5), r"warmup_steps=2.5 is not a whole number"),
    (lambda: optim.chain(optim.adamw(0.1), optim.clip_by_global_norm(1.0)), r"transforms and then one optimizer"),
])
def test_bad_hyperparameters(make, match):
    with raises(match) as info:
        make()
    assert "test_errors.py:" in str(info.value) and "Fix:" in str(info.value)


def test_mismatched_trees_name_the_first_path():
    params, grads = ref.problem()
    opt = optim.adamw(1e-3)
    state = opt.init(params)
    g = grads[0]
    with raises(r"grads\['b'\] is missing but params\['b'\] is a tensor") as info:
        opt.update({k: v for k, v in g.items() if k != "b"}, state, params)
    assert "test_errors.py:" in str(info.value)
    with raises(r"grads\['W2'\] is tensor<8x6xf32> but params\['W2'\] is tensor<6x8xf32>"):
        opt.update({**g, "W2": g["W2"].T.copy()}, state, params)
    with raises(r"grads\['W1'\] is tensor<8x6xf64> but params\['W1'\] is tensor<8x6xf32>"):
        opt.update({**g, "W1": g["W1"].astype(np.float64)}, state, params)
    with raises(r"grads\[1\] is missing but params\[1\] is a tensor"):
        opt2 = optim.sgd(0.1)
        opt2.update([g["b"]], opt2.init([params["b"], params["b"]]), [params["b"], params["b"]])
    with raises(r"state.mu\['W1'\] is tensor<6x8xf32>"):
        opt.update(g, state._replace(mu={**state.mu, "W1": np.zeros((6, 8), np.float32)}), params)
    with raises(r"state is a SGDState, not the AdamWState that adamw.init returns"):
        opt.update(g, optim.sgd(0.1).init(params), params)
    with raises(r"chain.update: state is not the tuple of 2 states"):
        optim.chain(optim.clip_by_global_norm(1.0), opt).update(g, state, params)


@pytest.mark.parametrize("leaf,kind", [(asarray([1, 2], dtype="int8"), "tensor<2xint8>"), (np.arange(4), "tensor<4xindex>"),
                                       (np.ones(4, bool), "tensor<4xi1>"), (asarray([1.0], dtype="e8m0"), "tensor<1xe8m0>"),
                                       (None, "None")])
def test_non_float_parameters(leaf, kind):
    with raises(rf"params\['n'\] is {kind}") as info:
        optim.sgd(0.1).init({"w": np.ones(3, np.float32), "n": leaf})
    assert isinstance(info.value, TesseraError) and "test_errors.py:" in str(info.value)
