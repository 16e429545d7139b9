"""Where the CUDA compile-only toolchain lives: the pinned pip wheels (CUDA-COMPILE-2).

The ``cuda-tools`` extra installs NVRTC (``nvidia-cuda-nvrtc-cu12``), the CUDA runtime
headers (``nvidia-cuda-runtime-cu12``: cuda_fp16.h, cuda_bf16.h, cuda_fp8.h) and cuobjdump
with the nvdisasm it runs (``nvidia-cuda-cuobjdump``, ``nvidia-cuda-nvdisasm``; the CUDA 13
tools, which read sm_80/sm_90 cubins and have no CUDA 12 wheel) in the versions of
:data:`PINNED`. ptxas is NVRTC's own (``--ptxas-options=-v``), and the header uses inline
PTX rather than mma.h, so no nvcc wheel is needed; nothing here needs a GPU or a
CUDA toolkit. :func:`toolchain` finds them (once) or raises :class:`ToolchainError` saying
what is missing and how to install it; :func:`version_tag` is part of every build-cache key.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ...errors import BackendError

__all__ = ["PINNED", "Toolchain", "ToolchainError", "toolchain", "available", "version_tag", "HEADER_DIR",
           "INSTALL_FIX"]

#: The compile-only wheels and the versions the register counts in tests and docs were taken with.
PINNED = {
    "nvidia-cuda-nvrtc-cu12": "12.9.86",
    "nvidia-cuda-runtime-cu12": "12.9.79",
    "nvidia-cuda-cuobjdump": "13.5.37",
    "nvidia-cuda-nvdisasm": "13.5.37",  # cuobjdump -sass runs it
}
HEADER_DIR = Path(__file__).resolve().parent  # tessera_device.cuh
INSTALL_FIX = "pip install -e '.[cuda-tools]' (compile-only wheels; '.[cuda]' adds CuPy and NCCL for a GPU)"


class ToolchainError(BackendError):
    """The CUDA compile-only toolchain (NVRTC, runtime headers, cuobjdump) is missing or broken."""


@dataclass(frozen=True)
class Toolchain:
    """Paths of the pinned toolchain: NVRTC's shared library, the runtime include directory,
    the cuobjdump executable, and the installed versions (wheel name -> version)."""
    nvrtc_lib: Path
    include_dir: Path
    cuobjdump: Path
    versions: tuple


def _nvidia_dir(sub: str) -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (Path(root) / sub).is_dir():
            return Path(root) / sub
    return None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def _find() -> Toolchain | str:
    nvrtc = _nvidia_dir("cuda_nvrtc")
    libs = sorted((nvrtc / "lib").glob("libnvrtc.so.*")) if nvrtc else []
    include = _nvidia_dir("cuda_runtime")
    objdump_dir = _nvidia_dir("cu13")  # the CUDA 13 wheels' layout: nvidia/cu13/bin
    objdump = objdump_dir / "bin" / "cuobjdump" if objdump_dir else None
    if objdump is None or not objdump.is_file():
        found = shutil.which("cuobjdump")
        objdump = Path(found) if found else None
    nvdisasm = objdump.parent / "nvdisasm" if objdump is not None else None
    missing = [name for name, ok in (("nvidia-cuda-nvrtc-cu12 (libnvrtc)", libs),
                                     ("nvidia-cuda-runtime-cu12 (cuda_fp16.h)",
                                      include and (include / "include" / "cuda_fp16.h").is_file()),
                                     ("nvidia-cuda-cuobjdump (cuobjdump)", objdump),
                                     ("nvidia-cuda-nvdisasm (nvdisasm)",
                                      nvdisasm is not None and (nvdisasm.is_file() or shutil.which("nvdisasm")))) if not ok]
    if missing:
        return ", ".join(missing)
    versions = tuple((d, _version(d)) for d in PINNED)
    return Toolchain(libs[0], include / "include", objdump, versions)


def toolchain() -> Toolchain:
    """The pinned toolchain, or a :class:`ToolchainError` naming the missing wheels."""
    found = _find()
    if isinstance(found, str):
        raise ToolchainError(f"the CUDA compile-only toolchain is not installed: missing {found}", fix=INSTALL_FIX)
    return found


def available() -> bool:
    """Whether :func:`toolchain` would succeed (for tests that skip without it)."""
    return not isinstance(_find(), str)


def version_tag() -> str:
    """The installed toolchain versions as one string (a build-cache key component)."""
    return ";".join(f"{d}={v}" for d, v in toolchain().versions) + f";env={os.environ.get('TESSERA_NVRTC_FLAGS', '')}"
