"""AD-MESH-1, AD-MESH-2, AD-MESH-3, AD-COLL-1, AD-COLL-2, AD-COLL-3 (and AD-2's captured
closures, AD-REV-3's gradient moves): derivatives of programs on a simulated mesh, run on the
backend. Integer data make every sum exact, so expected global values are NumPy integer
arithmetic; the collectives a derivative performs are read from the public
``communication_plan``."""
import inspect
import re
from math import prod

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op
from tessera_ref.autodiff import communication_plan
from tessera_ref.errors import TraceError
from tessera_ref.numerics import Policy
from tessera_conformance import assert_bits, assert_close, clause, eager, unsupported

from ._reference import exact_inner, ints, same_as_oracle

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")
HERE = __file__.rsplit("/", 1)[-1]


def _mesh():
    return dist.Mesh(("dp", "tp"), range(6), (2, 3))


def _plan(transformed):
    """``[(collective, axis)]`` of the plan's lines, and its number of local slices."""
    text = communication_plan(transformed)
    calls = re.findall(r"^  (\w+)\s+over (\S+)", text, re.M)
    slices = re.search(r"(\d+) local slice", text)
    return calls, int(slices.group(1)) if slices else 0


def _dist(values, spec, mesh):
    return dist.tensor(values.shape, spec, mesh, data=np.asarray(values, np.float32))


def _partial(mesh, shape, axes, seed):
    """A pending sum over ``axes`` of small-integer contributions, and its exact global value."""
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    groups = sorted({tuple(mesh.coords(d)[a] for a in axes) for d in range(mesh.size)})
    parts = {g: ints(shape, seed + i, dtype=np.float32) for i, g in enumerate(groups)}
    shards = [parts[tuple(mesh.coords(d)[a] for a in axes)] for d in range(mesh.size)]
    layout = S(None, axes, reduce="sum").layout(len(shape))
    return dist.from_shards(shards, layout, mesh), sum(parts.values())


def _global(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


# -- AD-MESH-1 / AD-MESH-2: gradients equal the single-device gradient --------------------------
def _mlp_tensors(mesh_shape, policy):
    """x, y batch-split over dp; W1 column-, W2 row-split over tp (replicated on one axis); small integers."""
    names = ("dp", "tp", "pp")[:len(mesh_shape)]
    mesh = dist.Mesh(names, range(prod(mesh_shape)), mesh_shape)
    dp, tp = mesh_shape[0], mesh_shape[1] if len(mesh_shape) > 1 else 1
    col = S(("col",), ("tp",)) if len(mesh_shape) > 1 else None
    row = S(("row",), ("tp",)) if len(mesh_shape) > 1 else None

    def t(shape, spec, seed):
        return dist.tensor(shape, spec, mesh, dtype=policy, data=ints(shape, seed, lo=-2, hi=2, dtype=np.float32))
    return (mesh, t((2 * dp, 4), S(("batch",), ("dp",)), 1), t((2 * dp, 4), S(("batch",), ("dp",)), 2),
            t((4, 2 * tp), col, 3), t((2 * tp, 4), row, 4))


def _loss(x, y):
    def loss(W1, W2):
        d = op.matmul(op.matmul(x, W1) * 0.5, W2) - y
        return op.sum(d * d)
    return loss


@clause("AD-MESH-1", "AD-MESH-2")
def test_sharded_gradients_equal_the_single_device_gradient(backend, mesh_shape):
    """Exact reduction: sharded gradients have the single-device bits, in their weights' layouts."""
    mesh, x, y, W1, W2 = _mlp_tensors(mesh_shape, EXACT)
    gW1, gW2 = _grad_on_mesh(backend, _loss(x, y), W1, W2)
    xs, ys, w1, w2 = (_global(t).astype(np.float64) for t in (x, y, W1, W2))
    h = xs @ w1 * 0.5
    d = h @ w2 - ys
    assert_bits(_global(gW2), (2 * h.T @ d).astype(np.float32))
    assert_bits(_global(gW1), (xs.T @ (2 * d @ w2.T) * 0.5).astype(np.float32))
    assert gW1.layout == W1.layout and gW2.layout == W2.layout and not gW1.layout.partial
    xs, ys, w1, w2 = (tr.asarray(_global(t), policy=EXACT) for t in (x, y, W1, W2))
    one = eager(backend, tr.grad(_loss(xs, ys), argnums=(0, 1)), w1, w2)
    assert_bits([_global(gW1), _global(gW2)], one)


def _grad_on_mesh(backend, f, *args, argnums=(0, 1)):
    """``grad(f, argnums)(*args)`` on DistTensors under ``backends.use(backend)`` (layouts kept)."""
    try:
        with tr.backends.use(backend):
            return tr.grad(f, argnums=argnums)(*args)
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)


