"""Gradients on the simulated mesh (AD-MESH-1 … AD-MESH-3, AD-COLL-1 … AD-COLL-3): TP- and
DP-sharded gradients equal the single-device gradient (bit for bit under
``reduction="exact"``, within a stated bound otherwise), a data-parallel loss gets its
gradient all-reduced over dp, seed 004's TP GEMMs get their transposed collectives, the
backward communication plan's bytes, the collectives' adjoint law and transposes."""
import json
import re
import warnings

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op
from tessera_ref.autodiff import communication_plan
from tessera_ref.autodiff.plan import collectives
from tessera_ref.errors import TraceError
from tessera_ref.ir import ShardLayout
from tessera_ref.numerics import Policy
from tessera_ref.ops import PRIMITIVES

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")


def _ops(text):
    return re.findall(r'"tessera\.graph\.(\w+)"', text)


def _mesh():
    return dist.Mesh(("dp", "tp"), range(6), (2, 3))


def _tensors(mesh, policy, seed=0):
    """x and y split over dp by batch; W1 by columns and W2 by rows over tp (Megatron)."""
    def t(shape, spec, s):
        return dist.tensor(shape, spec, mesh, dtype=policy, init="randn", seed=seed + s)
    return (t((4, 6), S(("batch",), ("dp",)), 1), t((4, 6), S(("batch",), ("dp",)), 2),
            t((6, 9), S(("col",), ("tp",)), 3), t((9, 6), S(("row",), ("tp",)), 4))


def _loss(x, y):
    def loss(W1, W2):
        d = op.matmul(op.tanh(op.matmul(x, W1)), W2) - y
        return op.mean(d * d)
    return loss


def _one_device(tensors, policy):
    """The global values of ``tensors`` as single-device arrays of ``policy``."""
    return [op.cast(t.numpy(), policy) for t in tensors]


def _bits(a):
    return np.asarray(a).view(np.uint32)


@pytest.mark.parametrize("policy", ["f32", EXACT], ids=["canonical", "exact"])
def test_tp_and_dp_gradients_equal_the_single_device_gradient(policy):
    mesh = _mesh()
    x, y, W1, W2 = _tensors(mesh, policy)
    g = tr.grad(_loss(x, y), argnums=(0, 1))
    gW1, gW2 = g(W1, W2)
    assert gW1.layout == W1.layout and gW2.layout == W2.layout  # each gradient in its weight's layout
    xs, ys, w1, w2 = _one_device((x, y, W1, W2), policy)
    r1, r2 = tr.grad(_loss(xs, ys), argnums=(0, 1))(w1, w2)
    for got, want in ((gW1, r1), (gW2, r2)):
        if policy is EXACT:
            assert np.array_equal(_bits(got.numpy()), _bits(want))
        else:  # the stated bound: split sums round at other points, 2^-20 of the largest magnitude
            want = np.asarray(want)
            assert np.max(np.abs(got.numpy() - want)) <= 2.0 ** -20 * np.max(np.abs(want))


def test_a_data_parallel_loss_gets_its_gradient_all_reduced_over_dp():
    mesh = _mesh()
    x, y, _, _ = _tensors(mesh, "f32")
    W = dist.tensor((6, 6), None, mesh, init="randn", seed=9)  # replicated: every dp rank holds W

    def loss(W):
        d = op.matmul(x, W) - y
        return op.mean(d * d)
    g = tr.grad(loss)
    gW = g(W)
    names = _ops(g.inspect_ir())
    assert names[-1] == "all_reduce" and "partial(dp)" in g.inspect_ir()
    (kind, axis, t, nbytes, _), *_ = collectives(g.program)
    assert (kind, axis, nbytes) == ("all_reduce", "dp", 6 * 6 * 4)  # the whole W gradient, f32, per device
    xs, ys = x.numpy().astype(np.float64), y.numpy().astype(np.float64)
    ref = 2 * xs.T @ (xs @ W.numpy() - ys) / 24
    assert np.allclose(gW.numpy(), ref, rtol=1e-5, atol=1e-6)


