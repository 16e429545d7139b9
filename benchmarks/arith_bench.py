"""Speed of the exact arithmetic core against NumPy baselines measured in the same run.

    python benchmarks/arith_bench.py [--n 256] [--elements 1048576] [--repeat 5]

Rows: fma (elementwise, vs NumPy's two-rounding ``a*b + c``), ``dot_canonical`` (vs
``np.matmul`` — the INEXACT BLAS baseline, whose bits depend on the BLAS build and thread
count), ``reduce_canonical`` (vs ``np.sum``/``np.max``, pairwise/SIMD order) and
``exact_sum`` (vs ``math.fsum``, correctly rounded to f64, and ``np.sum``). ``ratio`` is
baseline time / tessera_ref time: below 1 means tessera_ref is slower. Both are timed in the
same process, interleaved, the best of ``--repeat`` runs after one warm-up call each; the
script runs once with one thread and once with the default thread counts.
"""
from __future__ import annotations

import argparse
import math

import ml_dtypes
import numpy as np

from timing import best_times, run_in_thread_settings
from tessera_ref.numerics.arith import fma
from tessera_ref.numerics.exactsum import exact_dot, exact_sum
from tessera_ref.numerics.reduce import dot_canonical, reduce_canonical


def row(name: str, ours, baseline, base_name: str, repeat: int, work: float | None = None,
        unit: str = "") -> None:
    t, b = best_times(ours, baseline, repeat=repeat)
    rate = f"{work / t / 1e6:9.1f} {unit}" if work else " " * 15
    print(f"{name:44} {t * 1e3:9.2f} ms {rate} | {base_name:26} {b * 1e3:9.2f} ms  ratio {b / t:8.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="matrix size n (n x n x n)")
    ap.add_argument("--elements", type=int, default=1 << 20, help="vector length")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, L, rep = args.n, args.elements, args.repeat

    x32 = (rng.standard_normal(L) * np.exp2(rng.integers(-20, 20, L))).astype(np.float32)
    y32, z32 = np.roll(x32, 1), np.roll(x32, 2)
    x64 = x32.astype(np.float64) * (1 + rng.standard_normal(L) * 1e-9)
    print(f"fma: {L:,} elements; matmul: {n}x{n}x{n}; reductions: {L:,} elements")
    row("fma f32 (exact, one rounding)", lambda: fma(x32, y32, z32), lambda: x32 * y32 + z32,
        "numpy a*b+c (2 roundings)", rep, L, "M/s")
    row("fma f64 (emulated, one rounding)", lambda: fma(x64, x64, x64, fmt="f64"),
        lambda: x64 * x64 + x64, "numpy a*b+c (2 roundings)", rep, L, "M/s")

    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    flops = 2.0 * n ** 3
    blas = "np.matmul f32 (INEXACT BLAS)"
    row("dot_canonical f32 x f32 -> f32 (exact fma)", lambda: dot_canonical(a, b), lambda: a @ b,
        blas, rep, flops, "MFLOP/s")
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        an, bn = a.astype(dtype), b.astype(dtype)
        af, bf = an.astype(np.float32), bn.astype(np.float32)
        row(f"dot_canonical {np.dtype(dtype).name} -> f32 accum", lambda: dot_canonical(an, bn),
            lambda: af @ bf, blas, rep, flops, "MFLOP/s")
    m = max(16, n // 4)
    a64, b64 = a[:m, :m].astype(np.float64), b[:m, :m].astype(np.float64)
    row(f"dot_canonical f64 x f64 ({m}^3, emulated fma)", lambda: dot_canonical(a64, b64),
        lambda: a64 @ b64, "np.matmul f64 (INEXACT BLAS)", rep, 2.0 * m ** 3, "MFLOP/s")
    a8, b8 = a.astype(ml_dtypes.float8_e4m3fn), b.astype(ml_dtypes.float8_e4m3fn)
    a8f, b8f = a8.astype(np.float32), b8.astype(np.float32)
    row("exact_dot fp8_e4m3 -> f32 (int64 fixed point)", lambda: exact_dot(a8, b8),
        lambda: a8f @ b8f, blas, rep, flops, "MFLOP/s")

    side = int(math.isqrt(L))
    grid = x32[: side * side].reshape(side, side)
    row("reduce_canonical sum, one axis of L", lambda: reduce_canonical(x32), lambda: np.sum(x32),
        "np.sum (pairwise)", rep, L, "M/s")
    row(f"reduce_canonical sum [{side},{side}] axis=1", lambda: reduce_canonical(grid, axis=1),
        lambda: np.sum(grid, axis=1), "np.sum (pairwise)", rep, L, "M/s")
    row(f"reduce_canonical sum [{side},{side}] axis=0", lambda: reduce_canonical(grid, axis=0),
        lambda: np.sum(grid, axis=0), "np.sum", rep, L, "M/s")
    short = x32[: L - L % 4].reshape(-1, 4)  # a batch axis summed away (gradients of broadcasts)
    row(f"reduce_canonical sum [{len(short)},4] axis=1", lambda: reduce_canonical(short, axis=1),
        lambda: np.sum(short, axis=1), "np.sum", rep, L, "M/s")
    row("reduce_canonical max, one axis of L", lambda: reduce_canonical(x32, op="max"),
        lambda: np.max(x32), "np.max", rep, L, "M/s")

    x64_list = x64.tolist()
    x32_list = x32.astype(np.float64).tolist()
    row("exact_sum f32 -> f32", lambda: exact_sum(x32), lambda: math.fsum(x32_list),
        "math.fsum (f64 result)", rep, L, "M/s")
    row("exact_sum f64 -> f64", lambda: exact_sum(x64, out_fmt="f64"), lambda: math.fsum(x64_list),
        "math.fsum", rep, L, "M/s")
    row("exact_sum f32 -> f32", lambda: exact_sum(x32), lambda: np.sum(x32),
        "np.sum (inexact)", rep, L, "M/s")
    row(f"exact_sum [{side},{side}] axis=1", lambda: exact_sum(grid, axis=1),
        lambda: np.sum(grid, axis=1), "np.sum (inexact)", rep, L, "M/s")
    row(f"exact_sum [{L // 16},16] axis=1", lambda: exact_sum(x32.reshape(-1, 16), axis=1),
        lambda: np.sum(x32.reshape(-1, 16), axis=1), "np.sum (inexact)", rep, L, "M/s")


if __name__ == "__main__":
    run_in_thread_settings(main)
