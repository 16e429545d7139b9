"""A stand-in for CuPy whose device is the CUDA-on-CPU harness (CUDA-CHECK-4).

``tessera-ref gpu-check --dry-run`` runs every stage against it, so CI proves the command
itself — its stages, isolation, time bounds and report — on every commit. It has the part of
CuPy the check and the ``"cuda"`` backend use, with CuPy's rules where they matter to them:
``asarray`` refuses dtypes that are not NumPy's own (bf16 and fp8 move as their bits, as on a
real device); a ``RawModule`` loads a cubin file, and calling one of its functions runs the
kernel of the CUDA C that cubin was built from in the harness (one lockstep run, cp.async
deferred), with CuPy's launch signature ``(grid, block, args, shared_mem=)``; launches on a
capturing stream are recorded into a graph and run when it is launched; events read the host
clock. The cubin-to-source table is filled by :func:`install`, which wraps the NVRTC build
of this process. There is no cuBLAS, NCCL or sanitizer here: what needs them is skipped.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np

from ..backends.cuda import compile as cuda_compile
from ..backends.cuda import fake_cupy, runtime
from ..backends.cuda.cpu import build as cpu_build
from ..backends.cuda.cpu import harness
from ..numerics import tc

__all__ = ["FakeCupy", "install", "runtime_backend", "DEVICE_NAME"]

DEVICE_NAME = "CUDA-on-CPU harness (dry run)"


class _Pointer:
    def __init__(self, array: np.ndarray):
        self.ptr = array.ctypes.data


class FakeArray(np.ndarray):
    """A device array: host memory, with CuPy's ``get()`` and ``data.ptr``."""

    def get(self) -> np.ndarray:
        return np.array(self)

    @property
    def data(self):  # CuPy's MemoryPointer; NumPy's buffer is not what callers want
        return _Pointer(self)


def _device(host) -> FakeArray:
    arr = np.asarray(host)
    if arr.dtype.type.__module__ != "numpy":  # CuPy 14: "Unsupported dtype float8_e5m2"
        raise ValueError(f"Unsupported dtype {arr.dtype}")
    return np.array(arr).view(FakeArray)


class _Source:
    """What the harness needs of a CUDA C program (its text; no Tile IR locations)."""

    def __init__(self, text: str):
        self.text, self.locations = text, {}


class _Function:
    def __init__(self, fake, source, name: str):
        self._fake, self._source, self.name = fake, source, name
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        stream = stream or self._fake._current
        if stream is not None and stream.capturing:
            stream.captured.append((self, grid, block, args, shared_mem))
            return
        self._run(grid, block, args, shared_mem)

    def _run(self, grid, block, args, shared_mem):
        grid = tuple(grid) if np.ndim(grid) else (grid,)
        block = tuple(block) if np.ndim(block) else (block,)
        if tuple(block[1:]) not in ((), (1,), (1, 1)):
            raise ValueError(f"the harness runs 1-D blocks; got {block}")
        if shared_mem > 48 * 1024 and shared_mem > self.max_dynamic_shared_size_bytes:
            raise RuntimeError(f"CUDA_ERROR_INVALID_VALUE: {shared_mem} bytes of dynamic shared memory without "
                               "max_dynamic_shared_size_bytes")
        buffers = [np.asarray(a) if isinstance(a, FakeArray) else np.asarray(a).reshape(1) for a in args]
        lib = cpu_build.library(self._source, [self.name])
        harness.run(lib, self.name, grid, int(block[0]), buffers, int(shared_mem),
                    harness.Options(schedule="lockstep", cp_async="deferred", tc=_tc_options(self._source.text, self.name)),
                    self._source)


_MMA = re.compile(r"tsr_mma_m16n8k(?:16|32)_(bf16|f16|e4m3|e5m2)")


def _tc_options(text: str, kernel: str):
    """The instruction the harness's mma.sync computes for ``kernel``'s inputs (a resolved
    ``BlockFMA``): the device's (sm_90's) tensor-core model, as the GPU would (None without
    mma.sync). The format is the one mma of the text, or the one a macro instantiates
    ``kernel`` with."""
    found = set(_MMA.findall(text))
    if len(found) > 1:
        found = set(re.findall(rf"\b{re.escape(kernel)}\s*,\s*tsr_mma_m16n8k(?:16|32)_(\w+)", text))
    if len(found) != 1:
        return None
    fmt = found.pop()
    fmt = {"e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2"}.get(fmt, fmt)
    return tc.model("tc:sm90").block(fmt).resolved(fmt)


