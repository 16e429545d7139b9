"""``tessera-ref demo``: seed 004's transformer block, tensor-parallel on a simulated GB200 NVL72.

What it shows, step by step, on the CPU:

1. the NVL72 mesh of seed 004 (dp=4 × tp=9 × pp=2) on a simulated GB200-NVL72 machine;
2. seed 004 §2.8's block ``rmsnorm_safe → gemm(Wqkv) → split_qkv → flash_attention →
   gemm(Wo)``, traced once with ``jit``: the batch split over ``dp``, ``Wqkv`` by columns
   and ``Wo`` by rows over ``tp`` (Megatron's layout). The printed Graph IR carries the
   layouts: each device computes the q, k, v and attention of its heads with no
   communication; the second gemm sums over the heads of every device — a K split, a
   pending sum over ``tp`` — which the block's ``reduce_scatter`` carries out, leaving the
   output split over the sequence;
3. every collective the step ran, with its bytes, algorithm and time; the memory of each
   device and the estimated step time on GB200-NVL72; with ``--trace OUT.json``, the
   timeline as a Chrome trace;
4. the bits against the same block on one device: everything before the K split is
   bit-identical; the K split sums each device's heads and then folds the devices in rank
   order (NUM-RED-3), so the output differs in the last bits (how much is printed); under
   ``reduction="exact"`` (on a smaller block: exact sums cost more) it is identical again;
   and the SHA-256 of the output, the same on every run and machine;
5. the backward pass of a training step, ``grad`` of ``mean(block(x)²)`` with respect to
   ``Wqkv`` and ``Wo`` on the mesh: its communication plan — the ``reduce_scatter``
   transposed to one ``all_gather`` over ``tp``, and the data-parallel gradient sums, one
   ``all_reduce`` over ``dp`` per weight — the gradients in their weights' layouts, and their
   bits against one device (on the smaller block, in both reduction modes);
6. seed 002's 1,000,000 × 1,000,000 bf16 weight as an abstract tensor: its bytes per device,
   and the out-of-memory error of the simulated machine.

Two liberties with the seed's text, both printed: its block computes ``h = rmsnorm_safe(x)``
and then multiplies ``x`` (``h`` is dead; we multiply ``h``, as the block's name says), and it
passes the attention output ``[B, heads, S, D]`` straight to ``gemm(y, Wo)`` (we merge the
heads back to ``[B, S, E]`` first). The seed's ``heads=16`` does not divide ``tp=9``; the demo
uses 18 heads.

Each section prints its heading before its work and ends with the seconds it took (the
only lines that differ between runs).
"""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np

from . import autodiff, dist, grad, jit, op, sim
from .errors import OutOfMemoryError
from .numerics import Policy

__all__ = ["main", "attention_block", "tp_block"]

#: Locations in IR and errors name this file's lines (see tessera_ref.errors.user_location).
__tessera_user_code__ = True

HEADS = 18
TP = 9


class _Clock:
    """The wall time of each section, for its last line."""

    def __init__(self):
        self.start = time.perf_counter()

    def lap(self) -> str:
        now = time.perf_counter()
        took, self.start = now - self.start, now
        return f"   ({took:.1f} s)\n"


def heads_output(x, Wqkv):
    """Seed 004's block up to the output projection: the attention of every head, merged back
    to ``[B, S, E]``."""
    h = op.rmsnorm_safe(x)
    qkv = op.gemm(h, Wqkv)                          # Wqkv split by columns over tp: each device its heads
    q, k, v = op.split_qkv(qkv, heads=HEADS, groups=TP)
    y = op.flash_attention(q, k, v)                 # heads split over tp: no communication
    return op.reshape(op.permute(y, (0, 2, 1, 3)), (x.shape[0], x.shape[1], -1))


def attention_block(x, Wqkv, Wo):
    """Seed 004 §2.8's transformer block (on one device, or on a mesh)."""
    return op.gemm(heads_output(x, Wqkv), Wo)     # Wo split by rows over tp: a pending sum over tp


@jit
def tp_block(x, Wqkv, Wo):
    """The block on the mesh: the pending sum over tp reduce-scattered over the sequence."""
    return dist.collective.reduce_scatter(attention_block(x, Wqkv, Wo), axis="tp", dim=1)


