"""What the mesh tells its listeners: each collective, transfer and computation as it runs.

A listener has the methods ``record_collective(kind, groups, nbytes, axis=)``,
``record_transfer(src_devices, dst_devices, nbytes)`` and ``record_compute(devices, name,
cost, fmt, location=)`` — the simulated machine of ``with sim.use(machine)`` is one, and
``with dist.listen(obj):`` adds another for the block (in this thread/context). Inside
``with sim.paused():`` nothing is told (helper steps already accounted for).

A listener that takes them also gets ``reads=`` and ``writes=``: the ids of the values the
event reads and writes (SIM-TL-5). A distributed tensor's id is an int given out once
(:func:`value_id`); a result is bound to the id its event wrote (:func:`bind`), and a tensor
made from another without communication (a local slice) shares its source's id.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import threading
import weakref

from .. import context, sim
from ..counters import count

__all__ = ["listen", "listeners", "collective", "transfer", "compute", "value_id", "fresh_id", "bind"]

_IDS = weakref.WeakKeyDictionary()  # DistTensor -> its value id
_LOCK = threading.Lock()
_COUNTER = itertools.count(1)


def fresh_id() -> int:
    """A value id never given out before."""
    return next(_COUNTER)


def value_id(x) -> int:
    """The id of the value of the distributed tensor ``x`` (a fresh one the first time)."""
    with _LOCK:
        vid = _IDS.get(x)
        if vid is None:
            vid = _IDS[x] = fresh_id()
        return vid


def bind(x, vid: int):
    """Make ``vid`` the id of ``x``'s value; returns ``x``."""
    with _LOCK:
        _IDS[x] = vid
    return x


@functools.lru_cache(maxsize=None)
def _takes_values(kind: type, method: str) -> bool:
    """Whether listeners of type ``kind`` take ``reads=``/``writes=`` in ``method``."""
    try:
        params = inspect.signature(getattr(kind, method)).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return "reads" in params and "writes" in params


def _deps(listener, method: str, reads, writes) -> dict:
    return {"reads": tuple(reads), "writes": tuple(writes)} if _takes_values(type(listener), method) else {}


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


def collective(kind: str, groups: list, nbytes: int, axis: str, reads=(), writes=()) -> None:
    count(collectives=1, collective_bytes=int(nbytes))
    for listener in listeners():
        listener.record_collective(kind, groups, nbytes, axis=axis,
                                   **_deps(listener, "record_collective", reads, writes))


def transfer(src: list, dst: list, nbytes: int, reads=(), writes=()) -> None:
    for listener in listeners():
        listener.record_transfer(src, dst, nbytes, **_deps(listener, "record_transfer", reads, writes))


def compute(devices: list, name: str, cost, fmt: str, location=None, reads=(), writes=()) -> None:
    for listener in listeners():
        listener.record_compute(devices, name, cost, fmt, location=location,
                                **_deps(listener, "record_compute", reads, writes))