@clause("AD-MESH-1")
def test_canonical_reduction_stays_within_the_stated_bound(backend):
    """Canonical reduction: within 2⁻²⁰ of the largest single-device gradient magnitude."""
    mesh = _mesh()
    rng = np.random.default_rng(0)
    x, y = (_dist(rng.standard_normal((4, 6)), S(("batch",), ("dp",)), mesh) for _ in range(2))
    W1 = _dist(rng.standard_normal((6, 9)), S(("col",), ("tp",)), mesh)
    W2 = _dist(rng.standard_normal((9, 6)), S(("row",), ("tp",)), mesh)

    def loss(x, y):
        def f(a, b):
            d = op.matmul(op.tanh(op.matmul(x, a)), b) - y
            return op.mean(d * d)
        return f
    gs = _grad_on_mesh(backend, loss(x, y), W1, W2)
    one = eager(backend, tr.grad(loss(_global(x), _global(y)), argnums=(0, 1)), _global(W1), _global(W2))
    for g, r in zip(gs, one):
        assert_close(_global(g), r, rel=2.0 ** -20)
    same_as_oracle(backend, [_global(g) for g in gs],
                   lambda b: [_global(g) for g in _grad_on_mesh(b, loss(x, y), W1, W2)], "sharded gradients")


@clause("AD-MESH-2", "AD-REV-3")
def test_data_parallel_gradient_is_all_reduced_over_dp(backend):
    """A data-parallel weight gradient is all-reduced over dp (144 B) at the line calling grad."""
    mesh = _mesh()
    x, y = (_dist(ints((4, 6), s), S(("batch",), ("dp",)), mesh) for s in (5, 6))
    W = _dist(ints((6, 6), 7), None, mesh)

    def loss(w):
        d = op.matmul(x, w) - y
        return op.sum(d * d)
    g = tr.grad(loss)
    try:
        with tr.backends.use(backend):
            line = inspect.currentframe().f_lineno + 1
            gW = g(W)  # the line the all-reduce names
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)
    calls, _ = _plan(g)
    assert calls == [("all_reduce", "dp")]
    text = communication_plan(g)
    assert re.search(rf"all_reduce\s+over dp .*\s144 B per device\s+at \S*{HERE}:{line}$", text, re.M), text
    xs, ys, w = (_global(t).astype(np.float64) for t in (x, y, W))
    assert_bits(_global(gW), (2 * xs.T @ (xs @ w - ys)).astype(np.float32))
    assert gW.layout == W.layout


