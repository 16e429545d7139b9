"""Speed of the CUDA-on-CPU harness (backend ``cuda-cpu``) against the tile interpreter.

    python benchmarks/cuda_cpu_bench.py [--n 128] [--repeat 3] [--numba]

Rows: the fiber switch (round trips between the scheduler and one fiber, two switches each;
switches per second and ns per switch), the g++ build of one kernel (a cold cache: the cost
the cache saves), and an f32 ``n x n x n`` matmul program lowered once and run on
``cuda-cpu`` (lockstep, deferred; and random, eager) against the tile interpreter with its
checkers and counters off. ``ratio`` is interpreter time / harness time: above 1 means the
harness is faster. The AddressSanitizer rows (CUDA-CPU-10): the cold g++ build of the
kernel's ASan program, and the matmul under ``memcheck="asan"`` (a child process per launch)
as a slowdown: its time / the lockstep harness's, timed in the same rounds; the registered
backend's default six runs per launch (three schedules, both cp.async modes, CUDA-CPU-7) as
a slowdown against one lockstep run. With ``--numba`` (and numba installed) a shared-memory tiled SGEMM runs
under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, one OS thread per CUDA thread) in
a child process, once: the only packaged way to run CUDA-style kernels without a GPU, and
it runs numba Python kernels, not CUDA C. Times are the best of ``--repeat`` after one
warm-up run; the script runs once with one thread and once with the default thread counts.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

from timing import best_time, best_times, run_in_thread_settings
import tessera_ref as t
from tessera_ref import backends, op
from tessera_ref.backends.cuda.cpu import CudaCpuBackend, build
from tessera_ref.backends.cuda.source import render
from tessera_ref.lowering import lower

NUMBA_SGEMM = r"""
import os, sys, time
import numpy as np
from numba import cuda, float32
n, T = int(sys.argv[1]), 16

@cuda.jit
def sgemm(a, b, c):
    sa = cuda.shared.array((16, 16), float32)
    sb = cuda.shared.array((16, 16), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.blockIdx.y * 16 + ty, cuda.blockIdx.x * 16 + tx
    acc = float32(0.0)
    for k0 in range(0, a.shape[1], 16):
        sa[ty, tx] = a[row, k0 + tx]
        sb[ty, tx] = b[k0 + ty, col]
        cuda.syncthreads()
        for k in range(16):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    c[row, col] = acc

a = np.ones((n, n), np.float32); b = np.ones((n, n), np.float32); c = np.zeros((n, n), np.float32)
t0 = time.perf_counter()
sgemm[(n // T, n // T), (T, T)](a, b, c)
print(time.perf_counter() - t0)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128, help="matrix size n (n x n x n)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--numba", action="store_true", help="also time Numba's CUDA simulator (slow: tens of seconds)")
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    program = lower(t.jit(lambda x, y: op.matmul(x, y)).trace(a, b))
    kernels = [k.attributes["sym_name"] for k in program.tile.body]
    source = render(program.tile)

    lib = build.library(source, kernels)
    rounds = 2_000_000
    s = best_time(lambda: lib.tsr_cpu_pingpong(rounds), args.repeat)
    print(f"{f'fiber switch ({platform.machine()}, hand-written)':44} {2 * rounds / s / 1e6:9.1f} M switches/s "
          f"{s / (2 * rounds) * 1e9:6.1f} ns/switch")

    with tempfile.TemporaryDirectory() as d:
        os.environ["TESSERA_CACHE_DIR"] = d  # a cold cache
        t0 = time.perf_counter()
        build.library(source, kernels, flags=build.FLAGS + ("-DTSR_BENCH_COLD",))  # a new key: not loaded yet
        print(f"{'g++ build of the matmul kernel (cold cache)':44} {time.perf_counter() - t0:9.2f} s")
        t0 = time.perf_counter()
        build.executable(source, kernels)
        print(f"{'g++ build of its ASan program (cold cache)':44} {time.perf_counter() - t0:9.2f} s")
        del os.environ["TESSERA_CACHE_DIR"]

    def interp():
        with backends.use("interp"):
            program.run(a, b, checks=False, counters=False)

    switches, times = [], {}

    def on(backend):
        def harness():
            with backends.use(backend):
                switches[:] = [r.switches for r in program.run(a, b)[1]]
        return harness

    for schedule, mode in (("lockstep", "deferred"), ("random:1", "eager")):
        ours, base = times[schedule] = best_times(on(CudaCpuBackend(schedule, mode)), interp, repeat=args.repeat)
        print(f"{f'matmul f32 {n}^3 on cuda-cpu ({schedule}, {mode})':44} {ours * 1e3:9.2f} ms "
              f"({sum(switches):,} switches) | tile interpreter {base * 1e3:9.2f} ms  ratio {base / ours:8.2f}")
    checked, plain = best_times(on(CudaCpuBackend("lockstep", "deferred", memcheck="asan")),
                                on(CudaCpuBackend("lockstep", "deferred")), repeat=args.repeat)
    print(f"{f'matmul f32 {n}^3, memcheck asan (lockstep)':44} {checked * 1e3:9.2f} ms | cuda-cpu lockstep "
          f"{plain * 1e3:9.2f} ms  slowdown {checked / plain:8.2f}")
    swept, plain = best_times(on(CudaCpuBackend()), on(CudaCpuBackend("lockstep", "deferred")), repeat=args.repeat)
    print(f"{f'matmul f32 {n}^3, the default six runs':44} {swept * 1e3:9.2f} ms | cuda-cpu lockstep "
          f"{plain * 1e3:9.2f} ms  slowdown {swept / plain:8.2f}")
    if args.numba:
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        done = subprocess.run([sys.executable, "-c", NUMBA_SGEMM, str(n)], capture_output=True, text=True, env=env)
        if done.returncode:
            print(f"{'numba CUDA simulator':44} unavailable: {done.stderr.strip().splitlines()[-1:]}")
        else:
            sim = float(done.stdout.split()[-1])
            print(f"{f'tiled SGEMM {n}^3, numba CUDA simulator':44} {sim * 1e3:9.2f} ms (one run)  "
                  f"ratio to cuda-cpu lockstep {sim / times['lockstep'][0]:8.1f}")


if __name__ == "__main__":
    run_in_thread_settings(main)
