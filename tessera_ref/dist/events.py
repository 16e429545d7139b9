"""What the mesh tells its listeners: each collective, transfer and computation as it runs.

A listener has the methods ``record_collective(kind, groups, nbytes, axis=)``,
``record_transfer(src_devices, dst_devices, nbytes)`` and ``record_compute(devices, name,
cost, fmt, location=)`` — the simulated machine of ``with sim.use(machine)`` is one, and
``with dist.listen(obj):`` adds another for the block (in this thread/context). Inside
``with sim.paused():`` nothing is told (helper steps already accounted for).
"""
from __future__ import annotations

import contextlib

from .. import context, sim

__all__ = ["listen", "listeners", "collective", "transfer", "compute"]


@contextlib.contextmanager
def listen(listener):
    """Tell ``listener`` about everything the mesh does inside the block."""
    with context.scoped(context.LISTENERS, context.LISTENERS.get() + (listener,)):
        yield listener


def listeners() -> tuple:
    """The machine in use (if any and not paused), then the ``listen`` blocks' listeners."""
    if sim.is_paused():
        return ()
    machine = sim.current()
    return ((machine,) if machine is not None else ()) + context.LISTENERS.get()


def collective(kind: str, groups: list, nbytes: int, axis: str) -> None:
    for listener in listeners():
        listener.record_collective(kind, groups, nbytes, axis=axis)


def transfer(src: list, dst: list, nbytes: int) -> None:
    for listener in listeners():
        listener.record_transfer(src, dst, nbytes)


def compute(devices: list, name: str, cost, fmt: str, location=None) -> None:
    for listener in listeners():
        listener.record_compute(devices, name, cost, fmt, location=location)
