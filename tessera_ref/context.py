"""Every piece of ambient state, as context variables (DESIGN §4).

Each thread starts with the defaults below, and a ``with`` block that changes one restores it
on exit, so threads (and asyncio tasks) never see each other's state. A default is never a
mutable object (it would be shared by every thread): stacks are tuples, replaced on change.
Modules read and set these variables through their own APIs (``sim.use``, ``backends.use``,
tracing, ...); this module holds only the variables, :func:`scoped`, and :func:`backend`
(the current backend, for layers below the registry that fills it in).
"""
from __future__ import annotations

import contextlib
import contextvars
import types

__all__ = ["BACKEND", "LISTENERS", "TRACES", "MACHINES", "PAUSED", "LAST_MACHINE", "PLANNING_MESH",
           "SCHEDULE_DEFAULTS", "KERNEL_DIRECTIVES", "KERNEL_ASSIGNED", "DIFFERENTIATING", "RULE_KEYS",
           "MAILBOX", "QUIET_COLLECTIVES", "COLLECTIVE_CALL", "backend", "set_backend_resolver", "scoped"]

#: The backend ``backends.use`` made current (a Backend object), or None for the default.
BACKEND: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.backend", default=None)

#: The traces being recorded, innermost last (``ops.values.Trace``; ``current_trace()``).
TRACES: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.traces", default=())

#: The simulated machines of the enclosing ``sim.use`` blocks, innermost last.
MACHINES: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.machines", default=())

#: True inside ``sim.paused()`` (``sim.current()`` is then None).
PAUSED: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.paused", default=False)

#: The machine ``sim.use`` made current most recently (``sim.last_used()``).
LAST_MACHINE: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.last_machine", default=None)

#: The mesh sharding rules plan for (``ops.sharding.planning_on``), or None.
PLANNING_MESH: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.planning_mesh", default=None)

#: The top-level ``schedule`` directives (a read-only mapping: a change sets a new one).
SCHEDULE_DEFAULTS: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.schedule_defaults",
                                                                   default=types.MappingProxyType({}))

#: The directives of the ``@op.kernel`` body being traced (a dict of its own), or None.
KERNEL_DIRECTIVES: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.kernel_directives", default=None)

#: The ``(parameter, value)`` list of whole assignments of the ``@op.kernel`` body being traced.
KERNEL_ASSIGNED: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.kernel_assigned", default=None)

#: The transform (``"grad"``, ``"jvp"``, ...) differentiating the code being traced, or None.
DIFFERENTIATING: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.differentiating", default=None)

#: The stochastic-rounding keys of the adjoint rule being run (``ops.adjoint.rule_keys``), or None.
RULE_KEYS: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.rule_keys", default=None)

#: True while dist carries out steps of its own (a redistribution's collectives): their
#: CollectiveWarnings are not the user's and are not raised (no process-wide warning filter).
QUIET_COLLECTIVES: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.quiet_collectives", default=False)

#: The send/recv mailbox of the current ``dist.mailbox_scope``; None until a thread's first
#: send or recv outside any scope creates its own.
MAILBOX: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.mailbox", default=None)

#: ``(kind, op)`` of the user's collective a communicator is carrying out (``dist.signature.calling``),
#: named in its signature across processes (MESH-MP-10); None outside one.
COLLECTIVE_CALL: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.collective_call", default=None)

#: Objects told about every collective, transfer and computation (``dist.listen``).
LISTENERS: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.listeners", default=())

# The backend registry lives above every layer that runs programs; it fills this slot on import
# (a lower layer asks for the current backend without importing the registry).
_RESOLVER: list = []
_DEFAULT: list = []  # the default backend, once resolved (one shared instance)


def set_backend_resolver(resolve) -> None:
    """Install ``resolve(name_or_backend_or_None) -> Backend`` (done by ``tessera_ref.backends``)."""
    _RESOLVER[:] = [resolve]
    _DEFAULT.clear()


def backend(which=None):
    """The backend ``which`` names (a registered name or a Backend object), or, for None, the
    one ``backends.use`` made current, else the default (``"interp"``)."""
    if which is None:
        which = BACKEND.get()
        if which is not None:
            return which
        if not _DEFAULT:
            _DEFAULT.append(_RESOLVER[0](None))
        return _DEFAULT[0]
    return _RESOLVER[0](which)


@contextlib.contextmanager
def scoped(var: contextvars.ContextVar, value):
    """Set ``var`` to ``value`` inside the ``with`` block; restore it on exit."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
