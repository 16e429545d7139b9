"""Where the CUDA compile-only toolchain lives (CUDA-COMPILE-2).

Three places are searched, in order, and the first complete one is used:

1. ``pinned``: the ``cuda-tools`` extra's wheels in the versions of :data:`PINNED` — NVRTC
   (``nvidia-cuda-nvrtc-cu12``), the runtime headers (``nvidia-cuda-runtime-cu12``:
   cuda_fp16.h, cuda_bf16.h, cuda_fp8.h) and cuobjdump with the nvdisasm it runs (the CUDA 13
   tools, which read sm_80/sm_90 cubins and have no CUDA 12 wheel). The register counts in
   tests and docs were taken with these.
2. ``cuda13-wheels``: CUDA 13's own wheels (``nvidia-cuda-nvrtc``, ``nvidia-cuda-runtime``;
   ``nvidia/cu13/lib``, ``nvidia/cu13/include``), as GPU machines with ``cupy-cuda13x`` carry.
3. ``toolkit``: a CUDA toolkit at ``$CUDA_HOME``, ``$CUDA_PATH`` or ``/usr/local/cuda``.

The compile options are the same whichever is used; another NVRTC may allocate other
register counts (the report says which toolchain built it). ptxas is NVRTC's own
(``--ptxas-options=-v``) and the header uses inline PTX rather than mma.h, so no nvcc is
needed. :func:`toolchain` finds them (once) or raises :class:`ToolchainError` saying what is
missing and how to install it; :func:`version_tag` is part of every build-cache key.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ...errors import BackendError

__all__ = ["PINNED", "Toolchain", "ToolchainError", "toolchain", "available", "version_tag", "HEADER_DIR",
           "INSTALL_FIX",
           "dist_version"]

#: The compile-only wheels and the versions the register counts in tests and docs were taken with.
PINNED = {
    "nvidia-cuda-nvrtc-cu12": "12.9.86",
    "nvidia-cuda-runtime-cu12": "12.9.79",
    "nvidia-cuda-cuobjdump": "13.5.37",
    "nvidia-cuda-nvdisasm": "13.5.37",  # cuobjdump -sass runs it
}
HEADER_DIR = Path(__file__).resolve().parent  # tessera_device.cuh
INSTALL_FIX = ("pip install -e '.[cuda-tools]' (compile-only wheels; '.[cuda]' or '.[cuda13]' adds CuPy and NCCL "
               "for a GPU), or point CUDA_HOME at a CUDA 12/13 toolkit")


class ToolchainError(BackendError):
    """The CUDA compile-only toolchain (NVRTC, runtime headers, cuobjdump) is missing or broken."""


@dataclass(frozen=True)
class Toolchain:
    """Paths of the toolchain in use: NVRTC's shared library, the runtime include directory,
    the cuobjdump executable, the versions (name -> version) and which of the three places
    (``pinned``, ``cuda13-wheels``, ``toolkit``) it came from."""
    nvrtc_lib: Path
    include_dir: Path
    cuobjdump: Path
    versions: tuple
    source: str = "pinned"

    @property
    def pinned(self) -> bool:
        """Whether this is the toolchain the tests' and docs' register counts were taken with."""
        return self.source == "pinned"


def _nvidia_roots() -> list[str]:
    """The directories of the ``nvidia`` namespace package (the wheels of one CUDA may be
    installed in several site directories)."""
    spec = importlib.util.find_spec("nvidia")
    return list(spec.submodule_search_locations or []) if spec else []


def _nvidia(pattern: str) -> list[Path]:
    """The files matching ``pattern`` under every root of the ``nvidia`` namespace package."""
    return sorted(p for root in _nvidia_roots() for p in Path(root).glob(pattern))


def dist_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (None when it is not installed)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvrtc_version(lib: Path) -> str:
    """NVRTC's own ``major.minor`` (the cache key of a toolchain without pinned wheels)."""
    try:
        nvrtc = ctypes.CDLL(str(lib))
        major, minor = ctypes.c_int(), ctypes.c_int()
        if nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) == 0:
            return f"{major.value}.{minor.value}"
    except OSError:
        pass
    return "unknown"


def _cuobjdump(*candidates: Path) -> Path | None:
    for path in candidates:
        if path.is_file():
            return path
    found = shutil.which("cuobjdump")
    return Path(found) if found else None


def _toolkit() -> Path | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_fp16.h").is_file():
            return Path(root)
    return None


def _candidates():
    """``(source, nvrtc libraries, include dir or None, cuobjdump candidates)`` of each place, in
    order; the CUDA 13 wheels' layout is ``nvidia/cu13/{bin,lib,include}``."""
    objdumps = _nvidia("cu13/bin/cuobjdump")
    headers = {key: [h.parent for h in _nvidia(f"{key}/include/cuda_fp16.h")] for key in ("cuda_runtime", "cu13")}
    yield ("pinned", _nvidia("cuda_nvrtc/lib/libnvrtc.so.*"), next(iter(headers["cuda_runtime"]), None), objdumps)
    yield "cuda13-wheels", _nvidia("cu13/lib/libnvrtc.so.*"), next(iter(headers["cu13"]), None), objdumps
    kit = _toolkit()
    if kit is not None:
        libs = sorted(p for d in ("lib64", "lib", "targets/x86_64-linux/lib") for p in (kit / d).glob("libnvrtc.so*")
                      if "builtins" not in p.name and "alt" not in p.name)
        yield "toolkit", libs, kit / "include", [*objdumps, kit / "bin" / "cuobjdump"]


@functools.lru_cache(maxsize=None)
def _find() -> Toolchain | str:
    problems = []
    for source, libs, include, objdumps in _candidates():
        objdump = _cuobjdump(*objdumps)
        nvdisasm = objdump.parent / "nvdisasm" if objdump is not None else None
        missing = [name for name, ok in (("libnvrtc", libs),
                                         ("cuda_fp16.h", include is not None and (include / "cuda_fp16.h").is_file()),
                                         ("cuobjdump", objdump),
                                         ("nvdisasm", nvdisasm is not None and (nvdisasm.is_file()
                                                                                or shutil.which("nvdisasm"))))
                   if not ok]
        if not missing:
            if source == "pinned":
                versions = tuple((d, dist_version(d)) for d in PINNED)
            else:
                versions = (("nvrtc", _nvrtc_version(libs[0])), ("nvrtc_lib", str(libs[0])),
                            ("nvidia-cuda-cuobjdump", dist_version("nvidia-cuda-cuobjdump") or str(objdump)))
            return Toolchain(libs[0], include, objdump, versions, source)
        problems.append(f"{source}: no {', '.join(missing)}")
    return "; ".join(problems + ["toolkit: no CUDA_HOME, CUDA_PATH or /usr/local/cuda"] * (len(problems) < 3))


def toolchain() -> Toolchain:
    """The toolchain in use (module docstring), or a :class:`ToolchainError` naming what each
    place lacks."""
    found = _find()
    if isinstance(found, str):
        raise ToolchainError(f"the CUDA compile-only toolchain is not installed ({found})", fix=INSTALL_FIX)
    return found


def available() -> bool:
    """Whether :func:`toolchain` would succeed (for tests that skip without it)."""
    return not isinstance(_find(), str)


def version_tag() -> str:
    """The toolchain's source and versions as one string (a build-cache key component)."""
    found = toolchain()
    return ";".join([found.source] * (not found.pinned) + [f"{d}={v}" for d, v in found.versions])
