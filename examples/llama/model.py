"""A byte-level Llama-style decoder written with tessera_ref's public API.

Token embedding by gather (``E[ids]``), RMSNorm, rotary position embeddings, grouped-query
causal attention (``op.flash_attention``), SwiGLU, an untied or tied output head and
``op.cross_entropy`` on int32 labels. On a ``dp × tp`` mesh the parameters take Megatron's
layouts: the embedding and the head split over the vocabulary, q/k/v and the SwiGLU inputs by
columns (whole heads per device), the attention output and SwiGLU output projections by rows;
the batch is split over ``dp``.

    cfg = CONFIGS["tiny"]
    params = init_params(cfg, seed=0)                      # NumPy arrays
    params = place(params, cfg, mesh, policy)              # DistTensors on a dp x tp mesh
    loss = loss_fn(cfg)(params, ids, labels)               # ids, labels: int32 [batch, seq]
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tessera_ref import asarray, dist, op
from tessera_ref.errors import UsageError

VOCAB = 256  # bytes


@dataclass(frozen=True)
class Config:
    """The model's shape and the batch one step trains on."""
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    seq: int
    batch: int
    tied: bool = False
    vocab: int = VOCAB

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def with_(self, **changes) -> "Config":
        return replace(self, **changes)


CONFIGS = {
    # The smallest model the tests train (2 query heads per kv head, 2 kv heads: divides tp=2).
    "tiny": Config(dim=32, layers=1, heads=4, kv_heads=2, ffn=64, seq=16, batch=4),
    # The default of train.py: learns the corpus well below its unigram entropy in minutes.
    "small": Config(dim=128, layers=2, heads=4, kv_heads=2, ffn=256, seq=64, batch=8),
    # The size issue 28's benchmark names (benchmarks/train_bench.py --config medium); not tuned.
    "medium": Config(dim=256, layers=4, heads=8, kv_heads=4, ffn=512, seq=128, batch=8),
}


def param_shapes(cfg: Config) -> dict:
    """``name -> (shape, split)`` where ``split`` is ``None`` (replicated), ``"row"`` or
    ``"col"`` over ``tp`` (Megatron's layout)."""
    d, hd = cfg.dim, cfg.head_dim
    shapes = {"emb": ((cfg.vocab, d), "row"), "norm": ((d,), None)}
    if not cfg.tied:
        shapes["head"] = ((d, cfg.vocab), "col")
    for i in range(cfg.layers):
        shapes.update({f"l{i}.attn_norm": ((d,), None), f"l{i}.q": ((d, cfg.heads * hd), "col"),
                       f"l{i}.k": ((d, cfg.kv_heads * hd), "col"), f"l{i}.v": ((d, cfg.kv_heads * hd), "col"),
                       f"l{i}.o": ((cfg.heads * hd, d), "row"), f"l{i}.ffn_norm": ((d,), None),
                       f"l{i}.w1": ((d, cfg.ffn), "col"), f"l{i}.w3": ((d, cfg.ffn), "col"),
                       f"l{i}.w2": ((cfg.ffn, d), "row")})
    return shapes