def _weights(mesh, policy, batch, seq, width, seeds=(0, 1, 2)):
    """``x`` split over dp by batch, ``Wqkv`` by columns and ``Wo`` by rows over tp, from the
    seeded RNG (the same global bits on any mesh)."""
    S = dist.ShardSpec
    specs = {"x": ((batch, seq, width), S(("batch",), ("dp",))),
             "Wqkv": ((width, 3 * width), S(("col",), ("tp",))),
             "Wo": ((width, width), S(("row",), ("tp",)))}
    return [dist.tensor(shape, spec, mesh, dtype=policy, init="randn", seed=seed, name=name)
            for seed, (name, (shape, spec)) in zip(seeds, specs.items())]


def _difference(a: np.ndarray, b: np.ndarray) -> str:
    """How far ``a`` is from ``b``: how many elements' bits differ, and the largest difference
    relative to the largest magnitude."""
    differ = np.count_nonzero(a.view(np.uint32) != b.view(np.uint32))
    if not differ:
        return "bit-identical to one device"
    rel = float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))
    return f"{differ} of {a.size} elements differ from one device, by at most {rel:.1e} of the largest |value|"


def _global(tensors, policy) -> tuple:
    """The global values of ``tensors``, in ``policy``, for one device."""
    return tuple(op.cast(t.numpy(), policy) for t in tensors)


def _one_device(fn, tensors, policy):
    """``fn`` on one device, on the global values of ``tensors``."""
    with sim.paused():
        return np.asarray(fn(*_global(tensors, policy)))


def loss_gradients(x):
    """``grad`` of the training loss ``mean(block(x)²)`` with respect to ``Wqkv`` and ``Wo``;
    ``attention_block`` on one device, ``tp_block`` on the mesh."""
    def loss(Wqkv, Wo):
        block = tp_block if isinstance(x, dist.DistTensor) else attention_block
        return op.mean(block(x, Wqkv, Wo) ** 2.0)
    return grad(loss, argnums=(0, 1))


def _gradient_bits(tensors, policy) -> str:
    """The mesh gradients of the block on ``tensors`` against one device's."""
    x, Wqkv, Wo = tensors
    on_mesh = loss_gradients(x)(Wqkv, Wo)
    gx, *weights = _global(tensors, policy)
    single = loss_gradients(gx)(*weights)
    return "; ".join(f"{name}: {_difference(g.numpy(), np.asarray(s))}"
                     for name, g, s in zip(("gWqkv", "gWo"), on_mesh, single))


def _collectives(machine) -> list:
    """One line per collective call recorded on ``machine``: kind, axis, groups, bytes, time."""
    calls = {}
    for e in machine.timeline.events:
        if e.stream == "comm":
            calls.setdefault(e.args["call"], []).append(e)
    lines = []
    for events in calls.values():
        a = events[0].args
        groups = len({e.args["group"] for e in events})
        lines.append(f"   {e.name:<22} {groups} groups of {len(events) // groups} devices, {a['bytes']:,} B per "
                     f"device ({a['algorithm']}, {a['tier']}), {events[0].duration * 1e6:.1f} us   at {a['location']}")
    return lines


