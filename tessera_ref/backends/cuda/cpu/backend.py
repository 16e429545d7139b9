"""The backend ``"cuda-cpu"``: the rendered CUDA kernels run on the CPU (CUDA-CPU-7).

:class:`FiberDevice` is the CUDA-on-CPU harness as a runtime device: its memory is host
arenas (each launch's arguments guarded by inaccessible pages, or run under ASan), its
compiler g++ with the CPU twin (:mod:`.build`, cached), its kernels the rendered CUDA C
(:func:`~..source.render`, the text the ``"cuda"`` backend compiles with NVRTC) launched on
fibers (:mod:`.harness`), its graph the serial replay of the launch list. ``"cuda-cpu"`` is
:class:`~tessera_ref.runtime.DeviceBackend` over it (:func:`CudaCpuBackend`): whole programs
compiled once and replayed; an op without a kernel is refused unless host steps are allowed.
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
from ....ir.types import IndexType
from ....numerics import tc
from ....runtime import Compiler, Device, DeviceBackend, HostAllocator, Kernel
from ..source import render
from . import build, harness
from .harness import HarnessFinding

__all__ = ["CudaCpuBackend", "FiberDevice", "CpuLaunchReport", "scalar_dtype"]


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


def scalar_dtype(t):
    """The C type of a scalar kernel argument as NumPy's: index -> long, a 0-d mask -> bool, a
    number in its format (how the renderer declares it)."""
    return (np.dtype(np.int64) if isinstance(t, IndexType) else np.dtype(np.bool_) if isinstance(t, TensorType)
            else np.dtype(t.format.dtype))


@dataclass(frozen=True)
class _Unit:
    """What FiberDevice compiles: the rendered source and the kernels to launch from it."""
    source: object
    names: tuple
    memcheck: str

    @property
    def text(self) -> tuple:
        return (self.source.text, self.names, self.memcheck)


class _Gxx(Compiler):
    """g++ and the CPU twin (:func:`.build.library`; under ASan each launch builds its program)."""

    def key(self, unit):
        return unit.text

    def _compile(self, unit):
        return build.library(unit.source, list(unit.names)) if unit.memcheck == "guard" else None


class _FiberKernel(Kernel):
    def __init__(self, device, lib, unit, func):
        attrs = func.attributes
        self.device, self.lib, self.unit, self.name = device, lib, unit, attrs["sym_name"]
        self.block = _tc_block(func)
        self.arg_names = list(attrs["tile.params"]) + list(attrs.get("tile.sizes", {}))
        self.scalars = [None if isinstance(a.type, TensorType) and a.type.rank > 0 else scalar_dtype(a.type)
                        for a in func.regions[0].entry.args] + [np.dtype(np.int64)] * len(attrs.get("tile.sizes", {}))

    def __call__(self, args, grid, block, smem, stream=None, options=None) -> CpuLaunchReport:
        args = [a if dtype is None else np.asarray(a, dtype=dtype).reshape(1) for a, dtype in zip(args, self.scalars)]
        runs = self.device.runs
        before = [a.copy() for a in args] if len(runs) > 1 else None
        start, switches = time.perf_counter(), 0
        for i, run in enumerate(runs):  # the first into the buffers, every other on a copy of them
            options_i, bufs = dataclasses.replace(run, tc=self.block), args if i == 0 else [b.copy() for b in before]
            switches += harness.run(self.lib, self.name, grid, block[0], bufs, smem, options_i, self.unit.source,
                                    self.arg_names, kernels=list(self.unit.names))
            if i:
                _same_bits(self.name, runs[0], run, args, bufs, self.arg_names)
        d = self.device
        return CpuLaunchReport(self.name, tuple(grid), block[0], d.schedules, d.modes, switches,
                               time.perf_counter() - start)


class FiberDevice(Device):
    """The CUDA-on-CPU harness as a device (see the module docstring)."""

    name = "cuda-cpu"

    def __init__(self, schedule=SWEEP_SCHEDULES, cp_async=harness.CP_ASYNC, memcheck: str = "guard"):
        build.gxx()  # no g++, or a host neither x86-64 nor AArch64: a BackendError now
        schedules, modes = _names(schedule, "schedule"), _names(cp_async, "cp.async mode")
        self.runs = tuple(harness.Options(s, m, memcheck=memcheck) for s in schedules for m in modes)
        self.schedules, self.modes = ",".join(dict.fromkeys(schedules)), ",".join(dict.fromkeys(modes))
        self.allocator = HostAllocator(self.name)
        self.compiler = _Gxx()

    @property
    def options(self) -> harness.Options:
        """The first run's options (its memcheck is every run's)."""
        return self.runs[0]

    @property
    def options_text(self) -> str:
        return f"schedule={self.schedules} cp_async={self.modes} memcheck={self.options.memcheck}"

    def render(self, tile_module) -> _Unit:
        try:
            source = render(tile_module)
        except LoweringError as exc:  # what the emitter cannot write, the harness cannot run
            raise BackendError(f"the cuda-cpu backend runs rendered CUDA C; the CUDA emitter refuses this kernel: "
                               f"{exc.what}", location=exc.location, fix=exc.fix) from None
        names = tuple(op.attributes["sym_name"] for op in tile_module.body if T.is_kernel(op))
        return _Unit(source, names, self.options.memcheck)

    def load(self, binary, unit, tile_module) -> dict:
        return {op.attributes["sym_name"]: _FiberKernel(self, binary, unit, op)
                for op in tile_module.body if T.is_kernel(op)}


def CudaCpuBackend(schedule=SWEEP_SCHEDULES, cp_async=harness.CP_ASYNC, memcheck: str = "guard", *,
                   allow_host: bool = False) -> DeviceBackend:
    """``"cuda-cpu"``: :class:`~tessera_ref.runtime.DeviceBackend` over a :class:`FiberDevice`
    running every launch under each of ``schedule`` × ``cp_async`` (CUDA-CPU-7)."""
    return DeviceBackend(FiberDevice(schedule, cp_async, memcheck), "cuda-cpu",
                         "rendered CUDA kernels compiled with g++ and a CPU twin of the device, each thread a fiber; "
                         "whole programs compiled once and replayed", allow_host=allow_host)
