"""``tessera-ref demo``: a tensor-parallel MLP block on a simulated GB200 NVL72 (72 GPUs).

What it shows, step by step, on the CPU:

1. the NVL72 mesh of seed 004 (dp=4 × tp=9 × pp=2) on a simulated GB200-NVL72 machine;
2. a Megatron-style block ``rmsnorm(gelu(x @ W1) @ W2)``: ``x`` split over ``dp``, ``W1`` by
   columns and ``W2`` by rows over ``tp``, traced once with ``jit``; the printed Graph IR
   carries the layouts and the collective the sharding rules insert: the second matmul leaves
   a pending sum over ``tp`` (its K split), which rmsnorm needs whole — an ``all_reduce``;
3. the global result against the same program on one device: the first matmul is
   bit-identical (no K split); the second sums its K blocks per device and then across the
   ranks in rank order (NUM-RED-3), so its bits differ (by how much is printed); under
   ``reduction="exact"`` (shown on a smaller block: exact sums cost more) they are identical
   again, for any mesh;
4. seed 002's 1,000,000 × 1,000,000 bf16 weight as an abstract tensor: its bytes per device,
   and what the simulated machine says about them;
5. the simulator's report: memory per device, compute and communication time, the step time;
   ``--trace out.json`` writes the timeline for ui.perfetto.dev.
"""
from __future__ import annotations

import numpy as np

from . import dist, jit, op, sim
from .errors import OutOfMemoryError
from .numerics import Policy

__all__ = ["main"]

#: Locations in IR and errors name this file's lines (see tessera_ref.errors.user_location).
__tessera_user_code__ = True


def _difference(a: np.ndarray, b: np.ndarray) -> str:
    """How far ``a`` is from ``b``: how many elements' bits differ, and the largest difference
    relative to the largest magnitude."""
    differ = np.count_nonzero(a.view(np.uint32) != b.view(np.uint32))
    rel = float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))
    return f"{differ} of {a.size} elements differ, by at most {rel:.1e} of max|z|"


@jit
def mlp_block(x, w1, w2):
    h = op.gelu(op.matmul(x, w1))      # columns of W1 over tp: h is split over tp, no communication
    z = op.matmul(h, w2)               # rows of W2 over tp: a K split, a pending sum over tp
    return op.rmsnorm_safe(z)          # needs whole rows: the rule inserts an all_reduce over tp


def _block(mesh, policy, shapes=((576, 256), (256, 1152), (1152, 256))):
    """x split over dp, W1 by columns and W2 by rows over tp, from the seeded RNG (the same
    global bits on any mesh), and the block's result."""
    S = dist.ShardSpec
    specs = (S(("row",), ("dp",)), S(("col",), ("tp",)), S(("row",), ("tp",)))
    x, w1, w2 = (dist.tensor(shape, spec, mesh, dtype=policy, init="randn", seed=i, name=name)
                 for i, (shape, spec, name) in enumerate(zip(shapes, specs, ("x", "W1", "W2"))))
    return x, w1, w2, mlp_block(x, w1, w2)


def _one_device(x, w1, w2, policy):
    """The same block on one device, from the global values."""
    with sim.paused():
        gx, g1, g2 = (op.cast(t.numpy(), policy) for t in (x, w1, w2))
        return np.asarray(op.rmsnorm_safe(op.matmul(op.gelu(op.matmul(gx, g1)), g2)))


def main(trace: str | None = None) -> int:
    machine = sim.machine("GB200-NVL72", devices=72)
    with sim.use(machine):
        mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
        print(f"1. {mesh} on a simulated {machine.preset.name}\n")

        x, w1, w2, z = _block(mesh, "f32")
        print("2. the traced block (layouts in the types, the inserted collectives as ops):\n")
        print(mlp_block.inspect_ir("graph"), "\n")
        print(f"   result {z.type}; each device holds {x.nbytes_per_device:,} B of x, "
              f"{w1.nbytes_per_device:,} B of W1, {w2.nbytes_per_device:,} B of W2\n")

        with sim.paused():
            h1 = np.asarray(op.gelu(op.matmul(x.numpy(), w1.numpy())))
        h_mesh = dist.all_gather(op.gelu(op.matmul(x, w1)), axis="tp").numpy()
        same_h = np.array_equal(h_mesh.view(np.uint32), h1.view(np.uint32))
        print(f"3. first matmul + gelu against one device: {'bit-identical' if same_h else 'DIFFERENT'}")
        print(f"   the block (second matmul's K split over tp=9, canonical order): "
              f"{_difference(z.numpy(), _one_device(x, w1, w2, 'f32'))}")
        small = ((36, 72), (72, 144), (144, 72))  # exact sums cost more: a smaller block
        exact = Policy("f32", reduction="exact")
        for policy in ("f32", exact):
            xs, w1s, w2s, zs = _block(mesh, policy, small)
            single = _one_device(xs, w1s, w2s, policy)
            same = np.array_equal(zs.numpy().view(np.uint32), single.view(np.uint32))
            name = "reduction='exact'" if policy is exact else "canonical order"
            print(f"   block {small[0]}x{small[1]}x{small[2]}, {name}: "
                  + ("bit-identical to one device" if same else _difference(zs.numpy(), single)))
        print()

        big_mesh = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))
        with sim.paused():
            W = dist.tensor(shape=(1_000_000, 1_000_000),
                            layout=dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp")),
                            mesh=big_mesh, dtype="bf16")
        print(f"4. seed 002's weight on {big_mesh}: {W.type}, {W.nbytes / 1e12:.1f} TB, "
              f"{W.nbytes_per_device / 1e9:.0f} GB per device (split 8 ways, replicated over dp=9)")
        try:
            dist.tensor(shape=W.shape, layout=W.layout, mesh=big_mesh, dtype="bf16", name="W (seed 002)")
        except OutOfMemoryError as error:
            print(f"   the simulated machine: {error.what}\n")
        print("5. the simulated machine's report:\n")
        print(machine.report())
        if trace:
            machine.save_trace(trace)
            print(f"\ntimeline written to {trace} (open it in ui.perfetto.dev)")
    return 0
