"""Checkpoint save and restore throughput against safetensors on the same data in the same run.

    python benchmarks/checkpoint_bench.py [--mb 1024] [--repeat 3] [--dir DIR]

The state is ``--mb`` MB of f32 parameters and optimizer-like moments (DistTensors split over
tp=4 and dp=2 of a dp=2 x tp=4 mesh; 16 tensors). Rows:

- ``save``: ``checkpoint.save`` (safetensors files written with the safetensors package, then
  fsynced, their SHA-256 and each block's CRC-32 computed, the manifest written, the directory
  renamed into place) vs ``safetensors.numpy.save_file`` of the same tensors (global arrays,
  one file, no fsync, no hash);
- ``restore``: ``checkpoint.restore`` onto the saved mesh and layouts (every block's CRC-32
  checked, ``verify="read"``) vs ``safetensors.numpy.load_file``;
- ``restore onto another mesh``: the same checkpoint onto tp=2 x dp=4 with other layouts.

``ratio`` is baseline time / checkpoint time (throughput as a fraction of safetensors'); the
issue's target is >= 0.5. Times are the best of ``--repeat`` interleaved rounds after one
warm-up each; the page cache holds the files (nothing is dropped between rounds). The script
runs once with one thread and once with the default thread counts (timing.py).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import numpy as np
from safetensors.numpy import load_file, save_file

from timing import best_times, run_in_thread_settings, thread_setting
from tessera_ref import checkpoint, dist

S = dist.ShardSpec


def state(mb: int) -> dict:
    mesh = dist.Mesh(("dp", "tp"), range(8), (2, 4))
    rows = max(8, (mb << 20) // (16 * 4 * 1024) // 8 * 8)  # 16 tensors of rows x 1024 f32
    rng = np.random.default_rng(0)
    out = {}
    for i in range(8):
        for kind, spec in (("w", S(("row",), ("tp",))), ("m", S(("row", "col"), ("dp", "tp")))):
            data = rng.standard_normal((rows, 1024), dtype=np.float32)
            out[f"{kind}{i}"] = dist.tensor(data.shape, spec, mesh, data=data)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="state size in MB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="directory for the files (default: a temporary one)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(dir=args.dir)
    try:
        tree = state(args.mb)
        arrays = {k: v.numpy() for k, v in tree.items()}
        nbytes = sum(a.nbytes for a in arrays.values())
        print(f"{thread_setting()}: {nbytes / 1e6:.0f} MB in {len(arrays)} tensors; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        ck, st = os.path.join(root, "ck"), os.path.join(root, "st.safetensors")
        t, b = best_times(lambda: checkpoint.save(ck, tree), lambda: save_file(arrays, st), repeat=args.repeat)
        _row("save", nbytes, t, b, "safetensors.numpy.save_file")
        t, b = best_times(lambda: checkpoint.restore(ck, like=tree), lambda: load_file(st), repeat=args.repeat)
        _row("restore (same mesh)", nbytes, t, b, "safetensors.numpy.load_file")
        other = dist.Mesh(("tp", "dp"), range(8), (2, 4))
        like = {k: S(("col",), ("tp",)) if k.startswith("w") else S(("row",), ("dp",)) for k in tree}
        t, b = best_times(lambda: checkpoint.restore(ck, like=like, mesh=other), lambda: load_file(st),
                          repeat=args.repeat)
        _row("restore onto another mesh", nbytes, t, b, "safetensors.numpy.load_file")
        print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _row(name: str, nbytes: int, t: float, b: float, base: str) -> None:
    print(f"{name:28} {t:7.3f} s {nbytes / t / 1e9:6.2f} GB/s | {base:28} {b:7.3f} s {nbytes / b / 1e9:6.2f} GB/s"
          f"  ratio {b / t:5.2f}", flush=True)


if __name__ == "__main__":
    run_in_thread_settings(main)
