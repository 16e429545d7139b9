"""The check's view of the device (CUDA-CHECK-1): CuPy or, in a dry run, the runtime's CuPy
test double (:mod:`tessera_ref.backends.cuda.fake_cupy`, whose device is the CUDA-on-CPU
harness); CUDA C loaded as a module; results compared bit for bit."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from ..backends.cuda import compile as cuda_compile
from ..backends.cuda import runtime
from ..backends.cuda.fake_cupy import FakeCupy
from ..backends.cuda.runtime import arch_of, device_bits

__all__ = ["Context", "Skip", "compare_bits", "hexbits"]


class Skip(Exception):
    """An item that cannot run here (no cuBLAS, no PyTorch, no sanitizer, …): its reason."""


class Context:
    """One worker's device: ``cp`` (CuPy, or in a dry run the test double), ``build`` (NVRTC's,
    or the double's, which records what it built), ``backend`` (``"cuda"``, or the runtime's
    ``CudaDevice`` over the double), ``arch`` (sm_80/sm_90), ``dry_run``, ``quick``, ``scale``
    (how much work an item does: ``full``, ``quick`` or ``dry``, the least) and ``out`` (the
    results directory)."""

    def __init__(self, dry_run: bool, quick: bool, out: str):
        self.dry_run, self.quick, self.out = dry_run, quick, Path(out)
        self.scale = "dry" if dry_run else "quick" if quick else "full"
        if dry_run:
            self.cp = FakeCupy()
            self.build, self.backend = self.cp.build, runtime.CudaBackend(cupy=self.cp, build_fn=self.cp.build)
        else:
            self.cp, self.build, self.backend = runtime._cupy(), cuda_compile.build, "cuda"
        self.arch = arch_of(self.cp.cuda.Device().compute_capability)
        self._dir = tempfile.mkdtemp(prefix="tessera-gpu-check-")
        self._loaded = 0

    def load(self, source, arch=None):
        """``(module, Build)`` of CUDA C ``source`` compiled for the device (a fresh cubin file
        per module: CuPy keeps modules by path)."""
        b = self.build(source, arch or self.arch)
        self._loaded += 1
        path = Path(self._dir) / f"m{os.getpid()}_{self._loaded}.cubin"
        path.write_bytes(b.cubin)
        return self.cp.RawModule(path=str(path)), b

    def to_device(self, host: np.ndarray):
        return self.cp.asarray(device_bits(np.ascontiguousarray(host)))


def hexbits(value) -> str:
    """``0x…`` of one element's bits (the value's, not its bytes in memory order)."""
    a = np.asarray(value).reshape(1)
    return f"0x{int(a.view(f'u{a.dtype.itemsize}')[0]):0{2 * a.dtype.itemsize}x}"


def compare_bits(got, want, inputs=()) -> dict:
    """``{"status": "pass"}`` when ``got`` and ``want`` have the same bits, else ``"differ"``
    with how many elements differ, the first index and both values there (and each input's
    value at that index when it has the result's shape)."""
    g, w = np.ascontiguousarray(got), np.ascontiguousarray(want)
    if g.shape != w.shape or g.dtype.itemsize != w.dtype.itemsize:
        return {"status": "differ", "detail": f"shape/dtype {g.shape} {g.dtype} vs {w.shape} {w.dtype}"}
    gb, wb = g.view(f"u{g.dtype.itemsize}"), w.view(f"u{w.dtype.itemsize}")
    bad = np.flatnonzero(gb != wb)
    if bad.size == 0:
        return {"status": "pass", "elements": int(g.size)}
    i = np.unravel_index(bad[0], g.shape)
    at = {f"input{j}": hexbits(np.asarray(x)[i]) for j, x in enumerate(inputs) if np.shape(x) == g.shape}
    return {"status": "differ", "elements": int(g.size), "differing": int(bad.size), "first_index": [int(v) for v in i],
            "device": hexbits(g[i]), "reference": hexbits(w[i]), **({"inputs": at} if at else {}),
            "detail": f"{bad.size} of {g.size} differ; first at {tuple(int(v) for v in i)}: device {hexbits(g[i])}, "
                      f"reference {hexbits(w[i])}"}
