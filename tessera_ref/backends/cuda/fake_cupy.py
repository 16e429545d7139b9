"""A CuPy test double that runs :class:`~.runtime.CudaDevice`'s own code without a GPU
(RUNTIME-DOUBLE-1): ``CudaBackend(cupy=FakeCupy(), build_fn=fake.build)``.

It has just the CuPy surface the device uses, and it behaves as CUDA does where the device's
code could go wrong:

- memory: ``cuda.MemoryPool().malloc`` gives pointers into host byte arrays; copies are
  *asynchronous* — queued on their stream and done at its ``synchronize`` (a copy to the host
  read before it holds stale bytes);
- kernels: ``cuda.function.Module().load(cubin)`` finds the CUDA C the cubin was built from
  (:meth:`FakeCupy.build` records it), ``get_function`` gives functions with the
  ``max_dynamic_shared_size_bytes`` attribute; a launch checks its grid and block (3-tuples),
  refuses dynamic shared memory above 48 KB unless the attribute allows it (CUDA's invalid
  argument), checks each argument (a device array or a NumPy scalar; CuPy 14 refuses dtypes
  that are not NumPy's own), and is queued on its stream;
- the work: a queued launch runs the kernel's CUDA C on the CUDA-on-CPU harness
  (:mod:`.cpu.harness`, one schedule and cp.async mode) on the double's memory; a fault the
  harness finds becomes a sticky error raised at the next synchronize and by every later
  call, as a lost CUDA context does;
- streams and graphs: ``Stream.begin_capture``/``end_capture`` record the launches issued
  while capturing (nothing runs) into a graph whose ``launch`` queues them again.

The GPU check's dry run (CUDA-CHECK-4) uses it too: ``RawModule(path=)`` over cubins it built
(hand-written CUDA C included: :meth:`FakeCupy.build` takes text; a hand-written ``mma.sync``
computes the device's model), ``asarray``/``empty``/``asnumpy``, events, ``with stream:`` and
the device's properties.

``calls`` lists every launch run (kernel, grid, block, shared memory); ``captures`` and
``graph_launches`` count captures and graph launches. ``build`` is NVRTC's
(:func:`~.compile.build`) when its wheels are installed, else a stand-in that records the
source under a made-up cubin (its kernels report 0 registers). A tensor-core (``tc:``)
kernel's mma.sync computes its policy's block-FMA model when the library's mma calls take one
input format (more than one: not run).
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import time

import numpy as np

from ...numerics import tc
from . import toolchain
from .compile import Build, build as nvrtc_build
from .cpu import build as gxx, harness
from .report import KernelReport

__all__ = ["FakeCupy", "FakeCudaError"]

_STATIC_SMEM_MAX = 48 * 1024
_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(')
_MMA = re.compile(r"tsr_mma_m16n8k(?:16|32)_(bf16|f16|e4m3|e5m2)")
#: kernels a macro defines (the GPU check's validation kernels: ``TSR_TC_KERNEL(name, mma)``)
_MACRO_KERNEL = re.compile(r"^TSR_\w+_KERNEL\((\w+),", re.M)


class FakeCudaError(RuntimeError):
    """What the double raises where CUDA fails (CuPy's CUDARuntimeError/CUDADriverError)."""


def _address(mem) -> int:
    """A host address as CuPy 14 takes one: an int or a ``ctypes.c_void_p``."""
    if isinstance(mem, ctypes.c_void_p):
        return mem.value
    if not isinstance(mem, int):
        raise TypeError(f"a host pointer is an int or ctypes.c_void_p, not {type(mem).__name__}")
    return mem


class _Pointer:
    """A device pointer: ``memory`` (a host byte array standing for device memory) at ``offset``."""

    def __init__(self, fake, memory: np.ndarray, offset: int = 0):
        self.fake, self.memory, self.offset = fake, memory, offset

    @property
    def ptr(self) -> int:
        return self.memory.ctypes.data + self.offset

    def __add__(self, n: int) -> "_Pointer":
        return _Pointer(self.fake, self.memory, self.offset + int(n))

    def _bytes(self, size: int) -> np.ndarray:
        if self.offset + size > self.memory.size:
            raise FakeCudaError(f"cudaErrorInvalidValue: {size} bytes at +{self.offset} of a "
                                f"{self.memory.size}-byte allocation")
        return self.memory[self.offset:self.offset + size]

    def copy_from_host_async(self, mem, size: int, stream) -> None:
        data = (ctypes.c_uint8 * size).from_address(_address(mem))
        snapshot = np.frombuffer(data, np.uint8).copy()  # the host bytes as of the call
        stream._queue(lambda: self._bytes(size).__setitem__(slice(None), snapshot))

    def copy_to_host_async(self, mem, size: int, stream) -> None:
        address = _address(mem)

        def run():
            ctypes.memmove(address, self._bytes(size).ctypes.data, size)
        stream._queue(run)

    def copy_from_device_async(self, src: "_Pointer", size: int, stream) -> None:
        stream._queue(lambda: self._bytes(size).__setitem__(slice(None), src._bytes(size).copy()))


class _Array:
    """``cupy.ndarray(shape, dtype, memptr=...)``: a typed view of device memory."""

    def __init__(self, shape, dtype, memptr: _Pointer):
        dtype = np.dtype(dtype)
        if dtype.type.__module__ != "numpy":  # CuPy 14: "Unsupported dtype float8_e5m2"
            raise ValueError(f"Unsupported dtype {dtype}")
        self.shape, self.dtype, self.data = tuple(shape), dtype, memptr

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def host_view(self) -> np.ndarray:
        return self.data._bytes(self.nbytes).view(self.dtype).reshape(self.shape)

    def get(self) -> np.ndarray:
        """A host copy, after the work queued before it (CuPy's ``get`` synchronizes)."""
        out = np.empty(self.shape, self.dtype)
        self.data.copy_to_host_async(out.ctypes.data, self.nbytes, self.data.fake.current())
        self.data.fake.current().synchronize()
        return out


class _Pool:
    def __init__(self, fake):
        self.fake, self.allocations = fake, 0

    def malloc(self, nbytes: int) -> _Pointer:
        self.fake.check()
        self.allocations += 1
        return _Pointer(self.fake, np.full(int(nbytes), 0xA5, np.uint8))  # uninitialized: not zeros

    def total_bytes(self) -> int:
        return 0


class _Graph:
    def __init__(self, fake, launches: list):
        self.fake, self.launches = fake, launches

    def launch(self, stream=None) -> None:
        stream = stream or self.fake.current()
        for _, fn, grid, block, args, smem in self.launches:
            stream._queue(lambda fn=fn, grid=grid, block=block, args=args, smem=smem: fn._run(grid, block, args, smem))
        self.fake.graph_launches += 1


class _Stream:
    def __init__(self, fake, non_blocking: bool = False):
        self.fake, self.pending, self.capturing = fake, [], None
        self.ptr = id(self)
        fake.streams.append(self)

    def _queue(self, work) -> None:
        self.fake.check()
        self.pending.append(work)

    def synchronize(self) -> None:
        self.fake.check()
        work, self.pending = self.pending, []
        for w in work:
            w()
        self.fake.check()

    def __enter__(self) -> "_Stream":
        self.fake.stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        self.fake.stack.pop()

    @property
    def done(self) -> bool:
        return not self.pending

    def begin_capture(self) -> None:
        if self.capturing is not None:
            raise FakeCudaError("cudaErrorIllegalState: the stream is already capturing")
        self.capturing = []

    def end_capture(self) -> _Graph:
        if self.capturing is None:
            raise FakeCudaError("cudaErrorIllegalState: the stream is not capturing")
        graph, self.capturing = _Graph(self.fake, self.capturing), None
        self.fake.captures += 1
        return graph


class _Function:
    def __init__(self, fake, source, name: str, kernels: list):
        self.fake, self.source, self.name, self.kernels = fake, source, name, kernels
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None) -> None:
        fake = self.fake
        fake.check()
        if len(grid) != 3 or len(block) != 3 or not all(isinstance(g, (int, np.integer)) and g > 0
                                                          for g in tuple(grid) + tuple(block)):
            raise FakeCudaError(f"cudaErrorInvalidConfiguration: grid {grid}, block {block}")
        if shared_mem > max(_STATIC_SMEM_MAX, self.max_dynamic_shared_size_bytes):
            raise FakeCudaError(f"cudaErrorInvalidValue: {shared_mem} bytes of dynamic shared memory for {self.name}, "
                                f"whose max_dynamic_shared_size_bytes is {self.max_dynamic_shared_size_bytes}")
        for a in args:
            if not isinstance(a, (_Array, np.generic)):
                raise TypeError(f"Unsupported type {type(a)}")
        stream = stream or fake.current()
        entry = (stream, self, tuple(grid), tuple(block), tuple(args), int(shared_mem))
        if stream.capturing is not None:
            stream.capturing.append(entry)
        else:
            stream._queue(lambda: self._run(*entry[2:]))

    def _run(self, grid, block, args, smem) -> None:
        fake = self.fake
        fake.calls.append((self.name, grid, block, smem))
        bufs = [a.host_view() if isinstance(a, _Array) else np.asarray(a).reshape(1) for a in args]
        options = harness.Options(fake.schedule, fake.cp_async, tc=_tc_block(self.source, self.name, fake.compute_capability))
        try:
            lib = gxx.library(self.source, self.kernels)
            harness.run(lib, self.name, grid, block[0], bufs, smem, options, self.source, kernels=self.kernels)
        except harness.HarnessFinding as finding:
            fake.fault = f"cudaErrorIllegalAddress: an illegal memory access was encountered ({finding.what})"


