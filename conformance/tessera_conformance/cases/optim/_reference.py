"""An independent NumPy reference of the optimizers (docs/spec/optim.md; the cases and
tests/optim use it): the same IEEE operations in the same order, each f32 one rounded by
NumPy's float32 arithmetic, the f64 step scalars by Python floats, pow and cos by the suite's
scalar NUM-MATH reference, the global norm by Fractions. It imports nothing of tessera_ref."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..numerics._ref_math import cos, pow_

F = np.float32


def problem(seed: int = 0, steps: int = 4):
    """``(params, [grads per step])``: a dict of f32 arrays and gradients of varied scale."""
    rng = np.random.default_rng(seed)
    params = {"W1": rng.standard_normal((8, 6)).astype(F), "W2": rng.standard_normal((6, 8)).astype(F),
              "b": rng.standard_normal(8).astype(F)}
    grads = [{k: (rng.standard_normal(v.shape) * 10.0 ** rng.integers(-3, 2)).astype(F) for k, v in params.items()}
             for _ in range(steps)]
    grads[1]["b"][:3] = 0.0
    return params, grads


def warmup_cosine(s: float, peak: float, warm: int, total: int, end: float = 0.0, init: float = 0.0) -> float:
    """OPTIM-SCHED-1/2 in Python floats."""
    if s < warm:
        return (min(s, float(warm)) / warm) * (peak - init) + init
    d = float(total - warm)
    u = min(max(s - warm, 0.0), d) / d
    return ((cos(u * math.pi) + 1.0) * 0.5) * (peak - end) + end


def adamw(params, grads_seq, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.01, lerp=False):
    """OPTIM-ADAMW-1 over the steps; ``lr`` a function of the count. The final params (dict).
    ``lerp``: m as PyTorch writes it, ``m + (g − m)·(1 − b1)`` (a planted difference)."""
    p = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    count = 0.0
    for grads in grads_seq:
        lr_s, t = lr(count), count + 1.0
        bc1, bc2 = 1.0 - pow_(b1, t), 1.0 - pow_(b2, t)
        alpha, beta, delta = F(lr_s / bc1), F(math.sqrt(bc2)), F(1.0 - lr_s * wd)
        for k in p:
            g = grads[k]
            m[k] = m[k] + (g - m[k]) * F(1.0 - b1) if lerp else m[k] * F(b1) + g * F(1.0 - b1)
            v[k] = v[k] * F(b2) + (g * g) * F(1.0 - b2)
            d = np.sqrt(v[k]) / beta + F(eps)
            p[k] = p[k] * delta - (m[k] * alpha) / d
        count = t
    return p


def sgd(params, grads_seq, lr, momentum=0.0, nesterov=False):
    """OPTIM-SGD-1 over the steps; ``lr`` a function of the count. The final params (dict)."""
    p = {k: v.copy() for k, v in params.items()}
    buf = {k: np.zeros_like(v) for k, v in p.items()}
    for step, grads in enumerate(grads_seq):
        alpha = F(lr(float(step)))
        for k in p:
            d = grads[k]
            if momentum:
                buf[k] = buf[k] * F(momentum) + grads[k]
                d = grads[k] + buf[k] * F(momentum) if nesterov else buf[k]
            p[k] = p[k] - d * alpha
    return p


def global_norm(leaves) -> float:
    """OPTIM-CLIP-1: each leaf's exact sum of squares rounded to f64, added in order, sqrt."""
    total = 0.0
    for i, x in enumerate(leaves):
        q = float(sum(Fraction(float(e)) ** 2 for e in np.asarray(x, np.float64).ravel()))
        total = q if i == 0 else total + q
    return math.sqrt(total)


def clip(grads: dict, max_norm: float) -> dict:
    """OPTIM-CLIP-1 on a dict (leaf order: sorted keys)."""
    n = global_norm([grads[k] for k in sorted(grads)])
    phi = F(min(max_norm / n, 1.0)) if n else F(1.0)
    return {k: g * phi for k, g in grads.items()}
