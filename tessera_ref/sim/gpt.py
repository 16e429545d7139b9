"""An abstract GPT training iteration against Megatron-LM's published throughput (SIM-GPT-1 … SIM-GPT-3).

A GPT model (embedding, ``l`` transformer layers of hidden size ``h``, the logits and the loss;
sequence 2048, vocabulary 51,200) trained with tensor (``t``), pipeline (``p``) and data
(``d``) parallelism, as Narayanan et al. ran it on Selene's DGX A100 nodes ("Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC'21). Nothing carries
data: each op of a layer is a cost ``(FLOPs, bytes)`` per device, timed by the roofline of the
preset with its achievable fractions (SIM-ROOF-3); the tensor-parallel all-reduces, pipeline
transfers and data-parallel gradient all-reduce by the alpha-beta model (SIM-COLL-2); the
micro-batches by the pipeline schedule of :mod:`tessera_ref.sim.pipeline` (SIM-PP-2).

``python -m tessera_ref.sim.gpt`` prints predicted against published TFLOP/s per GPU for every
configuration of the paper's Table 1 and the PTD-P rows of its Table 2.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..errors import SimError
from .collectives import collective_cost
from .pipeline import order, timing
from .presets import get_preset
from .roofline import roofline

__all__ = ["GPTConfig", "Iteration", "PUBLISHED", "model_flops", "iteration", "main"]

BF16 = 2  # bytes of an activation or weight
ADAM_BYTES = 30  # per parameter: read fp32 param, grad, m, v (16 B), write param, m, v (12 B) and the bf16 copy (2 B)


@dataclass(frozen=True)
class GPTConfig:
    """One training configuration: the model (``layers``, ``hidden``, ``heads``, ``seq``,
    ``vocab``), the parallelism (``t``, ``p``, ``gpus``), the global ``batch`` and the
    ``microbatch`` size, the pipeline ``schedule`` (``v`` model chunks per device when
    interleaved), activation ``recompute``, and the ``published`` TFLOP/s per GPU, if any."""

    name: str
    layers: int
    hidden: int
    heads: int
    t: int
    p: int
    gpus: int
    batch: int
    published: float | None = None
    source: str = ""
    microbatch: int = 1
    seq: int = 2048
    vocab: int = 51200
    schedule: str = "1f1b"
    v: int = 1
    recompute: bool = True

    @property
    def d(self) -> int:
        return self.gpus // (self.t * self.p)

    @property
    def m(self) -> int:
        """Micro-batches per pipeline per iteration."""
        return self.batch // (self.d * self.microbatch)

    def check(self) -> None:
        if self.gpus % (self.t * self.p) or self.batch % (self.d * self.microbatch):
            raise SimError(f"{self.name}: {self.gpus} GPUs, t={self.t}, p={self.p}, batch {self.batch} and "
                           f"micro-batch {self.microbatch} do not divide evenly",
                           fix="pick gpus a multiple of t·p and a batch a multiple of d·microbatch")
        if self.layers % (self.p * self.v) or self.heads % self.t:
            raise SimError(f"{self.name}: {self.layers} layers over p·v = {self.p * self.v} chunks, or {self.heads} "
                           f"heads over t = {self.t}, do not divide", fix="pick p, v and t that divide them")


_T1 = "Narayanan et al. 2021, Table 1"
_T2 = "Narayanan et al. 2021, Table 2 (PTD-P)"
#: The published configurations and their measured TFLOP/s per GPU (A100 80GB, Selene).
PUBLISHED = (
    GPTConfig("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, _T1),
    GPTConfig("3.6B", 30, 3072, 32, 2, 1, 64, 512, 138, _T1),
    GPTConfig("7.5B", 36, 4096, 32, 4, 1, 128, 512, 142, _T1),
    GPTConfig("18.4B", 40, 6144, 48, 8, 1, 256, 1024, 135, _T1),
    GPTConfig("39.1B", 48, 8192, 64, 8, 2, 512, 1536, 138, _T1),
    GPTConfig("76.1B", 60, 10240, 80, 8, 4, 1024, 1792, 140, _T1),
    GPTConfig("145.6B", 80, 12288, 96, 8, 8, 1536, 2304, 148, _T1),
    GPTConfig("310.1B", 96, 16384, 128, 8, 16, 1920, 2160, 155, _T1),
    GPTConfig("529.6B", 105, 20480, 128, 8, 35, 2520, 2520, 163, _T1),
    GPTConfig("1008.0B", 128, 25600, 160, 8, 64, 3072, 3072, 163, _T1),
    GPTConfig("174.6B", 96, 12288, 96, 8, 12, 384, 1536, 153, _T2),
    GPTConfig("174.6B", 96, 12288, 96, 8, 12, 768, 1536, 149, _T2),
    GPTConfig("174.6B", 96, 12288, 96, 8, 12, 1536, 1536, 141, _T2),
)


def model_flops(c: GPTConfig) -> float:
    """FLOPs of one iteration as the paper counts them (its eq. 3; GEMMs only):
    ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))`` with activation recomputation — the layers' forward
    counted twice — and ``72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·h·V`` without."""
    h, s = c.hidden, c.seq
    return (96 if c.recompute else 72) * c.batch * s * c.layers * h * h * (1 + s / (6 * h)) + 6 * c.batch * s * h * c.vocab


class Op(NamedTuple):
    """One kernel per device: ``name`` (a tensor-core op is ``matmul``), FLOPs and HBM bytes."""

    name: str
    flops: float
    bytes: float


def layer_ops(c: GPTConfig) -> list:
    """One transformer layer's forward kernels on one device of a tensor-parallel group, for one
    micro-batch (Megatron's layout: QKV and fc1 split by columns, proj and fc2 by rows; the
    layer norms, dropouts and residuals on the full hidden size)."""
    b, s, h, t, a = c.microbatch, c.seq, c.hidden, c.t, c.heads
    sbh = s * b * h
    probs = b * (a // t) * s * s  # attention scores of this device's heads
    norm = Op("layernorm", 8 * sbh, 2 * sbh * BF16)
    residual = Op("bias_dropout_add", 3 * sbh, 3 * sbh * BF16 + sbh)  # reads x and the residual, writes x; 1-byte mask
    return [
        norm,
        Op("matmul", 2 * sbh * 3 * h / t, (sbh + 3 * h * h / t + 3 * sbh / t) * BF16),  # QKV
        Op("matmul", 2 * b * s * s * h / t, (2 * sbh / t + probs) * BF16),  # Q·Kᵀ
        Op("softmax", 5 * probs, 2 * probs * BF16),  # scale, mask, softmax (fused)
        Op("dropout", probs, 2 * probs * BF16 + probs),
        Op("matmul", 2 * b * s * s * h / t, (probs + 2 * sbh / t) * BF16),  # probabilities·V
        Op("matmul", 2 * sbh * h / t, (sbh / t + h * h / t + sbh) * BF16),  # proj
        residual,
        norm,
        Op("matmul", 2 * sbh * 4 * h / t, (sbh + 4 * h * h / t + 4 * sbh / t) * BF16),  # fc1
        Op("gelu", 8 * sbh / t, 2 * 4 * sbh / t * BF16),
        Op("matmul", 2 * sbh * 4 * h / t, (4 * sbh / t + 4 * h * h / t + sbh) * BF16),  # fc2
        residual,
    ]


def backward_ops(ops: list) -> list:
    """The backward of forward kernels: each GEMM becomes two of its size (input and weight
    gradients); every other kernel reads its saved input and the output gradient and writes the
    input gradient, 1.5 times its forward bytes."""
    out = []
    for o in ops:
        out += [o, o] if o.name == "matmul" else [Op(o.name, 2 * o.flops, 1.5 * o.bytes)]
    return out


class Iteration(NamedTuple):
    """A simulated iteration: its time (s), predicted TFLOP/s per GPU, and where the time of the
    busiest pipeline stage goes (s): GEMMs, other kernels, tensor-parallel all-reduces, the
    pipeline bubble and transfers, the data-parallel gradient all-reduce, the optimizer."""

    config: GPTConfig
    time: float
    tflops: float
    gemm: float
    other: float
    tp_comm: float
    bubble: float
    dp_comm: float
    optimizer: float


def _compute(ops: list, preset) -> tuple:
    """``(GEMM time, other time)`` of kernels run one after another."""
    times = [(o.name == "matmul", roofline((o.flops, o.bytes), "bf16", preset, 0.0, o.name).time) for o in ops]
    return sum(x for g, x in times if g), sum(x for g, x in times if not g)


def iteration(c: GPTConfig, preset="A100") -> Iteration:
    """Simulate one iteration of ``c`` on ``preset`` (SIM-GPT-2)."""
    c.check()
    preset = get_preset(preset)
    b, s, h, t = c.microbatch, c.seq, c.hidden, c.t
    sbh = s * b * h
    node = preset.devices_per_domain
    tp_group = tuple(range(t))  # tensor parallelism inside a node (Megatron's rank order: t, then d, then p)
    allreduce = collective_cost("all_reduce", tp_group, sbh * BF16, preset, "ring" if t > 1 else None).time
    # ring, as NCCL runs Megatron's tensor-parallel all-reduces (the cheapest model would take tree for t = 2)
    fwd_ops, bwd_ops = layer_ops(c), backward_ops(layer_ops(c))
    (fg, fo), (bg, bo) = _compute(fwd_ops, preset), _compute(bwd_ops, preset)
    layer_f = (fg, fo, 2 * allreduce)  # the f and g all-reduces of attention and MLP
    layer_b = (bg + (fg if c.recompute else 0), bo + (fo if c.recompute else 0),
               2 * allreduce + (2 * allreduce if c.recompute else 0))
    embed_f = (0.0, roofline((0, 2 * sbh * BF16), "bf16", preset).time, allreduce)  # vocab-parallel lookup
    logits = [Op("matmul", 2 * sbh * c.vocab / t, (sbh + c.vocab * h / t + s * b * c.vocab / t) * BF16),
              Op("cross_entropy", 6 * s * b * c.vocab / t, 3 * s * b * c.vocab / t * BF16)]
    head_f = _compute(logits, preset) + (0.0,)
    head_b = _compute(backward_ops(logits), preset) + (0.0,)
    chunks = c.p * c.v
    per_chunk = c.layers // chunks

    def parts(chunk: int, kind: str) -> tuple:
        layer = layer_f if kind == "F" else layer_b
        out = [per_chunk * x for x in layer]
        extras = ([embed_f] if chunk == 0 and kind == "F" else []) + \
                 ([head_f if kind == "F" else head_b] if chunk == chunks - 1 else [])
        for e in extras:
            out = [x + y for x, y in zip(out, e)]
        return tuple(out)

    stride = t * c.d  # ranks between neighbouring stages
    hop = collective_cost("send", (0, stride), sbh * BF16 // t, preset).time if c.p > 1 else 0.0
    gather = collective_cost("all_gather", tp_group, sbh * BF16, preset, "ring").time if t > 1 and c.p > 1 else 0.0
    placed = timing(order(c.schedule, c.p, c.m, c.v), lambda d, a: sum(parts(a.chunk, a.kind)),
                    lambda a: hop + gather)  # Megatron's scatter/gather: 1/t of the activation per NIC
    pipeline_end = max(x.end for x in placed)
    split = [[0.0, 0.0, 0.0] for _ in range(c.p)]  # per device: GEMM, other, tensor-parallel time
    for x in placed:
        for i, v in enumerate(parts(x.action.chunk, x.action.kind)):
            split[x.device][i] += v
    worst = max(range(c.p), key=lambda d: sum(split[d]))
    gemm, other, tp_comm = split[worst]
    # parameters of the stage with the embedding (stage 0; the last stage holds the tied copy)
    params = (c.layers // c.p * (12 * h * h + 13 * h) + c.vocab * h + s * h) / t
    dp = _dp_allreduce(c, params * 4, preset, node)  # fp32 gradients
    tied = collective_cost("all_reduce", (0, (c.p - 1) * stride), int(c.vocab * h / t * 4), preset).time \
        if c.p > 1 else 0.0
    optimizer = roofline((0, params * ADAM_BYTES), "f32", preset, 0.0, "adam").time
    time = pipeline_end + tied + dp + optimizer
    return Iteration(c, time, model_flops(c) / time / c.gpus / 1e12, gemm, other, tp_comm,
                     max(0.0, pipeline_end - (gemm + other + tp_comm)), dp + tied, optimizer)


def _dp_allreduce(c: GPTConfig, nbytes: float, preset, node: int) -> float:
    """The data-parallel all-reduce of each device's gradients: ranks of one node first reduce-
    scatter over NVLink, then each all-reduces its share with its peers of the other nodes over
    its own NIC, then the node all-gathers (NCCL's hierarchical ring); one ring when the
    data-parallel peers are all in different nodes."""
    if c.d == 1:
        return 0.0
    stride = c.t * c.p
    local = max(1, min(c.d, node // stride)) if stride < node else 1  # dp peers in one node
    nodes = c.d // local
    n = int(nbytes)
    time = 0.0
    if local > 1:
        inside = tuple(range(0, local * stride, stride))
        time += collective_cost("reduce_scatter", inside, n, preset, "ring").time
        time += collective_cost("all_gather", inside, n, preset, "ring").time
    if nodes > 1:
        across = tuple(range(0, nodes * node, node))
        time += collective_cost("all_reduce", across, n // local, preset, "ring").time
    return time


def main(argv=None) -> int:
    """Print predicted against published TFLOP/s per GPU (``python -m tessera_ref.sim.gpt``)."""
    parser = argparse.ArgumentParser(prog="python -m tessera_ref.sim.gpt", description=__doc__.split("\n")[0])
    parser.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved"])
    parser.add_argument("--virtual-stages", type=int, default=2, help="model chunks per device when interleaved")
    parser.add_argument("--no-recompute", action="store_true", help="keep activations instead of recomputing them")
    parser.add_argument("--microbatch", type=int, default=1)
    parser.add_argument("--preset", default="A100")
    args = parser.parse_args(argv)
    preset = get_preset(args.preset)
    print(f"GPT training iterations on simulated {preset.name} ({preset.gpu}), schedule {args.schedule}"
          + (f" (v={args.virtual_stages})" if args.schedule == "interleaved" else "")
          + f", micro-batch {args.microbatch}, activation recomputation {'off' if args.no_recompute else 'on'}")
    print("time shares of the busiest stage; TFLOP/s per GPU by the paper's FLOP count (eq. 3)\n")
    head = (f"{'model':>8} {'t':>2} {'p':>3} {'d':>4} {'GPUs':>5} {'batch':>5} {'m':>5} | {'GEMM':>5} {'other':>5} "
            f"{'TP':>5} {'bubble':>6} {'DP':>5} {'opt':>4} | {'iter s':>7} {'predicted':>9} {'published':>9} {'ratio':>5}")
    print(head)
    print("-" * len(head))
    for c in PUBLISHED:
        c = replace(c, schedule=args.schedule, v=args.virtual_stages if args.schedule == "interleaved" else 1,
                    recompute=not args.no_recompute, microbatch=args.microbatch)
        try:
            c.check()
        except SimError:
            print(f"{c.name:>8} {c.t:>2} {c.p:>3} {c.d:>4} {c.gpus:>5} {c.batch:>5}   (does not divide: skipped)")
            continue
        it = iteration(c, preset)
        shares = [x / it.time * 100 for x in (it.gemm, it.other, it.tp_comm, it.bubble, it.dp_comm, it.optimizer)]
        print(f"{c.name:>8} {c.t:>2} {c.p:>3} {c.d:>4} {c.gpus:>5} {c.batch:>5} {c.m:>5} | "
              + " ".join(f"{x:>{w}.1f}" for x, w in zip(shares, (5, 5, 5, 6, 5, 4)))
              + f" | {it.time:>7.2f} {it.tflops:>9.1f} {c.published:>9.0f} {it.tflops / c.published:>5.2f}")
    print("\n(shares in % of the iteration; 'bubble' includes the pipeline transfers; published: "
          "Narayanan et al., SC'21, Tables 1 and 2, measured on Selene)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
