"""A small Llama-style training step on the ``interp`` oracle with ``jit``, against the same
model in PyTorch eager on the CPU (the ``bench`` extra) — issue 26's target: at most 5x.

    python benchmarks/train_bench.py [--repeat 5]

The model: 90,432 parameters (vocab 128, width 64, 2 layers, 4 query heads and 2 key/value
heads of 16 (GQA), SwiGLU of 128, RMSNorm, RoPE), batch 4 x sequence 32, the loss a
cross-entropy on one-hot labels (log-sum-exp written with max, exp, sum and log), AdamW written
op by op (there is no optimizer yet). On tessera_ref the step is one ``jit`` function of the
parameters, the optimizer state and the batch on a dp=2 x tp=2 mesh (Megatron's layout: q/k/v
and the SwiGLU inputs split by columns, the output projections by rows); in PyTorch the same
step on one device in float32. Each row prints the best step time over ``--repeat`` and the
ratio; the script runs with one thread, then with the default thread counts.
"""
from __future__ import annotations

import argparse
import importlib.util

import numpy as np

from timing import best_times, run_in_thread_settings
from tessera_ref import dist, jit, op, value_and_grad

V, E, L, H, KV, D, F = 128, 64, 2, 4, 2, 16, 128
B, S = 4, 32
B1, B2, LR, WD, EPS = 0.9, 0.95, 1e-3, 0.1, 1e-8


