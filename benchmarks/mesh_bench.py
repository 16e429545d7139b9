"""Speed of the simulated mesh: a tensor-parallel matmul plus all_gather, against baselines
measured in the same run.

    python benchmarks/mesh_bench.py [--repeat 5] [--meshes 2x2x2,4x9x2]

The step: ``x [576×256] @ W [256×1152]`` in f32 with ``x`` split over ``dp`` (rows) and ``W``
over ``tp`` (columns), then ``all_gather`` over ``tp`` — on the dp×tp×pp meshes given (8 and
72 devices by default). Rows:

- ``mesh eager``: ``op.matmul`` + ``dist.all_gather`` on DistTensors (stacked shards);
- ``mesh jit``: the same step traced once with ``@jit`` (the collectives in the IR) and run by
  the mesh interpreter;
- ``single-device exact``: the same global program, ``op.matmul(x, w)``, in the exact
  interpreter — the mesh's own overhead is ``mesh / single``;
- ``numpy``: ``x @ w`` with BLAS (inexact, the speed floor);
- ``JAX shard_map`` and ``DTensor LocalTensorMode``: the same step simulated by JAX (CPU
  devices from ``--xla_force_host_platform_device_count``) and by PyTorch's in-process
  DTensor simulation, each in a subprocess (the device count is fixed at start), when the
  package is installed (``pip install tessera_ref[bench]``); otherwise the row says why not.

The mesh results are checked bit for bit against the single-device result (no K split, so
NUM-RED-1 makes them identical). Times are the best of ``--repeat`` runs after a warm-up;
the script runs with one thread, then with the default thread counts.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys

import numpy as np

from timing import best_times, run_in_thread_settings
import tessera_ref as tr
from tessera_ref import dist, op

# The baselines' scripts: argv = devices, mesh shape "dpxtpxpp", repeat; print ms per step.
_SETUP = """
import sys, time
import numpy as np
n, shape, repeat = int(sys.argv[1]), tuple(map(int, sys.argv[2].split("x"))), int(sys.argv[3])
rng = np.random.default_rng(0)
x = rng.normal(size=(576, 256)).astype(np.float32)
w = rng.normal(size=(256, 1152)).astype(np.float32)

def best(fn):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return min(times)
"""
_JAX = """
import os
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           f" --xla_force_host_platform_device_count={n}")
import jax
from jax.sharding import Mesh, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()[:n]).reshape(shape), ("dp", "tp", "pp"))
def body(xs, ws):
    return jax.lax.all_gather(xs @ ws, "tp", axis=1, tiled=True)
shard_map = getattr(jax, "shard_map", None)
if shard_map is None:
    from jax.experimental.shard_map import shard_map
specs = dict(mesh=mesh, in_specs=(P("dp", None), P(None, "tp")), out_specs=P("dp", None))
try:
    step = jax.jit(shard_map(body, check_vma=False, **specs))
except TypeError:
    step = jax.jit(shard_map(body, check_rep=False, **specs))
xd, wd = jax.device_put(x), jax.device_put(w)
print(best(lambda: step(xd, wd).block_until_ready()) * 1e3)
"""
_DTENSOR = """
import torch
import torch.distributed as tdist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore
tdist.init_process_group("fake", rank=0, world_size=n, store=FakeStore())
with LocalTensorMode(n):
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp", "pp"))
    X = distribute_tensor(torch.from_numpy(x), mesh, [Shard(0), Replicate(), Replicate()])
    W = distribute_tensor(torch.from_numpy(w), mesh, [Replicate(), Shard(1), Replicate()])
    out = [Shard(0), Replicate(), Replicate()]
    print(best(lambda: (X @ W).redistribute(mesh, out)) * 1e3)
"""
BASELINES = {"JAX shard_map": ("jax", _JAX), "DTensor LocalTensorMode": ("torch", _DTENSOR)}


def baseline_ms(package: str, script: str, shape: tuple[int, ...], repeat: int) -> tuple[float | None, str]:
    """(ms per step, "") from the baseline's subprocess, or (None, why it did not run)."""
    if importlib.util.find_spec(package) is None:
        return None, f"{package} not installed (pip install tessera_ref[bench])"
    argv = [str(int(np.prod(shape))), "x".join(map(str, shape)), str(repeat)]
    run = subprocess.run([sys.executable, "-c", _SETUP + script, *argv], capture_output=True,
                         text=True, env=dict(os.environ), timeout=600)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"failed: {last[:100]}"
    return float(run.stdout.split()[-1]), ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--meshes", default="2x2x2,4x9x2", help="dp x tp x pp shapes")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(576, 256)).astype(np.float32)
    w = rng.normal(size=(256, 1152)).astype(np.float32)
    single = np.asarray(op.matmul(x, w))
    t_single, t_numpy = best_times(lambda: op.matmul(x, w), lambda: x @ w, repeat=args.repeat)

    @tr.jit
    def step(xs, ws):
        return dist.all_gather(op.matmul(xs, ws), axis="tp")

    print(f"{'step':38} {'ms/step':>9}   {'/ single exact':>14}   {'/ numpy':>8}   {'ours / it':>9}")
    print(f"{'single-device exact (global)':38} {t_single * 1e3:9.2f}   {1.0:14.2f}   "
          f"{t_single / t_numpy:8.1f}")
    print(f"{'numpy x @ w (BLAS, inexact)':38} {t_numpy * 1e3:9.2f}")
    for shape in (tuple(map(int, m.split("x"))) for m in args.meshes.split(",")):
        mesh = dist.mesh(devices=range(int(np.prod(shape))), axes=("dp", "tp", "pp"), shape=shape)
        X = dist.tensor(x.shape, dist.ShardSpec(("row",), ("dp",)), mesh, data=x)
        W = dist.tensor(w.shape, dist.ShardSpec(("col",), ("tp",)), mesh, data=w)

        def eager():
            return dist.all_gather(op.matmul(X, W), axis="tp")
        fns = {"eager": eager, "jit": lambda: step(X, W)}
        for name, fn in fns.items():
            y = fn().numpy()
            assert np.array_equal(y.view(np.uint32), single.view(np.uint32)), f"{name} on {shape}: bits differ"
        times = dict(zip(fns, best_times(*fns.values(), repeat=args.repeat)))
        where = f"{mesh.size} dev {'x'.join(map(str, shape))}"
        for name, t in times.items():
            print(f"{f'mesh {name} {where}':38} {t * 1e3:9.2f}   {t / t_single:14.2f}   {t / t_numpy:8.1f}")
        ours = times["jit"]
        for label, (package, script) in BASELINES.items():
            ms, why = baseline_ms(package, script, shape, args.repeat)
            name = f"{label} {where}"
            if ms is None:
                print(f"{name:38} {'-':>9}   {why}")
            else:
                print(f"{name:38} {ms:9.2f}   {ms / 1e3 / t_single:14.2f}   "
                      f"{ms / 1e3 / t_numpy:8.1f}   {ours / (ms / 1e3):9.2f}")


if __name__ == "__main__":
    run_in_thread_settings(main)
