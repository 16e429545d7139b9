"""Where each op goes on the timeline (SIM-TL-2 … SIM-TL-8).

A :class:`Scheduler` places ops one at a time, in the order they are recorded. With
``overlap=False`` an op starts when every stream of its devices is free (program order, the
conservative bound of SIM-TL-2). With ``overlap=True`` it starts when the values it reads
are ready on its device and its own stream lane is free — compute on the compute stream, a
collective on the comm lane of its mesh axis — and, for communication, when the link tier it
uses is free on every member (SIM-TL-5 … SIM-TL-8). Every event remembers the event that
fixed its start (its *cause*), from which the critical path is read.
"""
from __future__ import annotations

from .timeline import Event, Timeline

__all__ = ["Scheduler"]

_NOTHING = (0.0, None)  # (time, event index): ready from the start, caused by nothing


class Scheduler:
    """The placement of ops on ``n_devices`` devices, conservative or overlapped."""

    def __init__(self, n_devices: int, overlap: bool):
        self.overlap = bool(overlap)
        self.timeline = Timeline(n_devices)
        self.causes: list = []  # per event: index of the event that fixed its start, or None
        self._lane_end: dict = {}  # (device, stream, lane) -> (end, event index)
        self._link_end: dict = {}  # (device, tier) -> (end, event index)
        self._ready: dict = {}  # (value id, device) -> (time, event index)
        self._last = [_NOTHING] * n_devices  # device -> (end, index) of the event ending last on it
        self._lanes: dict = {}  # mesh axis -> its comm lane (overlap only)

    def lane(self, axis) -> int:
        """The comm lane of mesh axis ``axis`` (always 0 without overlap)."""
        if not self.overlap:
            return 0
        return self._lanes.setdefault(axis, len(self._lanes))

    def earliest(self, device: int, stream: str, lane: int, reads=(), tier: str | None = None) -> tuple:
        """``(time, cause)``: when an op could start on ``device``; the first candidate that is
        latest is the cause (the lane, then the link, then the values in order; SIM-TL-6,
        SIM-TL-7)."""
        if not self.overlap:
            return self._last[device]
        candidates = [self._lane_end.get((device, stream, lane), _NOTHING)]
        if tier is not None:
            candidates.append(self._link_end.get((device, tier), _NOTHING))
        candidates += [self._ready.get((v, device), _NOTHING) for v in reads]
        return max(candidates, key=lambda c: c[0])

    def place(self, device: int, stream: str, lane: int, name: str, start: tuple, duration: float, args: dict,
              writes=(), tiers=()) -> Event:
        """Put the op on ``device`` at ``start = (time, cause)`` for ``duration``; the values
        ``writes`` are ready on ``device``, and the link ``tiers`` it used free, at its end."""
        event = self.timeline.add(Event(device, stream, name, start[0], duration, args, lane))
        self._done(device, stream, lane, start[1], event.end, writes, tiers)
        return event

    def place_each(self, devices, stream: str, lane: int, name: str, duration: float, args: dict, reads=(),
                   writes=()) -> None:
        """Put the op on each of ``devices`` (indices) at its :meth:`earliest` start: what
        ``place(d, …, earliest(d, …), …)`` does for each ``d`` in turn, in one loop (the per-op
        loop over a mesh's devices, SIM-TL-1)."""
        add, last, overlap, done = self.timeline.add, self._last, self.overlap, self._done
        for d in devices:
            start = self.earliest(d, stream, lane, reads) if overlap else last[d]
            done(d, stream, lane, start[1], add(Event(d, stream, name, start[0], duration, args, lane)).end, writes)

    def _done(self, device: int, stream: str, lane: int, cause, end: float, writes=(), tiers=()) -> None:
        """An event of ``device`` caused by event ``cause`` ended at ``end``: its lane and links are
        free, the values ``writes`` ready on the device then. Only the overlapped schedule reads
        lanes, links and values (:meth:`earliest`), so the program-order one does not keep them: its
        memory does not grow with values × devices."""
        done = (end, len(self.causes))
        self.causes.append(cause)
        if self.overlap:
            self._lane_end[device, stream, lane] = done
            for tier in tiers:
                self._link_end[device, tier] = done
            for v in writes:
                self._ready[v, device] = done
        if end >= self._last[device][0]:
            self._last[device] = done

    def forward(self, devices, reads, writes) -> None:
        """Values ``writes`` are ready on ``devices`` when the latest of ``reads`` is (an op
        that moves nothing, e.g. a collective over one device; the overlapped schedule only)."""
        if not self.overlap:
            return
        for d in devices:
            ready = max((self._ready.get((v, d), _NOTHING) for v in reads), key=lambda c: c[0], default=_NOTHING)
            for v in writes:
                self._ready[v, d] = ready

    def critical_path(self) -> list:
        """Indices of the events on the critical path, first to last: from the event that ends
        last (the first of them) back through the causes."""
        events = self.timeline.events
        if not events:
            return []
        index = max(range(len(events)), key=lambda i: events[i].end)
        path = []
        while index is not None:
            path.append(index)
            index = self.causes[index]
        return path[::-1]
