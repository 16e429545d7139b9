"""Compile rendered CUDA C for the CPU with g++ and the twin (CUDA-CPU-1, CUDA-CPU-6).

The translation unit is ``#include "tessera_cpu.h"`` (the twin), then the rendered text
itself, line for line (under ``#line 1``, so
``__LINE__`` and g++'s messages name CUDA source lines), followed by one
``TSR_CPU_LAUNCHER(kernel)`` per kernel: ``extern "C" int tsr_launch_<kernel>(grid, lanes,
args, options, result)``. The include path puts ``include/`` (the twin's stand-ins for
``cuda_fp16.h`` … and ``tessera_cpu.h``) before the directory of ``tessera_device.cuh``.
Inline PTX (an ``asm`` statement) in the kernel text has no CPU twin: an
:class:`UnsupportedPTX` naming its line (the renderer writes none; the device header's PTX
is what the twin replaces). Flags :data:`FLAGS`: ``-O2 -fno-fast-math
-ffp-contract=off`` (an fma only where the source calls ``fmaf``/``fma``), ``-g`` (the line
table names the CUDA line of a memory fault). Shared libraries
are cached in :func:`tessera_ref.cache.directory` ``("cuda-cpu")`` as ``<key>.so``, keyed by
the sha256 of the unit, the flags, the twin's and the device header's bytes and g++'s version,
and loaded only when the file has the size and SHA-256 its metadata records (else compiled
again and rewritten). :func:`executable` builds
the AddressSanitizer variant (CUDA-CPU-10): the same unit plus ``tessera_asan.h``'s ``main``,
linked as a program with :data:`ASAN_FLAGS`, cached the same way as ``<key>.asan`` (mode 0700).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from .... import cache
from ....errors import BackendError, CacheError
from ..compile import CompileError
from ..toolchain import HEADER_DIR

__all__ = ["FLAGS", "DEBUG_FLAGS", "ASAN_FLAGS", "TWIN_DIR", "UnsupportedPTX", "translation_unit", "library",
           "executable", "gxx"]

#: The twin's include directory (``tessera_cpu.h``, ``tessera_fiber.h``, ``tessera_switch.h``, the CUDA
#: header stand-ins).
TWIN_DIR = Path(__file__).parent / "include"
#: The machines (``platform.machine()``) whose fiber switch ``tessera_switch.h`` has.
MACHINES = ("x86_64", "AMD64", "aarch64")
#: g++'s options for every kernel library.
FLAGS = ("-std=c++17", "-O2", "-g", "-fno-fast-math", "-ffp-contract=off", "-fPIC", "-shared", "-fvisibility=hidden",
         "-fno-strict-aliasing")
#: The same at -O0, whose line table names the exact line of every access (a memory fault's
#: launch is run again with them to name its line).
DEBUG_FLAGS = tuple("-O0" if f == "-O2" else f for f in FLAGS)
#: The AddressSanitizer program's (CUDA-CPU-10): the same exactness flags, ``-O1`` (ASan's advice:
#: fast enough, and the line table still names each access), frame pointers for ASan's unwinder.
ASAN_FLAGS = ("-std=c++17", "-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer", "-fno-fast-math",
              "-ffp-contract=off", "-fno-strict-aliasing")


class UnsupportedPTX(BackendError):
    """Inline PTX the harness has no CPU twin for (the message names the CUDA line)."""


def _refuse_asm(text: str, locations: dict) -> None:
    for n, line in enumerate(text.split("\n"), 1):
        if re.search(r"\basm\b", line.split("//")[0]):
            where = locations.get(n, "")
            raise UnsupportedPTX(f"the CUDA-on-CPU harness has no CPU twin for the inline PTX of CUDA line {n}: "
                                 f"{line.strip()[:160]}" + (f"\n  from the Tile IR op at {where}" if where else ""),
                                 location=where or None,
                                 fix="run this kernel on the 'interp' backend (or on a GPU with 'cuda'); the harness "
                                     "runs the device header's cp.async, shuffles, ldmatrix and m16n8k16 mma.sync")


def _refuse_static_shared(text: str, locations: dict) -> None:
    """A ``__shared__`` variable that is not the dynamic ``extern __shared__`` array would be each
    fiber's own local under the twin (one thread's copy, never shared): refused, not run wrong."""
    for n, line in enumerate(text.split("\n"), 1):
        code = line.split("//")[0]
        if re.search(r"\b__shared__\b", code) and not re.search(r"\bextern\s+__shared__\b", code):
            where = locations.get(n, "")
            raise BackendError(f"the CUDA-on-CPU harness runs only dynamic shared memory (extern __shared__); CUDA "
                               f"line {n} declares a static __shared__ variable: {line.strip()[:160]}"
                               + (f"\n  from the Tile IR op at {where}" if where else ""), location=where or None,
                               fix="declare `extern __shared__ __align__(16) unsigned char tsr_smem[];`, place the "
                                   "variable in it and launch with that many bytes of dynamic shared memory (the "
                                   "rendered kernels do), or run the kernel on a GPU")


def translation_unit(source, kernels, main: bool = False) -> str:
    """The C++ text compiled for ``source`` (a rendered :class:`~..source.Source`) launching
    ``kernels``; with ``main``, the ASan driver's ``main`` over them too."""
    text = source.text
    _refuse_asm(text, getattr(source, "locations", {}))
    _refuse_static_shared(text, getattr(source, "locations", {}))
    launchers = "".join(f"TSR_CPU_LAUNCHER({k})\n" for k in kernels)
    if main:
        table = ", ".join(f'{{"{k}", &tsr_launch_{k}}}' for k in kernels)
        launchers += f'#include "tessera_asan.h"\nTSR_CPU_ASAN_MAIN({table})\n'
    return '#include "tessera_cpu.h"\n#line 1 "kernel.cu"\n' + text + "\n" + launchers