_DEVICE_MODELS = {"80": "tc:sm80", "90": "tc:sm90"}


def _tc_block(source, kernel: str, compute_capability: str):
    """The tensor-core instruction ``kernel``'s mma.sync computes (``BlockFMA.resolved``): its
    policy's model (CUDA-TC-1), or for hand-written CUDA C the device's; the input format is
    the one of the source's mma calls, or the one a macro instantiates ``kernel`` with. None
    without mma.sync or when the format cannot be told."""
    model = next((m for k, m, _ in getattr(source, "tc_models", ()) if k == kernel), None)
    if model is None and not hasattr(source, "tc_models"):
        model = _DEVICE_MODELS.get(compute_capability)
    formats = set(_MMA.findall(source.text))
    if len(formats) > 1:
        formats = set(re.findall(rf"\b{re.escape(kernel)}\s*,\s*tsr_mma_m16n8k(?:16|32)_(\w+)", source.text))
    if model is None or len(formats) != 1:
        return None
    fmt = formats.pop()
    fmt = {"e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2"}.get(fmt, fmt)
    return tc.model(model).block(fmt).resolved(fmt)


class _Text:
    """Hand-written CUDA C (no Tile IR behind it: no locations, no tensor-core policies)."""

    def __init__(self, text: str):
        self.text, self.locations = text, {}


