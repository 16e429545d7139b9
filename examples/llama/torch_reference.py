"""The model of model.py in PyTorch (float32, its own attention, RoPE, RMSNorm and
cross-entropy): an independent check of the first loss (tests/examples/test_llama.py) and
the baseline of benchmarks/train_bench.py."""
from __future__ import annotations

import torch

from model import Config, rope_tables


def loss_fn(cfg: Config):
    """``loss(params, ids, labels)`` on torch tensors (``params``: name -> float32 tensor)."""
    cos, sin = (torch.tensor(a) for a in rope_tables(cfg))
    b, s, h, kv, hd = cfg.batch, cfg.seq, cfg.heads, cfg.kv_heads, cfg.head_dim

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w

    def rope(x):
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def loss(t, ids, labels):
        x = t["emb"][ids]
        for i in range(cfg.layers):
            a = rms(x, t[f"l{i}.attn_norm"])
            q = rope((a @ t[f"l{i}.q"]).view(b, s, h, hd).transpose(1, 2))
            k = rope((a @ t[f"l{i}.k"]).view(b, s, kv, hd).transpose(1, 2)).repeat_interleave(h // kv, 1)
            v = (a @ t[f"l{i}.v"]).view(b, s, kv, hd).transpose(1, 2).repeat_interleave(h // kv, 1)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + o.transpose(1, 2).reshape(b, s, h * hd) @ t[f"l{i}.o"]
            a = rms(x, t[f"l{i}.ffn_norm"])
            x = x + (torch.nn.functional.silu(a @ t[f"l{i}.w1"]) * (a @ t[f"l{i}.w3"])) @ t[f"l{i}.w2"]
        head = t["emb"].T if cfg.tied else t["head"]
        logits = rms(x, t["norm"]) @ head
        return torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), labels.reshape(-1))
    return loss