@functools.lru_cache(maxsize=1)
def gxx() -> tuple[str, str]:
    """``(path, version line)`` of g++; a BackendError when there is none or the machine is
    neither x86-64 nor AArch64 (the architectures of ``tessera_switch.h``)."""
    if platform.machine() not in MACHINES:
        raise BackendError(f"the CUDA-on-CPU harness switches fibers with hand-written x86-64 or AArch64 code; this "
                           f"machine is {platform.machine() or 'of unknown architecture'}",
                           fix="run it on an x86-64 or AArch64 Linux machine, or use the 'interp' backend")
    path = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("g++")
    if path is None:
        raise BackendError("the CUDA-on-CPU harness compiles kernels with g++, which is not on PATH",
                           fix="install g++ (apt-get install g++), or use the 'interp' backend")
    done = subprocess.run([path, "--version"], capture_output=True, text=True)
    return path, done.stdout.splitlines()[0] if done.stdout else "unknown"


def _twin_bytes() -> bytes:
    parts = sorted(TWIN_DIR.iterdir()) + [HEADER_DIR / "tessera_device.cuh"]
    return b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in parts)


def _key(unit: str, flags) -> str:
    h = hashlib.sha256()
    for part in (unit.encode(), "\0".join(flags).encode(), _twin_bytes(), gxx()[1].encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:32]


_GXX_ERROR = re.compile(r"kernel\.cu:(\d+):(?:\d+:)? (?:fatal )?error: (.*)")


def _compile_error(log: str, source) -> CompileError:
    lines, locations = source.text.splitlines(), getattr(source, "locations", {})
    m = _GXX_ERROR.search(log)
    what = f"g++ could not compile the CUDA C for the CPU harness: {m.group(2) if m else log.strip()[-600:]}"
    where = ""
    if m:
        n = int(m.group(1))
        what += f"\n  CUDA line {n}: {lines[n - 1].strip() if 0 < n <= len(lines) else '?'}"
        where = locations.get(n, "")
        if where:
            what += f"\n  from the Tile IR op at {where}"
    err = CompileError(what, location=where or None,
                       fix="report it with the message: rendered kernels must compile with the twin "
                           "(tessera_ref/backends/cuda/cpu/include); g++'s full log is the error's .log")
    err.log = log
    return err


_LOADED: dict = {}
_LOCK = threading.Lock()


def _built(source, unit: str, flags, name: str) -> Path:
    """The cached build ``<key>.<name>`` of ``unit`` with ``flags``, checked against its
    metadata (compiled and stored again on a miss)."""
    folder, key = cache.directory("cuda-cpu"), _key(unit, flags)
    path = cache.path(folder, key, name)
    if cache.load(folder, key, (name,)) is None:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as d:
            cu = Path(d) / "kernel.cpp"
            cu.write_text(unit)
            out = Path(d) / f"kernel.{name}"
            cmd = [gxx()[0], *flags, f"-I{TWIN_DIR}", f"-I{HEADER_DIR}", str(cu), "-o", str(out)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise _compile_error(done.stderr, source)
            if not cache.store(folder, key, {name: out.read_bytes()}, programs=("asan",)):
                raise CacheError(f"cannot store the kernel {'program' if name == 'asan' else 'library'} built for "
                                 f"the CUDA-on-CPU harness in {folder}, where it is loaded from",
                                 fix=f"free space in {folder} or make it writable, or set {cache.ENV} to a "
                                     f"directory you can write")
    return path


def library(source, kernels, flags=FLAGS) -> ctypes.CDLL:
    """The loaded shared library of ``source`` with a launcher per kernel name in ``kernels``
    (compiled once per key, then taken from the disk cache and kept loaded)."""
    unit = translation_unit(source, kernels)
    key = _key(unit, flags)
    with _LOCK:
        lib = _LOADED.get(key)
        if lib is None:
            path = _built(source, unit, flags, "so")
            try:
                lib = _LOADED[key] = ctypes.CDLL(str(path))
            except OSError as exc:
                raise BackendError(f"the kernel library {path} was built and checked but does not load: {exc}",
                                   fix="report it with the message; removing the file makes the next run build "
                                       "it again") from None
        return lib


def executable(source, kernels) -> Path:
    """The AddressSanitizer program of ``source`` launching ``kernels`` (tessera_asan.h's
    ``main``; compiled once per key, then taken from the disk cache)."""
    with _LOCK:
        try:
            return _built(source, translation_unit(source, kernels, main=True), ASAN_FLAGS, "asan")
        except CompileError as err:
            if _GXX_ERROR.search(err.log) or "asan" not in err.log:
                raise
            raise BackendError(f"g++ cannot build AddressSanitizer programs here: {err.log.strip()[-400:]}",
                               fix="install GCC's libasan (Debian: apt-get install libasan8), or run with "
                                   "memcheck='guard'") from None