class _Module:
    def __init__(self, fake):
        self.fake, self.source = fake, None

    def load(self, cubin: bytes) -> None:
        self.fake.check()
        source = self.fake.sources.get(bytes(cubin))
        if source is None:
            raise FakeCudaError("CUDA_ERROR_INVALID_IMAGE: a cubin the double did not build")
        self.source = source

    def get_function(self, name: str) -> _Function:
        text = self.source.text
        params = {p.strip() for ps in re.findall(r"#define \w+\(([^)]*)\)", text) for p in ps.split(",")}
        kernels = [k for k in _KERNEL.findall(text) if k not in params] + _MACRO_KERNEL.findall(text)
        if name not in kernels:
            raise FakeCudaError(f"CUDA_ERROR_NOT_FOUND: no kernel {name} in the module")
        return _Function(self.fake, self.source, name, kernels)


class _Event:
    """A CUDA event: ``record`` queues the reading of the host clock on the stream."""

    def __init__(self, fake):
        self.fake, self.t, self.stream = fake, None, None

    def record(self, stream=None) -> None:
        self.stream = stream or self.fake.current()
        self.stream._queue(lambda: setattr(self, "t", time.perf_counter()))

    def synchronize(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()


def _elapsed_ms(start: _Event, stop: _Event) -> float:
    if start.t is None or stop.t is None:
        raise FakeCudaError("cudaErrorNotReady: an event that has not completed")
    return (stop.t - start.t) * 1e3


class FakeCupy:
    """The double (see the module docstring); ``schedule``/``cp_async``: the harness's run;
    ``memory``: the bytes ``Device().mem_info`` reports. Besides what :class:`~.runtime.CudaDevice`
    uses it has what the GPU check's hand-written kernels use (``RawModule(path=)`` over a cubin
    it built, ``asarray``/``empty``/``asnumpy``, events, ``with stream:``, the device's
    properties); it has no CuPy kernels of its own (no ``matmul``, ``exp``, random numbers)."""

    __version__ = "test double"
    DEVICE_NAME = "CUDA-on-CPU harness (CuPy test double)"

    def __init__(self, compute_capability: str = "90", memory: int = 1 << 30, schedule: str = "lockstep",
                 cp_async: str = "deferred"):
        fake = self
        self.compute_capability = compute_capability
        self.schedule, self.cp_async = schedule, cp_async
        self.sources: dict = {}
        self.streams: list = []
        self.stack: list = []
        self.calls: list = []
        self.captures = self.graph_launches = 0
        self.fault: str | None = None
        self._pool = _Pool(self)

        class _Device:
            def __init__(self, index: int = 0):
                self.id = index
                self.compute_capability = compute_capability
                self.mem_info = (memory, memory)

            def synchronize(self):
                for s in fake.streams:
                    s.synchronize()

            def use(self):
                pass

        class _FunctionModule:
            Module = staticmethod(lambda: _Module(fake))

        class _Runtime:
            @staticmethod
            def getDeviceCount() -> int:
                return 1

            @staticmethod
            def getDeviceProperties(index: int) -> dict:
                return {"name": FakeCupy.DEVICE_NAME.encode(), "major": int(compute_capability[:-1]),
                        "minor": int(compute_capability[-1]), "totalGlobalMem": memory, "multiProcessorCount": 1}

            @staticmethod
            def driverGetVersion() -> int:
                return 0

            runtimeGetVersion = driverGetVersion

        class _Cuda:
            Device = _Device
            Stream = staticmethod(lambda non_blocking=False: _Stream(fake, non_blocking))
            MemoryPool = staticmethod(lambda: _Pool(fake))
            Event = staticmethod(lambda: _Event(fake))
            get_elapsed_time = staticmethod(_elapsed_ms)
            function = _FunctionModule
            runtime = _Runtime

            @staticmethod
            def is_available():
                return True

        self.cuda = _Cuda
        self.default_stream = _Stream(fake)

    def current(self) -> _Stream:
        """The stream of the innermost ``with stream:`` (else the default stream)."""
        return self.stack[-1] if self.stack else self.default_stream

    def ndarray(self, shape, dtype, memptr) -> _Array:
        return _Array(shape, dtype, memptr)

    def empty(self, shape, dtype=np.float32) -> _Array:
        """Uninitialized device memory (every byte 0xA5: never zeros)."""
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
        return _Array(shape, dtype, self._pool.malloc(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize))

    def asarray(self, host) -> _Array:
        """A device copy of ``host`` (CuPy refuses dtypes that are not NumPy's own)."""
        host = np.ascontiguousarray(host)
        out = self.empty(host.shape, host.dtype)
        out.data.copy_from_host_async(host.ctypes.data, host.nbytes, self.current())
        self.current().synchronize()
        return out

    @staticmethod
    def asnumpy(a) -> np.ndarray:
        return a.get()

    def RawModule(self, path: str) -> _Module:
        """The module of a cubin file this double built (CuPy keeps modules by path)."""
        module = _Module(self)
        with open(path, "rb") as f:
            module.load(f.read())
        return module

    def check(self) -> None:
        """Raise the sticky error of a fault (every call after it fails, as on a lost context)."""
        if self.fault is not None:
            raise FakeCudaError(self.fault)

    def build(self, source, arch: str) -> Build:
        """NVRTC's build when its wheels are installed (else a stand-in), the source recorded
        (hand-written CUDA C too)."""
        if isinstance(source, str):
            source = _Text(source)
        if toolchain.available():
            b = nvrtc_build(source, arch)
        else:
            names = _KERNEL.findall(source.text)
            cubin = b"FAKE-CUBIN" + hashlib.sha256(source.text.encode()).digest()
            b = Build(arch, "", cubin, "", "", {n: KernelReport(n, arch) for n in names})
        self.sources[bytes(b.cubin)] = source
        return b
