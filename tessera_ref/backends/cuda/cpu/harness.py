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

Every argument is copied into memory of its own whose end (rounded up to 16 bytes) touches an
inaccessible page (another one lies before its first page), and the shared memory past the
launch's size is made inaccessible too, so an access past the end of a buffer or of the
shared memory faults; the fault is caught (the launch ends), the launch is run again from a
``-O0`` build whose line table names the exact line, and it is reported as a finding naming
the argument, how far past its end the access was, and the CUDA line (``addr2line``). That is
``memcheck="guard"``; ``memcheck="asan"`` runs the launch instead in the kernel's
AddressSanitizer program in a child process (:mod:`.asan`, CUDA-CPU-10), every argument and the
shared memory an exact-size heap block, and reports ASan's finding the same way.
"""
from __future__ import annotations

import ctypes
import mmap
import re
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np

from ....errors import BackendError, BackendFinding
from ....numerics.tc import BlockFMA
from . import asan, build

__all__ = ["Options", "HarnessFinding", "run", "SCHEDULES", "CP_ASYNC", "MEMCHECKS", "parse_schedule"]

#: The schedule names (``random:SEED`` takes a non-negative integer seed).
SCHEDULES = ("lockstep", "reverse", "random:SEED")
#: The cp.async modes.
CP_ASYNC = ("deferred", "eager")
#: How out-of-bounds accesses are found: guard pages in this process, or AddressSanitizer in a child.
MEMCHECKS = ("guard", "asan")

_KINDS = {1: "divergent barrier", 2: "barrier after exit", 3: "partial warp", 4: "bad launch",
          5: "unsupported operation", 6: "memory fault"}
_FIXES = {
    "divergent barrier": "every thread of a block must reach the same __syncthreads: move the barrier out of the "
                         "branch named above",
    "barrier after exit": "threads must not return before a __syncthreads the others still reach: guard the work, "
                          "not the barrier",
    "partial warp": "all 32 lanes of a warp must reach a warp operation (and blocks must be whole warps): move it "
                    "out of the branch named above",
    "memory fault": "keep every index of the line named above inside its buffer (and shared memory inside the "
                    "launch's dynamic size)",
    "bad launch": "launch 1 to 1024 threads per block on a grid of positive sizes",
    "unsupported operation": "run this kernel on the 'interp' backend",
}
_MEMORY_FAULT = 6
_PAGE = mmap.PAGESIZE


class HarnessFinding(BackendFinding):
    """The CUDA-on-CPU harness found a bug in a kernel (``kind``, ``line``: the CUDA line)."""


class _Options(ctypes.Structure):
    _fields_ = [("schedule", ctypes.c_int), ("eager", ctypes.c_int), ("seed", ctypes.c_ulonglong),
                ("smem", ctypes.c_long), ("tc_products", ctypes.c_int), ("tc_align", ctypes.c_int),
                ("tc_emin", ctypes.c_int), ("tc_fadd", ctypes.c_int), ("tc_order", ctypes.c_int * 32)]


class _Result(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("line", ctypes.c_int), ("other_line", ctypes.c_int),
                ("block", ctypes.c_long * 3), ("switches", ctypes.c_ulonglong), ("fault_address", ctypes.c_ulonglong),
                ("fault_pc", ctypes.c_ulonglong), ("fault_library", ctypes.c_char * 512),
                ("text", ctypes.c_char * 1024)]


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
    """How to run a launch: the schedule, the cp.async mode, the tensor-core model's
    instruction (``tc``: a numerics/tc.py ``BlockFMA`` resolved for the kernel's input format,
    ``model.block(fmt).resolved(fmt)``, or None), the ``memcheck`` (``"guard"`` pages, or
    ``"asan"``: CUDA-CPU-10) and the ASan child's time
    limit in seconds (``timeout``)."""
    schedule: str = "lockstep"
    cp_async: str = "deferred"
    tc: tuple | None = None
    memcheck: str = "guard"
    timeout: float = 600.0

    def __post_init__(self):
        parse_schedule(self.schedule)
        if self.cp_async not in CP_ASYNC:
            raise BackendError(f"unknown cp.async mode {self.cp_async!r}", fix=f"use one of {', '.join(CP_ASYNC)}")
        if self.memcheck not in MEMCHECKS:
            raise BackendError(f"unknown memcheck {self.memcheck!r}", fix=f"use one of {', '.join(MEMCHECKS)}")
        if self.tc is not None and not (isinstance(self.tc, BlockFMA) and self.tc.emin is not None
                                        and 0 < len(self.tc.order) <= 32):
            raise BackendError(f"the harness's tc option is a resolved tensor-core instruction, got {self.tc!r}",
                               fix="pass tc.model(name).block(fmt).resolved(fmt)")


def _tc_fields(blk: BlockFMA | None) -> tuple:
    """The twin's ``tc_*`` options for the instruction ``blk`` (None: no model)."""
    if blk is None:
        return 0, 0, 0, 0, (ctypes.c_int * 32)()
    return blk.products, blk.align_bits, blk.emin, int(blk.fadd), (ctypes.c_int * 32)(*blk.order)


