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