@clause("AD-2")
def test_closures_over_distributed_tensors_are_captured(backend):
    """A closed-over DistTensor becomes a parameter after the arguments; in plain jit a TraceError."""
    mesh = _mesh()
    x = _dist(ints((4, 6), 8), S(("batch",), ("dp",)), mesh)
    W = _dist(ints((6, 9), 9), S(("col",), ("tp",)), mesh)
    with pytest.raises(TraceError, match="not an argument"):
        tr.jit(lambda w: op.matmul(x, w)).trace(W)
    g = tr.grad(lambda w: op.sum(op.matmul(x, w)))
    try:
        with tr.backends.use(backend):
            gW = g(W)
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)
    params = re.findall(r"%\d+: (tensor<[^>]*>>)", re.search(r"\^bb0\((.*?)\):", g.inspect_ir()).group(1))
    assert params == ["tensor<6x9xf32, #shard<[*, tp]>>", "tensor<4x6xf32, #shard<[dp, *]>>"]
    assert not re.search(r"constant.*-> tensor<4x6xf32", g.inspect_ir())
    assert_bits(_global(gW), np.broadcast_to(_global(x).sum(0)[:, None], (6, 9)).astype(np.float32))


# -- AD-COLL-1: the transposes ------------------------------------------------------------------
def _vjp_on_mesh(backend, fn, x, ct):
    try:
        with tr.backends.use(backend):
            out, pullback = tr.vjp(fn, x)
            (g,) = pullback(ct(out) if callable(ct) else ct)
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)
    return out, pullback, g


def _jvp_on_mesh(backend, fn, x, v):
    try:
        with tr.backends.use(backend):
            return tr.jvp(fn, (x,), (v,))
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)


COLL = [  # (label, forward, operand kind, cotangent kind, backward collectives, local slices)
    ("all_reduce", lambda t: dist.all_reduce(t, axis="tp"), "partial", "like", [], 0),
    ("reduce_scatter", lambda t: dist.collective.reduce_scatter(t, axis="tp", dim=0), "partial", "like",
     [("all_gather", "tp")], 0),
    ("all_gather-pending-ct", lambda t: dist.all_gather(t, axis="tp"), "split0", "pending",
     [("reduce_scatter", "tp")], 0),
    ("all_gather-replicated-ct", lambda t: dist.all_gather(t, axis="tp"), "split0", "like", [], 1),
    ("shard_slice", lambda t: op.shard_slice(t, axis="tp", dim=0), "replicated", "like", [("all_gather", "tp")], 0),
]


def _operand(kind, mesh, seed):
    if kind == "partial":
        return _partial(mesh, (6, 6), "tp", seed)[0]
    spec = S((0,), ("tp",)) if kind == "split0" else None
    return _dist(ints((6, 6), seed), spec, mesh)


def _like(out, kind, seed):
    mesh = out.mesh
    if kind == "pending":
        return _partial(mesh, out.shape, "tp", seed)[0]
    return dist.tensor(out.shape, out.layout, mesh, data=ints(out.shape, seed, dtype=np.float32))


@clause("AD-COLL-1", "AD-MESH-1")
@pytest.mark.parametrize("label, fn, operand, ct_kind, backward, slices", COLL, ids=[c[0] for c in COLL])
def test_collective_transposes(backend, label, fn, operand, ct_kind, backward, slices):
    """The cotangent keeps its global value, moved by the table's collective; the law holds exactly."""
    mesh = _mesh()
    x = _operand(operand, mesh, 11)
    out, pullback, g = _vjp_on_mesh(backend, fn, x, lambda o: _like(o, ct_kind, 12))
    ct = _like(out, ct_kind, 12)
    assert_bits(_global(g), _global(ct))
    assert not g.layout.partial and g.layout.replace(partial=()) == x.layout.replace(partial=())
    assert _plan(pullback) == (backward, slices)
    v = _operand(operand, mesh, 13)
    _, t = _jvp_on_mesh(backend, fn, x, v)
    assert_bits(_global(t), _global(v))
    assert exact_inner(_global(t), _global(ct)) == exact_inner(_global(v), _global(g))


