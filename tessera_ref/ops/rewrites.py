"""Graph-level rewrites (GRAPH-RW-*), run on every traced module by :func:`optimize`."""
from __future__ import annotations

from ..ir import CommonSubexpressionElimination, DeadCodeElimination, Module, PassManager

__all__ = ["optimize"]


def optimize(module: Module):
    """Rewrite ``module`` in place; returns the pass report."""
    return PassManager([CommonSubexpressionElimination(), DeadCodeElimination()]).run(module)
