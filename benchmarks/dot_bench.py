"""Speed of the compiled canonical dot product (NUM-RED-1) against BLAS, and its JIT cost.

    python benchmarks/dot_bench.py [--repeat 5]

Rows: ``dot_canonical`` with f32 operands (every fma emulated exactly, one rounding) and
with f16 operands (exact products: multiply-then-add in f32) for 256x256x256 and
576x256x1152, against ``np.matmul`` on the same f32 values — the INEXACT BLAS baseline,
whose bits depend on the BLAS build and thread count. ``ratio`` is baseline time /
tessera_ref time: below 1 means tessera_ref is slower. Times are the best of ``--repeat``
runs after one warm-up call.

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

import numpy as np

from timing import best_time
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
dot_canonical(a.astype(np.float16), a.astype(np.float16))  # dot_rows_exact, f32
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
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("ratio = np.matmul time / dot_canonical time; best of", args.repeat)
    for M, K, N in ((256, 256, 256), (576, 256, 1152)):
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        for dtype, what in ((np.float32, "exact fma"), (np.float16, "exact products")):
            an, bn = a.astype(dtype), b.astype(dtype)
            af, bf = an.astype(np.float32), bn.astype(np.float32)
            t = best_time(lambda: dot_canonical(an, bn), args.repeat)
            base = best_time(lambda: af @ bf, args.repeat)
            name = f"dot_canonical {np.dtype(dtype).name} -> f32 ({what})"
            print(f"{M}x{K}x{N:<5} {name:44} {t * 1e3:9.2f} ms | np.matmul f32 (INEXACT BLAS) "
                  f"{base * 1e3:8.2f} ms  ratio {base / t:7.4f}")
    with tempfile.TemporaryDirectory() as cache:
        for label in ("compile (empty cache)", "load from cache"):
            numba_s, fma_s, exact_s = first_calls(cache)
            print(f"{label:22} import numba {numba_s * 1e3:7.0f} ms | first call: "
                  f"dot_rows_fma_f32 {fma_s * 1e3:7.0f} ms, dot_rows_exact {exact_s * 1e3:7.0f} ms")


if __name__ == "__main__":
    main()