@clause("AD-COLL-1")
@pytest.mark.parametrize("fn, axes, p", [
    (lambda t: dist.all_reduce(t, axis="tp", op="avg"), "tp", 3),
    (lambda t: dist.all_reduce(t, axis=("dp", "tp"), op="avg"), ("dp", "tp"), 6),
    (lambda t: dist.collective.reduce_scatter(t, axis="tp", dim=0, op="avg"), "tp", 3),
], ids=["all_reduce-tp", "all_reduce-dp-tp", "reduce_scatter-tp"])
def test_averaging_collectives_divide_by_p_once(backend, fn, axes, p):
    """avg: the moved cotangent (and the tangent) divided by p once, correctly rounded in f32."""
    mesh = _mesh()
    x, _ = _partial(mesh, (6, 6), axes, 21)
    out, _, g = _vjp_on_mesh(backend, fn, x, lambda o: _like(o, "like", 22))
    u = _global(_like(out, "like", 22))
    assert_bits(_global(g), u / np.float32(p))
    v, vsum = _partial(mesh, (6, 6), axes, 23)
    _, t = _jvp_on_mesh(backend, fn, x, v)
    assert_bits(_global(t), vsum / np.float32(p))


# -- AD-COLL-2 / AD-COLL-3 ---------------------------------------------------------------------
@clause("AD-COLL-2")
@pytest.mark.parametrize("ct_layout, backward, slices", [("result", [("all_to_all", "tp")], 0), ("replicated", [], 1)])
def test_all_to_all_goes_back_by_the_swapped_all_to_all(backend, ct_layout, backward, slices):
    """all_to_all goes back by the swapped all_to_all (a replicated cotangent by a local slice)."""
    mesh = _mesh()
    fn = lambda t: dist.all_to_all(t, axis="tp", split_dim=1, concat_dim=0)  # noqa: E731
    x = _operand("split0", mesh, 31)

    def ct(out):
        return dist.tensor(out.shape, out.layout if ct_layout == "result" else None, mesh,
                           data=ints(out.shape, 32, dtype=np.float32))
    out, pullback, g = _vjp_on_mesh(backend, fn, x, ct)
    assert_bits(_global(g), ints(out.shape, 32, dtype=np.float32))
    assert g.layout == x.layout and _plan(pullback) == (backward, slices)
    if ct_layout == "result":
        assert re.search(r'all_to_all"\(%\d+\) \{axis = "tp", concat_dim = 1, split_dim = 0\}', pullback.inspect_ir())
    v = _operand("split0", mesh, 33)
    _, t = _jvp_on_mesh(backend, fn, x, v)
    assert_bits(_global(t), _global(v))
    assert t.layout == out.layout


@clause("AD-COLL-3")
@pytest.mark.parametrize("pairs", [[(0, 1), (1, 2), (2, 0)], [(0, 1)]], ids=["cycle", "one-pair"])
def test_collective_permute_goes_back_by_the_inverse_pairs(backend, pairs):
    """collective_permute goes back by the inverse pairs; ranks that sent nothing get +0."""
    mesh = _mesh()
    fn = lambda t: dist.permute(t, axis="tp", perm=pairs)  # noqa: E731
    x = _operand("split0", mesh, 41)
    u = ints((6, 6), 42, dtype=np.float32)
    out, pullback, g = _vjp_on_mesh(backend, fn, x, lambda o: dist.tensor(o.shape, o.layout, mesh, data=u))
    want = np.zeros((6, 6), np.float32)
    for s, d in pairs:
        want[2 * s:2 * s + 2] = u[2 * d:2 * d + 2]
    assert_bits(_global(g), want)
    inverse = ", ".join(f"[{d}, {s}]" for s, d in pairs)
    assert f"pairs = [{inverse}]" in pullback.inspect_ir()
    assert _plan(pullback) == ([("collective_permute", "tp")], 0)
    v = _operand("split0", mesh, 43)
    _, t = _jvp_on_mesh(backend, fn, x, v)
    fwd = np.zeros((6, 6), np.float32)
    for s, d in pairs:
        fwd[2 * d:2 * d + 2] = _global(v)[2 * s:2 * s + 2]
    assert_bits(_global(t), fwd)


