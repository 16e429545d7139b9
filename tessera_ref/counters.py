"""What ran, counted (RUNTIME-COUNT-1): compiles, launches, replays, host steps, bytes across
the bus, allocations, collectives — filled by every layer that does one of these, read by anyone.

``with runtime.counting() as c: ...`` gives a :class:`Counters` that every event inside the
block (this thread or task) adds to; blocks nest, each sees its own events and its inner
blocks'. :func:`totals` are the process's since it started. Nothing else is global.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from dataclasses import dataclass

__all__ = ["Counters", "counting", "count", "totals", "FIELDS"]


@dataclass
class Counters:
    """Counts of what ran (RUNTIME-COUNT-1). ``lowerings``/``renders``/``compiles``: whole
    programs lowered, libraries rendered, binaries built (a cache hit is not a compile);
    ``launches``: kernels launched one by one, ``replays``: captured launch lists replayed
    (their launches counted in ``graph_launches``); ``host_steps``: ops run on the host by
    permission (``allow_host``); ``h2d_bytes``/``d2h_bytes``: bytes copied host→device and
    device→host (``d2d_bytes`` on the device); ``allocations``: buffers the allocator had to
    make (a pool hit is not one) and ``pool_bytes`` the most bytes it held; ``collectives`` and
    ``collective_bytes``: collective ops run and the bytes each device sent."""

    lowerings: int = 0
    renders: int = 0
    compiles: int = 0
    launches: int = 0
    replays: int = 0
    graph_launches: int = 0
    host_steps: int = 0
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    d2d_bytes: int = 0
    allocations: int = 0
    pool_bytes: int = 0
    collectives: int = 0
    collective_bytes: int = 0

    def as_dict(self) -> dict:
        """The counts as a plain dict (the JSON form)."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in self.as_dict().items())


#: The names of the counts, in order.
FIELDS = tuple(f.name for f in dataclasses.fields(Counters))

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("tessera_ref.runtime.counters", default=())
_TOTALS = Counters()
_LOCK = threading.Lock()


def count(**amounts) -> None:
    """Add ``amounts`` (``launches=1``, ``h2d_bytes=n``) to the process totals and to every
    :func:`counting` block active here; ``pool_bytes`` is a level: the largest value is kept."""
    targets = (_TOTALS, *_ACTIVE.get())
    with _LOCK:
        for c in targets:
            for name, n in amounts.items():
                if name == "pool_bytes":
                    c.pool_bytes = max(c.pool_bytes, n)
                else:
                    setattr(c, name, getattr(c, name) + n)


@contextlib.contextmanager
def counting():
    """``with counting() as c:`` — ``c`` counts what ran inside the block (RUNTIME-COUNT-1)."""
    c = Counters()
    token = _ACTIVE.set(_ACTIVE.get() + (c,))
    try:
        yield c
    finally:
        _ACTIVE.reset(token)


def totals() -> Counters:
    """A copy of the process's counts so far."""
    with _LOCK:
        return dataclasses.replace(_TOTALS)
