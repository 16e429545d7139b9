"""The backend ``"cuda"``: one GPU as a runtime device, driven through CuPy (CUDA-RUN-1 … 4).

:class:`CudaDevice` implements the Device contract of :mod:`tessera_ref.runtime.device`:
memory from a ``cupy.cuda.MemoryPool`` (copies counted, asynchronous on the device's stream),
NVRTC as the compiler (:func:`~.compile.build` for the GPU's architecture, cached), kernels
loaded from the cubin's bytes (``cupy.cuda.function.Module.load``: no file) and launched
asynchronously on the device's stream as ``(grid, (lanes, 1, 1), args, shared_mem)`` — the
kernel's parameters in order (bf16/fp8 buffers as their bits), then its symbolic sizes
(``long``); a kernel whose dynamic shared memory (LOWER-TARGET-2) exceeds 48 KB gets its
max-dynamic-shared-memory attribute when loaded. A program's launch list is captured once by
stream capture into CUDA graphs (one per run of launches between host steps) and each call
replays them, the arguments and results moved into and out of the captured buffers on the
device. Nothing synchronizes per launch: the program synchronizes once, at its end. A kernel
that faults is a BackendError naming the kernels in flight and their Tile IR lines, and the
device refuses all further work (the CUDA context is lost). ``"cuda"`` is
:class:`~tessera_ref.runtime.DeviceBackend` over it; the tile interpreter's checkers and
counters do not run on a GPU (each launch's report says so). A mesh is refused (one device).

Making the backend (``backends.get("cuda")``) on a machine without CuPy or without a GPU
raises a BackendError that says which. :mod:`.fake_cupy` is a CuPy test double that runs this
module's code without a GPU.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from ...errors import BackendError
from ...ir import TensorType
from ...ir import tile as T
from ...runtime import Allocator, Compiler, Device, DeviceBackend, Graph, Kernel, Launch, Slot
from ...counters import count
from ...runtime.program import DYNAMIC_SMEM, kernel_smem
from .compile import build
from .cpu.backend import scalar_dtype
from .report import ARCH_LIMITS
from .source import render
from .toolchain import INSTALL_FIX
from .tune import register_screen

__all__ = ["CudaBackend", "CudaDevice", "CudaLaunchReport", "arch_of", "device_bits", "STATIC_SMEM_MAX", "DYNAMIC_SMEM"]

#: The most dynamic shared memory a kernel may take without its attribute raised.
STATIC_SMEM_MAX = 48 * 1024


@dataclass
class CudaLaunchReport:
    """What one launch on the GPU reports: the kernel, its launch shape, the architecture it
    was compiled for and ptxas's numbers; ``checks`` is always False (no checkers on a GPU)."""
    kernel: str
    grid: tuple
    lanes: int
    arch: str
    registers: int
    shared_bytes: int
    dynamic_shared_bytes: int
    checks: bool = False
    note: str = "the tile interpreter's checkers and counters do not run on a GPU"


def arch_of(compute_capability: str) -> str:
    """The architecture to compile for on a device of ``compute_capability`` (CuPy's string,
    ``"90"``): sm_90 for 9.x, sm_80 for 8.x (an sm_80 cubin runs on 8.6 and 8.9)."""
    major = int(compute_capability) // 10
    arch = {8: "sm_80", 9: "sm_90"}.get(major)
    if arch is None:
        raise BackendError(f"the CUDA backend compiles for {', '.join(ARCH_LIMITS)}; this GPU is compute "
                           f"capability {compute_capability[:-1]}.{compute_capability[-1]}",
                           fix="run on an A100/H100-class GPU, or on the 'interp' backend")
    return arch


def _cupy():
    try:
        import cupy
    except ImportError:
        raise BackendError("the CUDA backend needs CuPy, which is not installed",
                           fix="pip install -e '.[cuda]' on a machine with an NVIDIA GPU") from None
    try:
        available = cupy.cuda.is_available()
    except Exception:  # CuPy raises driver/runtime errors of its own kinds here
        available = False
    if not available:
        raise BackendError("the CUDA backend needs a CUDA GPU: cupy.cuda.is_available() is False on this machine",
                           fix="run on a machine with an NVIDIA GPU and its driver, or use the 'interp' backend "
                               f"(`tessera-ref cuda build` reports kernels without a GPU; {INSTALL_FIX})")
    return cupy


def device_bits(a: np.ndarray) -> np.ndarray:
    """``a`` as unsigned integers of its width when its dtype is not NumPy's own (bf16 and the
    fp8 formats are ml_dtypes' types, which CuPy lacks — float8_e5m2 even has kind ``f``);
    the bits are what moves."""
    return a if a.dtype.type.__module__ == "numpy" else a.view(f"u{a.dtype.itemsize}")


