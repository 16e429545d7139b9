"""Train the byte-level Llama of model.py on the project's own specification.

    python examples/llama/train.py                                # the small config, ~3 minutes
    python examples/llama/train.py --config tiny --steps 50 --mesh 2,2 --plot loss.png
    python examples/llama/train.py --ckpt-dir ckpt --ckpt-every 50 ...   # then again with --resume
    tessera-ref launch -n 2 examples/llama/train.py --mesh 2,2 --exact

The corpus is ``docs/spec/*.md`` (sorted, concatenated) as bytes; its last 10% is held out
for evaluation. Each step is one ``jit`` function: the loss and its gradient, clipping to a
global norm of 1 and AdamW with a warmup-cosine schedule. A batch is drawn from the step
number alone, so a resumed run sees the batches the uninterrupted one would. ``--exact``
computes every sum exactly and rounds it once (``reduction="exact"``, slower): the losses
and parameters then have the same bits on every mesh and process count.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import tessera_ref as tr  # noqa: E402
from tessera_ref import backends, checkpoint, dist, optim, sim  # noqa: E402
from tessera_ref.dist.world import placement  # noqa: E402
from tessera_ref.errors import CheckpointError, TesseraError, UsageError  # noqa: E402
from tessera_ref.numerics import Policy  # noqa: E402

from model import (BATCH, CONFIGS, Config, check_mesh, init_params, layout, loss_fn, n_params,  # noqa: E402
                   param_shapes, place)

STEPS = {"tiny": 300, "small": 600, "medium": 1000}
LR = {"tiny": 1e-2, "small": 3e-3, "medium": 2e-3}
EVAL_FRACTION = 0.1


# -- data -------------------------------------------------------------------------------------
def load_corpus(root: str = ROOT) -> np.ndarray:
    """``docs/spec/*.md`` under ``root``, sorted by name and concatenated, as uint8 bytes."""
    files = sorted(glob.glob(os.path.join(root, "docs", "spec", "*.md")))
    if not files:
        raise UsageError(f"no corpus: {os.path.join(root, 'docs', 'spec')} holds no *.md files",
                         fix="run from a checkout of the repository (the corpus ships in docs/spec/)")
    return np.frombuffer(b"".join(open(f, "rb").read() for f in files), np.uint8)


def split(data: np.ndarray) -> tuple:
    """(train, held-out tail)."""
    cut = int(len(data) * (1 - EVAL_FRACTION))
    return data[:cut], data[cut:]


def unigram_entropy(data: np.ndarray) -> float:
    """The entropy in nats of the bytes' frequencies: the loss of the best model that ignores context."""
    p = np.bincount(data, minlength=256) / len(data)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def batch(data: np.ndarray, cfg: Config, step: int, seed: int = 0) -> tuple:
    """Step ``step``'s int32 (ids, labels), ``[batch, seq]``: windows at offsets drawn from
    ``(seed, step)`` alone; labels are the next bytes."""
    starts = np.random.default_rng([seed, step]).integers(0, len(data) - cfg.seq - 1, cfg.batch)
    windows = np.stack([data[s:s + cfg.seq + 1] for s in starts]).astype(np.int32)
    return windows[:, :-1].copy(), windows[:, 1:].copy()


def eval_batches(held: np.ndarray, cfg: Config, n: int = 4) -> list:
    """Up to ``n`` batches of consecutive windows from the start of the held-out tail."""
    span = cfg.batch * cfg.seq
    out = []
    for b in range(min(n, (len(held) - 1) // span)):
        w = held[b * span:(b + 1) * span + 1].astype(np.int32)
        out.append((w[:-1].reshape(cfg.batch, cfg.seq).copy(), w[1:].reshape(cfg.batch, cfg.seq).copy()))
    return out


# -- the run ----------------------------------------------------------------------------------
def parse_mesh(text: str) -> tuple:
    try:
        dp, tp = (int(v) for v in text.split(","))
        if dp < 1 or tp < 1:
            raise ValueError
    except ValueError:
        raise UsageError(f"--mesh {text!r} is not two positive integers dp,tp",
                         fix="write e.g. --mesh 2,2 (dp=2 data-parallel x tp=2 tensor-parallel) or --mesh 1,1"
                         ) from None
    return dp, tp


class Run:
    """A model, its optimizer, the jitted step and where the tensors live (a ``dp × tp`` mesh,
    or plain arrays on one device for ``1,1``)."""

    def __init__(self, cfg: Config, dp: int = 1, tp: int = 1, *, steps: int, lr: float, exact: bool = False,
                 seed: int = 0):
        check_mesh(cfg, dp, tp)
        self.cfg, self.dp, self.tp = cfg, dp, tp
        self.policy = Policy("f32", reduction="exact") if exact else None
        self.mesh = dist.Mesh(("dp", "tp"), range(dp * tp), (dp, tp)) if dp * tp > 1 else None
        if steps < 1:
            raise UsageError(f"--steps {steps}: a run takes at least one step", fix="pass --steps 1 or more")
        self.schedule = optim.warmup_cosine(lr, warmup_steps=max(1, steps // 20) if steps > 1 else 0,
                                            total_steps=steps)
        self.opt = optim.chain(optim.clip_by_global_norm(1.0),
                               optim.adamw(self.schedule, b1=0.9, b2=0.95, weight_decay=0.1))
        loss = loss_fn(cfg, self.policy)
        opt = self.opt

        @tr.jit
        def step(params, state, ids, labels):
            value, grads = tr.value_and_grad(loss)(params, ids, labels)
            params, state = opt.update(grads, state, params)
            return value, params, state
        self.step, self.loss = step, tr.jit(loss)
        self.params = self.put_params(init_params(cfg, seed))
        self.state = self.opt.init(self.params)
        self.done = 0

    def put_params(self, params: dict) -> dict:
        if self.mesh is not None:
            return place(params, self.cfg, self.mesh, self.policy)
        return {k: tr.asarray(v, policy=self.policy) if self.policy else v for k, v in params.items()}

    def put_batch(self, ids, labels) -> tuple:
        if self.mesh is None:
            return ids, labels
        return tuple(dist.tensor(a.shape, BATCH, self.mesh, data=a) for a in (ids, labels))

    def train_step(self, ids, labels) -> float:
        """One step on this batch; its loss (before the update)."""
        loss, self.params, self.state = self.step(self.params, self.state, *self.put_batch(ids, labels))
        self.done += 1
        return loss

    def eval_loss(self, batches) -> float:
        return float(np.mean([float(self.loss(self.params, *self.put_batch(*b))) for b in batches]))

    def simulated_step_time(self, preset: str) -> float:
        """Seconds one step takes on ``preset`` GPUs (dp × tp of them): the same jitted step on
        abstract tensors of the same types under ``sim.use``."""
        machine = sim.machine(preset, devices=self.dp * self.tp, overlap=True)
        mesh = self.mesh or dist.Mesh(("dp", "tp"), range(1), (1, 1))
        with sim.use(machine):
            params = {k: dist.tensor(shape, layout(split), mesh, self.policy)
                      for k, (shape, split) in param_shapes(self.cfg).items()}
            ids = dist.tensor((self.cfg.batch, self.cfg.seq), BATCH, mesh, "i32")
            self.step(params, self.opt.init(params), ids, ids)
        return machine.overlapped_step_time

    # checkpoints: {"params", "opt"} and the step
    def save(self, directory: str) -> str:
        os.makedirs(directory, exist_ok=True)
        return checkpoint.save(os.path.join(directory, f"step-{self.done:06d}"),
                               {"params": self.params, "opt": self.state}, step=self.done)

    def restore(self, directory: str) -> str:
        path = latest_checkpoint(directory)
        try:
            tree = checkpoint.restore(path, like={"params": self.params, "opt": self.state}, mesh=self.mesh)
        except CheckpointError as e:
            raise UsageError(f"cannot resume from {path}: {e.what}",
                             fix="resume with the --config the run was saved with, or start a new --ckpt-dir") from None
        self.params, self.state, self.done = tree["params"], tree["opt"], checkpoint.info(path).step
        return path

    def digest(self) -> str:
        """SHA-256 of the parameters' bits (sorted by name)."""
        h = hashlib.sha256()
        for k in sorted(self.params):
            v = self.params[k]
            h.update(k.encode() + (v.numpy() if hasattr(v, "numpy") else np.asarray(v)).tobytes())
        return h.hexdigest()


def latest_checkpoint(directory: str) -> str:
    steps = sorted(d for d in (os.listdir(directory) if os.path.isdir(directory) else ()) if d.startswith("step-"))
    if not steps:
        raise UsageError(f"--resume: {directory!r} holds no checkpoint (step-* directories)",
                         fix="pass the --ckpt-dir of an earlier run, or drop --resume")
    return os.path.join(directory, steps[-1])


def plot(path: str, curve: list, evals: list, entropy: float) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "(--plot needs matplotlib: pip install -e '.[plot]'; no plot written)"
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(*zip(*curve), lw=1, label="train loss")
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval loss (held-out tail)")
    ax.axhline(entropy, color="gray", ls="--", label=f"unigram entropy {entropy:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("nats per byte")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return f"loss curve written to {path}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="small")
    ap.add_argument("--steps", type=int, help="steps in all (default: 300 tiny, 600 small, 1000 medium)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: 1e-2 tiny, 3e-3 small, 2e-3 medium)")
    ap.add_argument("--mesh", default="1,1", help="dp,tp (default 1,1: one device)")
    ap.add_argument("--backend", default="interp", help="the backend that runs the step (default interp)")
    ap.add_argument("--exact", action="store_true", help='reduction="exact": the same bits on every mesh')
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ckpt-dir", help="where checkpoints go (step-NNNNNN directories)")
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --ckpt-dir")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--preset", default="H100", help="the simulated GPU of the progress lines (default H100)")
    ap.add_argument("--plot", help="write the loss curve to this PNG (the plot extra)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines; the summary only")
    ap.add_argument("--digest", action="store_true", help="print each loss's bits and the parameters' SHA-256")
    args = ap.parse_args(argv)
    try:
        return train(args)
    except TesseraError as e:
        print(f"error: {e.what}" + (f". Fix: {e.fix}" if e.fix else ""), file=sys.stderr)
        return 2


def train(args) -> int:
    cfg = CONFIGS[args.config]
    steps = args.steps if args.steps is not None else STEPS[args.config]
    dp, tp = parse_mesh(args.mesh)
    if args.resume and not args.ckpt_dir:
        raise UsageError("--resume needs --ckpt-dir", fix="pass the --ckpt-dir the run saved to")
    if args.backend not in backends.available():
        raise UsageError(f"--backend {args.backend!r} is not one of the available backends {backends.available()}",
                         fix="run tessera-ref backends to list them")
    data = load_corpus()
    train_data, held = split(data)
    entropy = unigram_entropy(data)
    evals_batches = eval_batches(held, cfg)
    with backends.use(args.backend):
        run = Run(cfg, dp, tp, steps=steps, lr=args.lr or LR[args.config], exact=args.exact, seed=args.seed)
        rank0 = run.mesh is None or placement(run.mesh).rank == 0
        say = print if rank0 else (lambda *a, **k: None)
        if args.resume:
            say(f"resumed from {run.restore(args.ckpt_dir)}")
        simulated = run.simulated_step_time(args.preset)
        say(f"corpus: {len(data):,} bytes of docs/spec/*.md ({len(held):,} held out); unigram entropy "
            f"{entropy:.4f} nats")
        say(f"model: {args.config} {n_params(cfg):,} parameters (dim {cfg.dim}, {cfg.layers} layers, {cfg.heads} "
            f"heads / {cfg.kv_heads} kv, ffn {cfg.ffn}), batch {cfg.batch} x {cfg.seq} bytes, mesh dp={dp} x "
            f"tp={tp}, backend {args.backend}{', exact sums' if args.exact else ''}")
        curve, evals, bits = [], [], []
        tokens = cfg.batch * cfg.seq
        start = time.perf_counter()
        while run.done < steps:
            t0 = time.perf_counter()
            loss = run.train_step(*batch(train_data, cfg, run.done, args.seed))
            value = float(loss)
            dt = time.perf_counter() - t0
            curve.append((run.done, value))
            bits.append(np.float32(value).view(np.uint32))
            if not args.quiet:
                say(f"step {run.done:4d}/{steps}  loss {value:.4f}  {tokens / dt:7.0f} tok/s  "
                    f"({dt * 1e3:5.0f} ms; simulated {args.preset} x{dp * tp}: {simulated * 1e6:.0f} us)", flush=True)
            if run.done % args.eval_every == 0 or run.done == steps:
                evals.append((run.done, run.eval_loss(evals_batches)))
                say(f"eval at step {run.done}: {evals[-1][1]:.4f} nats (unigram entropy {entropy:.4f})", flush=True)
            if args.ckpt_dir and (run.done % args.ckpt_every == 0 or run.done == steps):
                path = run.save(args.ckpt_dir)
                say(f"checkpoint {path}")
        wall = time.perf_counter() - start
        ran = len(curve)
        final = evals[-1][1] if evals else float("nan")
        say(f"done: {ran} steps in {wall:.1f} s ({ran * tokens / max(wall, 1e-9):.0f} tok/s); eval loss "
            f"{final:.4f} nats vs unigram entropy {entropy:.4f} nats")
        if args.digest:
            digest = run.digest()
            say("loss bits: " + " ".join(f"{b:08x}" for b in bits))
            say(f"params sha256: {digest}")
        if args.plot and rank0:
            say(plot(args.plot, curve, evals, entropy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
