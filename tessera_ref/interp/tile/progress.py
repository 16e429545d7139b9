"""Progress of a long tile launch (TILE-EXEC-2): a line on stderr every few seconds."""
from __future__ import annotations

import sys
import time

__all__ = ["Progress", "EVERY_SECONDS"]

#: A launch says nothing for this long, then reports its progress at this interval.
EVERY_SECONDS = 5.0


class Progress:
    """Reports ``tiles done / total`` of kernel ``name`` on ``stream`` once the launch has run
    ``every`` seconds (default :data:`EVERY_SECONDS`), then every ``every`` seconds, with the
    elapsed time and an estimate of the time left (from the rate so far)."""

    def __init__(self, name: str, total: int, *, every: float | None = None, stream=None, clock=time.monotonic):
        self.name, self.total = name, total
        self.every = EVERY_SECONDS if every is None else every
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = self.last = clock()

    def tick(self, done: int) -> None:
        """Called after each tile: ``done`` tiles have run."""
        now = self.clock()
        if now - self.last < self.every or done >= self.total:
            return
        self.last = now
        elapsed = now - self.start
        left = elapsed / done * (self.total - done)
        print(f"tessera: kernel {self.name}: tile {done:,}/{self.total:,} ({100 * done / self.total:.0f}%), "
              f"{elapsed:.0f} s elapsed, about {left:.0f} s left", file=self.stream, flush=True)
