"""Seed 004's transformer block, two of them, as a real 2-stage pipeline over the pp axis of the NVL72 mesh.

Run with ``python examples/pipeline_demo.py [--schedule gpipe|1f1b] [--trace OUT.json]``. The mesh
is seed 004's (dp=4 × tp=9 × pp=2 on a simulated GB200-NVL72). A model of two of seed 004's
blocks (``rmsnorm_safe → gemm(Wqkv) → split_qkv → flash_attention → gemm(Wo)``, as
``tessera-ref demo`` runs it, tensor-parallel over tp) runs one block per stage: block 1 on
``pp=0`` (36 devices), block 2 and the loss ``mean(out²)`` on ``pp=1``. Each block ends with an
``all_reduce`` over tp (Megatron's layout: the next block needs the whole activation; the
one-block demo reduce-scatters instead). Activations cross to stage 1 and their gradients back
to stage 0 by ``dist.send``/``dist.recv``; each stage differentiates its own block
(``dist.pipeline``).

It prints the schedule, the bits of the losses and gradients against the same model run on
stage 0's devices without a pipeline (micro-batch by micro-batch, gradients summed in
micro-batch order: MESH-PP-3), the SHA-256 of those losses and gradients (the same on every
run), and then, on abstract tensors of a larger size, the bubble the simulated machine shows
against the formula ``(p − 1)/m``.
"""
import argparse
import hashlib

import numpy as np

from tessera_ref import dist, op, sim
from tessera_ref.autodiff import value_and_grad
from tessera_ref.demo import HEADS, attention_block

BATCH, SEQ, WIDTH, MICROBATCHES = 8, 72, HEADS * 32, 2
#: the abstract run that shows the bubble: 8 micro-batches of 4 sequences of 2304 (9 · 256)
BIG_SEQ, BIG_WIDTH, BIG_MICROBATCHES = 2304, HEADS * 128, 8


def block(x, Wqkv, Wo):
    """One stage: seed 004's block, its output projection's pending sum over tp all-reduced."""
    return dist.all_reduce(attention_block(x, Wqkv, Wo), axis="tp")


def loss(out):
    return op.mean(out ** 2.0)


def _tensors(mesh, batch, seq, width, abstract=False):
    """x on stage 0 (split over dp by batch); per block k, Wqkv by columns and Wo by rows over tp on
    stage k. With values, the seeded RNG gives the same global bits on any sub-mesh."""
    S = dist.ShardSpec
    init = {} if abstract else {"init": "randn"}
    dtype = "bf16" if abstract else "f32"
    x = dist.tensor((batch, seq, width), S(("batch",), ("dp",)), mesh.sub(pp=0), dtype=dtype, seed=0, name="x", **init)
    weights = [(dist.tensor((width, 3 * width), S(("col",), ("tp",)), mesh.sub(pp=k), dtype=dtype, seed=1 + 2 * k,
                            name=f"Wqkv{k}", **init),
                dist.tensor((width, width), S(("row",), ("tp",)), mesh.sub(pp=k), dtype=dtype, seed=2 + 2 * k,
                            name=f"Wo{k}", **init)) for k in range(2)]
    return x, weights


def unpipelined(x, weights):
    """The same model on stage 0's devices, micro-batch by micro-batch, gradients summed in order."""
    here = [dist.tensor(w.shape, w.layout, x.mesh, dtype="f32", data=w.numpy()) for ws in weights for w in ws]

    def model(xj):
        return lambda *w: loss(block(block(xj, w[0], w[1]), w[2], w[3]))

    losses, grads = [], None
    for xj in dist.microbatches(x, MICROBATCHES):
        value, g = value_and_grad(model(xj), argnums=(0, 1, 2, 3))(*here)
        losses.append(value)
        grads = g if grads is None else tuple(s + gi for s, gi in zip(grads, g))
    return losses, grads


def _bits(tensors) -> bytes:
    return b"".join(np.ascontiguousarray(t.numpy()).tobytes() for t in tensors)


def _mesh():
    return dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))


