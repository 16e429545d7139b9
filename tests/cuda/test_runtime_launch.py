"""CUDA-RUN-2 and the RUNTIME-* clauses of ``CudaDevice`` without a GPU: the backend "cuda"
driven through the CuPy test double (tessera_ref/backends/cuda/fake_cupy.py), whose "GPU" runs
each launched kernel's CUDA C on the CUDA-on-CPU harness. What this checks is CudaDevice's own
code — the launch contract (parameter order, bf16/fp8 buffers as their bits, sizes, grid,
block), the memory pool, asynchronous copies synchronized before the host reads them, graph
capture and replay with new bindings, the dynamic-shared-memory attribute, faults — not the
GPU's arithmetic (the ``gpu``-marked tests in test_runtime.py do that). The last tests plant
the bugs the double exists to catch (a line of CudaDevice deleted) and see them caught."""
import numpy as np
import pytest

import tessera_ref as tr
from cuda_programs import on_the_interpreter
from tessera_ref import backends, op, runtime
from tessera_ref.backends.cuda import runtime as cuda_runtime, toolchain
from tessera_ref.backends.cuda.fake_cupy import FakeCupy
from tessera_ref.backends.cuda.runtime import CudaBackend
from tessera_ref.errors import BackendError, OutOfMemoryError, ShapeError


@pytest.fixture
def fake_cuda():
    fake = FakeCupy()
    return CudaBackend(cupy=fake, build_fn=fake.build), fake


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def _same(got, want):
    return all(np.array_equal(_bits(g), _bits(w)) for g, w in zip(got, want))


@pytest.mark.parametrize("name", ["softmax", "elementwise_bf16", "elementwise_e4m3", "matmul_f32", "layernorm",
                                  "softmax_e5m2", "cast_e5m2_e4m3_rdown"])
def test_a_program_through_the_launch_contract_gives_the_interpreters_bits(fake_cuda, name):
    backend, fake = fake_cuda
    program, inputs, want = on_the_interpreter(name, 5)
    with backends.use(backend):
        got, reports = program.run(*inputs)
    kernels = [p for _, p in program.steps if p is not None]
    assert [c[0] for c in fake.calls] == [p.func.attributes["sym_name"] for p in kernels]
    assert [c[2][0] for c in fake.calls] == [p.lanes for p in kernels]
    assert all(r.checks is False and r.arch == "sm_90" for r in reports)
    assert all(r.registers > 0 for r in reports) or not toolchain.available()
    assert _same(got, want), name


def test_a_jit_function_compiles_once_and_replays_its_captured_graph(fake_cuda):
    backend, fake = fake_cuda
    x = np.linspace(-3, 3, 64 * 32, dtype=np.float32).reshape(64, 32)
    f = tr.jit(lambda x: op.softmax(op.rmsnorm_safe(x)))
    want = np.asarray(f(x))
    with backends.use(backend):
        first = np.asarray(f(x))
        with runtime.counting() as c:
            again = np.asarray(f(x))
        other = np.asarray(f(x[::-1].copy()))  # the same graph, new bindings
    assert _same([first, again], [want, want]) and _same([other], [np.asarray(f(x[::-1].copy()))])
    assert (c.lowerings, c.renders, c.compiles, c.replays, c.graph_launches, c.launches) == (0, 0, 0, 1, 2, 0)
    assert (c.h2d_bytes, c.d2h_bytes) == (x.nbytes, x.nbytes)
    assert fake.captures == 1 and fake.graph_launches == 3 and len(fake.calls) == 6


def test_device_arrays_stay_on_the_device_between_calls(fake_cuda):
    backend, fake = fake_cuda
    a = np.arange(256, dtype=np.float32).reshape(16, 16) / 7
    f = tr.jit(lambda x: x * 2.0 + 1.0)
    with backends.use(backend):
        x = runtime.device_put(a, backend)
        f(x)
        with runtime.counting() as c:
            y = f(f(x))
    assert isinstance(y, runtime.DeviceArray) and (c.h2d_bytes, c.d2h_bytes) == (0, 0)
    assert np.array_equal(np.asarray(y), (a * 2 + 1) * 2 + 1)


