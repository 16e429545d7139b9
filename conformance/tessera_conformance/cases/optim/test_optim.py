"""OPTIM-*: each optimizer update runs as one jitted program on the backend under test and
gives the bits of the case's independent NumPy reference (``_reference``) step after step;
schedules, the global norm and clipping likewise; mistakes are OptimErrors."""
import numpy as np
import pytest

from tessera_ref import asarray, dist, jit, optim
from tessera_ref.errors import BackendError, OptimError
from tessera_ref.frontend.pytree import flatten
from tessera_conformance import assert_bits, clause, run

from . import _reference as ref


def train(backend, opt, params, grads_seq):
    """``(params, state)`` after one jitted update per gradient on ``backend``."""
    state = opt.init(params)
    for grads in grads_seq:
        out = run(backend, lambda g, s, p: flatten(opt.update(g, s, p))[0], grads, state, params)
        params, state = flatten((params, state))[1].unflatten(asarray(x) for x in out)
    return params, state


def assert_tree(got: dict, want: dict, what: str):
    for k in sorted(want):
        assert_bits(np.asarray(got[k]), want[k], f"{what} {k}")


@clause("OPTIM-API-1", "OPTIM-ADAMW-1")
def test_adamw_steps(backend):
    params, grads = ref.problem(steps=3)
    got, state = train(backend, optim.adamw(1e-2, b1=0.8, weight_decay=0.1), params, grads)
    assert_tree(got, ref.adamw(params, grads, lambda s: 1e-2, b1=0.8, wd=0.1), "adamw")
    assert float(np.asarray(state.count)) == 3.0


@clause("OPTIM-SGD-1")
def test_sgd_steps(backend):
    params, grads = ref.problem(seed=1, steps=3)
    for momentum, nesterov in [(0.0, False), (0.9, False), (0.9, True)]:
        got, _ = train(backend, optim.sgd(0.1, momentum=momentum, nesterov=nesterov), params, grads)
        assert_tree(got, ref.sgd(params, grads, lambda s: 0.1, momentum, nesterov), f"sgd {momentum} {nesterov}")


@clause("OPTIM-SCHED-1")
def test_linear_warmup(backend):
    sched = optim.linear_warmup(0.3, 4, init=0.1)
    for s in range(7):
        got = run(backend, sched, asarray(s, dtype="f64"))  # a tensor, not a static scalar
        assert_bits(got, np.float64((min(s, 4.0) / 4.0) * (0.3 - 0.1) + 0.1), f"step {s}")


@clause("OPTIM-SCHED-2")
def test_warmup_cosine(backend):
    sched = optim.warmup_cosine(0.5, 2, 9, end=0.01)
    for s in range(11):
        assert_bits(run(backend, sched, asarray(s, dtype="f64")), np.float64(ref.warmup_cosine(s, 0.5, 2, 9, 0.01)), f"step {s}")


@clause("OPTIM-CLIP-1")
def test_global_norm_and_clipping(backend):
    _, grads = ref.problem(seed=2)
    g = grads[0]
    norm = ref.global_norm([g[k] for k in sorted(g)])
    assert_bits(run(backend, optim.global_norm, g), np.float64(norm), "global norm")
    clip = optim.clip_by_global_norm(norm / 3)
    out = run(backend, lambda g: flatten(clip.update(g, ())[0])[0], g)
    assert_tree(dict(zip(sorted(g), out)), ref.clip(g, norm / 3), "clipped")


MESH = dist.Mesh(("dp", "tp"), range(4), (2, 2))
LAYOUTS = {"W1": dist.ShardSpec(("col",), ("tp",)), "W2": dist.ShardSpec(("row",), ("tp",)), "b": None}


def spread(tree: dict) -> dict:
    """A dict of arrays as DistTensors on the dp=2 × tp=2 mesh in LAYOUTS."""
    return {k: dist.tensor(v.shape, LAYOUTS[k], MESH, "f32", data=v) for k, v in tree.items()}


def train_on_mesh(backend, opt, params, grads_seq):
    """``(params, state)`` after one jitted update per gradient, as DistTensors on MESH."""
    got, state = spread(params), opt.init(spread(params))
    step = jit(opt.update, backend=backend)
    try:
        for g in grads_seq:
            got, state = step(spread(g), state, got)
    except BackendError as exc:
        pytest.skip(f"unsupported: {backend} refuses the program: {exc.what}")
    assert {k: v.type for k, v in got.items()} == {k: v.type for k, v in spread(params).items()}
    return got, state


@clause("OPTIM-CLIP-1", "OPTIM-STATE-1")
def test_on_a_mesh(backend):
    params, grads = ref.problem(seed=3, steps=2)
    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.sgd(0.1, momentum=0.5))
    got, state = train_on_mesh(backend, opt, params, grads)
    assert_tree({k: v.numpy() for k, v in got.items()},
                ref.sgd(params, [ref.clip(g, 1.0) for g in grads], lambda s: 0.1, 0.5), "mesh")
    assert {k: v.type for k, v in state[1].momentum.items()} == {k: v.type for k, v in got.items()}


@clause("OPTIM-ZERO-1")
def test_zero1(backend):
    params, grads = ref.problem(seed=5, steps=2)
    got, state = train_on_mesh(backend, optim.sgd(0.1, momentum=0.5, zero=1), params, grads)
    assert [str(state.momentum[k].layout) for k in ("W1", "W2", "b")] == \
        ["#shard<[dp, tp]>", "#shard<[tp, dp]>", "#shard<[dp]>"]
    assert_tree({k: v.numpy() for k, v in got.items()}, ref.sgd(params, grads, lambda s: 0.1, 0.5), "zero=1")


@clause("OPTIM-CHAIN-1")
def test_chain(backend):
    params, grads = ref.problem(seed=4, steps=2)
    got, state = train(backend, optim.chain(optim.clip_by_global_norm(0.5), optim.sgd(0.1)), params, grads)
    assert_tree(got, ref.sgd(params, [ref.clip(g, 0.5) for g in grads], lambda s: 0.1), "chain")
    assert state[0] == ()
    with pytest.raises(OptimError):
        optim.chain(optim.sgd(0.1), optim.clip_by_global_norm(1.0))


@clause("OPTIM-ERR-1")
def test_bad_hyperparameters():
    for make in (lambda: optim.adamw(-1.0), lambda: optim.adamw(0.1, b1=1.0), lambda: optim.sgd(0.1, momentum=-0.5),
                 lambda: optim.clip_by_global_norm(float("inf")), lambda: optim.warmup_cosine(0.1, 5, 3)):
        with pytest.raises(OptimError):
            make()


@clause("OPTIM-ERR-2")
def test_mismatched_trees_and_non_float_parameters():
    params, grads = ref.problem()
    opt = optim.adamw(0.1)
    with pytest.raises(OptimError, match=r"grads\['b'\] is missing"):
        opt.update({k: v for k, v in grads[0].items() if k != "b"}, opt.init(params), params)
    with pytest.raises(OptimError, match=r"params\['i'\]"):
        opt.init({**params, "i": np.arange(3)})
