"""The optimizer protocol and ``chain`` (OPTIM-API-1, OPTIM-CHAIN-1).

An :class:`Optimizer` is a pure ``init``/``update`` pair over pytrees (optax's shape):
``state = opt.init(params)``, ``params, state = opt.update(grads, state, params)``. A
:class:`GradientTransform` (clipping) has the same pair but its ``update`` returns new
*gradients*; :func:`chain` puts transforms in front of one optimizer.
"""
from __future__ import annotations

from ..errors import OptimError
from .tree import check_float_params, check_same_tree

__all__ = ["Optimizer", "GradientTransform", "Chain", "chain", "check_update"]


class GradientTransform:
    """``init(params) -> state``; ``update(grads, state, params=None) -> (grads, state)``."""

    name = "transform"

    def init(self, params):
        check_float_params(params, where=f"{self.name}.init")
        return ()

    def update(self, grads, state, params=None):
        raise NotImplementedError


class Optimizer:
    """``init(params) -> state``; ``update(grads, state, params) -> (params, state)``."""

    name = "optimizer"

    def init(self, params):
        raise NotImplementedError

    def update(self, grads, state, params):
        raise NotImplementedError


def check_update(name: str, grads, state, params, state_type):
    """The leaves of ``params`` and ``grads`` after checking both trees and ``state`` (OPTIM-ERR-2)."""
    where = f"{name}.update"
    if not isinstance(state, state_type):
        raise OptimError(f"{where}: state is a {type(state).__name__}, not the {state_type.__name__} that "
                         f"{name}.init returns", fix=f"pass the state from {name}.init(params) or the last update")
    p = check_float_params(params, where=where)
    g = check_same_tree("grads", grads, params, where=where)
    return p, g


class Chain(Optimizer):
    """Gradient transforms applied in order, then one optimizer (OPTIM-CHAIN-1); its state is
    the tuple of their states."""

    def __init__(self, parts):
        *transforms, last = parts
        self.transforms, self.optimizer = tuple(transforms), last
        self.name = "chain"

    def init(self, params):
        return tuple(t.init(params) for t in self.transforms) + (self.optimizer.init(params),)

    def update(self, grads, state, params):
        if not isinstance(state, tuple) or len(state) != len(self.transforms) + 1:
            raise OptimError(f"chain.update: state is not the tuple of {len(self.transforms) + 1} states that "
                             "chain.init returns", fix="pass the state from chain.init(params) or the last update")
        new = []
        for t, s in zip(self.transforms, state):
            grads, s = t.update(grads, s, params)
            new.append(s)
        params, s = self.optimizer.update(grads, state[-1], params)
        return params, tuple(new) + (s,)


def chain(*parts) -> Chain:
    """``chain(clip_by_global_norm(1.0), adamw(3e-4))``: transforms first, one optimizer last."""
    if not parts or not isinstance(parts[-1], Optimizer) or \
            not all(isinstance(p, GradientTransform) for p in parts[:-1]):
        kinds = [type(p).__name__ for p in parts]
        raise OptimError(f"optim.chain takes gradient transforms and then one optimizer, got {kinds}",
                         fix="chain(optim.clip_by_global_norm(1.0), optim.adamw(3e-4))")
    return Chain(parts)

