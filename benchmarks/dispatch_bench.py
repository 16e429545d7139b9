"""Per-op overhead of running through the executor seam: small eager ops, a 200-op ``@jit``
function and a 200-op Schedule IR function, against NumPy doing the same arithmetic in the
same run.

    python benchmarks/dispatch_bench.py [--repeat 7]

Each row prints microseconds per op and the ratio to NumPy's ``a + b`` on the same 64-element
f32 arrays (inexact-free here: f32 addition is one IEEE operation either way). The ops are
tiny so that the time is the dispatch, not the arithmetic. Rows are timed interleaved, the
best of ``--repeat``; the script runs with one thread, then with the default thread counts.
"""
from __future__ import annotations

import argparse

import numpy as np

from timing import best_times, run_in_thread_settings
import tessera_ref as tr
from tessera_ref import lowering, op

OPS = 200


def chain(x):
    for _ in range(OPS):
        x = op.add(x, x)
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    a = np.ones(64, np.float32) * np.float32(1e-30)
    f = tr.jit(chain)
    f(a)
    schedule = lowering.graph_to_schedule(f.trace(a))
    rows = {
        "numpy a + a": lambda: [np.add(a, a) for _ in range(OPS)],
        "eager op.add": lambda: chain(a),
        "jit (200 ops)": lambda: f(a),
        "run_schedule (200 kernels)": lambda: lowering.run_schedule(schedule, a),
    }
    times = dict(zip(rows, (t / OPS for t in best_times(*rows.values(), repeat=args.repeat))))
    base = times["numpy a + a"]
    for name, t in times.items():
        print(f"{name:<28} {t * 1e6:8.2f} us/op   {t / base:7.1f}x numpy")
    assert np.array_equal(np.asarray(f(a)), np.asarray(chain(a)))


if __name__ == "__main__":
    run_in_thread_settings(main)
