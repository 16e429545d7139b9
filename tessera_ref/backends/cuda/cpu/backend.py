"""The backend ``"cuda-cpu"``: the rendered CUDA kernels run on the CPU (CUDA-CPU-7).

Graph IR ops with a kernel family are lowered to their one-op program, rendered
(:func:`~..source.render`, the text the ``"cuda"`` backend compiles with NVRTC), compiled with
g++ and the CPU twin (:mod:`.build`, cached) and launched on the host's NumPy buffers
(:mod:`.harness`); ops without a kernel family run by their primitive's reference ``impl``.
Every launch runs under each schedule of ``schedule`` with each cp.async mode of
``cp_async`` — by default ``lockstep``, ``reverse`` and ``random:1``, each ``deferred`` and
``eager`` — the first into the buffers, the others on copies of them; a buffer whose bits
differ between two runs is a finding (a race). ``CudaCpuBackend(schedule=..., cp_async=...)``
takes one name or a tuple of names (one of each: a single run), ``memcheck="asan"`` runs every
launch under AddressSanitizer (CUDA-CPU-10): pass it to ``backends.use``. A mesh is
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
from .harness import HarnessFinding

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


def _tc_block(func) -> tc.BlockFMA | None:
    """The tensor-core instruction of ``func``'s ``tc:`` mma ops, resolved for their input
    format (``BlockFMA.resolved``; None without)."""
    blocks = set()
    for op in func.walk():
        accum = op.attributes.get("accum") if op.name == T._name("mma") else None
        if isinstance(accum, str) and accum.startswith(tc.PREFIX):
            storage = op.operands[0].type.policy.storage
            blocks.add(tc.model(accum).block(storage).resolved(storage))
    if len(blocks) > 1:
        raise BackendError(f"kernel {func.attributes['sym_name']} mixes tensor-core models {sorted(map(str, blocks))}",
                           fix="use one tc: policy per kernel")
    return blocks.pop() if blocks else None


#: The schedules a launch runs under by default (each with both cp.async modes, CUDA-CPU-7).
SWEEP_SCHEDULES = ("lockstep", "reverse", "random:1")


def _names(value, what: str) -> tuple:
    """One name or a non-empty sequence of names, as a tuple."""
    names = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, (tuple, list)) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise BackendError(f"a {what} is a name or a non-empty tuple of names, got {value!r}",
                           fix=f"e.g. CudaCpuBackend(schedule={SWEEP_SCHEDULES!r}, cp_async=('deferred', 'eager'))")
    return names


def _element(array, rows, i: int) -> str:
    """Element ``i`` of ``array`` as its value and its bits (``rows``: its bytes, one row each)."""
    return f"{array.reshape(-1)[i].item()!r} (bits 0x{rows[i][::-1].tobytes().hex()})"


def _same_bits(kernel: str, first, other, want, got, names) -> None:
    """A HarnessFinding unless the launch under ``other`` wrote every buffer's bits as under ``first``."""
    for name, a, b in zip(names, want, got):
        x = a.reshape(-1).view(np.uint8).reshape(a.size, a.itemsize)
        y = b.reshape(-1).view(np.uint8).reshape(b.size, b.itemsize)
        differ = np.flatnonzero((x != y).any(axis=1))
        if differ.size:
            i = int(differ[0])
            err = HarnessFinding(
                f"the CUDA-on-CPU harness found a schedule-dependent result in kernel {kernel}: under schedule "
                f"{other.schedule}, cp.async {other.cp_async} it wrote {differ.size} of the {a.size} elements of "
                f"argument {name} with other bits than under schedule {first.schedule}, cp.async {first.cp_async} "
                f"(the first at flat index {i}: {_element(a, x, i)} there, {_element(b, y, i)} here)",
                fix="the block's threads race: look for a missing __syncthreads, a cp.async wait_group that leaves "
                    "a copy in flight, or a shared buffer refilled while other threads still read it; the 'interp' "
                    "backend's tile interpreter names the racing accesses")
            err.kind, err.line = "schedule-dependent result", 0
            raise err


class CudaCpuBackend(RenderedBackend):
    """Rendered kernels on the CPU harness (see the module docstring)."""

    name = "cuda-cpu"
    description = "rendered CUDA kernels compiled with g++ and a CPU twin of the device, each thread a fiber"

    def __init__(self, schedule=SWEEP_SCHEDULES, cp_async=harness.CP_ASYNC, memcheck: str = "guard"):
        build.gxx()  # no g++, or a host neither x86-64 nor AArch64: a BackendError now
        schedules, modes = _names(schedule, "schedule"), _names(cp_async, "cp.async mode")
        self.runs = tuple(harness.Options(s, m, memcheck=memcheck) for s in schedules for m in modes)
        self._schedules, self._modes = ",".join(dict.fromkeys(schedules)), ",".join(dict.fromkeys(modes))

    @property
    def options(self) -> harness.Options:
        """The first run's options (its memcheck is every run's)."""
        return self.runs[0]

    def __repr__(self) -> str:
        return (f"<tessera backend 'cuda-cpu' schedule={self._schedules} cp_async={self._modes} "
                f"memcheck={self.options.memcheck}>")

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
        block, arg_names = _tc_block(func), params + list(attrs.get("tile.sizes", {}))
        before = [a.copy() for a in args] if len(self.runs) > 1 else None
        start, switches = time.perf_counter(), 0
        for i, run in enumerate(self.runs):  # the first into the buffers, every other on a copy of them
            options, bufs = dataclasses.replace(run, tc=block), args if i == 0 else [b.copy() for b in before]
            switches += harness.run(lib, name, launch.grid, launch.lanes, bufs, smem, options, source, arg_names,
                                    kernels=names)
            if i:
                _same_bits(name, self.runs[0], run, args, bufs, arg_names)
        seconds = time.perf_counter() - start
        grid = tuple(launch.grid) if np.ndim(launch.grid) else (launch.grid,)
        return CpuLaunchReport(name, grid, launch.lanes, self._schedules, self._modes, switches, seconds)
