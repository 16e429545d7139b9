"""Programs of several processes: the demo's 72-device training step on 1, 2 and 4 processes,
and the canonical reductions against MPI's own on the same data.

    python benchmarks/multiprocess_bench.py [--repeat 3] [--elements 4194304] [--exact-elements 262144]

Rows:

- ``step P``: the demo's tensor-parallel block (GB200-NVL72 mesh dp=4 x tp=9 x pp=2, batch 4 x
  sequence 288 x width 1152) forward and backward (``grad`` of ``mean(block(x)**2)`` with
  respect to Wqkv and Wo) as ``P`` processes, each owning 72/P devices: the best wall time per
  step, its ratio to one process, and the bytes each rank sent per step against the ring's
  lower bound for the step's inter-process traffic — the data-parallel all-reduce of both
  gradients, ``2(P-1)/P`` times their bytes (the processes split dp; tp stays inside each).
- ``all_reduce P`` / ``reduce_scatter P``: one f32 value per process (mesh ``r`` of P devices,
  ``--elements`` each) reduced by ``dist`` (the ascending fold over point-to-point, NUM-RED-3)
  and by MPI's ``Allreduce`` / ``Reduce_scatter_block`` (whose order MPI does not fix), timed
  in the same processes, interleaved; ``ratio`` = MPI time / ours (below 1: ours is slower),
  how many elements' bits differ, and the bytes each rank sent against the ring's lower bound
  (``2(P-1)/P`` of the value for the all-reduce, ``(P-1)/P`` for the reduce-scatter, which
  folds only each owner's block: no all-gather).
- ``exact_all_reduce P`` / ``exact_reduce_scatter P``: the same with ``--exact-elements`` exact
  partial sums per process (``reduction="exact"``, NUM-RED-4; their digits move, MESH-MP-4),
  timed against MPI's f32 ``Allreduce`` / ``Reduce_scatter_block`` of the same values (which
  round, so "bits differ" counts where MPI's rounded sum is not the exact sum rounded once);
  the ring bound is that of the digits in use (``4·(w+1)`` bytes a sum: 4 a digit, 8 for the
  signed top one), and the f32 ring bound is
  printed beside it.

The machine this runs on may have fewer cores than processes (oversubscribed runs measure
the protocol, not a cluster). The script runs with one thread, then the default threads.

Measured 2026-11-24 on a 2-core VM shared with other jobs (load average about 6), one thread
(default threads): the step took 2.21 (4.73) s on 1 process, 2.00 (2.72) s on 2 and 1.93
(1.88) s on 4; each rank sent 31.85 MB per step, 1.50 x the ring bound on 2 processes (each
holds two dp contributions, and the canonical order lets no process pre-add its own) and 1.00 x
on 4. On 4,194,304 f32 per process MPI's own reductions were 3-4.5 x faster (ratio 0.22-0.34:
ours folds in Python-driven rounds and copies every contribution to its owner), and with 4
processes their bits differed from the ascending fold in about a quarter of the elements
(4,490,480 of 16,777,216 for Allreduce); with 2 processes the two orders coincide.
Re-measured 2026-11-24 (same VM, load about 4, --repeat 1) after the reduce-scatter stopped
all-gathering: each rank sent 8.39 MB on 2 processes and 12.58 MB on 4, 1.00 x the ring
bound (half of the all-reduce's 16.78 / 25.17 MB, which it used to send), in 23-24 ms on 2
(MPI's Reduce_scatter_block 3.7-12 ms) and 47-51 ms on 4 (MPI 13-17 ms): ratio 0.16-0.50;
the all-reduce took 53-60 ms and 91-231 ms.
Measured 2026-11-24 (same VM, load about 5.3-5.6, --repeat 2) after exact sums moved as their
digits in use to the owners (4 bytes a digit, 8 for the signed top one): 262,144 exact sums per
process (4 digits in use, 20 bytes a sum) sent 2.62 MB per rank for a reduce-scatter on 2
processes and 3.93 MB on 4, 5.24 / 7.86 MB for an all-reduce — 1.000 x the ring bound of the
digits, 5.00 x f32's. One thread (default threads): a reduce-scatter took 96 (124) ms on 2 and
155 (171) ms on 4, an all-reduce 203 (299) and 393 (381) ms, against 0.2-19 ms for MPI's f32
reductions of the same values (ratio 0.001-0.068: the digits are cut, merged, packed and
rounded by NumPy). Before, every process sent its whole exact partial sums — all 68 digits of
the f64 domain, pickled — to every other: for the 48 x 40 sums of
tests/multiprocess/programs.py exact_bytes, 1,050,664 bytes per rank on 2 processes and
3,151,992 on 4 for either collective; now 23,060 / 34,620 for a reduce-scatter and 46,120 /
69,240 for an all-reduce (5 digits in use; the f32 ring bound is 3,840 / 5,760). The f32 rows:
1.000 x the ring bound, 24-62 ms on 2 processes and 57-179 ms on 4 (ratio to MPI 0.18-0.41);
the step took 2.00 (3.28), 2.05 (1.88), 1.38 (2.13) s on 1, 2, 4 processes.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

from timing import run_in_thread_settings, thread_setting

HERE = os.path.dirname(os.path.abspath(__file__))


def _transport_bytes() -> int:
    from tessera_ref.backends.p2p import _OPEN
    return sum(t.bytes_sent for t in _OPEN.values())


def _timed(fn, barrier, repeat: int) -> float:
    """Best wall time of ``fn`` over ``repeat`` runs after a warm-up, every rank starting together."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        barrier()
        t0 = time.perf_counter()
        fn()
        barrier()
        best = min(best, time.perf_counter() - t0)
    return best


