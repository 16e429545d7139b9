"""Every piece of ambient state, as context variables (DESIGN §4).

Each thread starts with the defaults below, and a ``with`` block that changes one restores it
on exit, so threads (and asyncio tasks) never see each other's state. Modules read and set
these variables through their own APIs (``sim.use``, ``backends.use``, tracing, ...); this
module holds only the variables and :func:`scoped`.
"""
from __future__ import annotations

import contextlib
import contextvars

__all__ = ["BACKEND", "scoped"]

#: The backend ``backends.use`` made current (a Backend object), or None for the default.
BACKEND: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.backend", default=None)


@contextlib.contextmanager
def scoped(var: contextvars.ContextVar, value):
    """Set ``var`` to ``value`` inside the ``with`` block; restore it on exit."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