class _Module:
    def __init__(self, fake, path: str):
        cubin = Path(path).read_bytes()
        if cubin not in fake.sources:
            raise RuntimeError(f"CUDA_ERROR_INVALID_IMAGE: {path} was not built by this process")
        self._fake, self._source = fake, fake.sources[cubin]

    def get_function(self, name: str) -> _Function:
        if not re.search(rf"\b{re.escape(name)}\b", self._source.text):
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: no kernel {name}")
        return _Function(self._fake, self._source, name)


class _Graph:
    def __init__(self, launches):
        self.launches = list(launches)

    def launch(self, stream=None):
        for fn, grid, block, args, smem in self.launches:
            fn._run(grid, block, args, smem)


class _Stream:
    def __init__(self, fake, non_blocking=False):
        self._fake, self.capturing, self.captured, self.ptr = fake, False, [], id(self)

    def __enter__(self):
        self._saved, self._fake._current = self._fake._current, self
        return self

    def __exit__(self, *exc):
        self._fake._current = self._saved

    def begin_capture(self):
        self.capturing, self.captured = True, []

    def end_capture(self) -> _Graph:
        self.capturing = False
        return _Graph(self.captured)

    def synchronize(self):
        pass

    done = True


class _Event:
    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass


class FakeCupy:
    """The module object standing in for ``cupy`` (see the module docstring)."""

    __version__ = "dry-run"
    float16, float32, float64, uint8, uint16, uint32 = np.float16, np.float32, np.float64, np.uint8, np.uint16, np.uint32

    def __init__(self):
        self.sources: dict[bytes, _Source] = {}
        self._current = None
        fake = self

        class _Device:
            compute_capability = "90"

            def __init__(self, index=0):
                self.id = index

            def synchronize(self):
                pass

            def use(self):
                pass

        class _Runtime:
            @staticmethod
            def getDeviceCount():
                return 1

            @staticmethod
            def getDeviceProperties(index):
                return {"name": DEVICE_NAME.encode(), "major": 9, "minor": 0, "totalGlobalMem": 1 << 30,
                        "multiProcessorCount": 1}

            @staticmethod
            def driverGetVersion():
                return 0

            @staticmethod
            def runtimeGetVersion():
                return 0

        class _Cuda:
            Device, runtime = _Device, _Runtime

            @staticmethod
            def is_available():
                return True

            @staticmethod
            def Stream(non_blocking=False):
                return _Stream(fake, non_blocking)

            Event = _Event

            @staticmethod
            def get_elapsed_time(start, stop) -> float:
                return (stop.t - start.t) * 1e3

        class _Random:
            @staticmethod
            def default_rng(seed):
                rng = np.random.default_rng(seed)

                class _Gen:
                    @staticmethod
                    def random(n, dtype=np.float64):
                        return _device(rng.random(n, dtype=dtype))
                return _Gen

        self.cuda, self.random = _Cuda, _Random

    def RawModule(self, path: str) -> _Module:
        return _Module(self, path)

    @staticmethod
    def asarray(host) -> FakeArray:
        return _device(host)

    @staticmethod
    def asnumpy(a) -> np.ndarray:
        return np.array(a)

    @staticmethod
    def empty(shape, dtype=np.float32) -> FakeArray:
        """Poisoned (every byte 0xFF: NaN or all ones), so an element a kernel fails to write shows."""
        shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return _device(np.full(count, 0xFF, np.uint8).view(dtype).reshape(shape))

    @staticmethod
    def empty_like(a) -> FakeArray:
        return FakeCupy.empty(a.shape, a.dtype)

    @staticmethod
    def exp(a):
        return np.exp(a)

    @staticmethod
    def matmul(a, b):
        return np.matmul(a, b)

    @staticmethod
    def copyto(dst, src):
        np.copyto(dst, src)


def install() -> FakeCupy:
    """Make this process's ``"cuda"`` backend and the check's launches use a :class:`FakeCupy`
    (its device: the harness); every NVRTC build of the process registers its source so that
    a RawModule of its cubin can run. Returns the stand-in."""
    fake = FakeCupy()
    real_build = cuda_compile.build

    def build(source, arch="sm_90"):
        b = real_build(source, arch)
        fake.sources[b.cubin] = source if hasattr(source, "text") else _Source(source)
        return b

    cuda_compile.build = runtime.build = build
    runtime._cupy = lambda: fake
    return fake


def runtime_backend():
    """The ``"cuda"`` backend's own code — the runtime's ``CudaDevice`` — over the runtime's
    CuPy test double (:mod:`tessera_ref.backends.cuda.fake_cupy`), whose kernels also run on
    the harness: what the dry run's program stages run on."""
    double = fake_cupy.FakeCupy()
    return runtime.CudaBackend(cupy=double, build_fn=double.build)
