"""Every piece of ambient state, as context variables (DESIGN §4).

Each thread starts with the defaults below, and a ``with`` block that changes one restores it
on exit, so threads (and asyncio tasks) never see each other's state. Modules read and set
these variables through their own APIs (``sim.use``, ``backends.use``, tracing, ...); this
module holds only the variables and :func:`scoped`.
"""
from __future__ import annotations

import contextlib
import contextvars

__all__ = ["BACKEND", "LISTENERS", "backend", "set_backend_resolver", "scoped"]

#: The backend ``backends.use`` made current (a Backend object), or None for the default.
BACKEND: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.backend", default=None)

#: Objects told about every collective, transfer and computation (``dist.listen``).
LISTENERS: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.listeners", default=())

# The backend registry lives above every layer that runs programs; it fills this slot on import
# (a lower layer asks for the current backend without importing the registry).
_RESOLVER: list = []


def set_backend_resolver(resolve) -> None:
    """Install ``resolve(name_or_backend_or_None) -> Backend`` (done by ``tessera_ref.backends``)."""
    _RESOLVER[:] = [resolve]


def backend(which=None):
    """The backend ``which`` names (a registered name or a Backend object), or, for None, the
    one ``backends.use`` made current, else the default (``"interp"``)."""
    if which is None:
        which = BACKEND.get()
        if which is not None:
            return which
    return _RESOLVER[0](which)


@contextlib.contextmanager
def scoped(var: contextvars.ContextVar, value):
    """Set ``var`` to ``value`` inside the ``with`` block; restore it on exit."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
