"""Same-bits resume (CKPT-RESUME-1): plain SGD on DistTensor parameters (tensor-parallel over
tp, data split over dp, exact reductions so that the bits do not depend on the mesh), saved
at step k with its RNG key and restored on another mesh, continues with the same losses and
parameters, bit for bit, as the run that never stopped."""
from __future__ import annotations

import numpy as np

import tessera_ref as tr
from tessera_ref import checkpoint, dist, op
from tessera_ref.numerics import Policy
from tessera_ref.numerics.rng import RNGKey

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")
STEPS, SAVE_AT, LR = 4, 2, 0.05


def _data(mesh, step: int, key: RNGKey):
    """The step's batch: drawn from the key folded with the step (the same global bits on any mesh)."""
    seed = int(key.fold(step).words[0])
    x = dist.tensor((4, 6), S(("batch",), ("dp",)), mesh, dtype=EXACT, init="randn", seed=seed)
    y = dist.tensor((4, 6), S(("batch",), ("dp",)), mesh, dtype=EXACT, init="randn", seed=seed + 1)
    return x, y


def _loss(x, y):
    def loss(params):
        d = op.matmul(op.tanh(op.matmul(x, params["W1"])), params["W2"]) - y
        return op.mean(d * d)
    return loss


def _init(mesh):
    return {"W1": dist.tensor((6, 8), S(("col",), ("tp",)), mesh, dtype=EXACT, init="randn", seed=11),
            "W2": dist.tensor((8, 6), S(("row",), ("tp",)), mesh, dtype=EXACT, init="randn", seed=12)}


def _train(params, mesh, key, start: int, stop: int) -> tuple:
    losses = []
    for step in range(start, stop):
        x, y = _data(mesh, step, key)
        loss, grads = tr.value_and_grad(_loss(x, y))(params)
        params = {k: params[k] - LR * grads[k] for k in params}
        losses.append(np.asarray(loss.numpy() if isinstance(loss, dist.DistTensor) else loss).tobytes())
    return params, losses


def _bits(params) -> dict:
    return {k: v.numpy().tobytes() for k, v in params.items()}


def test_a_run_restored_on_another_mesh_continues_with_the_same_bits(tmp_path):
    key = RNGKey(2026)
    first = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    params, losses = _train(_init(first), first, key, 0, STEPS)  # the run that never stops

    resumed, head = _train(_init(first), first, key, 0, SAVE_AT)
    checkpoint.save(tmp_path / "ck", {"params": resumed, "key": key}, step=SAVE_AT)
    other = dist.Mesh(("dp", "tp"), range(4), (1, 4))
    like = {"params": {"W1": S(("col",), ("tp",)), "W2": S(("row",), ("tp",))}, "key": key}
    state = checkpoint.restore(tmp_path / "ck", like=like, mesh=other)
    assert state["params"]["W1"].mesh == other
    resumed, tail = _train(state["params"], other, state["key"], checkpoint.info(tmp_path / "ck").step, STEPS)
    assert head + tail == losses
    assert _bits(resumed) == _bits(params)
    assert len(set(losses)) == STEPS  # the loss changes every step: the comparison can fail
