"""The timeline: what each device did when, on its compute and comm streams (SIM-TL-1).

Every device has a *ready time*, the end of the last thing recorded on it; an event starts no
earlier than its device's ready time and moves it to the event's end. The machine decides
start times (SIM-TL-2, SIM-TL-3); the timeline only keeps events in order and checks that no
event starts before its device is ready.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Event", "Timeline", "STREAMS"]

#: The streams of a device, in the order the trace shows them (``tid`` 0 and 1).
STREAMS = ("compute", "comm")


@dataclass(frozen=True)
class Event:
    """One op on one device: ``start`` and ``duration`` in seconds, on ``stream``; ``args``
    are the facts shown with it (FLOPs, bytes, algorithm, axis, source line)."""

    device: int
    stream: str
    name: str
    start: float
    duration: float
    args: dict = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.start + self.duration


class Timeline:
    """The events of ``n_devices`` devices, and their HBM use over time."""

    def __init__(self, n_devices: int):
        self.events: list = []
        self.memory_samples: list = []  # (device, time, live bytes)
        self._ready = [0.0] * n_devices

    def ready(self, device: int) -> float:
        """When ``device`` has finished everything recorded on it so far."""
        return self._ready[device]

    @property
    def end(self) -> float:
        """When the last device finishes: the step time (SIM-TL-2)."""
        return max(self._ready)

    def add(self, event: Event) -> Event:
        """Append ``event``; it must start at or after its device's ready time."""
        if event.stream not in STREAMS or event.duration < 0 or event.start < self._ready[event.device]:
            raise AssertionError(f"event out of order: {event}")
        self.events.append(event)
        self._ready[event.device] = event.end
        return event

    def sample_memory(self, device: int, live: int) -> None:
        """Note that ``device`` holds ``live`` bytes from its ready time on."""
        self.memory_samples.append((device, self._ready[device], live))