def _sequence_parallel(x, W1, W2):
    """Megatron's sequence-parallel MLP: gather the sequence, column- then row-parallel GEMMs,
    reduce-scatter the pending sum back over the sequence."""
    h = op.gelu(op.matmul(dist.all_gather(x, axis="tp"), W1))
    return dist.collective.reduce_scatter(op.matmul(h, W2), axis="tp", dim=1)


def test_seed_004_tp_gemms_insert_reduce_scatter_and_all_gather_in_the_backward():
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    x = dist.tensor((2, 4, 8), S((0, 1), ("dp", "tp")), mesh, init="randn", seed=1)
    y_true = dist.tensor((2, 4, 8), S((0, 1), ("dp", "tp")), mesh, init="randn", seed=2)
    W = {k: dist.tensor(shape, spec, mesh, init="randn", seed=s) for k, shape, spec, s in (
        ("W1a", (8, 16), S(("col",), ("tp",)), 3), ("W2a", (16, 8), S(("row",), ("tp",)), 4),
        ("W1b", (8, 16), S(("col",), ("tp",)), 5), ("W2b", (16, 8), S(("row",), ("tp",)), 6))}

    def model(x, W):
        return _sequence_parallel(_sequence_parallel(x, W["W1a"], W["W2a"]), W["W1b"], W["W2b"])

    def loss_fn(W):
        y = model(x, W)  # includes tensor-parallel GEMMs; x and y_true are closures (captured)
        d = y - y_true
        return op.mean(d * d)

    grad = tr.grad(loss_fn)
    gW = grad(W)  # inserts reduce_scatter/all_gather in backward pass
    plan = [(k, a) for k, a, *_ in collectives(grad.program)[:-1]]
    assert ("all_gather", "tp") in plan and ("reduce_scatter", "tp") in plan and ("all_reduce", "dp") in plan
    text = communication_plan(grad)
    assert "reduce_scatter     over tp" in text and "bytes per device by mesh axis: dp:" in text
    assert len(grad.program.func.regions[0].blocks[0].args) == 4 + 2  # W's leaves, then x and y_true captured
    # against one device
    xs, ys = x.numpy(), y_true.numpy()

    def loss_one(W):
        def block(h, W1, W2):
            return op.matmul(op.gelu(op.matmul(h, W1)), W2)
        d = block(block(xs, W["W1a"], W["W2a"]), W["W1b"], W["W2b"]) - ys
        return op.mean(d * d)
    ref = tr.grad(loss_one)({k: v.numpy() for k, v in W.items()})
    for k in W:
        assert gW[k].layout == W[k].layout
        assert np.max(np.abs(gW[k].numpy() - np.asarray(ref[k]))) <= 2.0 ** -20 * np.max(np.abs(np.asarray(ref[k])))


def test_the_communication_plan_counts_bytes_per_device_and_axis_on_abstract_tensors():
    mesh = dist.Mesh(("dp", "tp"), range(8), (2, 4))
    x = dist.tensor((8, 4096, 1024), S((0, 1), ("dp", "tp")), mesh, dtype="bf16")
    W1 = dist.tensor((1024, 4096), S(("col",), ("tp",)), mesh, dtype="bf16")
    W2 = dist.tensor((4096, 1024), S(("row",), ("tp",)), mesh, dtype="bf16")
    g = tr.grad(lambda W1, W2: op.mean(_sequence_parallel(x, W1, W2) ** 2.0), argnums=(0, 1))
    gW1, gW2 = g(W1, W2)
    assert gW1.is_abstract and gW1.type == W1.type and gW2.type == W2.type
    text = communication_plan(g)
    gathered = 4 * 1024 * 1024 * 2 * 4    # the output cotangent: (8/dp)·(4096/tp)·1024 bf16, gathered from tp=4
    weight = 1024 * 1024 * 2              # each weight gradient's block: 1024·4096/tp bf16, all-reduced over dp
    assert f"{gathered:,} B per device" in text and f"{weight:,} B per device" in text
    assert f"dp: {2 * weight:,} B, tp: {gathered:,} B" in text
    # the same numbers as data (issue 19 item 3)
    assert text.bytes_per_axis == {"dp": 2 * weight, "tp": gathered}
    assert [(c.kind, c.axis, c.bytes_per_device) for c in text.collectives if c.axis == "dp"] == \
        [("all_reduce", "dp", weight)] * 2
    data = text.as_dict()
    assert data["mesh"] == {"dp": 2, "tp": 4} and data["bytes_per_axis"] == {"dp": 2 * weight, "tp": gathered}
    assert json.loads(json.dumps(data)) == data


