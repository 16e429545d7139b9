"""The training step of examples/llama on the ``interp`` oracle with ``jit``, against the same
model and optimizer in PyTorch eager on the CPU (the ``bench`` extra) — issue 28's target: at
most 5x.

    python benchmarks/train_bench.py [--config small] [--mesh 1,1] [--repeat 5]

The model is examples/llama/model.py (byte vocabulary, gather embedding, RMSNorm, RoPE,
grouped-query causal flash attention, SwiGLU, cross-entropy on int32 labels); the step is
``train.Run``'s: the loss and its gradient, clipping to a global norm of 1 and AdamW with a
warmup-cosine schedule, one ``jit`` function, on one device or a ``dp × tp`` mesh with
Megatron's layouts. In PyTorch the same weights and batch (examples/llama/torch_reference.py),
``clip_grad_norm_`` and ``torch.optim.AdamW``, float32 on one device. Each row prints the best
step time over ``--repeat`` and the ratio; the script runs with one thread, then with the
default thread counts.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from timing import best_times, run_in_thread_settings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "llama"))

import model  # noqa: E402
import train  # noqa: E402

LR = 3e-3


def _torch_step(cfg, params, ids, labels):
    import torch
    import torch_reference
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch.optim.AdamW(p.values(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    loss_fn = torch_reference.loss_fn(cfg)
    ids, labels = torch.tensor(ids).long(), torch.tensor(labels).long()

    def step():
        opt.zero_grad()
        loss = loss_fn(p, ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(p.values(), 1.0)
        opt.step()
        return loss
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(model.CONFIGS), default="small")
    ap.add_argument("--mesh", default="1,1", help="dp,tp of the tessera_ref step (default 1,1)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cfg = model.CONFIGS[args.config]
    dp, tp = train.parse_mesh(args.mesh)
    ids, labels = train.batch(train.split(train.load_corpus())[0], cfg, 0)
    run = train.Run(cfg, dp, tp, steps=10_000, lr=LR)
    rows = {f"tessera_ref interp, jit (dp={dp} x tp={tp})": lambda: run.train_step(ids, labels)}
    if importlib.util.find_spec("torch") is not None:
        rows["PyTorch eager CPU (one device)"] = _torch_step(cfg, model.init_params(cfg), ids, labels)
    times = dict(zip(rows, best_times(*rows.values(), repeat=args.repeat)))
    print(f"{args.config}: {model.n_params(cfg):,} parameters, batch {cfg.batch} x {cfg.seq}, "
          f"{len(list(run.step._last.func.regions[0].entry)):,} Graph IR ops per step; uptime load "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    base = times.get("PyTorch eager CPU (one device)")
    for name, t in times.items():
        print(f"{name:<40} {t * 1e3:8.1f} ms/step" + (f"   {t / base:6.1f}x PyTorch" if base else ""))
    if base is None:
        print("(PyTorch is not installed: pip install -e '.[bench]' for the baseline)")


if __name__ == "__main__":
    run_in_thread_settings(main)
