"""The executor seam (docs/spec/backends.md): everything runs on the current backend, an
outside backend plugs in through the entry point, errors name what to do."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import backends, dist, f32, kernel, lowering, mut, op, sim, symbols, tile
from tessera_ref.backends import Backend
from tessera_ref.demo import HEADS, tp_block
from tessera_ref.errors import BackendError

from toy_helpers import write_toy_distribution


@pytest.fixture
def toy(toy_path, monkeypatch):
    monkeypatch.syspath_prepend(str(toy_path))
    return backends.get("toy")


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint8).tobytes()


def _demo_inputs():
    mesh = dist.Mesh(("dp", "tp"), range(6), (2, 3))
    S = dist.ShardSpec
    width = HEADS * 64
    specs = [((2, 12, width), S(("batch",), ("dp",))), ((width, 3 * width), S(("col",), ("tp",))),
             ((width, width), S(("row",), ("tp",)))]
    return [dist.tensor(shape, spec, mesh, dtype="f32", init="randn", seed=seed)
            for seed, (shape, spec) in enumerate(specs)]


def test_interp_is_the_default_and_is_listed():
    assert "interp" in backends.available()
    assert backends.current() is backends.get("interp")
    assert backends.current().name == "interp"


def test_the_toy_entry_point_backend_runs_the_demo_block_with_the_oracles_bits(toy):
    assert "toy" in backends.available()
    x, Wqkv, Wo = _demo_inputs()
    reference = tp_block(x, Wqkv, Wo).numpy()
    before = toy.counts.copy()
    with backends.use("toy"):
        got = tp_block(x, Wqkv, Wo).numpy()
    assert _bits(got) == _bits(reference)
    ran = toy.counts - before
    assert ran["op:matmul"] >= 2 and ran["op:flash_attention"] >= 1 and ran["op:rmsnorm_safe"] >= 1
    assert ran["reduce"] == 1  # the reduce_scatter's fold, by the backend's communicator


def test_every_entry_point_runs_on_the_current_backend(toy):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    mesh = dist.Mesh(("tp",), range(2))
    d = dist.tensor((4, 4), dist.ShardSpec(("row",), ("tp",)), mesh, data=np.ones((4, 4), np.float32))

    @tr.jit
    def f(x):
        return op.matmul(x, op.transpose(x, (1, 0)))

    @op.kernel
    def k(x):
        return x + x

    cases = {
        "eager op": lambda: op.add(a, a),
        "jit": lambda: f(a),
        "eager dist op and collective": lambda: dist.all_reduce(op.sum(d, axis=0), axis="tp"),
        "grad": lambda: tr.grad(lambda x: op.sum(x * x))(a),
        "@op.kernel": lambda: k(a),
        "lowered program": lambda: lowering.lower(f.trace(a)).run(a),
        "schedule": lambda: lowering.run_schedule(lowering.graph_to_schedule(f.trace(a)), a),
    }
    for name, run in cases.items():
        expected = run()
        before = toy.counts.copy()
        with backends.use(toy):
            got = run()
        ran = toy.counts - before
        assert ran["op"] + ran["launch"] > 0, f"{name} did not run on the current backend"
        flat = lambda v: [np.asarray(getattr(x, "numpy", lambda: x)()) for x in (v if isinstance(v, (list, tuple)) else [v])]
        for e, g in zip(flat(expected), flat(got)):
            if isinstance(e, np.ndarray) and e.dtype != object:
                assert _bits(e) == _bits(g), name
    before = toy.counts.copy()
    with backends.use(toy):
        k(a)
    assert (toy.counts - before)["launch"] == 1  # one elementwise kernel


n = symbols("n")


@kernel
def scale(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i]


def test_kernel_launches_go_through_the_backend(toy):
    x = np.arange(200, dtype=np.float32)
    y = np.zeros(200, np.float32)
    before = toy.counts.copy()
    with backends.use("toy"):
        report = scale(x, y, 2.0, grid=2, lanes=128)
    assert (toy.counts - before)["launch"] == 1
    assert np.array_equal(report.outputs["y"], 2 * x)


def test_jit_backend_argument_wins_over_the_block(toy):
    a = np.ones(4, np.float32)
    pinned = tr.jit(lambda x: x * 3.0, backend="interp")
    before = toy.counts.copy()
    with backends.use("toy"):
        assert np.array_equal(np.asarray(pinned(a)), np.full(4, 3.0, np.float32))
    assert (toy.counts - before)["op"] == 0
    on_toy = tr.jit(lambda x: x * 3.0, backend=toy)
    on_toy(a)
    assert (toy.counts - before)["op:mul"] == 1


def test_the_choice_is_per_thread(toy):
    seen, barrier = {}, threading.Barrier(2)

    def worker(name):
        with backends.use(name):
            barrier.wait()
            for _ in range(200):
                if backends.current().name != name:
                    seen[name] = backends.current().name
                    return
            seen[name] = name

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("interp", "toy")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"interp": "interp", "toy": "toy"}
    assert backends.current().name == "interp"


def test_unknown_duplicate_and_wrong_backends_are_backend_errors():
    with pytest.raises(BackendError, match="no backend named 'nope'.*interp"):
        backends.get("nope")
    with pytest.raises(BackendError, match="no backend named"):
        with backends.use("nope"):
            pass
    with pytest.raises(BackendError, match="already registered"):
        backends.register("interp", backends.get("interp"))
    backends.register("not-a-backend", lambda: object())
    with pytest.raises(BackendError, match="not a tessera_ref Backend"):
        backends.get("not-a-backend")
    with pytest.raises(BackendError, match="by name or Backend object"):
        backends.get(3)


def test_a_broken_entry_point_is_a_backend_error(tmp_path, monkeypatch):
    root = write_toy_distribution(tmp_path / "broken", target="no_such_module_here:Backend")
    (root / "toy_backend-0.1.dist-info" / "entry_points.txt").write_text(
        "[tessera_ref.backends]\nbroken-toy = no_such_module_here:Backend\n")
    monkeypatch.syspath_prepend(str(root))
    assert "broken-toy" in backends.available()
    with pytest.raises(BackendError, match="broken-toy.*failed to load.*ModuleNotFoundError"):
        backends.get("broken-toy")


def test_a_backend_must_implement_the_interface():
    class Half(Backend):
        name = "half"

        def run_op(self, call, *operands):
            return ()

    with pytest.raises(TypeError, match="launch"):
        Half()


def test_every_collective_moves_data_through_the_backends_communicator(toy):
    mesh = dist.Mesh(("pp", "tp"), range(4), (2, 2))
    x = dist.tensor((4, 4), dist.ShardSpec(("row",), ("tp",)), mesh, data=np.arange(16, dtype=np.float32).reshape(4, 4))
    stage0, stage1 = mesh.sub(pp=0), mesh.sub(pp=1)
    y = dist.tensor((4, 4), dist.ShardSpec(("row",), ("tp",)), stage0, data=np.ones((4, 4), np.float32))
    calls = {
        "all_gather": lambda: dist.all_gather(x, axis="tp"),
        "reduce": lambda: dist.all_reduce(op.sum(x, axis=0), axis="tp"),
        "broadcast": lambda: dist.broadcast(x, axis="tp", root=1),
        "permute": lambda: dist.permute(x, axis="tp", perm=1),
    }
    for kind, call in calls.items():
        expected = call().numpy()
        before = toy.counts.copy()
        with backends.use(toy):
            got = call().numpy()
        assert (toy.counts - before)[kind] >= 1, kind
        assert _bits(got) == _bits(expected), kind
    before = toy.counts.copy()
    with backends.use(toy), dist.mailbox_scope():
        dist.send(y, stage1)
        received = dist.recv(stage0, stage1)
    assert ((toy.counts - before)["send"], (toy.counts - before)["recv"]) == (1, 1)
    assert received.mesh == stage1 and np.array_equal(received.numpy(), np.ones((4, 4), np.float32))


def test_listeners_hear_every_collective_and_paused_silences_them():
    mesh = dist.Mesh(("tp",), range(4))
    x = dist.tensor((8, 4), dist.ShardSpec(("row",), ("tp",)), mesh, data=np.ones((8, 4), np.float32))

    class Ear:
        def __init__(self):
            self.heard = []

        def record_collective(self, kind, groups, nbytes, axis=None):
            self.heard.append((kind, len(groups), nbytes, axis))

        def record_compute(self, devices, name, cost, fmt, location=None):
            self.heard.append(("compute", name))

        def record_transfer(self, src, dst, nbytes):
            self.heard.append(("transfer", nbytes))

    ear = Ear()
    with dist.listen(ear):
        dist.all_gather(x, axis="tp")
        with sim.paused():
            dist.all_gather(x, axis="tp")
    dist.all_gather(x, axis="tp")
    assert ear.heard == [("all_gather", 1, 8 * 4 * 4, "tp")]


def test_tessera_ref_backends_lists_the_entry_point_backend(toy_path):
    root = Path(tr.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_path), str(root)])}
    out = subprocess.run([sys.executable, "-m", "tessera_ref", "backends"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "interp" in out.stdout and "(default)" in out.stdout
    assert "toy" in out.stdout and "counts ops, launches and collectives" in out.stdout
    assert "entry point toy_backend:CountingBackend (toy-backend 0.1)" in out.stdout
    rows = json.loads(subprocess.run([sys.executable, "-m", "tessera_ref", "backends", "--json"],
                                     capture_output=True, text=True, env=env, check=True).stdout)
    defaults = {r["name"]: r["default"] for r in rows}
    assert defaults["interp"] is True and defaults["toy"] is False and sum(defaults.values()) == 1


def test_jit_takes_callable_objects_as_well_as_functions():
    class Double:
        def __call__(self, x):
            return x * 2.0

    f = tr.jit(Double())
    assert np.array_equal(np.asarray(f(np.ones(3, np.float32))), np.full(3, 2.0, np.float32))
    assert 'sym_name = "Double"' in f.inspect_ir("graph")
