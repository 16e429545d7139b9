"""The global norm of a tree and clipping by it (OPTIM-CLIP-1)."""
from __future__ import annotations

from ..frontend.pytree import flatten
from ..numerics import Policy
from ..ops import FUNCTIONS as op
from ..ops import asarray
from .base import GradientTransform
from .scalars import PerPolicy
from .tree import check_float_params, check_number

__all__ = ["global_norm", "ClipByGlobalNorm", "clip_by_global_norm"]

#: Each leaf's sum of squares: computed exactly and rounded once into f64 (NUM-RED-4).
EXACT64 = Policy("f64", reduction="exact")


def _leaf_square_sum(g):
    x = op.cast(g, EXACT64)
    return op.cast(op.sum(op.mul(x, x)), "f64")


def global_norm(tree, *, where: str = "optim.global_norm"):
    """``sqrt(Σ_leaves Σ x²)`` of a tree of floating-point tensors as an f64 scalar
    (OPTIM-CLIP-1): each leaf's sum exact, the leaves' sums added in leaf order in f64."""
    leaves = check_float_params(tree, where=where)
    total = asarray(0.0, dtype="f64")
    for i, g in enumerate(leaves):
        s = _leaf_square_sum(g)
        total = s if i == 0 else op.add(total, s)
    return op.sqrt(total)


class ClipByGlobalNorm(GradientTransform):
    """See :func:`clip_by_global_norm`."""

    name = "clip_by_global_norm"

    def __init__(self, max_norm):
        self.max_norm = check_number("max_norm", max_norm, low=0.0, low_open=True, where="optim.clip_by_global_norm")

    def __repr__(self) -> str:
        return f"clip_by_global_norm({self.max_norm!r})"

    def update(self, grads, state, params=None):
        norm = global_norm(grads, where="clip_by_global_norm.update")
        s = PerPolicy(factor=op.minimum(op.div(asarray(self.max_norm, dtype="f64"), norm), 1.0))
        leaves, tree = flatten(grads)
        return tree.unflatten(op.mul(g, s("factor", g)) for g in leaves), state


def clip_by_global_norm(max_norm: float) -> ClipByGlobalNorm:
    """Scale every gradient by ``min(1, max_norm / global_norm(grads))`` (OPTIM-CLIP-1); no state."""
    return ClipByGlobalNorm(max_norm)
