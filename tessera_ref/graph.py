"""``tessera_ref.graph``: ``@graph.module("name")`` traces a function into a Graph IR module.

See :mod:`tessera_ref.frontend.graph` for the tracing and caching rules.
"""
from .frontend.graph import GraphFunction, module

__all__ = ["module", "GraphFunction"]
