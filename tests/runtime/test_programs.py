"""RUNTIME-PROG, RUNTIME-MEM, RUNTIME-HOST, RUNTIME-COUNT: whole programs compiled once on
``interp-tiles`` and ``cuda-cpu`` and replayed — the counters prove compile-once and residency,
the bits are the interpreter's, the memory plan's peak is the simulated machine's."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import backends, dist, grad, op, runtime, sim
from tessera_ref.backends.cuda.cpu import CudaCpuBackend
from tessera_ref.demo import HEADS, attention_block
from tessera_ref.errors import BackendError, LayoutError, ShapeError
from tessera_ref.ir import ShardLayout
from tessera_ref.runtime import DeviceBackend, HostStep, Program

RNG = np.random.default_rng(0)
X = RNG.standard_normal((64, 32)).astype(np.float32)
W = RNG.standard_normal((32, 48)).astype(np.float32)


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def _backend(name, allow_host=False):
    device = CudaCpuBackend("lockstep", "deferred").device if name == "cuda-cpu" else backends.get(name).device
    return DeviceBackend(device, name, allow_host=allow_host)


def _kernels_only(x, w):
    return op.softmax(op.matmul(op.rmsnorm_safe(x), w)) * 2.0 + 1.0


@pytest.mark.parametrize("name", ["interp-tiles", "cuda-cpu"])
def test_after_warm_up_a_call_is_one_replay_and_only_inputs_and_outputs_cross(name):
    f = tr.jit(_kernels_only)
    want = np.asarray(f(X, W))
    with backends.use(_backend(name)):
        with runtime.counting() as first:
            f(X, W)
        with runtime.counting() as c:
            got = np.asarray(f(X, W))
    assert (first.lowerings, first.renders, first.compiles) == (1, 1, 1)
    assert (c.lowerings, c.renders, c.compiles, c.launches, c.replays, c.host_steps) == (0, 0, 0, 0, 1, 0)
    assert c.graph_launches == 4 and c.allocations == 0  # rmsnorm, matmul, softmax, the fused * 2 + 1
    assert (c.h2d_bytes, c.d2h_bytes) == (X.nbytes + W.nbytes, want.nbytes)
    assert np.array_equal(_bits(got), _bits(want))


def _demo_inputs():
    E = HEADS * 4
    return [RNG.standard_normal(s).astype(np.float32) / d for s, d in (((1, 32, E), 1), ((E, 3 * E), 8), ((E, E), 8))]


def _host_bytes(program):
    steps = [i for i in program.graph.items if isinstance(i, HostStep)]
    return sum(s.nbytes for h in steps for s in h.outs), sum(s.nbytes for h in steps for s in h.ins)


def _check_demo(name, fn, inputs):
    want = fn(*inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    backend = _backend(name, allow_host=True)
    with backends.use(backend):
        fn(*inputs)
        with runtime.counting() as c:
            got = fn(*inputs)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    assert all(np.array_equal(_bits(g), _bits(w)) for g, w in zip(got, want))
    program = backend.program(fn.trace(*inputs).body.first_op, [tr.asarray(a).type for a in inputs])
    into, out_of = _host_bytes(program)
    assert (c.lowerings, c.renders, c.compiles, c.replays) == (0, 0, 0, 1)
    assert c.host_steps == len(program.host_steps) and c.graph_launches == program.graph.launches
    assert c.h2d_bytes == sum(a.nbytes for a in inputs) + into  # inputs and what host steps give back
    assert c.d2h_bytes == sum(np.asarray(w).nbytes for w in want) + out_of  # outputs and host steps' operands
    return program


@pytest.mark.parametrize("name", ["interp-tiles", "cuda-cpu"])
def test_the_demo_block_is_resident_but_for_its_counted_host_steps(name):
    program = _check_demo(name, tr.jit(attention_block), _demo_inputs())
    assert [n for n, _ in program.host_steps] == ["split_qkv", "transpose"]  # reshape is a view
    assert program.graph.launches == 4 and all("demo.py" in where for _, where in program.host_steps)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["interp-tiles", "cuda-cpu"])
def test_the_demo_blocks_backward_is_compiled_once_and_resident(name):
    step = tr.jit(grad(lambda x, a, b: op.mean(attention_block(x, a, b) ** 2.0), argnums=(1, 2)))
    program = _check_demo(name, step, _demo_inputs())
    assert program.graph.launches > len(program.host_steps)


def test_an_op_without_a_kernel_is_refused_at_compile_time_naming_it_and_the_line():
    f = tr.jit(lambda x: op.transpose(x) + 1.0)
    with backends.use("interp-tiles"), pytest.raises(BackendError, match=r"no kernel for transpose \(tensor<64x32xf32>") \
            as info:
        f(X)
    assert "test_programs.py" in info.value.location and "allow_host=True" in info.value.fix


def test_a_new_signature_compiles_again_and_a_wrong_one_names_the_line():
    f = tr.jit(lambda x: op.softmax(x))
    backend = _backend("interp-tiles")
    with backends.use(backend), runtime.counting() as c:
        f(X)
        f(X[:32].copy())
        f(X)
    assert (c.lowerings, c.replays) == (2, 3)
    program = backend.program(f.trace(X).body.first_op, [tr.asarray(X).type])
    with pytest.raises(ShapeError, match=r"argument 0: expected tensor<64x32xf32>, got shape \(32, 32\)") as info:
        program(X[:32].copy())
    assert "test_programs.py" in info.value.location


def test_device_arrays_stay_resident_and_copy_out_once_counted():
    backend = _backend("interp-tiles")
    f = tr.jit(lambda x: x * 2.0)
    x = runtime.device_put(X, backend)
    with backends.use(backend), runtime.counting() as c:
        y = f(f(x))
        host = y.numpy()
    assert isinstance(y, runtime.DeviceArray) and (c.h2d_bytes, c.d2h_bytes) == (4, X.nbytes)  # 4: the constant
    assert np.array_equal(host, X * 4)


def test_the_memory_plan_reuses_the_arena_and_its_peak_is_the_simulated_machines():
    """Three kernels, no fused chain and no view: the simulated machine runs the same values."""
    f = tr.jit(lambda x, w: op.softmax(op.matmul(op.rmsnorm_safe(x), w)))
    types = [tr.asarray(X).type, tr.asarray(W).type]
    program = Program.compile(f.trace(X, W).body.first_op, types, backends.get("interp-tiles").device)
    plan = program.memory
    h, logits, out = 64 * 32 * 4, 64 * 48 * 4, 64 * 48 * 4
    assert plan.peak_bytes == X.nbytes + W.nbytes + logits + out
    assert plan.arena_bytes == h + logits  # h and the logits overlap in time; the output has its own buffer
    machine = sim.machine("H100", devices=1)
    with sim.use(machine):
        mesh = dist.Mesh(("d",), machine.device_names[:1])
        f(dist.tensor(X.shape, None, mesh, data=X), dist.tensor(W.shape, None, mesh, data=W))
    assert machine.memory.peak(0) == plan.peak_bytes


def test_counting_blocks_nest_and_totals_grow():
    f = tr.jit(lambda x: op.softmax(x))
    before = runtime.totals().replays
    with backends.use(_backend("interp-tiles")), runtime.counting() as outer:
        f(X)
        with runtime.counting() as inner:
            f(X)
    assert (outer.replays, inner.replays) == (2, 1) and runtime.totals().replays == before + 2


def test_run_counters_prints_what_ran(tmp_path):
    import subprocess
    import sys
    script = tmp_path / "prog.py"
    script.write_text("import numpy as np\nimport tessera as tr\nfrom tessera import op, backends\n"
                      "f = tr.jit(lambda x: op.softmax(x))\nwith backends.use('interp-tiles'):\n"
                      "    for _ in range(3):\n        f(np.ones((4, 64), np.float32))\n")
    out = subprocess.run([sys.executable, "-m", "tessera_ref", "run", "--counters", str(script)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stderr.splitlines() if l.startswith("tessera-ref run: counters: "))
    assert "lowerings 1, renders 1, compiles 1, launches 0, replays 3, graph_launches 3" in line
    assert f"h2d_bytes {3 * 4 * 64 * 4:,}, d2h_bytes {3 * 4 * 64 * 4:,}" in line


def test_a_sharded_function_derives_its_rules_once_and_check_plan_derives_them_again(monkeypatch):
    from tessera_ref.dist import execute
    mesh = dist.Mesh(("tp",), range(2))
    w = dist.tensor((32, 48), dist.ShardSpec(("col",), ("tp",)), mesh, data=W)
    f = tr.jit(lambda x, w: op.softmax(op.matmul(x, w), axis=-1))
    want = f(X, w).numpy()
    derived = []
    real = execute.rule_of
    monkeypatch.setattr(execute, "rule_of", lambda *a: derived.append(a[0].name) or real(*a))
    assert np.array_equal(_bits(f(X, w).numpy()), _bits(want)) and derived == []  # nothing derived again
    monkeypatch.setenv("TESSERA_CHECK_PLAN", "1")
    assert np.array_equal(_bits(f(X, w).numpy()), _bits(want)) and "matmul" in derived
    def replicated(*a):  # a rule that now says every result is whole on every device
        out, plan, layouts = real(*a)
        return out, plan, tuple(ShardLayout.replicated(lay.rank) for lay in layouts)
    monkeypatch.setattr(execute, "rule_of", replicated)
    with pytest.raises(LayoutError, match="TESSERA_CHECK_PLAN: tessera.graph.matmul derives another plan"):
        f(X, w)
