"""Speed of the compiled canonical dot product (NUM-RED-1) against BLAS, and its JIT cost.

    python benchmarks/dot_bench.py [--repeat 5] [--sizes 256,512,1024]

Rows: ``dot_canonical`` with f32 operands (every step one exact fma: the platform's, checked
once, else emulated) and with bf16 operands (f32 accumulation; with this data every product
is exact in f32) for n×n×n and 576x256x1152, against ``np.matmul`` on the same f32 values —
OpenBLAS's sgemm, the INEXACT baseline, whose bits depend on the BLAS build and thread
count. ``time ratio`` is tessera_ref time / baseline time: above 1 means tessera_ref is
slower. Both are timed in the same process, interleaved, the best of ``--repeat`` runs
after one warm-up call; the script runs once with one thread and once with the default
thread counts (``timing.run_in_thread_settings``).

Then the one-time costs of the numba kernels, each in a fresh interpreter: ``import numba``
and the first call of each kernel, once compiling into an empty cache directory and once
loading what that compile wrote (``cache=True``: what every later process pays).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

from timing import best_times, run_in_thread_settings, thread_setting
from tessera_ref.numerics.reduce import dot_canonical

ROOT = pathlib.Path(__file__).resolve().parents[1]

_FIRST_CALLS = """
import time
t0 = time.perf_counter()
import numba
t1 = time.perf_counter()
import numpy as np
from tessera_ref.numerics.reduce import dot_canonical
a = np.ones((4, 4), np.float32)
t2 = time.perf_counter()
dot_canonical(a, a)  # dot_rows_fma_f32
t3 = time.perf_counter()
dot_canonical(a.astype(np.float16), a.astype(np.float16))  # exact products, f32
t4 = time.perf_counter()
print(t1 - t0, t3 - t2, t4 - t3)
"""


def first_calls(cache_dir: str) -> list[float]:
    """Seconds for ``import numba`` and the first call of each kernel in a fresh process."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _FIRST_CALLS], env=env, capture_output=True,
                         text=True, check=True)
    return [float(t) for t in out.stdout.split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="256,512,1024")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("time ratio = dot_canonical time / np.matmul time (sgemm); best of", args.repeat,
          "interleaved")
    shapes = [(n, n, n) for n in map(int, args.sizes.split(","))] + [(576, 256, 1152)]
    for M, K, N in shapes:
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        for dtype, what in ((np.float32, "exact fma"), (ml_dtypes.bfloat16, "exact products")):
            an, bn = a.astype(dtype), b.astype(dtype)
            af, bf = an.astype(np.float32), bn.astype(np.float32)
            t, base = best_times(lambda: dot_canonical(an, bn), lambda: af @ bf, repeat=args.repeat)
            name = f"dot_canonical {np.dtype(dtype).name} -> f32 ({what})"
            print(f"{M}x{K}x{N:<5} {name:44} {t * 1e3:9.2f} ms | np.matmul f32 (INEXACT BLAS) "
                  f"{base * 1e3:8.2f} ms  time ratio {t / base:6.2f}")
    if thread_setting() != "one thread":
        return
    with tempfile.TemporaryDirectory() as cache:
        for label in ("compile (empty cache)", "load from cache"):
            numba_s, fma_s, exact_s = first_calls(cache)
            print(f"{label:22} import numba {numba_s * 1e3:7.0f} ms | first call: "
                  f"f32 (fma self-test + kernel) {fma_s * 1e3:7.0f} ms, f16 {exact_s * 1e3:7.0f} ms")


if __name__ == "__main__":
    run_in_thread_settings(main)
