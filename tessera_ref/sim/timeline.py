"""The timeline: what each device did when, on its compute and comm streams (SIM-TL-1).

Every device has a *ready time*, the end of the last thing recorded on it. A stream may have
several *lanes* (the comm stream has one per mesh axis when communication overlaps,
SIM-TL-6); events of one lane never overlap. The scheduler decides start times (SIM-TL-2 …
SIM-TL-8); the timeline only keeps the events and checks that no event starts before the
last one of its lane ended.
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Event", "Timeline", "MemorySamples", "STREAMS"]

#: The streams of a device, in the order the trace shows them (``tid`` 0 and 1).
STREAMS = ("compute", "comm")


@dataclass(frozen=True, slots=True)
class Event:
    """One op on one device: ``start`` and ``duration`` in seconds, on ``stream``; ``args``
    are the facts shown with it (FLOPs, bytes, algorithm, axis, source line)."""

    device: int
    stream: str
    name: str
    start: float
    duration: float
    args: dict = field(default_factory=dict)
    lane: int = 0

    @property
    def end(self) -> float:
        return self.start + self.duration


class MemorySamples(Sequence):
    """The memory samples of a timeline: ``(device, time, live bytes)`` tuples, held as three
    typed columns (24 bytes a sample rather than a tuple and its objects, ~5x less host memory:
    a long run records one per allocation and free on every device, SIM-TL-9)."""

    __slots__ = ("_device", "_time", "_live")

    def __init__(self):
        self._device, self._time, self._live = array("q"), array("d"), array("q")

    def append(self, sample: tuple) -> None:
        device, time, live = sample
        try:
            self._live.append(live)
        except OverflowError:  # more than 2^63 bytes on one device: kept as Python ints
            self._live = list(self._live)
            self._live.append(live)
        self._device.append(device)
        self._time.append(time)

    def __len__(self) -> int:
        return len(self._device)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self._device[i], self._time[i], self._live[i]

    def __iter__(self):
        return zip(self._device, self._time, self._live)

    def __repr__(self) -> str:
        return f"MemorySamples({len(self)} samples)"


class Timeline:
    """The events of ``n_devices`` devices, and their HBM use over time."""

    def __init__(self, n_devices: int):
        self.events: list = []
        self.memory_samples = MemorySamples()  # (device, time, live bytes)
        self._ready = [0.0] * n_devices
        self._lane_end: dict = {}  # (device, stream, lane) -> end of its last event

    def ready(self, device: int) -> float:
        """When ``device`` has finished everything recorded on it so far."""
        return self._ready[device]

    @property
    def end(self) -> float:
        """When the last device finishes: the step time (SIM-TL-2)."""
        return max(self._ready)

    def add(self, event: Event) -> Event:
        """Append ``event``; it must start at or after the end of the last event of its lane."""
        lane = (event.device, event.stream, event.lane)
        if event.stream not in STREAMS or event.duration < 0 or event.start < self._lane_end.get(lane, 0.0):
            raise AssertionError(f"event out of order: {event}")
        self.events.append(event)
        self._lane_end[lane] = event.end
        self._ready[event.device] = max(self._ready[event.device], event.end)
        return event

    def sample_memory(self, device: int, live: int) -> None:
        """Note that ``device`` holds ``live`` bytes from its ready time on."""
        self.memory_samples.append((device, self._ready[device], live))