def main(schedule: str = "1f1b", trace: str | None = None) -> str:
    """Run the demo; returns the SHA-256 it prints."""
    machine = sim.machine("GB200-NVL72", devices=72)
    with sim.use(machine):
        mesh = _mesh()
        x, weights = _tensors(mesh, BATCH, SEQ, WIDTH)
        pipe = dist.pipeline(block, mesh, mesh_axis="pp", microbatches=MICROBATCHES, schedule=schedule, loss=loss)
        print(f"1. {mesh} on a simulated {machine.preset.name}; {pipe}")
        for k in range(2):
            print(f"   stage {k} on {pipe.sub_mesh(k)}: block {k + 1} (rmsnorm_safe, gemm(Wqkv), split_qkv, "
                  f"flash_attention, gemm(Wo), all_reduce over tp)" + (", mean(out**2)" if k else ""))
        print(f"   batch {BATCH} x sequence {SEQ} x width {WIDTH} (f32), {MICROBATCHES} micro-batches of "
              f"{BATCH // MICROBATCHES}: each dp rank's {BATCH // 4} rows cut in {MICROBATCHES}")
        for d, actions in enumerate(pipe.order):
            print(f"   stage {d} runs " + " ".join(f"{a.kind}{a.microbatch}" for a in actions))
        result = pipe.step(x, weights)
    sends = {e.args["call"]: e.args["bytes"] for e in machine.timeline.events if e.name.startswith("send/recv")}
    print(f"   {len(sends)} send/recv calls across the stage boundary (activations forward, their gradients "
          f"back), {next(iter(sends.values())):,} B per device each")

    with sim.paused():
        losses, grads = unpipelined(x, weights)
        mine = [g for ws in result.grads for g in ws]
        same = _bits(result.losses) == _bits(losses) and _bits(mine) == _bits(grads)
        print("\n2. the losses and gradients against the model without a pipeline (stage 0's devices, "
              f"micro-batch by micro-batch): {'bit-identical' if same else 'DIFFERENT'}")
        print("   losses: " + ", ".join(f"{float(v.numpy()):.6f}" for v in result.losses))
        digest = hashlib.sha256(_bits(result.losses) + _bits(mine)).hexdigest()
        print(f"   SHA-256 of the losses and gradients: {digest}")

    big = sim.machine("GB200-NVL72", devices=72)
    with sim.use(big):
        mesh = _mesh()
        x, weights = _tensors(mesh, 4 * BIG_MICROBATCHES, BIG_SEQ, BIG_WIDTH, abstract=True)
        pipe = dist.pipeline(block, mesh, microbatches=BIG_MICROBATCHES, schedule=schedule, loss=loss)
        pipe.step(x, weights)
    work = [{stream: sum(e.duration for e in big.timeline.events if e.stream == stream and e.device == d)
             for stream in ("compute", "comm")} for d in range(big.n_devices)]
    busiest = max(work, key=lambda w: w["compute"] + w["comm"])
    busy = busiest["compute"] + busiest["comm"]
    print(f"\n3. abstract tensors (bf16, no data): batch {4 * BIG_MICROBATCHES} x sequence {BIG_SEQ} x width "
          f"{BIG_WIDTH}, {BIG_MICROBATCHES} micro-batches, {schedule}")
    print(f"   step {big.step_time * 1e3:.3f} ms; the busiest device computes {busiest['compute'] * 1e3:.3f} ms and "
          f"communicates {busiest['comm'] * 1e3:.3f} ms (program order: one at a time)")
    print(f"   it idles {(big.step_time - busy) * 1e3:.3f} ms, {(big.step_time - busy) / busy:.3f} of its work: the "
          f"bubble; (p-1)/m = {(pipe.p - 1) / pipe.m:.3f} for {pipe.p} equal stages (stage 0 computes no input "
          "gradient, stage 1 also the loss)")
    if trace:
        big.save_trace(trace)
        print(f"\ntimeline of 3. written to {trace} (open it in ui.perfetto.dev)")
    return digest


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b"])
    parser.add_argument("--trace", help="write the simulated timeline as a Chrome trace")
    args = parser.parse_args()
    main(args.schedule, args.trace)
