"""Stage ``environment`` (CUDA-CHECK-1): what the device and its software are, and which CUDA
toolchain the project uses on it."""
from __future__ import annotations

import os
import platform
import shutil
import sys

import numpy as np

from ..backends.cuda import nvrtc, toolchain

__all__ = ["items", "run", "device_slug"]


def items(arch: str, quick: bool) -> list:
    return ["environment"]


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}" if v else "none"


def device_slug(name: str) -> str:
    """A short file-name form of a device name: ``NVIDIA H200`` -> ``h200``."""
    words = [w for w in name.lower().replace("-", " ").split() if w not in ("nvidia", "tesla", "geforce")]
    return "-".join(w for w in words if w.isalnum())[:40] or "device"


def run(ctx, item: str) -> dict:
    cp = ctx.cp
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    tc = toolchain.toolchain()
    try:
        from cupy.cuda import nccl
        nccl_version = str(nccl.get_version())
    except Exception as e:  # CuPy without NCCL support, or no CuPy at all in a dry run
        nccl_version = f"unavailable ({type(e).__name__})"
    sanitizer = shutil.which("compute-sanitizer") or (
        "/usr/local/cuda/bin/compute-sanitizer" if os.path.exists("/usr/local/cuda/bin/compute-sanitizer") else None)
    cc = cp.cuda.Device().compute_capability
    env = {
        "device": name, "device_slug": device_slug(name), "compute_capability": f"{cc[:-1]}.{cc[-1]}",
        "arch": ctx.arch, "memory_bytes": int(props.get("totalGlobalMem", 0)),
        "multiprocessors": int(props.get("multiProcessorCount", 0)),
        "driver_cuda": _cuda_version(cp.cuda.runtime.driverGetVersion()),
        "runtime_cuda": _cuda_version(cp.cuda.runtime.runtimeGetVersion()),
        "cupy": getattr(cp, "__version__", "?"), "nccl": nccl_version,
        "nvrtc": ".".join(map(str, nvrtc.nvrtc_version())),
        "toolchain": tc.source, "toolchain_pinned": tc.pinned, "nvrtc_library": str(tc.nvrtc_lib),
        "cuobjdump": str(tc.cuobjdump),
        "compute_sanitizer": sanitizer, "torch": toolchain.dist_version("torch"),
        "python": platform.python_version(), "numpy": np.__version__, "executable": sys.executable,
        "dry_run": ctx.dry_run,
    }
    note = "" if tc.pinned else " (not the pinned CUDA 12.9 wheels: register counts may differ from the docs')"
    env["detail"] = (f"{name} (sm_{cc}), driver CUDA {env['driver_cuda']}, runtime {env['runtime_cuda']}, "
                     f"CuPy {env['cupy']}, NVRTC {env['nvrtc']} from {tc.source}{note}")
    env["status"] = "pass"
    return env