def _big_smem_attention():
    q = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float16)
    graph = tr.jit(lambda q, k, v: op.flash_attention(q, k, v, block_k=64)).trace(q, q, q)
    program = tr.lowering.lower(graph, dict(tile=(64, 64, 64), padding=1, async_copy=True, stages=2))
    with backends.use("interp"):
        want, _ = program.run(q, q, q)
    return program, [q, q, q], want


def test_a_kernel_over_48_kb_of_shared_memory_gets_its_attribute(fake_cuda):
    backend, fake = fake_cuda
    program, inputs, want = _big_smem_attention()
    with backends.use(backend):
        got, reports = program.run(*inputs)
    assert reports[0].dynamic_shared_bytes > cuda_runtime.STATIC_SMEM_MAX and _same(got, want)


def test_a_fault_names_the_kernel_and_the_device_takes_no_more_work(fake_cuda):
    backend, fake = fake_cuda
    k = tr.kernel.from_source('''
@kernel
def past_the_end(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    y[i + 4096] = x[i]
''')
    x = np.ones(64, np.float32)
    with backends.use(backend), pytest.raises(BackendError, match=r"faulted on the GPU.*past_the_end") as info:
        k(x, np.zeros(64, np.float32), grid=1, lanes=64)
    assert "cuda-cpu" in info.value.fix
    with backends.use(backend), pytest.raises(BackendError, match="context was lost"):
        tr.jit(lambda v: v + 1.0)(x)


def test_bad_input(fake_cuda):
    backend, fake = fake_cuda
    f = tr.jit(lambda x: x * 3.0)
    with pytest.raises(BackendError, match=r"single-device"):
        backend.communicator(object())
    elsewhere = runtime.device_put(np.ones(8, np.float32), "interp-tiles")
    program = backend.program(f.trace(np.ones(8, np.float32)).body.first_op, [elsewhere.type])
    with pytest.raises(BackendError, match=r"DeviceArray on interp-tiles.*runs on cuda") as info:
        program(elsewhere)
    assert "device_put" in info.value.fix
    with pytest.raises(ShapeError, match=r"argument 0: expected tensor<8xf32>, got shape \(9,\)") as info:
        program(np.ones(9, np.float32))
    assert "test_runtime_launch.py" in info.value.location
    small = FakeCupy(memory=4096)
    with pytest.raises(OutOfMemoryError, match=r"more than its 4 KiB; the largest value is %arg0 \(16 KiB, argument"):
        CudaBackend(cupy=small, build_fn=small.build).program(f.trace(np.ones(4096, np.float32)).body.first_op,
                                                                [tr.asarray(np.ones(4096, np.float32)).type])


# -- the double catches the bugs it exists for: a line of CudaDevice deleted ----------------

def _mutant(monkeypatch, what):
    if what == "no synchronize before the host reads":
        monkeypatch.setattr(cuda_runtime._Pool, "_copyout", lambda self, data, buf: (
            buf.base + buf.offset).copy_to_host_async(data.ctypes.data, buf.nbytes, self.device.stream_))
    elif what == "no max dynamic shared memory attribute":
        monkeypatch.setattr(cuda_runtime, "STATIC_SMEM_MAX", 10 ** 9)
    elif what == "arguments not copied into the captured graph":
        monkeypatch.setattr(cuda_runtime._CudaGraph, "inputs", property(lambda self: (), lambda self, v: None),
                            raising=False)


@pytest.mark.parametrize("what", ["no synchronize before the host reads", "no max dynamic shared memory attribute",
                                  "arguments not copied into the captured graph"])
def test_the_double_catches_a_deleted_line(monkeypatch, what):
    _mutant(monkeypatch, what)
    fake = FakeCupy()
    backend = CudaBackend(cupy=fake, build_fn=fake.build)
    program, inputs, want = _big_smem_attention()
    try:
        with backends.use(backend):
            got, _ = program.run(*inputs)
            got2, _ = program.run(*[x[::-1].copy() for x in inputs])
    except Exception as exc:  # the double refused what CUDA refuses
        assert what != "no synchronize before the host reads", exc
        return
    with backends.use("interp"):
        want2, _ = program.run(*[x[::-1].copy() for x in inputs])
    assert not (_same(got, want) and _same(got2, want2))
