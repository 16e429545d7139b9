"""Shared pieces of the CUDA-on-CPU harness tests: the library zoo of tests/cuda, the
combinations of schedule and cp.async mode, and launching hand-written CUDA C."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cuda"))
from cuda_programs import LIBRARY, lowered, on_the_interpreter  # noqa: E402

from tessera_ref import backends, kernel  # noqa: E402
from tessera_ref.backends.cuda.cpu import CudaCpuBackend, build, harness  # noqa: E402
from tessera_ref.backends.cuda.source import Source  # noqa: E402

__all__ = ["LIBRARY", "lowered", "on_the_interpreter", "COMBOS", "FAST", "bits", "run_on", "run_text", "PRELUDE",
           "seed_pipeline"]

#: every schedule kind x both cp.async modes (the slow tests run them all)
COMBOS = [(s, m) for s in ("lockstep", "reverse", "random:1", "random:2") for m in ("deferred", "eager")]
#: the default run: three schedules, both modes
FAST = [("lockstep", "deferred"), ("reverse", "eager"), ("random:7", "deferred"), ("random:8", "eager")]

#: the includes of every rendered kernel
PRELUDE = '#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_fp8.h>\n#include "tessera_device.cuh"\n'


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def run_on(program, inputs, schedule="lockstep", cp_async="deferred"):
    """``(results, reports)`` of a lowered program on the harness under one schedule and mode."""
    with backends.use(CudaCpuBackend(schedule, cp_async)):
        return program.run(*inputs)


def run_text(text, kernel, grid, lanes, args, *, smem=0, schedule="lockstep", cp_async="deferred", tc=None):
    """Launch ``kernel`` of hand-written CUDA C ``text`` (after :data:`PRELUDE`) on ``args``
    (arrays, written in place; 0-d arrays for scalars); returns the fiber switches."""
    source = Source(PRELUDE + text)
    lib = build.library(source, [kernel])
    args = [np.asarray(a).reshape(1) if np.ndim(a) == 0 else a for a in args]
    return harness.run(lib, kernel, grid, lanes, args, smem, harness.Options(schedule, cp_async, tc), source)


def seed_pipeline():
    """Seed 004 §2.3's racy double-buffered pipeline (tests/tiles/data/tp_axpy.tsr, without its
    autotune line) on fixed inputs: ``(kernel, X, Y0, outs)``, ``outs[mode]`` the ``Y`` one
    lockstep run with that cp.async mode wrote."""
    text = (Path(__file__).parents[1] / "tiles" / "data" / "tp_axpy.tsr").read_text()
    k = kernel.from_source(text.replace("@kernel.autotune(space=dict(BM=[128,256], stages=[2,3]))", "@kernel"))
    rng = np.random.default_rng(2)
    X = rng.standard_normal(1024).astype(np.float16)
    Y0 = rng.standard_normal(1024).astype(np.float16)
    outs = {}
    for mode in ("deferred", "eager"):
        outs[mode] = Y0.copy()
        with backends.use(CudaCpuBackend("lockstep", mode)):
            k(X, outs[mode], np.float16(2), grid=1, lanes=128)
    return k, X, Y0, outs
