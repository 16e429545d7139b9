"""Optimizers on a simulated dp=2 × tp=2 mesh (OPTIM-API-1, OPTIM-STATE-1, OPTIM-CLIP-1, OPTIM-ZERO-1): the
state keeps each parameter's layout, the update gives one device's bits, the global norm
communicates one exact all-reduce per tp-split leaf, and abstract trees are priced."""
import numpy as np
import pytest

from tessera_conformance.cases.optim import _reference as ref
from tessera_conformance import assert_bits
from tessera_ref import dist, jit, optim, sim
from tessera_ref.errors import OptimError
from tessera_ref.frontend.pytree import flatten

MESH = dist.Mesh(("dp", "tp"), range(4), (2, 2))
S = dist.ShardSpec
LAYOUTS = {"W1": S(("col",), ("tp",)), "W2": S(("row",), ("tp",)), "b": None}


def on_mesh(tree, abstract=False):
    return {k: dist.tensor(v.shape, LAYOUTS[k], MESH, "f32", data=None if abstract else v) for k, v in tree.items()}


OPTIMIZERS = {
    "adamw+clip": lambda: optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(optim.warmup_cosine(1e-2, 1, 4))),
    "sgd-nesterov": lambda: optim.sgd(0.05, momentum=0.9, nesterov=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_mesh_gives_one_devices_bits_and_keeps_layouts(name):
    params, grads = ref.problem(seed=5, steps=3)
    opt = OPTIMIZERS[name]()
    one, one_state = params, opt.init(params)
    many, state = on_mesh(params), opt.init(on_mesh(params))
    step = jit(opt.update)
    for i, g in enumerate(grads):
        one, one_state = opt.update(g, one_state, one)
        many, state = (step if i % 2 else opt.update)(on_mesh(g), state, many)  # eager and jitted steps
    for k in params:
        assert many[k].type == on_mesh(params)[k].type
        assert_bits(many[k].numpy(), np.asarray(one[k]), k)
    leaves = flatten(state)[0]
    assert all(isinstance(x, dist.DistTensor) and x.mesh is MESH for x in leaves)
    moments = state[1].mu if name == "adamw+clip" else state.momentum
    assert {k: v.type for k, v in moments.items()} == {k: v.type for k, v in many.items()}


def test_the_global_norm_all_reduces_one_scalar_per_split_leaf():
    params, grads = ref.problem(seed=6)
    g = on_mesh(grads[0])
    f = jit(lambda g: optim.global_norm(g))
    assert f(g).numpy() == ref.global_norm([grads[0][k] for k in sorted(grads[0])])
    text = f.inspect_ir("graph")
    assert text.count("all_reduce") == 2 and "all_gather" not in text  # W1 and W2 over tp; b is whole


def test_abstract_trees_are_priced_without_values():
    params, _ = ref.problem()
    machine = sim.machine("H100", devices=4)
    with sim.use(machine):
        p = on_mesh(params, abstract=True)
        opt = optim.adamw(1e-3)
        state = opt.init(p)
        new, state = opt.update(p, state, p)
    assert new["W1"].is_abstract and state.mu["W1"].is_abstract and new["W1"].type == p["W1"].type
    assert state.count.numpy() == 1.0  # the count has a value: it does not depend on the parameters
    events = [e.name for e in machine.timeline.events]
    assert "sqrt" in events and "pow" in events


PENDING = {"W1": S(("col",), ("tp", "dp"), reduce="sum"), "W2": S(("row",), ("tp", "dp"), reduce="sum"),
           "b": S((), ("dp",), reduce="sum")}


@pytest.mark.parametrize("make", [lambda **z: optim.adamw(1e-2, **z), lambda **z: optim.sgd(0.1, momentum=0.9, **z)],
                         ids=["adamw", "sgd"])
@pytest.mark.parametrize("pending", [False, True], ids=["replicated-grads", "pending-grads"])
def test_zero1_splits_state_over_dp_and_keeps_the_bits(make, pending):
    """OPTIM-ZERO-1: buffers split over dp, the same parameter bits, and the communication of
    ZeRO-1 (a pending gradient reduce-scattered, the parameter all-gathered, no all-reduce)."""
    params, grads = ref.problem(seed=7, steps=3)
    plain, zero = make(), make(zero=1)
    one, one_state = params, plain.init(params)
    many, state = on_mesh(params), zero.init(on_mesh(params))
    buffers = state.mu if isinstance(state, optim.AdamWState) else state.momentum
    assert {k: str(v.layout) for k, v in buffers.items()} == {"W1": "#shard<[dp, tp]>", "W2": "#shard<[tp, dp]>", "b": "#shard<[dp]>"}
    assert buffers["W1"].nbytes_per_device * 2 == on_mesh(params)["W1"].nbytes_per_device
    step = jit(zero.update)
    for g in grads:
        g_mesh = {k: dist.tensor(v.shape, (PENDING if pending else LAYOUTS)[k], MESH, "f32", data=v) for k, v in g.items()}
        many, state = step(g_mesh, state, many)
        one, one_state = plain.update(g, one_state, one)
    for k in params:
        assert many[k].type == on_mesh(params)[k].type
        assert_bits(many[k].numpy(), np.asarray(one[k]), k)
    ir = step.inspect_ir("graph")
    assert ir.count("all_gather") == 3 and ir.count("all_reduce") == 0
    assert ir.count("reduce_scatter") == (3 if pending else 0) and ir.count("shard_slice") == (3 if pending else 6)


def test_zero1_needs_the_axis():
    with pytest.raises(OptimError, match=r"dp_axis='data', which the mesh .* does not have"):
        optim.adamw(1e-3, zero=1, dp_axis="data").init(on_mesh(ref.problem()[0]))
    with pytest.raises(OptimError, match="zero=2"):
        optim.sgd(0.1, zero=2)
    state = optim.sgd(0.1, momentum=0.5, zero=1).init(ref.problem()[0])  # one device: nothing to split
    assert state.momentum["W1"].type == optim.sgd(0.1, momentum=0.5).init(ref.problem()[0]).momentum["W1"].type
