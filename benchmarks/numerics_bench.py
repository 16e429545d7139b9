"""Encode/decode throughput of every format against ml_dtypes (and NumPy), same process.

    python benchmarks/numerics_bench.py [--n 4000000] [--repeat 7]

For each format: ``encode`` (f32 -> codes, rne) against ``x.astype(dtype)`` — ml_dtypes for
bf16/fp8/fp6/fp4/e8m0/int4, NumPy for f16/f32/f64/int8 (NumPy's int8 cast truncates, so that
baseline is a speed reference only) — and ``decode`` (codes -> f32) against
``codes.view(dtype).astype(float32)``. Ratios above 1 mean tessera_ref is faster. The other
rounding modes are timed against the same baseline. Each pair is timed in the same process,
interleaved, the best of ``--repeat``; the script runs once with one thread and once with the
default thread counts.
"""
from __future__ import annotations

import argparse

import numpy as np

from timing import best_times, run_in_thread_settings
from tessera_ref import numerics as tn


def sample(n: int, seed: int = 0) -> np.ndarray:
    """Values spread over many binades, including subnormal and overflowing magnitudes."""
    rng = np.random.default_rng(seed)
    scale = rng.choice(np.float32([2**-12, 2**-6, 1, 16, 300, 3e4]), n)
    return (rng.standard_normal(n).astype(np.float32) * scale).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--modes", default="rne,rtz,stochastic")
    args = ap.parse_args()
    x = sample(args.n)
    modes = args.modes.split(",")
    print(f"{args.n:,} f32 elements, best of {args.repeat}; ratio = baseline time / tessera_ref time")
    header = f"{'format':10} {'baseline':9} {'enc M/s':>8} {'base M/s':>8} " + " ".join(
        f"{'enc ' + m:>14}" for m in modes) + f" {'dec M/s':>8} {'base M/s':>8} {'dec ratio':>9}"
    print(header)
    print("-" * len(header))
    for fmt in tn.all_formats():
        base_name = "ml_dtypes" if fmt.dtype.__class__.__module__ != "numpy.dtypes" or fmt.name in (
            "bf16",) else "numpy"
        ratios = []
        t_rne = t_base = None
        for mode in modes:
            kw = {"key": 1} if mode == "stochastic" else {}
            t, base = best_times(lambda: tn.encode(x, fmt, rounding=mode, **kw),
                                 lambda: x.astype(fmt.dtype), repeat=args.repeat)
            t_rne, t_base = (t, base) if mode == "rne" else (t_rne, t_base)
            ratios.append(base / t)
        codes = tn.encode(x, fmt)
        stored = codes.view(fmt.dtype)
        t_dec, t_dec_base = best_times(lambda: tn.decode(codes, fmt),
                                       lambda: stored.astype(np.float32), repeat=args.repeat)
        mps = lambda t: args.n / t / 1e6  # noqa: E731
        print(f"{fmt.name:10} {base_name:9} {mps(t_rne):8.0f} {mps(t_base):8.0f} "
              + " ".join(f"{r:13.2f}x" for r in ratios)
              + f" {mps(t_dec):8.0f} {mps(t_dec_base):8.0f} {t_dec_base / t_dec:8.2f}x")


if __name__ == "__main__":
    run_in_thread_settings(main)