class _Pool(Allocator):
    """Device memory from a ``cupy.cuda.MemoryPool``, freed buffers kept for reuse by size;
    copies are asynchronous on the device's stream (a copy to the host then synchronizes)."""

    def __init__(self, device):
        super().__init__(device.name)
        self.device, self.cp = device, device.cp
        self.pool = device.cp.cuda.MemoryPool()

    def _alloc(self, nbytes):
        self.device.check()
        return self.pool.malloc(nbytes)

    def _copyin(self, buf, data) -> None:
        self.device.check()
        # a c_void_p: CuPy before 13 reads the address's .value (14 also takes an int)
        (buf.base + buf.offset).copy_from_host_async(ctypes.c_void_p(data.ctypes.data), buf.nbytes,
                                                     self.device.stream_)

    def _copyout(self, data, buf) -> None:
        self.device.check()
        (buf.base + buf.offset).copy_to_host_async(ctypes.c_void_p(data.ctypes.data), buf.nbytes, self.device.stream_)
        self.device.synchronize()

    def _copy(self, dst, src) -> None:
        self.device.check()
        (dst.base + dst.offset).copy_from_device_async(src.base + src.offset, src.nbytes, self.device.stream_)

    def array(self, buf, dtype, shape):
        dtype = np.dtype(dtype)
        bits = dtype if dtype.type.__module__ == "numpy" else np.dtype(f"u{dtype.itemsize}")
        return self.cp.ndarray(shape, bits, memptr=buf.base + buf.offset)


class _Nvrtc(Compiler):
    def __init__(self, arch: str, build_fn):
        super().__init__()
        self.arch, self.build = arch, build_fn

    def _compile(self, source):
        return self.build(source, self.arch)


class _CudaKernel(Kernel):
    def __init__(self, device, function, func, report):
        self.device, self.function, self.name, self.report = device, function, func.attributes["sym_name"], report
        self.where = f"{self.name} (Tile IR at {func.location})"
        self.scalars = [None if isinstance(a.type, TensorType) and a.type.rank > 0 else scalar_dtype(a.type)
                        for a in func.regions[0].entry.args] + [np.dtype(np.int64)] * len(func.attributes.get(
                            "tile.sizes", {}))

    def __call__(self, args, grid, block, smem, stream=None, options=None):
        args = tuple(a if dtype is None else device_bits(np.asarray(a, dtype=dtype).reshape(1))[0]
                     for a, dtype in zip(args, self.scalars))
        self.device.launch_function(self, args, grid, block, smem, stream)
        return CudaLaunchReport(self.name, tuple(grid), block[0], self.device.arch, self.report.registers,
                                self.report.shared_bytes, smem)


class _CudaGraph(Graph):
    """The launch list as CUDA graphs (RUNTIME-DEV-5): captured on the first replay over buffers
    of its own for the variable slots; each replay copies the bound arguments into them, launches
    the graphs (host steps between them run in order) and copies the results out."""

    def __init__(self, device, items, fixed, inputs, outputs):
        super().__init__(device, items, fixed)
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.captured, self.segments = None, None

    def _capture(self, bindings: dict) -> None:
        alloc, d = self.device.allocator, self.device
        self.captured = {i: alloc.alloc(bindings[i].nbytes) for i in self.inputs + self.outputs}
        fixed = {**self.fixed, **self.captured}
        self.segments, run = [], []
        for item in self.items + [None]:
            if isinstance(item, Launch):
                run.append(item)
                continue
            if run:
                self.segments.append(("graph", d.capture(run, fixed), [r.where for r in run]))
                run = []
            if item is not None:
                self.segments.append(("host", item, [item.name]))

    def replay(self, bindings: dict, stream=None, options: dict | None = None) -> list:
        if self.segments is None:
            self._capture(bindings)
        alloc, d = self.device.allocator, self.device
        for i in self.inputs:
            if bindings[i] is not self.captured[i]:
                alloc.copy(self.captured[i], bindings[i])
        count(replays=1, graph_launches=self.launches)
        fixed = {**self.fixed, **self.captured}
        for kind, what, where in self.segments:
            if kind == "graph":
                d.launch_graph(what, where)
            else:
                d.run_host_step(what, lambda s: fixed[s.index].view(s.offset, s.nbytes))
        for i in self.outputs:
            if bindings[i] is not self.captured[i]:
                alloc.copy(bindings[i], self.captured[i])
        return [CudaLaunchReport(r.kernel.name, r.grid, r.block[0], d.arch, r.kernel.report.registers,
                                 r.kernel.report.shared_bytes, r.smem) for r in self.items if isinstance(r, Launch)]


