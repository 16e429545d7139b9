"""Executors behind one seam (DESIGN §13, docs/spec/backends.md).

``tessera_ref.backends.available()`` lists the backends, ``get(name)`` returns one, and
``with tessera_ref.backends.use(name):`` makes one current for a block; ``jit(backend=...)``
fixes one for a function. The interpreter, ``"interp"``, is the default and the oracle.
Outside packages add backends through the entry-point group ``tessera_ref.backends``.
"""
from .base import Backend, Communicator, Launch
from .registry import ENTRY_POINT_GROUP, available, current, describe, get, register, use

__all__ = ["Backend", "Communicator", "Launch", "ENTRY_POINT_GROUP", "available", "current", "describe", "get",
           "register", "use"]
