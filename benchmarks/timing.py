"""Shared timing helper for the benchmark scripts (they run as plain scripts)."""
import time


def best_time(fn, repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` after one warm-up call."""
    fn()  # warm caches and lazily built tables
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
