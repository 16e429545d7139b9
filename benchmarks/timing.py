"""Shared timing helpers for the benchmark scripts (they run as plain scripts).

Every benchmark runs twice, each time in a fresh interpreter: first with one thread for
OpenMP, OpenBLAS, MKL and numba (stable on a busy machine: ratios measured this way are the
ones to quote), then with the default thread counts. ``run_in_thread_settings(main)`` does
that; each child's ratios compare baseline and tessera_ref timed in the same process,
interleaved, the best of several runs each.
"""
import os
import subprocess
import sys
import time

ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1"}
_CHILD = "TESSERA_BENCH_THREADS"


def best_times(*fns, repeat: int) -> list[float]:
    """Best wall time of each of ``fns`` over ``repeat`` rounds after one warm-up call each;
    a round calls every function once, so a burst of load hits all of them alike."""
    for fn in fns:
        fn()  # warm caches, lazily built tables, compiled code
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def best_time(fn, repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` after one warm-up call."""
    return best_times(fn, repeat=repeat)[0]


def thread_setting() -> str:
    """``"one thread"`` or ``"default threads"`` in a child run, ``""`` otherwise."""
    return os.environ.get(_CHILD, "")


def run_in_thread_settings(main) -> None:
    """Run ``main()`` here if this is a child run; otherwise re-run this script with its
    arguments in two children, one thread and then the default thread counts."""
    if thread_setting():
        main()
        return
    for label, env in (("one thread", ONE_THREAD), ("default threads", {})):
        print(f"== {label} ({', '.join(f'{k}={v}' for k, v in env.items()) or 'as inherited'}; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}) ==", flush=True)
        subprocess.run([sys.executable, *sys.argv], env=dict(os.environ, **env, **{_CHILD: label}),
                       check=True)
