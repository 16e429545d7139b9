"""The backend ``"cuda"``: rendered kernels launched on one GPU with CuPy (CUDA-RUN-1 … 3).

Every Graph IR op with a kernel family is lowered to its one-op program
(:meth:`~tessera_ref.backends.base.Backend.lower_op`), rendered, compiled with NVRTC for the
device's architecture (:func:`~.compile.build`, cached) and launched: the cubin is loaded with
``cupy.RawModule(path=...)``, every buffer parameter is copied to a device buffer, the launch
is ``(grid, (lanes, 1, 1), args, shared_mem)`` with the kernel's parameters in order followed
by its symbolic sizes (``long``), and the ``mut`` buffers are copied back. Dynamic shared
memory (the kernel attribute ``launch.dynamic_smem`` in bytes when set, else the total of
:func:`~tessera_ref.ir.tile.shared_layout`, LOWER-TARGET-2) above 48 KB sets the function's
max-dynamic-shared-memory attribute first. Ops without a kernel family run on the host by
their primitive's reference ``impl``, as the interpreter runs them; an op whose instance has
no tile lowering is a BackendError, never a silent fallback. Single device only: a mesh is
a BackendError (multi-GPU collectives are the multi-process backend's). The tile
interpreter's checkers and counters do not run on a GPU; each launch's report says so.

Making the backend (``backends.get("cuda")``) on a machine without CuPy or without a GPU
raises a BackendError that says which.
"""
from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import BackendError
from ...ir import TensorType
from ...ir.types import IndexType
from ...ir import tile as T
from ..base import Backend
from .compile import build
from .report import ARCH_LIMITS
from .source import render
from .toolchain import INSTALL_FIX

__all__ = ["CudaBackend", "RenderedBackend", "CudaLaunchReport", "arch_of", "device_bits", "DYNAMIC_SMEM"]

#: The kernel attribute holding its dynamic shared memory in bytes (0 when absent).
DYNAMIC_SMEM = "launch.dynamic_smem"
_STATIC_SMEM_MAX = 48 * 1024


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


class RenderedBackend(Backend):
    """What the backends running rendered CUDA C share: ops with a kernel family run as their
    one-op kernel program, the others by their primitive's ``impl``; a launch names its kernel."""

    def run_op(self, call, *operands) -> tuple:
        if call.primitive.kernel_family is None:
            return call.primitive.run(call, *operands)
        return self.run_op_as_kernel(call, operands, checks=False)

    @staticmethod
    def kernel_of(launch):
        """The kernel op ``launch`` runs (its named kernel, else the module's first)."""
        kernels = [op for op in launch.module.body if T.is_kernel(op)]
        func = next((k for k in kernels if launch.kernel in (None, k.attributes["sym_name"])), None)
        if func is None:
            raise BackendError(f"the module has no kernel {launch.kernel!r}", fix="name one of its kernels")
        return func


class CudaBackend(RenderedBackend):
    """Kernels on one GPU through CuPy (see the module docstring)."""

    name = "cuda"
    description = "rendered tile kernels compiled with NVRTC and launched on one GPU with CuPy"

    def __init__(self):
        self._cp = _cupy()
        self.arch = arch_of(self._cp.cuda.Device().compute_capability)
        self._modules = {}
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="tessera-cuda-")

    def communicator(self, mesh):
        raise BackendError(f"the cuda backend runs single-device programs; got a mesh {mesh}",
                           fix="run mesh programs on the 'interp' backend (multi-GPU runs are the multi-process "
                               "backend's)")

    def _function(self, module, name):
        """``(cupy function, KernelReport)`` of kernel ``name`` of ``module`` (compiled once)."""
        source = render(module)
        with self._lock:
            hit = self._modules.get(source.text)
            if hit is None:
                b = build(source, self.arch)
                path = Path(self._dir) / f"k{len(self._modules)}.cubin"
                path.write_bytes(b.cubin)
                hit = self._modules[source.text] = (self._cp.RawModule(path=str(path)), b)
        raw, b = hit
        return raw.get_function(name), b.kernels[name]

    def launch(self, launch) -> CudaLaunchReport:
        cp = self._cp
        func = self.kernel_of(launch)
        attrs = func.attributes
        name, params = attrs["sym_name"], list(attrs["tile.params"])
        mut = set(attrs.get("tile.mut", []))
        values = [launch.buffers[p] for p in params] if isinstance(launch.buffers, dict) else list(launch.buffers)
        args, device, sizes = [], {}, {}
        for pname, arg, value in zip(params, func.regions[0].entry.args, values):
            t = arg.type
            if isinstance(t, TensorType) and t.rank > 0:
                host = np.ascontiguousarray(value)
                for d, n in zip(t.shape, host.shape):
                    if isinstance(d, str):
                        sizes.setdefault(d, n)
                device[pname] = (value, cp.asarray(device_bits(host)))
                args.append(device[pname][1])
            else:
                dtype = (np.dtype(np.int64) if isinstance(t, IndexType) else np.dtype(np.bool_)
                         if isinstance(t, TensorType) else np.dtype(t.format.dtype))
                args.append(device_bits(np.asarray(value, dtype=dtype).reshape(1))[0])
        args += [np.int64(sizes[s]) for s in attrs.get("tile.sizes", {})]
        fn, report = self._function(launch.module, name)
        dynamic = int(attrs.get(DYNAMIC_SMEM, T.shared_layout(func)[1]))  # LOWER-TARGET-2
        if dynamic > _STATIC_SMEM_MAX:
            fn.max_dynamic_shared_size_bytes = dynamic
        grid = tuple(launch.grid) if np.ndim(launch.grid) else (launch.grid,)
        fn(tuple(grid) + (1,) * (3 - len(grid)), (launch.lanes, 1, 1), tuple(args), shared_mem=dynamic)
        cp.cuda.Device().synchronize()
        for pname in mut:
            value, buf = device[pname]
            device_bits(value)[...] = buf.get().reshape(value.shape)
        return CudaLaunchReport(name, grid, launch.lanes, self.arch, report.registers, report.shared_bytes, dynamic)

    def autotune(self, variants, problem: dict, preset="H100", **options):
        """The interpreter's ranking (:meth:`Backend.autotune`), after NVRTC rejects the
        configurations over the register budget or with spills on this GPU's architecture
        (:func:`~.tune.register_screen`; ``max_registers=`` to change the budget)."""
        from ...lowering import autotune
        from .tune import register_screen
        screen = register_screen(self.arch, **({"max_registers": options.pop("max_registers")}
                                               if "max_registers" in options else {}))
        return autotune.autotune_kernel(variants, problem, preset, screen=screen, **options)