def _shapes() -> dict:
    col, row = ("col", "tp"), ("row", "tp")
    shapes = {"emb": ((V, E), None), "out": ((E, V), None), "gf": ((E,), None)}
    for i in range(L):
        shapes.update({f"q{i}": ((E, H * D), col), f"k{i}": ((E, KV * D), col), f"v{i}": ((E, KV * D), col),
                       f"o{i}": ((H * D, E), row), f"w1{i}": ((E, F), col), f"w3{i}": ((E, F), col),
                       f"w2{i}": ((F, E), row), f"g1{i}": ((E,), None), f"g2{i}": ((E,), None)})
    return shapes


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {k: (rng.standard_normal(s) * (1.0 if k.startswith("g") else 0.05)).astype(np.float32)
              for k, (s, _) in _shapes().items()}
    tokens, labels = rng.integers(0, V, (B, S)), rng.integers(0, V, (B, S))
    eye = np.eye(V, dtype=np.float32)
    pos = np.arange(S)[:, None] / (10000 ** (np.arange(D // 2) / (D // 2)))
    return params, eye[tokens], eye[labels], np.cos(pos).astype(np.float32), np.sin(pos).astype(np.float32)


def _tessera_step(cos, sin):
    def rope(t):
        b, h = t.shape[0], t.shape[1]
        t1 = op.slice(t, (0, 0, 0, 0), (b, h, S, D // 2))
        t2 = op.slice(t, (0, 0, 0, D // 2), (b, h, S, D))
        return op.concat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], axis=3)

    def heads(t, n):
        return op.permute(op.reshape(t, (B, S, n, D)), (0, 2, 1, 3))

    def repeat_kv(t):
        return op.reshape(op.broadcast_to(op.reshape(t, (B, KV, 1, S, D)), (B, KV, H // KV, S, D)), (B, H, S, D))

    def loss_fn(p, x, y):
        h = op.matmul(x, p["emb"])
        for i in range(L):
            a = op.rmsnorm_safe(h) * p[f"g1{i}"]
            q = rope(heads(op.matmul(a, p[f"q{i}"]), H))
            k = repeat_kv(rope(heads(op.matmul(a, p[f"k{i}"]), KV)))
            v = repeat_kv(heads(op.matmul(a, p[f"v{i}"]), KV))
            o = op.reshape(op.permute(op.flash_attention(q, k, v, causal=True), (0, 2, 1, 3)), (B, S, H * D))
            h = h + op.matmul(o, p[f"o{i}"])
            a = op.rmsnorm_safe(h) * p[f"g2{i}"]
            h = h + op.matmul(op.silu(op.matmul(a, p[f"w1{i}"])) * op.matmul(a, p[f"w3{i}"]), p[f"w2{i}"])
        logits = op.matmul(op.rmsnorm_safe(h) * p["gf"], p["out"])
        m = op.max(logits, axis=-1, keepdims=True)
        lse = op.log(op.sum(op.exp(logits - m), axis=-1, keepdims=True)) + m
        return op.mean(lse - op.sum(logits * y, axis=-1, keepdims=True))

    @jit
    def step(p, m, v, x, y, c1, c2):
        loss, g = value_and_grad(loss_fn)(p, x, y)
        out_p, out_m, out_v = [], [], []
        for k in sorted(p):
            mk = m[k] * B1 + g[k] * (1 - B1)
            vk = v[k] * B2 + (g[k] * g[k]) * (1 - B2)
            out_p.append(p[k] - ((mk * c1) / (op.sqrt(vk * c2) + EPS) + p[k] * WD) * LR)
            out_m.append(mk)
            out_v.append(vk)
        return [loss] + out_p + out_m + out_v
    return step


def _torch_step(params, x, y, cos, sin):
    import torch
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    m = {k: torch.zeros_like(t) for k, t in p.items()}
    v = {k: torch.zeros_like(t) for k, t in p.items()}
    x, y, cos, sin = map(torch.tensor, (x, y, cos, sin))

    def rms(t):
        return t * torch.rsqrt((t * t).mean(-1, keepdim=True) + 1e-6)

    def rope(t):
        t1, t2 = t[..., :D // 2], t[..., D // 2:]
        return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], dim=3)

    def loss_fn():
        h = x @ p["emb"]
        for i in range(L):
            a = rms(h) * p[f"g1{i}"]
            q = rope((a @ p[f"q{i}"]).view(B, S, H, D).transpose(1, 2))
            k = rope((a @ p[f"k{i}"]).view(B, S, KV, D).transpose(1, 2)).repeat_interleave(H // KV, dim=1)
            vv = (a @ p[f"v{i}"]).view(B, S, KV, D).transpose(1, 2).repeat_interleave(H // KV, dim=1)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, vv, is_causal=True)
            h = h + o.transpose(1, 2).reshape(B, S, H * D) @ p[f"o{i}"]
            a = rms(h) * p[f"g2{i}"]
            h = h + (torch.nn.functional.silu(a @ p[f"w1{i}"]) * (a @ p[f"w3{i}"])) @ p[f"w2{i}"]
        logits = (rms(h) * p["gf"]) @ p["out"]
        return (torch.logsumexp(logits, -1) - (logits * y).sum(-1)).mean()

    def step():
        loss = loss_fn()
        grads = torch.autograd.grad(loss, list(p.values()))
        with torch.no_grad():
            for (k, t), g in zip(p.items(), grads):
                m[k].mul_(B1).add_(g * (1 - B1))
                v[k].mul_(B2).add_(g * g * (1 - B2))
                t.sub_(LR * (m[k] / (v[k].sqrt() + EPS) + WD * t))
        return loss
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    params, x, y, cos, sin = _data()
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    spec = {k: dist.ShardSpec((axis,), ("tp",)) if axis else None for k, (_, axis) in
            ((k, (s, a[0] if a else None)) for k, (s, a) in _shapes().items())}
    state = {"p": {k: dist.tensor(a.shape, spec[k], mesh, data=a) for k, a in params.items()}}
    state["m"] = {k: dist.tensor(a.shape, spec[k], mesh, data=np.zeros_like(a)) for k, a in params.items()}
    state["v"] = {k: dist.tensor(a.shape, spec[k], mesh, data=np.zeros_like(a)) for k, a in params.items()}
    batch = dist.ShardSpec(("batch",), ("dp",))
    xd, yd = dist.tensor(x.shape, batch, mesh, data=x), dist.tensor(y.shape, batch, mesh, data=y)
    step = _tessera_step(cos, sin)
    keys = sorted(params)
    one = np.asarray(np.float32(1.0))

    def tessera():
        out = step(state["p"], state["m"], state["v"], xd, yd, one, one)
        n = len(keys)
        state["p"], state["m"], state["v"] = (dict(zip(keys, out[1 + i * n:1 + (i + 1) * n])) for i in range(3))
        return out[0]

    rows = {"tessera_ref interp, jit (dp=2 x tp=2)": tessera}
    if importlib.util.find_spec("torch") is not None:
        rows["PyTorch eager CPU (one device)"] = _torch_step(params, x, y, cos, sin)
    times = dict(zip(rows, best_times(*rows.values(), repeat=args.repeat)))
    print(f"{sum(a.size for a in params.values()):,} parameters, {len(list(step._last.func.regions[0].entry)):,} "
          f"Graph IR ops per step")
    base = times.get("PyTorch eager CPU (one device)")
    for name, t in times.items():
        print(f"{name:<40} {t * 1e3:8.1f} ms/step" + (f"   {t / base:6.1f}x PyTorch" if base else ""))
    if base is None:
        print("(PyTorch is not installed: pip install -e '.[bench]' for the baseline)")


if __name__ == "__main__":
    run_in_thread_settings(main)
