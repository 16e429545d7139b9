"""The current simulated machine: what ``dist`` records into (SIM-ACT-1).

``with sim.use(machine): ...`` makes ``machine`` current for the block (blocks nest; the
innermost wins); :func:`current` returns it, or None outside every block and inside
``with sim.paused():`` (which a caller uses to run helper steps it has already accounted for).
:func:`report` prints the report of the current machine, or of the last one made current.
All of this is per thread (``tessera_ref.context``): a new thread starts with no machine.
"""
from __future__ import annotations

import contextlib

from ..context import LAST_MACHINE, MACHINES, PAUSED, scoped
from ..errors import SimError
from .machine import MAX_EVENTS, Machine

__all__ = ["use", "current", "paused", "is_paused", "report", "machine", "last_used"]


@contextlib.contextmanager
def use(machine: Machine):
    """Make ``machine`` the current machine inside the ``with`` block."""
    if not isinstance(machine, Machine):
        raise SimError(f"sim.use needs a sim.Machine, got {machine!r}",
                       fix="with sim.use(sim.machine('GB200-NVL72', devices=72)): ...")
    LAST_MACHINE.set(machine)
    with scoped(MACHINES, MACHINES.get() + (machine,)):
        yield machine


def current() -> Machine | None:
    """The innermost machine of the enclosing ``with sim.use(...)`` blocks; None when there
    is none, or inside ``with sim.paused()``."""
    machines = MACHINES.get()
    return machines[-1] if machines and not PAUSED.get() else None


def paused():
    """Inside the ``with`` block :func:`current` is None: nothing is recorded."""
    return scoped(PAUSED, True)


def is_paused() -> bool:
    """True inside ``with sim.paused():``."""
    return PAUSED.get()


def last_used() -> Machine | None:
    """The machine most recently made current in this thread (it may no longer be)."""
    return LAST_MACHINE.get()


def report(top: int = 10) -> str:
    """Print and return the report (SIM-REPORT-1) of the innermost machine in use, or of the
    last machine that was; a :class:`~tessera_ref.errors.SimError` if none ever was."""
    machines = MACHINES.get()
    m = machines[-1] if machines else LAST_MACHINE.get()
    if m is None:
        raise SimError("sim.report(): no simulated machine has been used",
                       fix="run the program inside `with sim.use(sim.machine(...)):` or under `tessera-ref sim FILE`")
    text = m.report(top=top)
    print(text)
    return text


def machine(preset="GB200-NVL72", devices=None, launch_overhead: float = 0.0, overlap: bool = False,
            max_events: int = MAX_EVENTS) -> Machine:
    """A :class:`Machine` of ``preset`` with ``devices`` GPUs: a count, a sequence of device
    names (ints ``i`` name ``cuda:i``), or None for one NVLink domain of the preset; its
    timeline holds at most ``max_events`` events and memory samples (SIM-TL-9)."""
    options = dict(launch_overhead=launch_overhead, overlap=overlap, max_events=max_events)
    if devices is None or isinstance(devices, int):
        return Machine(preset, devices, **options)
    names = [f"cuda:{d}" if isinstance(d, int) else d for d in devices]
    return Machine(preset, len(names), names, **options)