def init_params(cfg: Config, seed: int = 0) -> dict:
    """Float32 parameters: norms 1, the rest normal with standard deviation 0.02 (the output
    projections scaled by 1/sqrt(2·layers), as GPT-2 and Llama do)."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, (shape, _) in param_shapes(cfg).items():
        if name.endswith("norm"):
            params[name] = np.ones(shape, np.float32)
        else:
            std = 0.02 / np.sqrt(2 * cfg.layers) if name.endswith((".o", ".w2")) else 0.02
            params[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return params


def check_mesh(cfg: Config, dp: int, tp: int) -> None:
    """A UsageError with the fix when a ``dp × tp`` mesh cannot hold ``cfg``."""
    sizes = (("query heads", cfg.heads), ("key/value heads", cfg.kv_heads), ("SwiGLU width", cfg.ffn),
             ("vocabulary", cfg.vocab))
    for what, n in sizes:
        if n % tp:
            fits = max(d for d in range(1, tp + 1) if all(m % d == 0 for _, m in sizes))
            raise UsageError(f"tp={tp} does not divide the model's {n} {what}",
                             fix=f"choose a tp that divides {n} (e.g. --mesh {dp},{fits})")
    if cfg.batch % dp:
        raise UsageError(f"dp={dp} does not divide the batch of {cfg.batch} sequences",
                         fix="choose dp among the divisors of the batch, or another --config")


def layout(split):
    """The ShardSpec of a parameter split by ``"row"``/``"col"`` over tp, or None."""
    return dist.ShardSpec((split,), ("tp",)) if split else None


BATCH = dist.ShardSpec(("batch",), ("dp",))


def place(params: dict, cfg: Config, mesh, policy=None) -> dict:
    """The parameters as DistTensors with Megatron's layouts on ``mesh`` (axes ``dp``, ``tp``)."""
    shapes = param_shapes(cfg)
    return {k: dist.tensor(a.shape, layout(shapes[k][1]), mesh, policy, data=a) for k, a in params.items()}


def rope_tables(cfg: Config) -> tuple:
    """cos and sin, ``[seq, head_dim/2]`` float32 (base 10000, the rotate-half convention)."""
    half = cfg.head_dim // 2
    angle = np.arange(cfg.seq)[:, None] / (10000.0 ** (np.arange(half) / half))
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def loss_fn(cfg: Config, policy=None):
    """``loss(params, ids, labels)``: the mean next-byte cross-entropy in nats of int32
    ``ids``/``labels`` ``[batch, seq]`` under the model (whose parameters have ``policy``)."""
    b, s, h, kv, hd = cfg.batch, cfg.seq, cfg.heads, cfg.kv_heads, cfg.head_dim
    cos, sin = (asarray(t, policy=policy) if policy else t for t in rope_tables(cfg))

    def rope(t):
        n = t.shape[1]
        t1 = op.slice(t, (0, 0, 0, 0), (b, n, s, hd // 2))
        t2 = op.slice(t, (0, 0, 0, hd // 2), (b, n, s, hd))
        return op.concat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], axis=3)

    def heads(t, n):
        return op.permute(op.reshape(t, (b, s, n, hd)), (0, 2, 1, 3))

    def repeat_kv(t):
        return op.reshape(op.broadcast_to(op.reshape(t, (b, kv, 1, s, hd)), (b, kv, h // kv, s, hd)), (b, h, s, hd))

    def attention(p, i, x):
        a = op.rmsnorm_safe(x) * p[f"l{i}.attn_norm"]
        q = rope(heads(op.matmul(a, p[f"l{i}.q"]), h))
        k = repeat_kv(rope(heads(op.matmul(a, p[f"l{i}.k"]), kv)))
        v = repeat_kv(heads(op.matmul(a, p[f"l{i}.v"]), kv))
        o = op.reshape(op.permute(op.flash_attention(q, k, v, causal=True), (0, 2, 1, 3)), (b, s, h * hd))
        return x + op.matmul(o, p[f"l{i}.o"])

    def swiglu(p, i, x):
        a = op.rmsnorm_safe(x) * p[f"l{i}.ffn_norm"]
        return x + op.matmul(op.silu(op.matmul(a, p[f"l{i}.w1"])) * op.matmul(a, p[f"l{i}.w3"]), p[f"l{i}.w2"])

    def loss(p, ids, labels):
        x = p["emb"][ids]
        for i in range(cfg.layers):
            x = swiglu(p, i, attention(p, i, x))
        x = op.rmsnorm_safe(x) * p["norm"]
        head = op.transpose(p["emb"]) if cfg.tied else p["head"]
        return op.cross_entropy(op.matmul(x, head), labels)
    return loss


def n_params(cfg: Config) -> int:
    return sum(int(np.prod(shape)) for shape, _ in param_shapes(cfg).values())