def main(trace: str | None = None, record: dict | None = None) -> int:
    """Run the demo; ``trace``: also write the simulated timeline there (a Chrome trace);
    ``record``: a dict that receives the results as data (``tessera-ref demo --json``)."""
    clock = _Clock()
    machine = sim.machine("GB200-NVL72", devices=72)
    batch, seq, width = 4, 288, HEADS * 64
    with sim.use(machine):
        mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
        print(f"1. {mesh} on a simulated {machine.preset.name}\n", flush=True)

        x, Wqkv, Wo = _weights(mesh, "f32", batch, seq, width)
        print(f"2. seed 004's transformer block, {HEADS} heads of 64, batch {batch} x sequence {seq} x width "
              f"{width}, traced once (layouts in the types, collectives as ops). As the seed writes it, except:\n"
              f"   gemm(h, Wqkv), not gemm(x, Wqkv), which leaves h = rmsnorm_safe(x) dead; the heads merged back\n"
              f"   to [B, S, E] before gemm(y, Wo); {HEADS} heads, as the seed's 16 do not divide tp={TP}.\n",
              flush=True)
        out = tp_block(x, Wqkv, Wo)
        print(tp_block.inspect_ir("graph"), "\n")
        print(f"   each device holds {x.nbytes_per_device:,} B of x, {Wqkv.nbytes_per_device:,} B of Wqkv, "
              f"{Wo.nbytes_per_device:,} B of Wo; the output is {out.type}")
        print(clock.lap())

    print("3. the collectives of the step on the simulated machine:")
    print("\n".join(_collectives(machine)))
    print(f"   estimated step time on {machine.preset.name}: {machine.step_time * 1e6:.1f} us")
    print(f"   with communication under independent compute (SIM-TL-6): {machine.overlapped_step_time * 1e6:.1f} us\n")

    print("4. the bits against the same block on one device:", flush=True)
    with sim.paused():
        same = np.array_equal(dist.all_gather(heads_output(x, Wqkv), axis="tp").numpy().view(np.uint32),
                              _one_device(heads_output, (x, Wqkv), "f32").view(np.uint32))
        print(f"   rmsnorm, gemm(Wqkv), split_qkv, flash_attention: {'bit-identical' if same else 'DIFFERENT'}")
        result = out.numpy()
        print(f"   the block (gemm(Wo) sums over tp=9 devices' heads, then folds them in rank order): "
              f"{_difference(result, _one_device(attention_block, (x, Wqkv, Wo), 'f32'))}")
        small_blocks = {name: (policy, _weights(mesh, policy, 4, 18, HEADS * 4, seeds=(3, 4, 5)))
                        for name, policy in (("canonical order", "f32"),
                                             ("reduction='exact'", Policy("f32", reduction="exact")))}
        for name, (policy, small) in small_blocks.items():
            print(f"   a 4 x 18 x 72 block, {name}: "
                  f"{_difference(tp_block(*small).numpy(), _one_device(attention_block, small, policy))}")
        digest = hashlib.sha256(np.ascontiguousarray(result).tobytes()).hexdigest()
        print(f"   SHA-256 of the output ({result.dtype}, {result.shape}): {digest}")
    print(clock.lap())

    print("5. the backward pass: grad(mean(block(x)**2)) with respect to Wqkv and Wo, on the mesh", flush=True)
    with sim.use(machine):
        step = loss_gradients(x)
        gWqkv, gWo = step(Wqkv, Wo)
    plan = autodiff.communication_plan(step)
    print("   " + plan.replace("\n", "\n   "))
    print(f"   gWqkv {gWqkv.type}, gWo {gWo.type}: the weights' layouts")
    with sim.paused():
        for name, (policy, small) in small_blocks.items():
            print(f"   a 4 x 18 x 72 block, {name}: {_gradient_bits(small, policy)}")
        print(clock.lap())
        big_mesh = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))
        W = dist.tensor(shape=(1_000_000, 1_000_000),
                        layout=dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp")),
                        mesh=big_mesh, dtype="bf16")
    print(f"6. seed 002's weight on {big_mesh}: {W.type}, {W.nbytes / 1e12:.1f} TB, "
          f"{W.nbytes_per_device / 1e9:.0f} GB per device (split 8 ways, replicated over dp=9)")
    with sim.use(sim.machine("GB200-NVL72", devices=72)):
        try:
            dist.tensor(shape=W.shape, layout=W.layout, mesh=big_mesh, dtype="bf16", name="W (seed 002)")
        except OutOfMemoryError as error:
            print(f"   the simulated machine: {error.what}\n")

    print("7. the simulated machine's report of what ran on it: the forward pass of 2. and the training step "
          "of 5. (forward and backward):\n")
    print(machine.report())
    if record is not None:
        record.update(output={"dtype": str(result.dtype), "shape": list(result.shape), "sha256": digest},
                      machine=machine.summary().as_dict(), communication_plan=plan.as_dict())
    if trace:
        path = os.path.abspath(trace)
        machine.save_trace(path)
        print(f"\ntimeline written to {path} (open it in ui.perfetto.dev)")
    else:
        print("\n(tessera-ref demo --trace OUT.json also writes the timeline, for ui.perfetto.dev)")
    return 0
