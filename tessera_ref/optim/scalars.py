"""Step-dependent scalars in f64, each rounded once into a parameter's policy (OPTIM-ADAMW-1)."""
from __future__ import annotations

from ..ops import FUNCTIONS as op
from .tree import type_of

__all__ = ["PerPolicy"]


class PerPolicy:
    """f64 scalar tensors, each converted once (NUM-CVT, the policy's rounding) into every
    parameter policy that asks for it; conversions are shared between leaves of one policy."""

    def __init__(self, **values):
        self.values = values
        self._cache: dict = {}

    def __call__(self, name: str, like):
        policy = type_of(like).policy
        key = (name, policy)
        if key not in self._cache:
            self._cache[key] = op.cast(self.values[name], policy)
        return self._cache[key]
