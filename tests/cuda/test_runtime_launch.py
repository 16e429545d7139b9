"""CUDA-RUN-2 without a GPU: the backend "cuda" driven through a stand-in for CuPy whose
"device" runs each launched function in the tile interpreter, from the arguments exactly as
the backend passes them (device buffers, scalars, symbolic sizes, grid, block). What this
checks is the launch contract — parameter order, the bits of bf16/fp8 buffers, sizes, the
copy back of ``mut`` buffers, the program's results — not the GPU's arithmetic (the
``gpu``-marked tests in test_runtime.py do that)."""
from pathlib import Path

import numpy as np
import pytest

from cuda_programs import needs_toolchain, on_the_interpreter
from tessera_ref import backends
from tessera_ref.backends.cuda import runtime
from tessera_ref.interp.tile import run as run_tile
from tessera_ref.ir import TensorType
from tessera_ref.ir import tile as T

pytestmark = needs_toolchain


class _Array:
    def __init__(self, host):
        self.data = np.array(host)

    def get(self):
        return self.data.copy()


class _Function:
    def __init__(self, module, name, calls):
        self.module, self.name, self.calls = module, name, calls

    def __call__(self, grid, block, args, shared_mem=0):
        func = next(op for op in self.module.body if T.is_kernel(op) and op.attributes["sym_name"] == self.name)
        params = func.regions[0].entry.args
        sizes = list(func.attributes.get("tile.sizes", {}))
        assert len(args) == len(params) + len(sizes) and len(grid) == 3 and block[1:] == (1, 1)
        buffers, bound = [], {}
        for p, a in zip(params, args):
            if isinstance(p.type, TensorType) and p.type.rank > 0:
                assert isinstance(a, _Array)
                host = a.data.view(p.type.dtype)  # the bits the backend copied
                for d, n in zip(p.type.shape, host.shape):
                    if isinstance(d, str):
                        bound[d] = n
                buffers.append(host)
            else:
                buffers.append(a)
        assert [int(a) for a in args[len(params):]] == [bound[s] for s in sizes]  # sizes, as long
        self.calls.append((self.name, grid, block, shared_mem))
        run_tile(self.module, buffers, grid=grid, lanes=block[0], func=self.name, checks=True, counters=False)


class _FakeCupy:
    """Just the CuPy surface the backend uses; the module of a cubin is looked up by its bytes."""

    def __init__(self, modules, calls):
        fake = self

        class _Device:
            compute_capability = "90"

            def synchronize(self):
                pass

        class _Cuda:
            Device = _Device

            @staticmethod
            def is_available():
                return True

        class _RawModule:
            def __init__(self, path):
                self.module = modules[Path(path).read_bytes()]

            def get_function(self, name):
                return _Function(self.module, name, fake.calls)

        self.cuda, self.RawModule, self.calls = _Cuda, _RawModule, calls

    @staticmethod
    def asarray(host):
        if np.asarray(host).dtype.type.__module__ != "numpy":  # CuPy 14: "Unsupported dtype float8_e5m2"
            raise ValueError(f"Unsupported dtype {np.asarray(host).dtype}")
        return _Array(host)


@pytest.fixture
def fake_cuda(monkeypatch):
    modules, calls, last = {}, [], {}
    real_render, real_build = runtime.render, runtime.build

    def render(module):
        last["module"] = module
        return real_render(module)

    def build(source, arch):
        b = real_build(source, arch)
        modules[b.cubin] = last["module"]
        return b

    monkeypatch.setattr(runtime, "render", render)
    monkeypatch.setattr(runtime, "build", build)
    monkeypatch.setattr(runtime, "_cupy", lambda: _FakeCupy(modules, calls))
    return runtime.CudaBackend(), calls


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.parametrize("name", ["softmax", "elementwise_bf16", "elementwise_e4m3", "matmul_f32", "layernorm",
                                  "softmax_e5m2", "cast_e5m2_e4m3_rdown"])
def test_a_program_through_the_launch_contract_gives_the_interpreters_bits(fake_cuda, name):
    backend, calls = fake_cuda
    program, inputs, want = on_the_interpreter(name, 5)
    with backends.use(backend):
        got, reports = program.run(*inputs)
    kernels = [p for _, p in program.steps if p is not None]
    assert [c[0] for c in calls] == [p.func.attributes["sym_name"] for p in kernels]
    assert [c[2][0] for c in calls] == [p.lanes for p in kernels]
    assert all(r.checks is False and r.arch == "sm_90" and r.registers > 0 for r in reports)
    for g, w in zip(got, want):
        assert np.array_equal(_bits(g), _bits(w)), name


def test_an_op_runs_through_lower_op_on_the_backend(fake_cuda):
    backend, calls = fake_cuda
    from tessera_ref import jit, op
    x = np.linspace(-3, 3, 64 * 32, dtype=np.float32).reshape(64, 32)
    f = jit(lambda x: op.softmax(op.rmsnorm_safe(x)))
    with backends.use("interp"):
        want = np.asarray(f(x).numpy())
    with backends.use(backend):
        got = np.asarray(f(x).numpy())
    assert len(calls) == 2 and np.array_equal(_bits(got), _bits(want))


def test_a_mesh_is_refused(fake_cuda):
    backend, _ = fake_cuda
    from tessera_ref.errors import BackendError
    with pytest.raises(BackendError, match="single-device"):
        backend.communicator(object())