def test_the_communication_plan_of_a_one_device_derivative_is_empty_data():
    g = tr.grad(lambda w: op.sum(w * w))
    g(np.ones((3,), np.float32))
    plan = communication_plan(g)
    assert str(plan) == "the derivative runs on one device: no communication"
    assert plan.collectives == () and plan.bytes_per_axis == {} and plan.as_dict()["mesh"] is None


def test_a_closure_over_a_distributed_tensor_needs_a_capturing_trace():
    mesh = _mesh()
    x, _, W1, _ = _tensors(mesh, "f32")
    with pytest.raises(TraceError, match="not an argument"):
        tr.jit(lambda w: op.matmul(x, w)).trace(W1)
    g = tr.grad(lambda w: op.sum(op.matmul(x, w)))(W1)  # grad captures it
    assert np.allclose(g.numpy(), np.broadcast_to(x.numpy().sum(0)[:, None], (6, 9)), rtol=1e-6)
    # only the closure is distributed: the plain argument is replicated on its mesh
    g = tr.grad(lambda w: op.sum(op.matmul(x, w)))(np.ones((6, 9), np.float32))
    assert g.mesh == mesh and g.layout.dims == ((), ())
    assert np.allclose(g.numpy(), np.broadcast_to(x.numpy().sum(0)[:, None], (6, 9)), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# the collectives' derivatives

def _partial(mesh, shape, axes, seed):
    """A pending sum over ``axes`` (a name or a tuple) with different random contributions on
    the ranks of those axes."""
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    lay = ShardLayout(((),) * len(shape), axes)
    rng = np.random.default_rng(seed)
    groups = sorted({tuple(mesh.coords(d)[a] for a in axes) for d in range(mesh.size)})
    rows = {c: rng.standard_normal(shape).astype(np.float32) for c in groups}
    return dist.from_shards([rows[tuple(mesh.coords(d)[a] for a in axes)] for d in range(mesh.size)], lay, mesh)


def _cases(mesh):
    """(name, operand, attrs) for each collective, with a random operand in the layout it takes;
    the first six are the transposes' cases, then the averaging reductions."""
    split0 = dist.tensor((6, 6), S((0,), ("tp",)), mesh, init="randn", seed=11)
    return [
        ("all_reduce", _partial(mesh, (6, 6), "tp", 12), {"axis": ("tp",), "op": "sum"}),
        ("reduce_scatter", _partial(mesh, (6, 6), "tp", 13), {"axis": "tp", "dim": 0, "op": "sum"}),
        ("all_gather", split0, {"axis": "tp"}),
        ("all_to_all", split0, {"axis": "tp", "split_dim": 1, "concat_dim": 0}),
        ("collective_permute", split0, {"axis": "tp", "pairs": ((0, 1), (1, 2), (2, 0))}),
        ("shard_slice", dist.tensor((6, 6), None, mesh, init="randn", seed=14), {"axis": "tp", "dim": 0}),
        ("all_reduce", _partial(mesh, (6, 6), "tp", 15), {"axis": ("tp",), "op": "avg"}),
        ("all_reduce", _partial(mesh, (6, 6), ("dp", "tp"), 16), {"axis": ("dp", "tp"), "op": "avg"}),
        ("reduce_scatter", _partial(mesh, (6, 6), "tp", 17), {"axis": "tp", "dim": 0, "op": "avg"}),
    ]


N_CASES = len(_cases(_mesh()))


def _like(t, seed):
    """A random tensor of ``t``'s type (a pending sum gets random per-rank contributions)."""
    if t.layout.partial:
        return _partial(t.mesh, t.shape, t.layout.partial, seed)
    values = np.random.default_rng(seed).standard_normal(t.shape).astype(np.float32)
    return dist.tensor(t.shape, t.layout, t.mesh, data=values)


def _law(index):
    """``(⟨J v, u⟩, ⟨v, Jᵀ u⟩)`` in float64 of case ``index`` of :func:`_cases`, by the rules
    in the registry, for random ``v`` (the operand's type) and ``u`` (the result's)."""
    mesh = _mesh()
    name, x, attrs = _cases(mesh)[index]
    prim = PRIMITIVES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = tr.ops.bind(prim, x, **attrs)
        v, u = _like(x, 21), _like(result, 22)
        (jv,) = prim.jvp(attrs, (x,), (v,), (result,))
        (bar,) = prim.vjp(attrs, (x,), (result,), (u,))
    assert bar.type.with_layout(None) == x.type.with_layout(None) and not bar.layout.partial
    lhs = float(np.sum(jv.numpy().astype(np.float64) * u.numpy()))
    rhs = float(np.sum(v.numpy().astype(np.float64) * bar.numpy()))
    return lhs, rhs


@pytest.mark.parametrize("index", range(N_CASES))
def test_collective_adjoint_law_on_the_mesh(index):
    lhs, rhs = _law(index)
    assert lhs == pytest.approx(rhs, rel=1e-6)


def test_a_planted_wrong_collective_transpose_breaks_the_law(monkeypatch):
    """A permute whose vjp permutes by the forward pairs (not their inverse), planted in the
    registry: the adjoint-law check of the test above (:func:`_law`) fails on it."""
    permute = PRIMITIVES["collective_permute"]

    def wrong(attrs, primals, results, cts):
        return (tr.ops.bind(permute, cts[0], axis=attrs["axis"], pairs=attrs["pairs"]),)
    monkeypatch.setattr(permute, "vjp", wrong)
    lhs, rhs = _law(4)
    assert lhs != pytest.approx(rhs, rel=1e-6)


def test_avg_gradients_divide_by_the_group_size_once_in_accum():
    """AD-COLL-1 for avg: the cotangent ⊘ p (p = 3 over tp, 6 over dp×tp), one f32 division
    rounded to nearest even, against the float64 quotient rounded once into f32; and the
    derivative of the averaged loss is the sum-gradient's over p (float64 reference)."""
    mesh = _mesh()
    for index, p in ((6, 3), (7, 6), (8, 3)):
        name, x, attrs = _cases(mesh)[index]
        prim = PRIMITIVES[name]
        result = tr.ops.bind(prim, x, **attrs)
        u = _like(result, 23)
        (bar,) = prim.vjp(attrs, (x,), (result,), (u,))
        want = (u.numpy().astype(np.float64) / p).astype(np.float32)  # exact quotient, one rounding
        assert np.array_equal(_bits(bar.numpy()), _bits(want))
    x = dist.tensor((4, 6), S((1,), ("tp",)), mesh, init="randn", seed=1)
    W = dist.tensor((6, 2), S((0,), ("tp",)), mesh, init="randn", seed=2)
    g = tr.grad(lambda x: op.sum(dist.all_reduce(op.matmul(x, W), axis="tp", op="avg")))(x)
    ref = np.ones((4, 2)) @ W.numpy().astype(np.float64).T / 3
    assert np.max(np.abs(g.numpy() - ref)) <= 2.0 ** -22 * np.max(np.abs(ref))
    # only a closure is distributed: p comes from the captured tensor's mesh
    g = tr.grad(lambda w: op.sum(dist.all_reduce(op.matmul(x, w), axis="tp", op="avg")))(W.numpy())
    ref = x.numpy().astype(np.float64).T @ np.ones((4, 2)) / 3
    assert np.max(np.abs(g.numpy() - ref)) <= 2.0 ** -22 * np.max(np.abs(ref))


def test_avg_tangents_in_another_layout_are_divided_too():
    """The jvp of an avg with a tangent not in the operand's layout (a replicated one) moves it
    and divides by p: the same global tangent as through the avg itself."""
    mesh = _mesh()
    name, x, attrs = _cases(mesh)[6]
    prim = PRIMITIVES[name]
    result = tr.ops.bind(prim, x, **attrs)
    v = _like(x, 24)
    whole = dist.tensor(x.shape, None, mesh, data=v.numpy())
    (through,) = prim.jvp(attrs, (x,), (v,), (result,))
    (moved,) = prim.jvp(attrs, (x,), (whole,), (result,))
    ref = v.numpy().astype(np.float64) / 3
    for t in (through, moved):
        assert np.max(np.abs(t.numpy() - ref)) <= 2.0 ** -22 * np.max(np.abs(ref))


@pytest.mark.parametrize("index, transposed", [
    (0, []), (1, ["all_gather"]), (2, ["reduce_scatter"]), (3, ["all_to_all"]),
    (4, ["collective_permute"]), (5, ["all_gather"]),
])
def test_collective_transposes_in_the_backward_ir(index, transposed):
    mesh = _mesh()
    name, x, attrs = _cases(mesh)[index]
    fn = {
        0: lambda t: dist.all_reduce(t, axis="tp"),
        1: lambda t: dist.collective.reduce_scatter(t, axis="tp", dim=0),
        2: lambda t: dist.all_gather(t, axis="tp"),
        3: lambda t: dist.all_to_all(t, axis="tp", split_dim=1, concat_dim=0),
        4: lambda t: dist.permute(t, axis="tp", perm=[(0, 1), (1, 2), (2, 0)]),
        5: lambda t: op.shard_slice(t, axis="tp", dim=0),
    }[index]
    out, pullback = tr.vjp(fn, x)
    if index == 2:  # a pending-sum cotangent of a gathered value is reduce-scattered
        ct = dist.tensor(out.shape, S(None, ("tp",), reduce="sum"), mesh, init="randn", seed=5)
    else:
        ct = _like(out, 5)
    (g,) = pullback(ct)
    backward = [k for k, *_ in collectives(pullback.program)[:-1]]
    assert backward == transposed
    if index == 4:
        assert "pairs = [[1, 0], [2, 1], [0, 2]]" in pullback.inspect_ir()
    if index != 4:  # the identity on global values
        assert np.array_equal(g.numpy(), ct.numpy())


def test_forward_mode_and_pullbacks_on_the_mesh_equal_one_device():
    mesh = _mesh()
    x, y, W1, W2 = _tensors(mesh, EXACT)
    V1, V2 = (dist.tensor(w.shape, w.layout, mesh, dtype=EXACT, init="randn", seed=s) for w, s in ((W1, 30), (W2, 32)))
    _, tangent = tr.jvp(_loss(x, y), (W1, W2), (V1, V2))
    xs, ys, w1, w2, v1, v2 = _one_device((x, y, W1, W2, V1, V2), EXACT)
    _, t1 = tr.jvp(_loss(xs, ys), (w1, w2), (v1, v2))
    assert tangent.numpy().shape == () and np.array_equal(_bits(tangent.numpy()), _bits(t1))
    out, pullback = tr.vjp(lambda w: op.matmul(x, w), W1)
    ct = dist.tensor(out.shape, out.layout, mesh, dtype=EXACT, init="randn", seed=31)
    (g,) = pullback(ct)
    assert g.layout == W1.layout
    (g1,) = tr.vjp(lambda w: op.matmul(xs, w), w1)[1](op.cast(ct.numpy(), EXACT))
    assert np.array_equal(_bits(g.numpy()), _bits(g1))


def test_the_spec_prints_the_plan_its_example_computes(capsys):
    """docs/spec/autodiff.md (AD-MESH-3): the example runs and prints the plan shown there."""
    text = (__import__("pathlib").Path(__file__).resolve().parents[2] / "docs" / "spec" / "autodiff.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"```text\n(backward communication plan.*?)```", text, re.S).group(1)
    exec(compile(code, "autodiff.md", "exec"), {})
    printed = capsys.readouterr().out
    strip = [re.sub(r"\s+at \S+$", "", line).split() for line in printed.strip().splitlines()]
    assert strip == [line.split() for line in shown.strip().splitlines()]