class _Guarded:
    """``array``'s bytes in a mapping of their own whose end (rounded up to 16 bytes) touches an
    inaccessible page, with another inaccessible page before its first page (an access before
    the start faults once it leaves that page); :meth:`close` copies them back (into a
    writeable array) and unmaps."""

    _mprotect = None

    def __init__(self, array: np.ndarray):
        self.array, nbytes = array, array.nbytes
        padded = max(16, -(-nbytes // 16) * 16)
        pages = -(-padded // _PAGE)
        self.map = mmap.mmap(-1, (pages + 2) * _PAGE)  # a guard page, the data pages, a guard page
        offset = (pages + 1) * _PAGE - padded
        self.bytes = np.frombuffer(self.map, np.uint8, padded, offset)
        self.bytes[:nbytes] = array.reshape(-1).view(np.uint8)
        self.start = self.bytes.ctypes.data
        self.end = self.start + nbytes
        if _Guarded._mprotect is None:
            libc = ctypes.CDLL(None, use_errno=True)
            _Guarded._mprotect = libc.mprotect
            libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        base = self.start - offset
        if _Guarded._mprotect(base, _PAGE, 0) or _Guarded._mprotect(base + (pages + 1) * _PAGE, _PAGE, 0):  # PROT_NONE
            raise BackendError(f"could not protect a guard page (errno {ctypes.get_errno()})",
                               fix="run on Linux with mprotect available")

    def close(self) -> None:
        if self.array.flags.writeable:
            self.array.reshape(-1).view(np.uint8)[...] = self.bytes[:self.array.nbytes]
        del self.bytes
        self.map.close()


def _where_fault(res: _Result, guards, names) -> str:
    """Which argument the faulting address lies past (or before), in bytes."""
    address = res.fault_address
    best = None
    for i, g in enumerate(guards):
        distance = address - g.end if address >= g.end else g.start - address
        side = "past the end of" if address >= g.end else "before the start of"
        if best is None or distance < best[0]:
            best = (distance, f"{distance} bytes {side} argument {names[i] if names else i} "
                              f"({g.array.nbytes} bytes)")
    return f"; the address is {best[1]}" if best else ""


def _fault_line(res: _Result) -> int:
    """The CUDA line of the faulting instruction (its library's line table, innermost kernel.cu
    frame), else the line of the thread's last device operation."""
    library = res.fault_library.decode(errors="replace")
    tool = shutil.which("addr2line")
    if library and tool and res.fault_pc:
        done = subprocess.run([tool, "-i", "-e", library, hex(res.fault_pc)], capture_output=True, text=True)
        for text in done.stdout.splitlines():
            m = re.search(r"(?:^|/)kernel\.cu:(\d+)", text.strip())
            if m:
                return int(m.group(1))
    return res.line


def _finding(res: _Result, kernel: str, options: Options, source, guards=(), names=None, fix=None) -> HarnessFinding:
    lines, locations = source.text.splitlines(), getattr(source, "locations", {})
    kind = _KINDS.get(res.kind, f"finding {res.kind}")
    text = res.text.decode(errors="replace")
    if kind == "memory fault":
        res.line = _fault_line(res)
        text += _where_fault(res, guards, names)
    what = (f"the CUDA-on-CPU harness found a {kind} in kernel {kernel} (schedule {options.schedule}, cp.async "
            f"{options.cp_async}, block {tuple(res.block)}): {text}")
    where = ""
    for n in (res.line, res.other_line):
        if 0 < n <= len(lines):
            what += f"\n  CUDA line {n}: {lines[n - 1].strip()}"
            if locations.get(n):
                what += f"\n    from the Tile IR op at {locations[n]}"
                where = where or locations[n]
    err = HarnessFinding(what, location=where or None,
                         fix=fix or _FIXES.get(kind, "fix the kernel at the line named above"))
    err.kind, err.line = kind, res.line
    return err


def run(lib, kernel: str, grid, lanes: int, args, smem: int, options: Options, source, names=None,
        kernels=None) -> int:
    """Launch ``kernel`` of the loaded library ``lib``; ``args``: contiguous NumPy arrays in
    parameter order (buffers, written in place; one-element arrays for scalars and sizes),
    ``names`` their names for messages. Returns the number of fiber switches; raises
    :class:`HarnessFinding` for a finding (the buffers then hold what the kernel wrote; under
    ASan, what they held before the launch). With ``options.memcheck == "asan"`` ``lib`` is
    not used (it may be None): the launch runs in the ASan program of ``source`` with a
    launcher for each of ``kernels`` (default: ``kernel`` alone)."""
    code, seed = parse_schedule(options.schedule)
    opts = _Options(code, int(options.cp_async == "eager"), seed, int(smem), *_tc_fields(options.tc))
    grid = tuple(int(g) for g in (tuple(grid) if np.ndim(grid) else (grid,)))
    grid3 = (ctypes.c_long * 3)(*(grid + (1,) * (3 - len(grid))))
    if options.memcheck == "asan":
        return _run_asan(kernel, grid3, lanes, args, opts, options, source, names, kernels)
    res, guards = _launch(lib, kernel, grid3, lanes, args, opts)
    if res.kind == _MEMORY_FAULT:  # again from the -O0 build, for the exact line
        again, guards = _launch(build.library(source, [kernel], build.DEBUG_FLAGS), kernel, grid3, lanes, args, opts)
        res = again if again.kind == _MEMORY_FAULT else res
    if res.kind:
        raise _finding(res, kernel, options, source, guards, names)
    return res.switches


def _run_asan(kernel, grid3, lanes, args, opts, options, source, names, kernels) -> int:
    """:func:`run` in the ASan program of ``source`` launching ``kernels``."""
    program = build.executable(source, list(kernels or [kernel]))
    data, report = asan.run(program, kernel, tuple(grid3), lanes, args, bytes(opts), ctypes.sizeof(_Result),
                            options.timeout)
    if report is None:
        res = _Result.from_buffer_copy(data)
        if res.kind:
            raise _finding(res, kernel, options, source)
        return res.switches
    res = _Result(kind=_MEMORY_FAULT, line=report.line)
    res.block = (ctypes.c_long * 3)(*report.block)
    res.text = _asan_text(report, names).encode()[:1023]
    err = _finding(res, kernel, options, source, fix=_ASAN_FIXES.get(report.error))
    err.asan = report
    raise err


#: ASan's errors whose fix is not memory fault's (an index outside a buffer)
_ASAN_FIXES = {
    "stack-buffer-overflow": "keep every index of the line named above inside the local array named above",
    "stack-use-after-return": "do not keep a pointer to a local variable past the return of its function",
    "stack-use-after-scope": "do not keep a pointer to a local variable past the end of its block",
}


def _asan_text(report, names) -> str:
    """What a finding says of ASan's ``report``: the thread, the access, what it lies outside."""
    who = f"thread {report.thread}" if report.thread >= 0 else "a thread"
    access = {"read": "read", "write": "wrote"}.get(report.access, "accessed")
    text = f"{who} {access}{f' {report.size} bytes' if report.size else ''} at 0x{report.address:x} " \
           f"(AddressSanitizer: {report.error})"
    region = report.region
    if region is None:
        return text
    if region == "smem":
        what = f"the dynamic shared memory ({report.region_bytes} bytes)"
    elif isinstance(region, str):  # "local NAME"
        line = f", declared at CUDA line {report.region_line}" if report.region_line else ""
        what = f"the thread's local array '{region.split(' ', 1)[1]}' ({report.region_bytes} bytes{line})"
    else:
        what = f"argument {names[region] if names else region} ({report.region_bytes} bytes)"
    return f"{text}; the address is {report.distance} bytes {report.side} {what}"


def _launch(lib, kernel, grid3, lanes, args, opts) -> tuple:
    """One launch on guarded copies of ``args`` (copied back after); ``(result, guards)``."""
    fn = getattr(lib, f"tsr_launch_{kernel}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(ctypes.c_long), ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Options),
                   ctypes.POINTER(_Result)]
    guards = []
    try:
        guards = [_Guarded(a) for a in args]
        pointers = (ctypes.c_void_p * max(1, len(args)))(*(g.start for g in guards))
        res = _Result()
        fn(grid3, int(lanes), pointers, ctypes.byref(opts), ctypes.byref(res))
    finally:
        for g in guards:
            g.close()
    return res, guards
