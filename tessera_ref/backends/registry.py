"""The backends by name (BACKEND-REG-1): built-in ones registered on import, outside ones found
through the entry-point group ``tessera_ref.backends``; the current one per context.

An entry point names a :class:`~tessera_ref.backends.base.Backend` subclass, an instance, or a
factory returning one; it is loaded the first time its name is asked for. One instance per
name is made and shared, so backends keep no per-run state on themselves.
"""
from __future__ import annotations

import contextlib
import threading
from importlib import metadata

from .. import context
from ..errors import BackendError
from .base import Backend

__all__ = ["ENTRY_POINT_GROUP", "register", "available", "get", "use", "current", "describe"]

#: The entry-point group outside packages declare their backends in.
ENTRY_POINT_GROUP = "tessera_ref.backends"

#: The backend used when no ``backends.use`` block is active.
DEFAULT = "interp"

_FACTORIES: dict = {}   # name -> (factory, origin)
_INSTANCES: dict = {}   # name -> Backend
_LOCK = threading.RLock()


def register(name: str, factory, *, origin: str = "built-in") -> None:
    """Make ``factory`` (a Backend subclass, instance or callable returning one) the backend
    ``name``; a name already registered is a :class:`~tessera_ref.errors.BackendError`."""
    with _LOCK:
        if name in _FACTORIES:
            raise BackendError(f"a backend named {name!r} is already registered ({_FACTORIES[name][1]})",
                               fix="choose another name")
        _FACTORIES[name] = (factory, origin)


def _discover() -> None:
    """Register every entry point of the group not registered yet (loading nothing)."""
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        with _LOCK:
            if ep.name not in _FACTORIES:
                dist = getattr(ep, "dist", None)
                origin = f"entry point {ep.value}" + (f" ({dist.name} {dist.version})" if dist else "")
                _FACTORIES[ep.name] = (ep, origin)


def available() -> list:
    """The names of every registered and discoverable backend, sorted."""
    _discover()
    with _LOCK:
        return sorted(_FACTORIES)


def describe() -> list:
    """``[(name, origin, description)]`` for :func:`available`; loads each backend to ask for its
    description (one that fails to load is described by its error)."""
    rows = []
    for name in available():
        try:
            text = get(name).description
        except BackendError as exc:
            text = f"unavailable: {exc.what}"
        rows.append((name, _FACTORIES[name][1], text))
    return rows


def _make(name: str, factory) -> Backend:
    if isinstance(factory, metadata.EntryPoint):
        try:
            factory = factory.load()
        except Exception as exc:  # an outside package's import error, whatever it is
            raise BackendError(f"the backend {name!r} ({factory.value}) failed to load: {type(exc).__name__}: {exc}",
                               fix="install the package that provides it, or fix its entry point") from exc
    backend = factory() if callable(factory) and not isinstance(factory, Backend) else factory
    if not isinstance(backend, Backend):
        raise BackendError(f"the backend {name!r} is a {type(backend).__name__}, not a tessera_ref Backend",
                           fix="subclass tessera_ref.backends.Backend and implement run_op, launch and communicator")
    return backend


def get(name) -> Backend:
    """The backend ``name`` (a Backend object is returned as is); an unknown name is a
    :class:`~tessera_ref.errors.BackendError` listing the known ones."""
    if isinstance(name, Backend):
        return name
    if not isinstance(name, str):
        raise BackendError(f"a backend is chosen by name or Backend object, got {name!r}",
                           fix=f"use one of {available()}")
    backend = _INSTANCES.get(name)  # made once, never replaced: no lock needed to read it
    if backend is not None:
        return backend
    if name not in _FACTORIES:
        _discover()
    with _LOCK:
        if name not in _FACTORIES:
            raise BackendError(f"no backend named {name!r}", fix=f"use one of {sorted(_FACTORIES)}, or install the "
                               f"package that registers it under the entry-point group {ENTRY_POINT_GROUP!r}")
        if name not in _INSTANCES:
            _INSTANCES[name] = _make(name, _FACTORIES[name][0])
        return _INSTANCES[name]


def current() -> Backend:
    """The backend of the innermost ``with backends.use(...)`` block, else the default."""
    return context.backend()


@contextlib.contextmanager
def use(backend):
    """``with tessera_ref.backends.use("interp"): f(x)`` runs everything inside the block on
    ``backend`` (a name or a Backend object), in this thread/context only."""
    with context.scoped(context.BACKEND, get(backend)) as chosen:
        yield chosen


context.set_backend_resolver(lambda which: get(DEFAULT if which is None else which))
