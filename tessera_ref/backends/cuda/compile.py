"""Compile CUDA C with NVRTC and report every kernel (CUDA-COMPILE-1 … 3, CUDA-REPORT-1 … 3).

``build(source, arch)`` compiles ``source`` (CUDA C text, or a :class:`~.source.Source` that
also maps its lines to Tile IR op locations) for one real architecture with :data:`OPTIONS`
— always ``--fmad=false`` — and returns a :class:`Build`: PTX, cubin, NVRTC's log and a
:class:`~.report.KernelReport` per ``__global__`` kernel (ptxas's ``-v`` numbers and the SASS
opcode histograms from ``cuobjdump -sass``). Results are cached on disk in
:func:`tessera_ref.cache.directory` ``("cuda")``, keyed by the source, the options and the
toolchain versions (CUDA-COMPILE-4): an entry's PTX, cubin, log and SASS are returned, and
the report derived from them, only when each has the size and SHA-256 its metadata records;
a damaged entry is compiled again and rewritten.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ... import cache
from ...errors import BackendError
from .nvrtc import NvrtcError, compile_program
from ...numerics import tc
from .render import tc_arch
from .report import ARCH_LIMITS, KernelReport, main_loop, parse_ptxas, parse_sass
from .toolchain import HEADER_DIR, INSTALL_FIX, toolchain, version_tag

__all__ = ["build", "Build", "CompileError", "TensorCoreArchError", "check_tc_arch", "OPTIONS", "ARCHS", "options_for"]

#: The options of every compile besides ``-arch`` and the include paths (CUDA-COMPILE-1).
OPTIONS = ("--fmad=false", "-std=c++17", "--ptxas-options=-v")
ARCHS = tuple(ARCH_LIMITS)


class CompileError(BackendError):
    """NVRTC rejected rendered CUDA C (the message names the CUDA line and, where known, the
    Tile IR op it came from)."""


@dataclass
class Build:
    """One compiled program for one architecture."""
    arch: str
    ptx: str
    cubin: bytes
    log: str
    sass: str
    kernels: dict[str, KernelReport] = field(default_factory=dict)


def options_for(arch: str) -> list[str]:
    """The full NVRTC option list for ``arch`` (sm_80 or sm_90)."""
    if arch not in ARCH_LIMITS:
        raise BackendError(f"unknown CUDA architecture {arch!r}", fix=f"use one of {', '.join(ARCHS)}")
    return [f"-arch={arch}", *OPTIONS, f"-I{HEADER_DIR}", f"-I{toolchain().include_dir}"]


def _key(text: str, options: list[str]) -> str:
    header = (HEADER_DIR / "tessera_device.cuh").read_bytes()
    h = hashlib.sha256()
    for part in (text.encode(), header, "\0".join(o for o in options if not o.startswith("-I")).encode(),
                 version_tag().encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:32]


#: An entry's files: ``<key>.ptx``, ``.cubin``, ``.log`` (NVRTC's, with ptxas's ``-v`` lines), ``.sass``.
_FILES = ("ptx", "cubin", "log", "sass")


def _load(folder: Path, key: str, arch: str) -> Build | None:
    files = cache.load(folder, key, _FILES)
    if files is None:
        return None
    try:
        return Build(arch, files["ptx"].decode(), files["cubin"], files["log"].decode(), files["sass"].decode())
    except UnicodeDecodeError:  # a checked entry of another writer's making: build it again
        return None


def _store(folder: Path, key: str, b: Build) -> None:
    cache.store(folder, key, {"ptx": b.ptx.encode(), "cubin": b.cubin, "log": b.log.encode(), "sass": b.sass.encode()})


def _disassemble(cubin: bytes) -> str:
    tc = toolchain()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        env = dict(os.environ, PATH=f"{tc.cuobjdump.parent}{os.pathsep}{os.environ.get('PATH', '')}")
        done = subprocess.run([str(tc.cuobjdump), "-sass", str(path)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise BackendError(f"cuobjdump -sass failed: {done.stderr.strip()}", fix=INSTALL_FIX)
    return done.stdout


_SOURCE_LINE = re.compile(r"^tessera\.cu\((\d+)\): ")


def _compile_error(text: str, log: str, locations: dict[int, str]) -> CompileError:
    """The first error of NVRTC's ``log``, with the CUDA line and the Tile IR op it came from."""
    log = log.replace("\0", "").strip()
    errors = [ln.strip() for ln in log.splitlines() if re.search(r"\berror\b", ln) and "detected in" not in ln]
    first = errors[0] if errors else log.splitlines()[-1] if log else "no log"
    what, where = f"NVRTC could not compile the CUDA C: {first}", ""
    if m := _SOURCE_LINE.match(first):
        n = int(m.group(1))
        lines = text.splitlines()
        what += f"\n  CUDA line {n}: {lines[n - 1].strip() if 0 < n <= len(lines) else '?'}"
        where = locations.get(n, "")
        if where:
            what += f"\n  from the Tile IR op at {where}"
    err = CompileError(what, location=where,
                       fix="rendered library kernels must compile: report this with the message; in a @kernel, "
                           "change the op named above (NVRTC's full log is the error's .log)")
    err.log = log
    return err


class TensorCoreArchError(BackendError):
    """A kernel under a ``tc:`` policy compiled for another architecture than its model's
    (CUDA-TC-1): its device bits would be that architecture's, not the model's."""


def check_tc_arch(source, arch: str) -> None:
    """A :class:`TensorCoreArchError` when a kernel of ``source`` has a tensor-core model of
    another architecture than ``arch`` (CUDA-TC-1)."""
    for kernel, model, location in getattr(source, "tc_models", ()):
        want = tc_arch(model)
        if want != arch:
            other = [m for m in sorted(tc.MODELS) if tc_arch(m) == arch]
            alt = f"use accum='{other[0]}' for {arch} (its own, different bits), " if other else ""
            raise TensorCoreArchError(
                f"kernel {kernel} computes under accum='{model}', the tensor-core model of {want} "
                f"({tc.model(model).gpu}, {tc.model(model).instruction}); compiled for {arch} its mma.sync would "
                f"give {arch}'s tensor-core bits, not the model's", location=location,
                fix=f"compile it for {want}" + (" (not a target of this backend: sm_80, sm_90)" if want not in ARCHS
                                                 else "") + f", {alt}or drop the tc: policy (@accum(f32): IEEE fmas, "
                                                            "the same bits everywhere)")


def build(source, arch: str = "sm_90") -> Build:
    """Compile ``source`` for ``arch`` (see the module docstring); cached. A kernel under a
    tensor-core model of another architecture is refused first (:func:`check_tc_arch`)."""
    text = getattr(source, "text", source)
    locations = getattr(source, "locations", {})
    options = options_for(arch)
    check_tc_arch(source, arch)
    folder, key = cache.directory("cuda"), _key(text, options)
    b = _load(folder, key, arch)
    if b is None:
        try:
            ptx, cubin, log = compile_program(text, options)
        except NvrtcError as e:
            raise _compile_error(text, e.what, locations) from None
        b = Build(arch, ptx, cubin, log, _disassemble(cubin))
        _store(folder, key, b)
    b.kernels = parse_ptxas(b.log)
    functions = parse_sass(b.sass)
    for name, k in b.kernels.items():
        instrs = functions.get(name, [])
        k.sass.update(op for _, op, _ in instrs)
        k.main_loop.update(main_loop(instrs))
    return b
