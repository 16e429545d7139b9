"""SGD with optional (Nesterov) momentum as Graph IR ops (OPTIM-SGD-1)."""
from __future__ import annotations

from typing import NamedTuple

from ..errors import OptimError
from ..frontend.pytree import flatten
from ..ops import FUNCTIONS as op
from .base import Optimizer, check_update
from .scalars import PerPolicy
from .schedules import as_schedule
from .tree import check_float_params, check_number, check_same_tree, counter, zeros_like
from .zero import check_zero, on_shards, split_dim, zero_layout

__all__ = ["SGDState", "SGD", "sgd"]


class SGDState(NamedTuple):
    """``count``: updates done (an f64 scalar); ``momentum``: the velocity buffers in the
    parameters' tree, or ``()`` without momentum."""

    count: object
    momentum: object


class SGD(Optimizer):
    """See :func:`sgd`."""

    name = "sgd"

    def __init__(self, lr, momentum, nesterov, zero=0, dp_axis="dp"):
        where = "optim.sgd"
        self.zero, self.dp_axis = check_zero(zero, dp_axis, where)
        self.lr = as_schedule(lr, where)
        self.momentum = check_number("momentum", momentum, low=0.0, high=1.0, high_open=True, where=where)
        if not isinstance(nesterov, bool) or (nesterov and self.momentum == 0.0):
            raise OptimError(f"{where}: nesterov={nesterov!r} needs a bool, and momentum > 0 when True",
                             fix="pass nesterov=True together with momentum=0.9 (say), or nesterov=False")
        self.nesterov = nesterov

    def __repr__(self) -> str:
        return f"sgd(lr={self.lr.describe}, momentum={self.momentum!r}, nesterov={self.nesterov!r})"

    def init(self, params):
        leaves, tree = flatten(params)
        check_float_params(params, where="sgd.init")
        layouts = [zero_layout(x, self.dp_axis, "sgd.init") if self.zero else None for x in leaves]
        buffers = tree.unflatten(map(zeros_like, leaves, layouts)) if self.momentum else ()
        return SGDState(counter(leaves), buffers)

    def update(self, grads, state, params):
        ps, gs = check_update("sgd", grads, state, params, SGDState)
        if self.momentum:
            bs = check_same_tree("state.momentum", state.momentum, params, where="sgd.update")
        else:
            bs = [None] * len(ps)
        s = PerPolicy(lr=self.lr(state.count))
        out = [on_shards(lambda p, g, b=b: self._leaf(p, g, b, s), p, g, self.dp_axis,
                         None if b is None else split_dim(p, b, self.dp_axis)) for p, g, b in zip(ps, gs, bs)]
        tree = flatten(params)[1]
        buffers = tree.unflatten(o[1] for o in out) if self.momentum else ()
        return tree.unflatten(o[0] for o in out), SGDState(op.add(state.count, 1.0), buffers)

    def _leaf(self, p, g, b, s):
        d = g
        if self.momentum:
            b = op.add(op.mul(b, self.momentum), g)
            d = op.add(g, op.mul(b, self.momentum)) if self.nesterov else b
        return op.sub(p, op.mul(d, s("lr", p))), b


def sgd(lr, momentum: float = 0.0, nesterov: bool = False, *, zero: int = 0, dp_axis: str = "dp") -> SGD:
    """Stochastic gradient descent (PyTorch's form, no dampening): ``lr`` a number or a
    schedule of the step (OPTIM-SGD-1); ``zero=1`` splits the velocity over ``dp_axis`` (OPTIM-ZERO-1)."""
    return SGD(lr, momentum, nesterov, zero, dp_axis)