# -- AD-MESH-3 ---------------------------------------------------------------------------------
def _seed_004(B, L, E, F):
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    x = dist.tensor((B, L, E), S((0, 1), ("dp", "tp")), mesh, dtype="bf16")
    y_true = dist.tensor((B, L, E), S((0, 1), ("dp", "tp")), mesh, dtype="bf16")
    W = [{"up": dist.tensor((E, F), S(("col",), ("tp",)), mesh, dtype="bf16"),
          "down": dist.tensor((F, E), S(("row",), ("tp",)), mesh, dtype="bf16")} for _ in range(2)]

    def mlp(x, w):
        h = op.gelu(op.matmul(dist.all_gather(x, axis="tp"), w["up"]))
        return dist.collective.reduce_scatter(op.matmul(h, w["down"]), axis="tp", dim=1)

    def loss_fn(W):
        d = mlp(mlp(x, W[0]), W[1]) - y_true
        return op.mean(d * d)
    return loss_fn, W


def _expected_plan(B, L, E, F):
    """The plan the clauses derive for seed 004's two sequence-parallel TP MLPs, by hand: each
    MLP's two weight gradients are all-reduced right after its backward (AD-MESH-4)."""
    gathered = B // 4 * L * E * 2           # the output cotangent block (dp-split batch, whole sequence), bf16
    pending = B // 4 * L * E * 2            # the first MLP's output cotangent, a pending sum over tp
    weight = E * F // 9 * 2                 # each weight gradient's block
    calls = [("all_gather", "tp", gathered), ("all_reduce", "dp", weight), ("all_reduce", "dp", weight),
             ("reduce_scatter", "tp", pending), ("all_gather", "tp", gathered)]
    calls += [("all_reduce", "dp", weight)] * 2
    return calls, {"dp": 4 * weight, "tp": 2 * gathered + pending}


@clause("AD-MESH-3", "AD-MESH-4")
@pytest.mark.parametrize("dims", [(8, 18, 4, 36)], ids=["small"])
def test_communication_plan_of_seed_004_on_abstract_tensors(backend, dims):
    """Seed 004's backward plan on NVL72 (abstract tensors): the clause's collectives and bytes."""
    loss_fn, W = _seed_004(*dims)
    g = tr.grad(loss_fn)
    try:
        with tr.backends.use(backend):
            gW = g(W)
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)
    assert all(gW[i][k].type == W[i][k].type for i in range(2) for k in ("up", "down"))
    calls, per_axis = _expected_plan(*dims)
    text = communication_plan(g)
    got = [(k, a, int(n.replace(",", ""))) for k, a, n in
           re.findall(r"^  (\w+)\s+over (\S+)\s+.*?\s([\d,]+) B per device", text, re.M)]
    assert got == calls, text
    assert "2 local slice(s) (shard_slice): no communication" in text
    assert text.splitlines()[-1] == "bytes per device by mesh axis: " + ", ".join(
        f"{a}: {n:,} B" for a, n in sorted(per_axis.items()))


@pytest.mark.slow
@clause("AD-MESH-3")
def test_the_spec_example_prints_the_plan_shown(backend, capsys):
    """The AD-MESH-3 example of the spec, run as written, prints the plan shown there."""
    from pathlib import Path
    spec = Path(tr.__file__).resolve().parents[1] / "docs" / "spec" / "autodiff.md"
    if not spec.exists():
        pytest.skip("n/a: the spec text is not next to the package")
    text = spec.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"```text\n(backward communication plan.*?)```", text, re.S).group(1)
    with tr.backends.use(backend):
        exec(compile(code, "autodiff.md", "exec"), {})
    printed = capsys.readouterr().out
    strip = [re.sub(r"\s+at \S+$", "", line).split() for line in printed.strip().splitlines()]
    assert strip == [line.split() for line in shown.strip().splitlines()]
    calls, per_axis = _expected_plan(8, 4608, 8192, 36864)
    assert [f"{n:,}" for *_, n in calls] == [line[-4] for line in strip[1:-2]]