class CudaDevice(Device):
    """One GPU through CuPy (see the module docstring); ``cupy`` and ``build`` replace CuPy and
    NVRTC (the test double of :mod:`.fake_cupy` passes its own)."""

    name = "cuda"

    def __init__(self, cupy=None, build_fn=None):
        self.cp = _cupy() if cupy is None else cupy
        dev = self.cp.cuda.Device()
        self.arch = arch_of(dev.compute_capability)
        self.capacity = int(dev.mem_info[1]) if hasattr(dev, "mem_info") else None
        self.stream_ = self.cp.cuda.Stream(non_blocking=True)
        self.allocator = _Pool(self)
        self.compiler = _Nvrtc(self.arch, build_fn or build)
        self._lock = threading.Lock()
        self._inflight: list = []
        self._modules: list = []
        self._fault: str | None = None

    # -- faults ---------------------------------------------------------------------------
    def check(self) -> None:
        """A BackendError when an earlier kernel faulted: the context is lost (RUNTIME-FAULT-1)."""
        if self._fault is not None:
            raise BackendError(f"the GPU's CUDA context was lost to an earlier fault ({self._fault}); it takes no "
                               "further work", fix="restart the process; run the faulting kernel on 'cuda-cpu' "
                                                   "(its harness names the out-of-bounds line)")

    def synchronize(self) -> None:
        self.check()
        try:
            self.stream_.synchronize()
        except Exception as exc:  # CuPy's driver/runtime errors: an illegal address, a trap, a timeout
            where = "; ".join(dict.fromkeys(self._inflight)) or "no kernel in flight"
            self._fault = f"{type(exc).__name__}: {exc}; in flight: {where}"
            raise BackendError(f"a kernel faulted on the GPU: {exc}; the kernels in flight: {where}",
                               fix="run the program on 'cuda-cpu', whose harness names the faulting line") from None
        self._inflight.clear()

    # -- the contract ---------------------------------------------------------------------
    def render(self, tile_module):
        return render(tile_module)

    def load(self, binary, source, tile_module) -> dict:
        self.check()
        module = self.cp.cuda.function.Module()
        module.load(binary.cubin)
        kernels = {}
        for func in tile_module.body:
            if not T.is_kernel(func):
                continue
            name = func.attributes["sym_name"]
            fn = module.get_function(name)
            smem = kernel_smem(func)
            if smem > STATIC_SMEM_MAX:
                fn.max_dynamic_shared_size_bytes = smem
            kernels[name] = _CudaKernel(self, fn, func, binary.kernels[name])
        self._modules.append(module)  # loaded for the device's lifetime
        return kernels

    def launch_function(self, kernel, args, grid, block, smem, stream=None) -> None:
        """Launch ``kernel`` asynchronously on the device's stream (never synchronizes)."""
        self.check()
        grid = tuple(grid) + (1,) * (3 - len(grid))
        kernel.function(grid, tuple(block), args, shared_mem=smem, stream=stream or self.stream_)
        self._inflight.append(kernel.where)

    def capture(self, launches: list, fixed: dict):
        """The CUDA graph of ``launches`` over the ``fixed`` buffers (stream capture)."""
        self.check()
        stream = self.stream_
        stream.begin_capture()
        try:
            for item in launches:
                args = [self.allocator.array(fixed[a.index].view(a.offset, a.nbytes), a.dtype, a.shape)
                        if isinstance(a, Slot) else a for a in item.args]
                item.kernel(args, item.grid, item.block, item.smem, stream)
        finally:
            graph = stream.end_capture()
        self._inflight.clear()  # captured, not run
        return graph

    def launch_graph(self, graph, where) -> None:
        self.check()
        graph.launch(stream=self.stream_)
        self._inflight += where

    def graph(self, items, fixed, inputs=(), outputs=()):
        return _CudaGraph(self, items, fixed, inputs, outputs)

    def screen(self, options: dict):
        """The autotuner's register screen for this GPU's architecture (CUDA-TUNE-1)."""
        return register_screen(self.arch, **({"max_registers": options.pop("max_registers")}
                                             if "max_registers" in options else {}))


def CudaBackend(cupy=None, build_fn=None) -> DeviceBackend:
    """``"cuda"``: :class:`~tessera_ref.runtime.DeviceBackend` over a :class:`CudaDevice`."""
    return DeviceBackend(CudaDevice(cupy, build_fn), "cuda",
                         "rendered tile kernels compiled with NVRTC, whole programs captured as CUDA graphs and "
                         "replayed on one GPU with CuPy")