def worker_step(args) -> None:
    from mpi4py import MPI
    from tessera_ref import demo, dist
    from tessera_ref.dist.world import placement
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    x, Wqkv, Wo = demo._weights(mesh, "f32", 4, 288, demo.HEADS * 64)
    step = demo.loss_gradients(x)
    place = placement(mesh)
    comm = MPI.COMM_WORLD if place.size > 1 else None
    barrier = comm.Barrier if comm else (lambda: None)
    step(Wqkv, Wo)
    before = _transport_bytes()
    t = _timed(lambda: step(Wqkv, Wo), barrier, args.repeat)
    sent = (_transport_bytes() - before) / (args.repeat + 1)
    p = place.size
    ring = 2 * (p - 1) / p * (Wqkv.nbytes + Wo.nbytes)
    worst = comm.allreduce(sent, op=MPI.MAX) if comm else sent
    if place.rank == 0:
        print(f"step {p} {t:.4f} {worst:.0f} {ring:.0f}", flush=True)


def _pending(mesh, mine, p: int, exact: bool):
    """A pending sum over ``r`` whose contribution on each rank is ``mine``; under exact mode
    held as exact partial sums (an ExactAccumulator, as a K-split matmul leaves them)."""
    from tessera_ref import dist
    from tessera_ref.dist.tensor import DistTensor
    from tessera_ref.ir import TensorType
    from tessera_ref.numerics import ExactAccumulator, Policy
    policy = Policy("f32", reduction="exact") if exact else "f32"
    x = dist.from_shards([mine] * p, dist.ShardSpec(None, ("r",), reduce="sum"), mesh, dtype=policy)  # each its own
    if not exact:
        return x, 4 * mine.size
    acc = ExactAccumulator(x.local.shape).add(x.local)
    words = acc.to_words()
    return DistTensor(TensorType(x.shape, x.policy, x.layout), mesh, acc), 4 * int(words[1] + 2 - words[0]) * mine.size


