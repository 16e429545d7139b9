"""One launch under AddressSanitizer, in a child process (CUDA-CPU-10).

An ASan-instrumented kernel needs ASan's runtime loaded first in its process, which a Python
interpreter is not; so the launch runs in the kernel's own ASan program (:func:`.build.executable`,
``include/tessera_asan.h``): :func:`run` writes the launch to a file, runs the program under a
time limit, and reads back the result and every argument's bytes (copied into the caller's
arrays), or parses ASan's report into a :class:`Report`. A child that times out, dies of a
signal without a report or breaks the protocol is a BackendError. The child runs without
address-space randomisation where ``setarch -R`` may (GCC 12's ASan cannot start under the
32-bit mmap randomisation of recent kernels: it would only end at the time limit).
"""
from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ....errors import BackendError

__all__ = ["ASAN_OPTIONS", "Report", "run", "parse"]

#: The child's ASAN_OPTIONS: stop at the first error, no leak check (the harness's fibers are
#: abandoned at a finding), use-after-return checking on (each fiber keeps its own fake stack).
ASAN_OPTIONS = ("halt_on_error=1:abort_on_error=0:detect_leaks=0:detect_stack_use_after_return=1:color=never:"
                "symbolize=1:handle_segv=1:print_legend=0")


@dataclass(frozen=True)
class Report:
    """What ASan reported: ``error`` (``heap-buffer-overflow``, ``SEGV`` …), ``access``
    (``read``/``write``, or ``""``), ``size`` (bytes accessed), ``address``, ``line`` (the
    innermost frame in the kernel's text: its CUDA line; 0 if none), ``region`` (the argument's
    index, ``"smem"``, a local variable's name on a fiber's stack as ``"local NAME"``, or None),
    ``side`` (``"past the end of"`` / ``"before the start of"``), ``distance`` (bytes from the
    region's end / start), ``region_bytes``, ``region_line`` (a local variable's CUDA line, else
    0), ``thread`` and ``block`` (of the running fiber), ``text`` (the report's first lines)."""
    error: str
    access: str
    size: int
    address: int
    line: int
    region: object
    side: str
    distance: int
    region_bytes: int
    region_line: int
    thread: int
    block: tuple
    text: str


