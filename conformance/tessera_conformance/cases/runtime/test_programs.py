"""RUNTIME-PROG, RUNTIME-MEM-1, RUNTIME-HOST-1, RUNTIME-COUNT-1 as a user sees them: a function
called again replays with new values and the oracle's bits, compiles nothing the second time,
keeps device values on the device, and an op without a kernel is refused or run — never
silently wrong. On the oracle (no device) the device clauses are not applicable."""
import numpy as np
import pytest

from tessera_ref import backends, jit, op, runtime
from tessera_ref.errors import BackendError
from tessera_conformance import assert_bits, clause, not_applicable, run

RNG = np.random.default_rng(26)
X = RNG.standard_normal((8, 64)).astype(np.float32)
Y = RNG.standard_normal((8, 64)).astype(np.float32)


def _kernels(x):
    return op.softmax(op.rmsnorm_safe(x)) * 2.0


def _device(backend):
    device = getattr(backends.get(backend), "device", None)
    if device is None:
        not_applicable(f"{backend} has no device")
    return device


@clause("RUNTIME-PROG-4")
def test_a_second_call_replays_with_new_values(backend):
    f = jit(_kernels, backend=backend)
    assert_bits(run(backend, f, X), run("interp", _kernels, X), "first call")
    assert_bits(run(backend, f, Y), run("interp", _kernels, Y), "second call, new values")
    assert_bits(run(backend, f, X), run("interp", _kernels, X), "third call, the first values again")


@clause("RUNTIME-PROG-1")
def test_the_same_signature_compiles_nothing_the_second_time(backend):
    f = jit(_kernels, backend=backend)
    run(backend, f, X)
    with runtime.counting() as c:
        run(backend, f, Y)
    assert (c.lowerings, c.renders, c.compiles) == (0, 0, 0) and c.replays == 1


@clause("RUNTIME-PROG-3")
def test_a_reshape_inside_a_program(backend):
    def fn(x):
        return op.softmax(op.reshape(op.rmsnorm_safe(x), (16, 32)))
    assert_bits(run(backend, fn, X), run("interp", fn, X))


@clause("RUNTIME-MEM-1")
def test_device_values_stay_on_the_device(backend):
    device = _device(backend)
    x = runtime.device_put(X, device)
    assert_bits(np.asarray(x), X, "device_put and back")
    f = jit(_kernels, backend=backend)
    try:
        y = f(f(x))
    except BackendError as exc:
        pytest.skip(f"unsupported: {exc.what}")
    assert isinstance(y, runtime.DeviceArray) and y.device is device
    assert_bits(y.numpy(), run("interp", lambda v: _kernels(_kernels(v)), X))


@clause("RUNTIME-COUNT-1")
def test_only_inputs_and_outputs_cross_after_warm_up(backend):
    f = jit(_kernels, backend=backend)
    want = run(backend, f, X)
    with runtime.counting() as c:
        run(backend, f, Y)
    if getattr(backends.get(backend), "device", None) is None:
        assert (c.h2d_bytes, c.d2h_bytes) == (0, 0)
    else:
        assert (c.h2d_bytes, c.d2h_bytes) == (Y.nbytes, np.asarray(want).nbytes)


@clause("RUNTIME-HOST-1")
def test_an_op_without_a_kernel_is_refused_or_right(backend):
    def fn(x):  # a transpose (no kernel family) and an exact scaling
        return op.transpose(x, (1, 0)) * 2.0
    try:
        with backends.use(backend):
            got = np.asarray(jit(fn)(X))
    except BackendError as exc:
        assert "transpose" in exc.what and "test_programs.py" in (exc.location or "")
        return
    assert_bits(got, run("interp", fn, X))


def _two_kernels(x):
    return op.softmax(op.rmsnorm_safe(x)) * 2.0 + 1.0


@clause("RUNTIME-DEV-1")
def test_a_device_backend_has_a_device_and_runs_one(backend):
    device = _device(backend)
    assert device.allocator is not None and device.compiler is not None
    if backend != "interp-tiles":
        with pytest.raises(BackendError, match="single-device"):
            backends.get(backend).communicator(object())


def _second_call_counts(backend):
    """The runtime's counters of a compiled function's second call (the first warms it up)."""
    _device(backend)
    f = jit(_two_kernels, backend=backend)
    run(backend, f, X)
    with runtime.counting() as c:
        run(backend, f, Y)
    return c


