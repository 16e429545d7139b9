"""One launch of a rendered kernel on the CPU (CUDA-CPU-2 … 5).

:func:`run` mirrors the ``"cuda"`` backend's launch contract — ``(grid, (lanes, 1, 1), args,
dynamic shared memory)`` with the kernel's parameters in order followed by its symbolic sizes
as ``long`` — on NumPy buffers, which the kernel reads and writes in place. ``schedule`` is
``"lockstep"`` (the fibers of a block in ascending thread order between yield points),
``"reverse"`` or ``"random:SEED"`` (a fresh seeded permutation at every round); ``cp_async``
is ``"deferred"`` (each copy performed at the ``wait_group`` that covers it, the latest
moment the program may rely on) or ``"eager"`` (at issue). A finding raises
:class:`HarnessFinding` naming the kernel, the schedule and mode, the block, the CUDA line
and the Tile IR op (the user's source line) that line came from.
"""
from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

import numpy as np

from ....errors import BackendError

__all__ = ["Options", "HarnessFinding", "run", "SCHEDULES", "CP_ASYNC", "parse_schedule"]

#: The schedule names (``random:SEED`` takes a non-negative integer seed).
SCHEDULES = ("lockstep", "reverse", "random:SEED")
#: The cp.async modes.
CP_ASYNC = ("deferred", "eager")

_KINDS = {1: "divergent barrier", 2: "barrier after exit", 3: "partial warp", 4: "bad launch",
          5: "unsupported operation"}


class HarnessFinding(BackendError):
    """The CUDA-on-CPU harness found a bug in a kernel (``kind``, ``line``: the CUDA line)."""


class _Options(ctypes.Structure):
    _fields_ = [("schedule", ctypes.c_int), ("eager", ctypes.c_int), ("seed", ctypes.c_ulonglong),
                ("smem", ctypes.c_long), ("tc_products", ctypes.c_int), ("tc_align", ctypes.c_int)]


class _Result(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("line", ctypes.c_int), ("other_line", ctypes.c_int),
                ("block", ctypes.c_long * 3), ("switches", ctypes.c_ulonglong), ("text", ctypes.c_char * 1024)]


def parse_schedule(schedule: str) -> tuple[int, int]:
    """``(code, seed)`` of a schedule name; a BackendError for an unknown one."""
    if schedule in ("lockstep", "reverse"):
        return (0 if schedule == "lockstep" else 1), 0
    m = re.fullmatch(r"random:(\d+)", str(schedule))
    if m is None:
        raise BackendError(f"unknown CUDA-on-CPU schedule {schedule!r}",
                           fix=f"use one of {', '.join(SCHEDULES)} (e.g. 'random:3')")
    return 2, int(m.group(1))


@dataclass(frozen=True)
class Options:
    """How to run a launch: the schedule, the cp.async mode and the tensor-core model's block
    (``tc``: ``(products per block, extra alignment bits)`` of numerics/tc.py, or None)."""
    schedule: str = "lockstep"
    cp_async: str = "deferred"
    tc: tuple | None = None

    def __post_init__(self):
        parse_schedule(self.schedule)
        if self.cp_async not in CP_ASYNC:
            raise BackendError(f"unknown cp.async mode {self.cp_async!r}", fix=f"use one of {', '.join(CP_ASYNC)}")


def _finding(res: _Result, kernel: str, options: Options, source) -> HarnessFinding:
    lines, locations = source.text.splitlines(), getattr(source, "locations", {})
    kind = _KINDS.get(res.kind, f"finding {res.kind}")
    what = (f"the CUDA-on-CPU harness found a {kind} in kernel {kernel} (schedule {options.schedule}, cp.async "
            f"{options.cp_async}, block {tuple(res.block)}): {res.text.decode(errors='replace')}")
    where = ""
    for n in (res.line, res.other_line):
        if 0 < n <= len(lines):
            what += f"\n  CUDA line {n}: {lines[n - 1].strip()}"
            if locations.get(n):
                what += f"\n    from the Tile IR op at {locations[n]}"
                where = where or locations[n]
    err = HarnessFinding(what, location=where or None,
                         fix="every thread of a block must reach the same __syncthreads, and all 32 lanes of a warp "
                             "the same warp operation; fix the kernel at the line named above")
    err.kind, err.line = kind, res.line
    return err


def run(lib, kernel: str, grid, lanes: int, args, smem: int, options: Options, source) -> int:
    """Launch ``kernel`` of the loaded library ``lib``; ``args``: NumPy arrays (buffers, written
    in place) and 0-d arrays (scalars, sizes) in parameter order. Returns the number of fiber
    switches; raises :class:`HarnessFinding` for a finding."""
    code, seed = parse_schedule(options.schedule)
    products, align = options.tc or (0, 0)
    opts = _Options(code, int(options.cp_async == "eager"), seed, int(smem), products, align)
    grid = tuple(int(g) for g in (tuple(grid) if np.ndim(grid) else (grid,)))
    grid3 = (ctypes.c_long * 3)(*(grid + (1,) * (3 - len(grid))))
    pointers = (ctypes.c_void_p * max(1, len(args)))(*(a.ctypes.data for a in args))
    res = _Result()
    fn = getattr(lib, f"tsr_launch_{kernel}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(ctypes.c_long), ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Options),
                   ctypes.POINTER(_Result)]
    if fn(grid3, int(lanes), pointers, ctypes.byref(opts), ctypes.byref(res)):
        raise _finding(res, kernel, options, source)
    return res.switches
