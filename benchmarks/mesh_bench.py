"""Speed of the simulated mesh: a tensor-parallel matmul plus all_gather, against baselines
measured in the same run.

    python benchmarks/mesh_bench.py [--repeat 3]

The step: ``x [576×256] @ W [256×1152]`` in f32 with ``x`` split over ``dp`` (rows) and ``W``
over ``tp`` (columns), then ``all_gather`` over ``tp`` — on 8 devices (dp×tp×pp = 2×2×2) and
on 72 (4×9×2). Rows:

- ``mesh eager``: ``op.matmul`` + ``dist.all_gather`` on DistTensors (stacked shards);
- ``mesh jit``: the same step traced once with ``@jit`` (the collectives in the IR) and run by
  the mesh interpreter;
- ``single-device exact``: the same global program, ``op.matmul(x, w)``, in the exact
  interpreter — the mesh's own overhead is ``mesh / single``;
- ``numpy``: ``x @ w`` with BLAS (inexact, the speed floor).

The results of the mesh runs are checked bit for bit against the single-device result (no K
split, so NUM-RED-1 makes them identical). Times are the best of ``--repeat`` runs after a
warm-up; the issue's bar is 74 ms/step on 72 devices (JAX's CPU simulation on this machine
class) and mesh / single ≤ 1.5.
"""
from __future__ import annotations

import argparse

import numpy as np

from timing import best_time
import tessera_ref as tr
from tessera_ref import dist, op


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(576, 256)).astype(np.float32)
    w = rng.normal(size=(256, 1152)).astype(np.float32)
    single = np.asarray(op.matmul(x, w))
    t_single = best_time(lambda: op.matmul(x, w), args.repeat)
    t_numpy = best_time(lambda: x @ w, args.repeat)

    @tr.jit
    def step(xs, ws):
        return dist.all_gather(op.matmul(xs, ws), axis="tp")

    print(f"{'step':34} {'ms/step':>10}   {'/ single exact':>14}   {'/ numpy':>9}")
    print(f"{'single-device exact (global)':34} {t_single * 1e3:10.2f}   {1.0:14.2f}   {t_single / t_numpy:9.1f}")
    print(f"{'numpy x @ w (BLAS, inexact)':34} {t_numpy * 1e3:10.2f}")
    for shape in ((2, 2, 2), (4, 9, 2)):
        mesh = dist.mesh(devices=range(int(np.prod(shape))), axes=("dp", "tp", "pp"), shape=shape)
        X = dist.tensor(x.shape, dist.ShardSpec(("row",), ("dp",)), mesh, data=x)
        W = dist.tensor(w.shape, dist.ShardSpec(("col",), ("tp",)), mesh, data=w)

        def eager():
            return dist.all_gather(op.matmul(X, W), axis="tp")
        for name, fn in (("eager", eager), ("jit", lambda: step(X, W))):
            y = fn().numpy()
            assert np.array_equal(y.view(np.uint32), single.view(np.uint32)), f"{name} on {shape}: bits differ"
            t = best_time(fn, args.repeat)
            label = f"mesh {name} {mesh.size} dev {'x'.join(map(str, shape))}"
            print(f"{label:34} {t * 1e3:10.2f}   {t / t_single:14.2f}   {t / t_numpy:9.1f}")


if __name__ == "__main__":
    main()