@clause("RUNTIME-DEV-2")
def test_after_warm_up_nothing_is_allocated(backend):
    assert _second_call_counts(backend).allocations == 0


@clause("RUNTIME-DEV-3")
def test_the_same_library_is_compiled_once(backend):
    _device(backend)
    run(backend, jit(_two_kernels, backend=backend), X)
    with runtime.counting() as c:
        run(backend, jit(_two_kernels, backend=backend), X)  # a new function, the same source
    assert (c.lowerings, c.renders, c.compiles) == (1, 1, 0)


@clause("RUNTIME-DEV-4")
def test_a_kernel_launch_with_scalars_and_sizes(backend):
    from tessera_ref import kernel
    k = kernel.from_source('''
@kernel
def axpy(x: f32[n], y: mut f32[n], a: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = a * x[i] + y[i]
''')
    x = np.arange(100, dtype=np.float32) / 8
    got, want = np.ones(100, np.float32), np.ones(100, np.float32)
    with backends.use("interp"):
        k(x, want, np.float32(0.5), grid=2, lanes=64)
    try:
        with backends.use(backend):
            k(x, got, np.float32(0.5), grid=2, lanes=64)
    except BackendError as exc:
        pytest.skip(f"unsupported: {exc.what}")
    assert_bits(got, want)


@clause("RUNTIME-DEV-5")
def test_a_replay_launches_every_kernel_of_the_list(backend):
    c = _second_call_counts(backend)
    assert c.replays == 1 and c.graph_launches == 3 and c.launches == 0  # rmsnorm, softmax, the fused * 2 + 1


@clause("RUNTIME-PROG-2")
def test_a_whole_function_is_one_library_and_its_constants_cross_once(backend):
    _device(backend)
    f = jit(_two_kernels, backend=backend)
    with runtime.counting() as first:
        run(backend, f, X)
    with runtime.counting() as again:
        run(backend, f, Y)
    assert (first.lowerings, first.renders) == (1, 1)
    assert first.h2d_bytes == X.nbytes + 8 and again.h2d_bytes == Y.nbytes  # the constants 2.0 and 1.0 once


@clause("RUNTIME-MEM-3")
def test_the_plan_peak_is_the_simulated_machines(backend):
    from tessera_ref import dist, sim
    from tessera_ref.runtime import Program
    device = _device(backend)
    w = RNG.standard_normal((64, 48)).astype(np.float32)

    def fn(x, v):
        return op.softmax(op.matmul(op.rmsnorm_safe(x), v))
    func = jit(fn).trace(X, w).body.first_op
    try:
        plan = Program.compile(func, [func.regions[0].entry.args[0].type, func.regions[0].entry.args[1].type],
                               device).memory
    except BackendError as exc:
        pytest.skip(f"unsupported: {exc.what}")
    machine = sim.machine("H100", devices=1)
    with sim.use(machine):
        mesh = dist.Mesh(("d",), machine.device_names[:1])
        jit(fn)(dist.tensor(X.shape, None, mesh, data=X), dist.tensor(w.shape, None, mesh, data=w))
    assert machine.memory.peak(0) == plan.peak_bytes == X.nbytes + w.nbytes + X.nbytes + 8 * 48 * 4  # h, logits


@clause("RUNTIME-BACKEND-1")
def test_an_eager_op_is_a_program_compiled_once(backend):
    _device(backend)
    want = run("interp", lambda v: op.softmax(v), X)
    try:
        with backends.use(backend):
            op.softmax(X)
            with runtime.counting() as c:
                got = np.asarray(op.softmax(Y))
                got = np.asarray(op.softmax(X))
    except BackendError as exc:
        pytest.skip(f"unsupported: {exc.what}")
    assert_bits(got, want)
    assert (c.lowerings, c.compiles, c.replays) == (0, 0, 2)


@clause("RUNTIME-BACKEND-2")
def test_a_kernel_launch_copies_its_mut_buffers_back(backend):
    from tessera_ref import kernel
    k = kernel.from_source('''
@kernel
def twice(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] + x[i]
''')
    _device(backend)
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with backends.use(backend), runtime.counting() as c:
        k(x, y, grid=1, lanes=64)
    assert_bits(y, x * 2)
    assert c.launches == 1 and c.h2d_bytes == x.nbytes + y.nbytes and c.d2h_bytes == y.nbytes
