"""The numbers of a simulated machine, as data (SIM-SUMMARY-1): what the text report shows.

:func:`summarize` reads a machine's public records — its memory accountant and its timeline's
events — and returns a :class:`MachineSummary`: per device the HBM peak and live bytes, compute
time, communication time per mesh axis and finish time; per mesh axis the collectives (calls
by kind) and bytes sent. ``summary.as_dict()`` is the JSON form ``tessera-ref sim --json``
prints, with the schema name and version under ``"schema"`` (:data:`SCHEMA`).
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass

__all__ = ["MachineSummary", "DeviceSummary", "AxisSummary", "summarize", "SCHEMA"]

#: The name and version of the JSON form; the version changes when a key changes meaning or goes.
SCHEMA = "tessera-ref/sim-summary/1"

#: The axis of communication recorded without a mesh axis.
NO_AXIS = "-"


@dataclass(frozen=True)
class DeviceSummary:
    """One device: bytes of HBM, seconds on each stream, and when it finished."""

    name: str
    peak_bytes: int
    live_bytes: int
    compute_s: float
    comm_s: dict  # mesh axis -> seconds on the comm stream
    finish_s: float

    @property
    def comm_total_s(self) -> float:
        return sum(self.comm_s.values())


@dataclass(frozen=True)
class AxisSummary:
    """The communication over one mesh axis: calls per collective kind, bytes and time."""

    axis: str
    calls: dict  # collective kind -> number of record calls (one call may span many groups)
    bytes_sent_per_device: float  # the busiest device
    bytes_sent_total: float  # over all devices
    time_per_device_s: float  # the busiest device


@dataclass(frozen=True)
class MachineSummary:
    """The numbers of one simulated machine (see the module docstring)."""

    preset: str
    hbm_capacity_bytes: int
    step_time_s: float
    devices: tuple  # of DeviceSummary, in device order
    axes: tuple  # of AxisSummary, in first-use order

    def device(self, name: str) -> DeviceSummary:
        """The summary of the device called ``name``."""
        return next(d for d in self.devices if d.name == name)

    def axis(self, axis: str) -> AxisSummary:
        """The summary of mesh axis ``axis``."""
        return next(a for a in self.axes if a.axis == axis)

    @property
    def compute_s(self) -> float:
        """Compute time summed over devices."""
        return sum(d.compute_s for d in self.devices)

    @property
    def comm_s(self) -> float:
        """Communication time summed over devices."""
        return sum(d.comm_total_s for d in self.devices)

    def as_dict(self) -> dict:
        """The JSON form: plain numbers, strings, lists and dicts, ``"schema"`` first."""
        data = dataclasses.asdict(self)
        return {"schema": SCHEMA, **data, "devices": list(data["devices"]), "axes": list(data["axes"])}


def _axis(event) -> str:
    return event.args.get("axis") or NO_AXIS


def summarize(machine) -> MachineSummary:
    """The :class:`MachineSummary` of ``machine`` (a :class:`~tessera_ref.sim.Machine`)."""
    names, mem, events = machine.device_names, machine.memory, machine.timeline.events
    n = len(names)
    compute = [0.0] * n
    comm = [defaultdict(float) for _ in range(n)]
    sent = [defaultdict(float) for _ in range(n)]
    finish = [0.0] * n
    calls: dict = {}  # axis -> kind -> set of call ids
    for e in events:
        finish[e.device] = max(finish[e.device], e.start + e.duration)
        if e.stream == "compute":
            compute[e.device] += e.duration
            continue
        a = _axis(e)
        comm[e.device][a] += e.duration
        sent[e.device][a] += e.args.get("bytes_sent", 0.0)
        calls.setdefault(a, {}).setdefault(e.args.get("kind", e.name), set()).add(e.args.get("call"))
    devices = tuple(DeviceSummary(names[d], mem.peak(d), mem.live(d), compute[d], dict(comm[d]), finish[d])
                    for d in range(n))
    axes = tuple(AxisSummary(a, {k: len(ids) for k, ids in kinds.items()},
                             max(sent[d][a] for d in range(n)), sum(sent[d][a] for d in range(n)),
                             max(comm[d][a] for d in range(n)))
                 for a, kinds in calls.items())
    return MachineSummary(machine.preset.name, mem.capacity, machine.step_time, devices, axes)
