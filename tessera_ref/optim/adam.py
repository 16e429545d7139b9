"""AdamW with decoupled weight decay as Graph IR ops (OPTIM-ADAMW-1)."""
from __future__ import annotations

from typing import NamedTuple

from ..frontend.pytree import flatten
from ..ops import FUNCTIONS as op
from ..ops import asarray
from .base import Optimizer, check_update
from .scalars import PerPolicy
from .schedules import as_schedule
from .tree import check_float_params, check_number, check_same_tree, counter, zeros_like
from .zero import check_zero, on_shards, split_dim, zero_layout

__all__ = ["AdamWState", "AdamW", "adamw"]


class AdamWState(NamedTuple):
    """``count``: updates done (an f64 scalar); ``mu``, ``nu``: the moments, in the parameters'
    tree, shapes, policies and layouts."""

    count: object
    mu: object
    nu: object


class AdamW(Optimizer):
    """See :func:`adamw`."""

    name = "adamw"

    def __init__(self, lr, b1, b2, eps, weight_decay, zero=0, dp_axis="dp"):
        where = "optim.adamw"
        self.zero, self.dp_axis = check_zero(zero, dp_axis, where)
        self.lr = as_schedule(lr, where)
        self.b1 = check_number("b1", b1, low=0.0, high=1.0, high_open=True, where=where)
        self.b2 = check_number("b2", b2, low=0.0, high=1.0, high_open=True, where=where)
        self.eps = check_number("eps", eps, low=0.0, where=where)
        self.weight_decay = check_number("weight_decay", weight_decay, low=0.0, where=where)

    def __repr__(self) -> str:
        return (f"adamw(lr={self.lr.describe}, b1={self.b1!r}, b2={self.b2!r}, eps={self.eps!r}, "
                f"weight_decay={self.weight_decay!r}" + (f", zero=1, dp_axis={self.dp_axis!r})" if self.zero else ")"))

    def init(self, params):
        leaves, tree = flatten(params)
        check_float_params(params, where="adamw.init")
        layouts = [zero_layout(x, self.dp_axis, "adamw.init") if self.zero else None for x in leaves]
        return AdamWState(counter(leaves), tree.unflatten(map(zeros_like, leaves, layouts)),
                          tree.unflatten(map(zeros_like, leaves, layouts)))

    def update(self, grads, state, params):
        ps, gs = check_update("adamw", grads, state, params, AdamWState)
        ms = check_same_tree("state.mu", state.mu, params, where="adamw.update")
        vs = check_same_tree("state.nu", state.nu, params, where="adamw.update")
        count = state.count
        lr, t = self.lr(count), op.add(count, 1.0)
        bc1 = op.sub(1.0, op.pow(asarray(self.b1, dtype="f64"), t))
        bc2 = op.sub(1.0, op.pow(asarray(self.b2, dtype="f64"), t))
        s = PerPolicy(alpha=op.div(lr, bc1), beta=op.sqrt(bc2), decay=op.sub(1.0, op.mul(lr, self.weight_decay)))
        out = [on_shards(lambda p, g, m=m, v=v: self._leaf(p, g, m, v, s), p, g, self.dp_axis,
                         split_dim(p, m, self.dp_axis)) for p, g, m, v in zip(ps, gs, ms, vs)]
        tree = flatten(params)[1]
        return (tree.unflatten(o[0] for o in out),
                AdamWState(t, tree.unflatten(o[1] for o in out), tree.unflatten(o[2] for o in out)))

    def _leaf(self, p, g, m, v, s):
        m = op.add(op.mul(m, self.b1), op.mul(g, 1.0 - self.b1))
        v = op.add(op.mul(v, self.b2), op.mul(op.mul(g, g), 1.0 - self.b2))
        denom = op.add(op.div(op.sqrt(v), s("beta", p)), self.eps)
        p = op.sub(op.mul(p, s("decay", p)), op.div(op.mul(m, s("alpha", p)), denom))
        return p, m, v


def adamw(lr, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01, *,
          zero: int = 0, dp_axis: str = "dp") -> AdamW:
    """AdamW (Loshchilov & Hutter; PyTorch's form): ``lr`` a number or a schedule of the step
    (OPTIM-ADAMW-1; every intermediate's format is in docs/spec/optim.md); ``zero=1`` splits
    the moments over ``dp_axis`` (OPTIM-ZERO-1)."""
    return AdamW(lr, b1, b2, eps, weight_decay, zero, dp_axis)