_ERROR = re.compile(r"ERROR: AddressSanitizer: (\S+) on (?:unknown )?address (0x[0-9a-f]+)")
_ACCESS = re.compile(r"^(READ|WRITE) of size (\d+) at|caused by a (READ|WRITE) memory access", re.M)
_FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-f]+ .*?(?:^|[/ (])kernel\.cu:(\d+)")
_LOCATED = re.compile(r"is located (\d+) bytes (to the right of|to the left of|after|before|inside of) "
                      r"(\d+)-byte region \[(0x[0-9a-f]+),\s*(0x[0-9a-f]+)\)")
_VARIABLE = re.compile(r"\[(\d+), (\d+)\) '([^']+)'(?: \(line (\d+)\))? <== Memory access at offset (\d+) "
                       r"(?:overflows|underflows|partially overflows|partially underflows)")
_REGION = re.compile(r"^tsr-asan region (\d+|smem) (0x[0-9a-f]+|\(nil\)) (\d+)$", re.M)
_DEATH = re.compile(r"^tsr-asan at thread (\d+) block (\d+) (\d+) (\d+)$", re.M)


def _first_stack_line(log: str) -> int:
    """The CUDA line of the innermost kernel.cu frame of the report's first stack trace."""
    started = False
    for text in log[log.find("ERROR: AddressSanitizer"):].splitlines():
        is_frame = re.match(r"\s*#\d+ 0x", text) is not None
        if started and not is_frame:
            break
        started |= is_frame
        m = _FRAME.match(text)
        if m:
            return int(m.group(1))
    return 0


def parse(log: str) -> Report | None:
    """ASan's report in the child's stderr ``log`` (None when it has none)."""
    err = _ERROR.search(log)
    if err is None:
        return None
    address = int(err.group(2), 16)
    regions = {m.group(1): (int(m.group(2), 16) if m.group(2) != "(nil)" else 0, int(m.group(3)))
               for m in _REGION.finditer(log)}
    region, side, distance, nbytes, region_line = None, "", 0, 0, 0
    located, variable = _LOCATED.search(log), _VARIABLE.search(log)
    if variable:  # a local array on a fiber's stack (ASan knows the fiber stacks: CUDA-CPU-10)
        begin, end, offset = int(variable.group(1)), int(variable.group(2)), int(variable.group(5))
        region, nbytes, region_line = f"local {variable.group(3)}", end - begin, int(variable.group(4) or 0)
        side = "past the end of" if offset >= end else "before the start of"
        distance = offset - end if offset >= end else begin - offset
    elif located:
        start, end = int(located.group(4), 16), int(located.group(5), 16)
        region = next((k for k, (a, _) in regions.items() if a == start), None)
        nbytes = end - start
        side = "past the end of" if address >= end else "before the start of"
        distance = address - end if address >= end else start - address
    elif regions and err.group(1) == "SEGV":  # a wild access: the nearest region
        def gap(item):
            a, n = item[1]
            return address - (a + n) if address >= a + n else a - address
        region, (start, nbytes) = min(regions.items(), key=gap)
        side = "past the end of" if address >= start + nbytes else "before the start of"
        distance = gap((region, (start, nbytes)))
    access = _ACCESS.search(log)
    death = _DEATH.search(log)
    head = log[err.start():].split("\n\n")[0]
    verb = (access.group(1) or access.group(3)).lower() if access else ""
    return Report(err.group(1), verb, int(access.group(2) or 0) if access else 0,
                  address, _first_stack_line(log), region if not str(region).isdigit() else int(region), side,
                  distance, nbytes, region_line, int(death.group(1)) if death else -1,
                  tuple(int(death.group(i)) for i in (2, 3, 4)) if death else (0, 0, 0), head)


#: Where Linux says how many bits of mmap addresses it randomises.
RND_BITS = Path("/proc/sys/vm/mmap_rnd_bits")


@functools.lru_cache(maxsize=1)
def _no_aslr() -> tuple:
    """``(setarch, machine, "-R")`` when it works here, else ``()`` (a container may forbid it)."""
    tool = shutil.which("setarch")
    if tool is None:
        return ()
    cmd = (tool, platform.machine(), "-R")
    try:
        works = subprocess.run([*cmd, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    return cmd if works else ()


def _launcher(kernel: str) -> tuple:
    """The command prefix of an ASan child: ``setarch -R`` where it works; a BackendError
    where it does not and the kernel's mmap randomisation (over 28 bits) would stall ASan."""
    cmd = _no_aslr()
    try:
        bits = int(RND_BITS.read_text())
    except (OSError, ValueError):
        bits = 0
    if not cmd and bits > 28:
        raise BackendError(f"AddressSanitizer cannot start kernel {kernel} on this machine: vm.mmap_rnd_bits is "
                           f"{bits} and `setarch -R` (running without address-space randomisation) is not allowed",
                           fix="run `sysctl vm.mmap_rnd_bits=28` (as root), allow the personality system call, or "
                               "use the default memcheck ('guard')")
    return cmd


def run(program: Path, kernel: str, grid3, lanes: int, args, options: bytes, result_size: int,
        timeout: float) -> tuple[bytes | None, Report | None]:
    """Run one launch of ``program`` (see the module docstring); ``(result bytes, None)`` and
    the arguments updated in place, or ``(None, report)`` when ASan reported an error."""
    with tempfile.TemporaryDirectory(prefix="tsr-asan-") as d:
        launch, result = Path(d) / "launch", Path(d) / "result"
        name = kernel.encode()
        parts = [b"TSRASAN1", struct.pack("<I", len(name)), name, struct.pack("<3q", *grid3),
                 struct.pack("<i", int(lanes)), options, struct.pack("<I", len(args))]
        for a in args:
            data = np.ascontiguousarray(a).tobytes()
            parts += [struct.pack("<Q", len(data)), data]
        launch.write_bytes(b"".join(parts))
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # ASan's runtime must come first
        env["ASAN_OPTIONS"] = ASAN_OPTIONS
        try:
            done = subprocess.run([*_launcher(kernel), str(program), str(launch), str(result)], capture_output=True, text=True,
                                  errors="replace", env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BackendError(f"the AddressSanitizer launch of kernel {kernel} did not finish within {timeout:g} s "
                               f"(the child process was killed)",
                               fix="look for a loop that never ends in the kernel, or raise the harness Options' "
                                   "timeout") from None
        report = parse(done.stderr)
        if report is not None:
            return None, report
        if done.returncode != 0 or not result.exists():
            how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
            raise BackendError(f"the AddressSanitizer launch of kernel {kernel} died ({how}) without a report: "
                               f"{done.stderr.strip()[-800:] or 'no output'}",
                               fix="run the kernel with the default memcheck ('guard') to see whether it faults "
                                   "there; an ASan start-up failure is about the machine (ASLR, ulimit -v)")
        data = result.read_bytes()
        expected = result_size + sum(np.asarray(a).nbytes for a in args)
        if len(data) != expected:
            raise BackendError(f"the AddressSanitizer launch of kernel {kernel} wrote {len(data)} bytes of results, "
                               f"not {expected}", fix="report it: the harness's launch protocol is broken")
        at = result_size
        for a in args:
            n = a.nbytes
            if a.flags.writeable:
                a.reshape(-1).view(np.uint8)[...] = np.frombuffer(data, np.uint8, n, at)
            at += n
        return data[:result_size], None
