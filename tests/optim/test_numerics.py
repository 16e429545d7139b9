"""The optimizers' bits (OPTIM-ADAMW-1, OPTIM-SGD-1, OPTIM-SCHED-1/2, OPTIM-CLIP-1,
OPTIM-CHAIN-1): equal to an independent NumPy reference doing the same IEEE operations in
the same order over several steps, eagerly and under jit; close to PyTorch's optimizers."""
import numpy as np
import pytest

from tessera_conformance.cases.optim import _reference as ref
from tessera_conformance import assert_bits
from tessera_ref import jit, optim


def run(opt, params, grads_seq, *, traced=False):
    step = jit(opt.update) if traced else opt.update
    state = opt.init(params)
    for grads in grads_seq:
        params, state = step(grads, state, params)
    return params, state


def assert_tree_bits(got: dict, want: dict, what: str):
    assert sorted(got) == sorted(want)
    for k in want:
        assert_bits(np.asarray(got[k]), want[k], f"{what} {k}")


SCHEDULES = {"constant": (3e-3, lambda s: 3e-3),
             "cosine": (optim.warmup_cosine(0.05, 2, 5, end=1e-3), lambda s: ref.warmup_cosine(s, 0.05, 2, 5, 1e-3))}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "jit"])
def test_adamw_is_the_reference_bit_for_bit(schedule, traced):
    lr, lr_ref = SCHEDULES[schedule]
    params, grads = ref.problem(steps=6)
    got, state = run(optim.adamw(lr, b1=0.8, weight_decay=0.1), params, grads, traced=traced)
    assert_tree_bits(got, ref.adamw(params, grads, lr_ref, b1=0.8, wd=0.1), f"adamw {schedule}")
    assert float(np.asarray(state.count)) == 6.0 and state.mu["W1"].type == got["W1"].type


@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_sgd_is_the_reference_bit_for_bit(momentum, nesterov):
    params, grads = ref.problem(seed=1)
    lr = optim.linear_warmup(0.1, 3, init=0.01)
    for traced in (False, True):
        got, state = run(optim.sgd(lr, momentum=momentum, nesterov=nesterov), params, grads, traced=traced)
        want = ref.sgd(params, grads, lambda s: (min(s, 3.0) / 3.0) * (0.1 - 0.01) + 0.01, momentum, nesterov)
        assert_tree_bits(got, want, f"sgd {momentum} {nesterov}")
        assert state.momentum == () if not momentum else sorted(state.momentum) == sorted(params)


def test_a_planted_change_of_order_is_caught():
    """The comparison bites: the reference with m written as PyTorch's lerp differs in its bits."""
    params, grads = ref.problem()
    got, _ = run(optim.adamw(1e-2), params, grads)
    assert_tree_bits(got, ref.adamw(params, grads, lambda s: 1e-2), "adamw")
    with pytest.raises(AssertionError, match="differ in their bits"):
        assert_tree_bits(got, ref.adamw(params, grads, lambda s: 1e-2, lerp=True), "lerp")


def test_schedules_are_the_reference():
    cosine = optim.warmup_cosine(0.5, 3, 10, end=0.01, init=0.05)
    warm = optim.linear_warmup(1.0, 4)
    for s in range(13):
        assert float(np.asarray(cosine(s))) == ref.warmup_cosine(float(s), 0.5, 3, 10, 0.01, 0.05), s
        assert float(np.asarray(warm(s))) == min(s, 4) / 4, s
    assert float(np.asarray(cosine(3))) == 0.5 and float(np.asarray(cosine(10))) == 0.01
    assert float(np.asarray(optim.constant(0.25)(7))) == 0.25
    assert float(np.asarray(optim.linear_warmup(0.3, 0)(0))) == 0.3


def test_a_jitted_update_is_traced_once_for_every_step():
    params, grads = ref.problem(steps=5)
    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(optim.warmup_cosine(1e-2, 2, 5)))
    step = jit(opt.update)
    state = opt.init(params)
    for g in grads:
        params, state = step(g, state, params)
    assert len(step.cache) == 1 and isinstance(state[1], optim.AdamWState)


def test_global_norm_and_clipping_are_the_fraction_reference():
    params, grads = ref.problem(seed=2)
    g = grads[0]
    norm = float(np.asarray(optim.global_norm(g)))
    assert norm == ref.global_norm([g[k] for k in sorted(g)])
    clip = optim.clip_by_global_norm(norm / 3)
    out, state = clip.update(g, clip.init(params))
    assert state == ()
    assert_tree_bits(out, ref.clip(g, norm / 3), "clipped")
    same, _ = optim.clip_by_global_norm(norm * 2).update(g, ())
    assert_tree_bits(same, g, "not clipped: the gradients themselves")


def test_global_norm_does_not_lose_small_leaves():
    """Each leaf's sum is exact: 1e-8² terms next to a 1e4² term still count (f32 sums lose them)."""
    tree = [np.full(4096, 1e-8, np.float32), np.array([1e4], np.float32), np.full(4096, 3e-4, np.float32)]
    assert float(np.asarray(optim.global_norm(tree))) == ref.global_norm(tree)


def test_chain_clips_then_steps():
    params, grads = ref.problem(seed=3, steps=3)
    opt = optim.chain(optim.clip_by_global_norm(0.5), optim.sgd(0.1, momentum=0.5))
    got, state = run(opt, params, grads)
    want = ref.sgd(params, [ref.clip(g, 0.5) for g in grads], lambda s: 0.1, 0.5)
    assert_tree_bits(got, want, "chain")
    assert state[0] == () and isinstance(state[1], optim.SGDState)


def _torch_run(make, params, grads_seq):
    import torch as th
    ts = {k: th.nn.Parameter(th.tensor(v)) for k, v in params.items()}
    opt = make(list(ts.values()))
    for grads in grads_seq:
        for k, p in ts.items():
            p.grad = th.tensor(grads[k])
        opt.step()
    return {k: p.detach().numpy() for k, p in ts.items()}


def _close(got, want, rel):
    for k in want:
        g, w = np.asarray(got[k], np.float64), want[k].astype(np.float64)
        assert np.max(np.abs(g - w)) <= rel * np.max(np.abs(w)), (k, np.max(np.abs(g - w)))


def test_agrees_with_torch_adamw_and_sgd():
    th = pytest.importorskip("torch")
    th.set_num_threads(1)
    params, grads = ref.problem(seed=4, steps=6)
    got, _ = run(optim.adamw(1e-2, b1=0.9, b2=0.99, eps=1e-6, weight_decay=0.05), params, grads)
    want = _torch_run(lambda ps: th.optim.AdamW(ps, lr=1e-2, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.05),
                      params, grads)
    _close(got, want, 1e-6)
    for momentum, nesterov in [(0.0, False), (0.9, True)]:
        got, _ = run(optim.sgd(0.05, momentum=momentum, nesterov=nesterov), params, grads)
        want = _torch_run(lambda ps: th.optim.SGD(ps, lr=0.05, momentum=momentum, nesterov=nesterov), params, grads)
        _close(got, want, 1e-6)
