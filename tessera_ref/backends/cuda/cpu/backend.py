"""The backend ``"cuda-cpu"``: the rendered CUDA kernels run on the CPU (CUDA-CPU-7).

Graph IR ops with a kernel family are lowered to their one-op program, rendered
(:func:`~..source.render`, the text the ``"cuda"`` backend compiles with NVRTC), compiled with
g++ and the CPU twin (:mod:`.build`, cached) and launched on the host's NumPy buffers
(:mod:`.harness`); ops without a kernel family run by their primitive's reference ``impl``.
``CudaCpuBackend(schedule=..., cp_async=...)`` makes a backend with other launch options
than the registered one (``lockstep``, ``deferred``), ``memcheck="asan"`` runs every launch
under AddressSanitizer (CUDA-CPU-10): pass it to ``backends.use``. A mesh is
a BackendError (one process, one simulated device). A ``tc:`` matmul's ``mma.sync`` computes
the tensor-core block-FMA model named by the kernel's policy.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from ....errors import BackendError, LoweringError
from ....ir import TensorType
from ....ir import tile as T
from ....ir.launch import kernel_arguments
from ....ir.types import IndexType
from ....numerics import tc
from ..runtime import DYNAMIC_SMEM, RenderedBackend
from ..source import render
from . import build, harness

__all__ = ["CudaCpuBackend", "CpuLaunchReport"]


@dataclass
class CpuLaunchReport:
    """One launch on the harness: the kernel, its launch shape, the options it ran under, the
    fiber switches it took and its wall time; ``checks`` is False (the tile interpreter's
    race checker and counters do not run here: the harness finds barrier and warp bugs)."""
    kernel: str
    grid: tuple
    lanes: int
    schedule: str
    cp_async: str
    switches: int
    seconds: float
    checks: bool = False


def _tc_block(func) -> tuple | None:
    """``(products, align bits)`` of the tensor-core model of ``func``'s ``tc:`` mma ops (None without)."""
    blocks = set()
    for op in func.walk():
        accum = op.attributes.get("accum") if op.name == T._name("mma") else None
        if isinstance(accum, str) and accum.startswith(tc.PREFIX):
            blk = tc.model(accum).block(op.operands[0].type.policy.storage)
            blocks.add((blk.products, blk.align_bits))
    if len(blocks) > 1:
        raise BackendError(f"kernel {func.attributes['sym_name']} mixes tensor-core models {sorted(blocks)}",
                           fix="use one tc: policy per kernel")
    return blocks.pop() if blocks else None


class CudaCpuBackend(RenderedBackend):
    """Rendered kernels on the CPU harness (see the module docstring)."""

    name = "cuda-cpu"
    description = "rendered CUDA kernels compiled with g++ and a CPU twin of the device, each thread a fiber"

    def __init__(self, schedule: str = "lockstep", cp_async: str = "deferred", memcheck: str = "guard"):
        build.gxx()  # no g++, or a host neither x86-64 nor AArch64: a BackendError now
        self.options = harness.Options(schedule, cp_async, memcheck=memcheck)

    def __repr__(self) -> str:
        o = self.options
        return f"<tessera backend 'cuda-cpu' schedule={o.schedule} cp_async={o.cp_async} memcheck={o.memcheck}>"

    def communicator(self, mesh):
        raise BackendError(f"the cuda-cpu backend runs single-device programs; got a mesh {mesh}",
                           fix="run mesh programs on the 'interp' backend")

    def launch(self, launch) -> CpuLaunchReport:
        try:
            source = render(launch.module)
        except LoweringError as exc:  # what the emitter cannot write, the harness cannot run
            raise BackendError(f"the cuda-cpu backend runs rendered CUDA C; the CUDA emitter refuses this kernel: "
                               f"{exc.what}", location=exc.location, fix=exc.fix) from None
        return self.run_source(launch, source)

    def run_source(self, launch, source) -> CpuLaunchReport:
        """Run ``launch`` with its kernel compiled from ``source`` (a :class:`~..source.Source`:
        the rendering of ``launch.module``, or a changed copy of it, as mutation tests plant bugs)."""
        func = self.kernel_of(launch)
        kernels = [op for op in launch.module.body if T.is_kernel(op)]  # one library holds them all
        attrs = func.attributes
        name, params = attrs["sym_name"], list(attrs["tile.params"])
        values, sizes = kernel_arguments(func, launch.buffers)  # TILE-EXEC-1: a KernelError for bad arguments
        args = []
        for arg, value in zip(func.regions[0].entry.args, values):
            t = arg.type
            if isinstance(t, TensorType) and t.rank > 0:
                args.append(value)  # C-contiguous, written in place
            else:  # the renderer's scalars: index -> long, a 0-d mask -> bool, a number in its format
                dtype = (np.dtype(np.int64) if isinstance(t, IndexType) else np.dtype(np.bool_)
                         if isinstance(t, TensorType) else np.dtype(t.format.dtype))
                args.append(np.asarray(value, dtype=dtype).reshape(1))
        args += [np.array([sizes[s]], np.int64) for s in attrs.get("tile.sizes", {})]
        names = [k.attributes["sym_name"] for k in kernels]
        lib = build.library(source, names) if self.options.memcheck == "guard" else None  # asan: a program
        smem = int(attrs.get(DYNAMIC_SMEM, T.shared_layout(func)[1]))  # LOWER-TARGET-2
        options = dataclasses.replace(self.options, tc=_tc_block(func))
        start = time.perf_counter()
        switches = harness.run(lib, name, launch.grid, launch.lanes, args, smem, options, source,
                               params + list(attrs.get("tile.sizes", {})), kernels=names)
        seconds = time.perf_counter() - start
        grid = tuple(launch.grid) if np.ndim(launch.grid) else (launch.grid,)
        return CpuLaunchReport(name, grid, launch.lanes, options.schedule, options.cp_async, switches, seconds)