def worker_reduce(args) -> None:
    from mpi4py import MPI
    from tessera_ref import dist
    comm = MPI.COMM_WORLD
    p, rank = comm.Get_size(), comm.Get_rank()
    mesh = dist.Mesh(("r",), range(p))
    rows = []
    for exact, n in ((False, args.elements), (True, args.exact_elements)):
        mine = np.random.default_rng(rank).standard_normal(n).astype(np.float32) * np.float32(2.0 ** (4 * rank))
        x, nbytes = _pending(mesh, mine, p, exact)
        total, block = np.empty(n, np.float32), np.empty(n // p, np.float32)
        tag = "exact_" if exact else ""
        rows += [(f"{tag}all_reduce", lambda x=x: dist.all_reduce(x, axis="r").local,
                  lambda m=mine, t=total: comm.Allreduce(m, t, op=MPI.SUM), total, n, 2 * (p - 1) * nbytes // p,
                  2 * (p - 1) * 4 * n // p),
                 (f"{tag}reduce_scatter", lambda x=x: dist.collective.reduce_scatter(x, axis="r", dim=0).local,
                  lambda m=mine, b=block: comm.Reduce_scatter_block(m, b, op=MPI.SUM), block, n // p,
                  (p - 1) * nbytes // p, (p - 1) * 4 * n // p)]
    for name, ours, theirs, out, size, ring, ring_f32 in rows:
        before = _transport_bytes()
        ours()
        sent = comm.allreduce(_transport_bytes() - before, op=MPI.MAX)
        rounds = []
        for _ in range(args.repeat):  # interleaved: a burst of load hits both alike
            rounds.append((_timed(ours, comm.Barrier, 1), _timed(theirs, comm.Barrier, 1)))
        t_ours, t_mpi = min(r[0] for r in rounds), min(r[1] for r in rounds)
        mine_out = np.asarray(ours()).reshape(-1)
        theirs()
        differ = comm.allreduce(int(np.count_nonzero(mine_out.view(np.uint32) != out.view(np.uint32))))
        if rank == 0:
            print(f"{name} {p} {t_ours:.5f} {t_mpi:.5f} {differ} {size} {sent} {ring} {ring_f32}", flush=True)


def _launch(n: int, *worker) -> list:
    command = [sys.executable, "-m", "tessera_ref", "launch", "-n", str(n), os.path.abspath(__file__), *worker]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--elements", type=int, default=1 << 22)
    ap.add_argument("--exact-elements", type=int, default=1 << 18)
    ap.add_argument("--worker", choices=("step", "reduce"), default=None)
    args = ap.parse_args()
    if args.worker:
        (worker_step if args.worker == "step" else worker_reduce)(args)
        return
    print(f"[{thread_setting()}] the demo's training step (forward + backward, 72 simulated devices)")
    base = None
    for p in (1, 2, 4):
        _, _, t, sent, ring = _launch(p, "--worker", "step", "--repeat", str(args.repeat))
        t, sent, ring = float(t), float(sent), float(ring)
        base = base or t
        bound = f"{sent / ring:5.2f} x the ring bound {ring / 1e6:8.2f} MB" if ring else "(no inter-process traffic)"
        print(f"  step on {p} process(es): {t:8.3f} s  ratio to 1 process {base / t:5.2f}   "
              f"sent per rank {sent / 1e6:8.2f} MB {bound}", flush=True)
    print(f"[{thread_setting()}] reductions of {args.elements:,} f32 (exact: {args.exact_elements:,} sums) per "
          f"process: ours (ascending fold; exact sums) vs MPI's own")
    for p in (2, 4):
        out = _launch(p, "--worker", "reduce", "--repeat", str(args.repeat), "--elements", str(args.elements),
                      "--exact-elements", str(args.exact_elements))
        for name, _, ours, theirs, differ, size, sent, ring, ring_f32 in zip(*[iter(out)] * 9):
            mb = 4 * int(size) * (1 if name.endswith("all_reduce") else p) / 1e6
            print(f"  {name:20} P={p}: ours {float(ours) * 1e3:8.2f} ms ({mb / float(ours):7.1f} MB/s)  "
                  f"MPI {float(theirs) * 1e3:8.2f} ms ({mb / float(theirs):7.1f} MB/s)  ratio "
                  f"{float(theirs) / float(ours):6.3f}  bits differ in {differ} of {int(size) * p} elements  "
                  f"sent per rank {int(sent) / 1e6:.3f} MB = {int(sent) / int(ring):.3f} x the ring bound "
                  f"({int(sent) / int(ring_f32):.2f} x f32's)", flush=True)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        main()
    else:
        run_in_thread_settings(main)
