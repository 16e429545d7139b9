"""The simulated machine: devices of a preset, their memory and their timeline (SIM-TL-1 … SIM-TL-4).

A :class:`Machine` is what a simulated mesh records into: allocations (the memory
accountant), compute (roofline time) and communication (alpha-beta time), each placed on the
timeline of the devices involved. It can be exported as a Chrome trace and summarized as a
text report.
"""
from __future__ import annotations

import json
import math
import numbers
from collections import Counter

from ..errors import SimError, user_location
from .collectives import collective_cost
from .devices import device_names as _device_names
from .devices import resolve_device
from .memory import Allocation, MemoryAccountant
from .overlap import overlap_report
from .presets import get_preset
from .analysis import MachineSummary, summarize
from .summary import machine_report
from .roofline import Roofline, roofline
from .schedule import Scheduler
from .trace import chrome_trace
from .units import device_ranges

__all__ = ["Machine", "MAX_EVENTS"]

#: The default bound on a machine's timeline: events and memory samples together (SIM-TL-9).
#: Each costs a few hundred bytes of host memory with both schedules kept (under 1 KiB).
MAX_EVENTS = 1_000_000


class Machine:
    """``n_devices`` GPUs of ``preset`` (a name or a :class:`~tessera_ref.sim.presets.Preset`;
    default: as many as one NVLink domain holds), named ``device_names`` (default ``cuda:i``).

    Devices are addressed by index or name everywhere. Devices ``k·D … k·D + D − 1`` form
    NVLink domain ``k`` (``D`` = ``preset.devices_per_domain``). ``launch_overhead`` seconds
    are added to every compute op (SIM-ROOF-1; default 0).

    ``overlap=False`` (the default) places ops in program order, communication never under
    compute: the conservative bound of SIM-TL-2, the timeline and step time of before. With
    ``overlap=True`` ops start when their inputs are ready and their stream is free, so
    communication overlaps independent compute (SIM-TL-5 … SIM-TL-8). Both schedules are
    always kept: :attr:`conservative_step_time` and :attr:`overlapped_step_time`; the flag
    picks the one the timeline, trace and :attr:`step_time` show.

    ``efficiency=True`` charges compute at the achievable fractions of peak the preset states
    per op class (SIM-ROOF-3; presets that state none are pure roofline either way);
    ``efficiency=False`` is pure roofline on every preset.

    The timeline holds at most ``max_events`` events and memory samples (SIM-TL-9): a record
    that would pass the bound is a :class:`~tessera_ref.errors.SimError` before any of it is kept.
    """

    def __init__(self, preset="GB200-NVL72", n_devices=None, device_names=None, launch_overhead: float = 0.0,
                 overlap: bool = False, efficiency: bool = True, max_events: int = MAX_EVENTS):
        self.preset = get_preset(preset)
        n = self.preset.devices_per_domain if n_devices is None else n_devices
        self.device_names = _device_names(n, device_names)
        if not isinstance(launch_overhead, numbers.Real) or not math.isfinite(launch_overhead) or launch_overhead < 0:
            raise SimError(f"launch_overhead must be a finite number of seconds >= 0, got {launch_overhead!r}",
                           fix="pass e.g. launch_overhead=3e-6, or leave it out")
        self.launch_overhead = float(launch_overhead)
        if not isinstance(overlap, bool):
            raise SimError(f"overlap must be True or False, got {overlap!r}",
                           fix="pass overlap=True to let communication run under independent compute")
        self.overlap = overlap
        if not isinstance(efficiency, bool):
            raise SimError(f"efficiency must be True or False, got {efficiency!r}",
                           fix="pass efficiency=False for pure roofline times")
        self.efficiency = efficiency
        if isinstance(max_events, bool) or not isinstance(max_events, numbers.Integral) or max_events < 1:
            raise SimError(f"max_events must be an int >= 1, got {max_events!r}",
                           fix=f"pass e.g. max_events=10_000_000, or leave it out (default {MAX_EVENTS:,})")
        self.max_events = int(max_events)
        self.memory = MemoryAccountant(self.preset.hbm_capacity, self.device_names)
        # the schedule shown (the flag's) first, the other one kept for its step time
        self._schedules = (Scheduler(len(self.device_names), overlap), Scheduler(len(self.device_names), not overlap))
        self.timeline = self._schedules[0].timeline
        self._calls = 0  # record_collective / record_transfer calls so far: each event's "call" id
        self._looked_up: dict = {}  # (id of a tuple of devices or groups, what) -> (the tuple, its indices)

    def __repr__(self) -> str:
        return f"Machine({self.preset.name!r}, {self.n_devices} devices)"

    @property
    def n_devices(self) -> int:
        return len(self.device_names)

    def device(self, device) -> int:
        """The index of ``device`` (an index or a name)."""
        return resolve_device(device, self.device_names)

    def domain_of(self, device) -> int:
        """The NVLink domain of ``device``."""
        return self.device(device) // self.preset.devices_per_domain

    @property
    def step_time(self) -> float:
        """When the last device finishes everything recorded: the step time (SIM-TL-2), of the
        schedule ``overlap`` picks."""
        return self.timeline.end

    @property
    def conservative_step_time(self) -> float:
        """The step time in program order, communication never under compute (SIM-TL-2)."""
        return self._schedule(False).timeline.end

    @property
    def overlapped_step_time(self) -> float:
        """The step time with communication under independent compute (SIM-TL-5)."""
        return self._schedule(True).timeline.end

    def _schedule(self, overlap: bool) -> Scheduler:
        return next(s for s in self._schedules if s.overlap == overlap)

    def timeline_of(self, overlap: bool):
        """The timeline of the schedule with or without overlap (SIM-TL-8); ``timeline`` is
        the one of the machine's own flag."""
        return self._schedule(overlap).timeline

    def critical_path(self, overlap: bool | None = None) -> list:
        """The events on the critical path of the schedule shown (or of ``overlap``), first to
        last: each one's start was fixed by the one before it (SIM-TL-8)."""
        schedule = self._schedule(self.overlap if overlap is None else overlap)
        return [schedule.timeline.events[i] for i in schedule.critical_path()]

    # -- memory -------------------------------------------------------------------------------
    def alloc(self, device, nbytes: int, name: str, location: str | None = None) -> Allocation:
        """Charge ``nbytes`` of tensor ``name`` to ``device`` (SIM-MEM-1 … SIM-MEM-3); returns
        the handle to :meth:`free`."""
        return self._charge(device, nbytes, name, location if location is not None else user_location(),
                            f"allocating {name!r}")

    def _charge(self, device, nbytes: int, name: str, location: str | None, what: str) -> Allocation:
        self._room(1, what)
        handle = self.memory.alloc(device, nbytes, name, location)
        self.timeline.sample_memory(handle.device, self.memory.live(handle.device))
        return handle

    def free(self, handle: Allocation) -> None:
        """Give back the bytes of ``handle`` (always recorded: it ends an allocation the bound let in)."""
        self.memory.free(handle)
        self.timeline.sample_memory(handle.device, self.memory.live(handle.device))

    def alloc_each(self, devices, nbytes: int, name: str, location: str | None = None) -> list:
        """:meth:`alloc` of ``nbytes`` of tensor ``name`` on each of ``devices`` (indices), the
        fullest first: when the tensor does not fit, it fails before any other device is charged,
        so no peak, warning or timeline sample is left behind (SIM-MEM-4), and nothing stays
        charged. Returns the handles, for :meth:`free_each`."""
        location = location if location is not None else user_location()
        live, what = self.memory.live, f"allocating {name!r}"
        handles = []
        try:
            for d in sorted(devices, key=lambda d: -live(d)):
                handles.append(self._charge(d, nbytes, name, location, what))
        except BaseException:
            self.free_each(handles)  # an out-of-memory error leaves the accountant as it was
            raise
        return handles

    def free_each(self, handles) -> None:
        """:meth:`free` of each of ``handles``, in order."""
        for h in handles:
            self.free(h)

    # -- compute ------------------------------------------------------------------------------
    def record_compute(self, devices, name: str, cost, dtype, location: str | None = None,
                       reads=(), writes=()) -> Roofline:
        """Record the op ``name`` of ``cost = (flops, bytes)`` *per device* on operands of
        ``dtype`` on each of ``devices`` (one device or several), reading the values ``reads``
        and writing ``writes`` (value ids, SIM-TL-5). Each device runs it on its compute stream
        for the roofline time (SIM-TL-2, SIM-ROOF-1); returns that
        :class:`~tessera_ref.sim.roofline.Roofline`."""
        indices = self._devices(devices)
        reads, writes = self._values(name, reads, writes)
        r = roofline(cost, dtype, self.preset, self.launch_overhead, str(name) if self.efficiency else None)
        args = {"flops": cost[0], "bytes": cost[1], "dtype": r.peak_key, "bound": r.bound,
                "location": location if location is not None else user_location()}
        self._room(len(indices), f"the op {name!r}")
        for schedule in self._schedules:
            schedule.place_each(indices, "compute", 0, str(name), r.time, args, reads, writes)
        return r

    # -- communication ------------------------------------------------------------------------
    def record_collective(self, kind: str, groups, nbytes: int, axis: str | None = None,
                          algorithm: str | None = None, location: str | None = None, reads=(), writes=()) -> list:
        """Record the collective ``kind`` run by each group of ``groups`` (tuples of devices;
        no device in two groups) on ``nbytes`` per rank (SIM-COLL-3 for ``nbytes`` and the
        algorithm), reading the values ``reads`` and writing ``writes`` (SIM-TL-5). The members
        of a group start together when the last of them is ready and finish together
        (SIM-TL-3). ``axis`` names the mesh axis for the report and picks the comm lane
        (SIM-TL-6). Returns one :class:`~tessera_ref.sim.collectives.CollectiveCost` per group."""
        groups = self._groups(groups, kind)
        reads, writes = self._values(kind, reads, writes)
        costs = [collective_cost(kind, g, nbytes, self.preset, algorithm) for g in groups]
        location = location if location is not None else user_location()
        label = f"{kind}[{axis}]" if axis else kind
        self._room(sum(len(g) for g, c in zip(groups, costs) if c.ranks >= 2), f"the {label}")
        call = self._next_call()
        for schedule in self._schedules:
            lane = schedule.lane(axis)
            for g, c in zip(groups, costs):
                if c.ranks < 2:
                    schedule.forward(g, reads, writes)
                    continue
                start = max((schedule.earliest(d, "comm", lane, reads, c.tier) for d in g), key=lambda s: s[0])
                args = {"kind": kind, "axis": axis, "algorithm": c.algorithm, "tier": c.tier, "bytes": c.nbytes,
                        "bytes_sent": c.bytes_sent, "group": device_ranges(self.device_names, sorted(g)),
                        "call": call, "location": location}
                for d in g:
                    schedule.place(d, "comm", lane, label, start, c.time, args, writes, (c.tier,))
        return costs

    def record_transfer(self, src, dst, nbytes: int, name: str = "send/recv", axis: str | None = None,
                        location: str | None = None, reads=(), writes=()) -> list:
        """Record point-to-point messages of ``nbytes``: ``src[i]`` sends to ``dst[i]`` (one
        device or equal-length sequences; a device sends at most one and receives at most one
        message per call, never to itself). All messages of one call run concurrently: a
        message starts when both ends are ready and takes ``α + n/β`` of its tier; each device
        is busy on its comm stream from its first message's start to its last one's end
        (SIM-TL-4). A message reads ``reads`` on its source and writes ``writes`` on its
        destination (SIM-TL-5). Returns one :class:`~tessera_ref.sim.collectives.CollectiveCost`
        per message."""
        srcs, dsts = self._devices(src), self._devices(dst)
        reads, writes = self._values(name, reads, writes)
        if len(srcs) != len(dsts):
            raise SimError(f"{name}: {len(srcs)} sources but {len(dsts)} destinations",
                           fix="pass one destination per source")
        for what, ends in (("sends", srcs), ("receives", dsts)):
            twice = sorted({self.device_names[d] for d, k in Counter(ends).items() if k > 1})
            if twice:
                raise SimError(f"{name}: {', '.join(twice)} {what} more than one message in one call",
                               fix="record each round of messages with its own record_transfer call")
        selfsend = [self.device_names[s] for s, t in zip(srcs, dsts) if s == t]
        if selfsend:
            raise SimError(f"{name}: {', '.join(selfsend)} would send to itself",
                           fix="pair each source with a different destination device")
        costs = [collective_cost("send", (s, t), nbytes, self.preset) for s, t in zip(srcs, dsts)]
        location = location if location is not None else user_location()
        label = f"{name}[{axis}]" if axis else name
        self._room(len(set(srcs) | set(dsts)), f"the {label}")
        call = self._next_call()
        for schedule in self._schedules:
            lane = schedule.lane(axis)
            spans: dict = {}  # device -> its part in the call: start, end, bytes sent, peers, tiers
            for s, t, c in zip(srcs, dsts, costs):
                start = max(schedule.earliest(s, "comm", lane, reads, c.tier),
                            schedule.earliest(t, "comm", lane, (), c.tier), key=lambda x: x[0])
                for d, peer, sent in ((s, t, c.bytes_sent), (t, s, 0.0)):
                    span = spans.setdefault(d, {"start": start, "end": start[0], "sent": 0.0, "peers": [],
                                                "tiers": set()})
                    span["start"] = min(span["start"], start, key=lambda x: x[0])
                    span["end"] = max(span["end"], start[0] + c.time)
                    span["sent"] += sent
                    span["peers"].append(self.device_names[peer])
                    span["tiers"].add(c.tier)
            received = set(dsts)
            for d in sorted(spans):
                span = spans[d]
                args = {"kind": "send/recv", "axis": axis, "tier": "+".join(sorted(span["tiers"])),
                        "bytes": int(nbytes), "bytes_sent": span["sent"], "peers": ", ".join(span["peers"]),
                        "call": call, "location": location}
                schedule.place(d, "comm", lane, label, span["start"], span["end"] - span["start"][0], args,
                               writes if d in received else (), tuple(sorted(span["tiers"])))
        return costs

    @staticmethod
    def _values(what: str, reads, writes) -> tuple:
        """``reads`` and ``writes`` as tuples of value ids (hashable; SIM-TL-5)."""
        out = []
        for role, values in (("reads", reads), ("writes", writes)):
            try:
                values = tuple(values)
                for v in values:
                    hash(v)
            except TypeError:
                raise SimError(f"{what}: {role}= must be a sequence of value ids (ints or other hashable keys), "
                               f"got {values!r}", fix=f"pass e.g. {role}=(1, 2), or leave it out") from None
            out.append(values)
        return tuple(out)

    def _room(self, count: int, what: str) -> None:
        """Refuse a record of ``count`` entries that would pass ``max_events`` (SIM-TL-9)."""
        held = len(self.timeline.events) + len(self.timeline.memory_samples)
        if held + count > self.max_events:
            raise SimError(
                f"the simulated machine's timeline is full: it holds {held:,} events and memory samples of "
                f"max_events={self.max_events:,} (each under 1 KiB of host memory), and {what} would add "
                f"{count:,} more", fix="simulate fewer steps on one machine (a new sim.machine(...) for each step "
                "keeps each step's report), or pass a larger max_events= to sim.machine")

    def _next_call(self) -> int:
        self._calls += 1
        return self._calls

    def _devices(self, devices, remember: bool = True) -> tuple:
        """Indices of one device or a sequence of devices (``remember``: see :meth:`_lookup`)."""
        if isinstance(devices, (str, numbers.Integral)):
            return (self.device(devices),)
        return self._lookup(devices, False, remember)

    def present(self, devices) -> tuple:
        """The indices of those of ``devices`` (names) that this machine has, in their order
        (a sub-mesh's devices, or a mesh of devices of which only some are simulated)."""
        return self._lookup(devices, True, True)

    def _lookup(self, devices, skip_absent: bool, remember: bool) -> tuple:
        """Indices of the sequence ``devices``. With ``remember``, a tuple (a mesh's devices) is
        looked up once and then found by identity: an op on a mesh of n devices looks up no
        name and builds no list of n (SIM-TL-1)."""
        def indices():
            if skip_absent:
                positions = self.device_names.positions
                return tuple(positions[d] for d in devices if isinstance(d, str) and d in positions)
            return tuple(self.device(d) for d in devices)
        return self._remember(devices, skip_absent, indices) if remember else indices()

    def _remember(self, key, tag, make):
        """``make()``, computed once per immutable ``key`` (a tuple) and ``tag`` and then found by
        the key's identity; other keys are not remembered."""
        if not isinstance(key, tuple):
            return make()
        hit = self._looked_up.get((id(key), tag))
        if hit is not None and hit[0] is key:
            return hit[1]
        out = make()
        if len(self._looked_up) >= 256:  # meshes are few; sub-meshes made in a loop are not kept forever
            self._looked_up.clear()
        self._looked_up[id(key), tag] = (key, out)
        return out

    def _groups(self, groups, kind: str) -> tuple:
        """``groups`` as tuples of device indices, each device in at most one group (a tuple of
        groups, as a mesh gives them for an axis, is resolved once)."""
        if isinstance(groups, (str, numbers.Integral)):
            raise SimError(f"{kind}: groups must be a list of tuples of devices, got {groups!r}",
                           fix="pass e.g. groups=[(0, 1, 2, 3), (4, 5, 6, 7)]")

        def resolve():
            out, seen = [], set()
            for g in groups:
                g = self._devices(g, remember=False)
                if not g or len(set(g)) != len(g) or seen & set(g):
                    raise SimError(f"{kind}: bad group {g!r} — groups must be non-empty, without repeated devices, "
                                   "and disjoint", fix="pass each device at most once over all groups")
                seen |= set(g)
                out.append(g)
            return tuple(out)
        return self._remember(groups, "groups", resolve)

    # -- output -------------------------------------------------------------------------------
    def chrome_trace(self) -> dict:
        """The timeline as a Chrome/Perfetto trace dict (SIM-TRACE-1)."""
        return chrome_trace(self.timeline, self.device_names, f"{self.preset.name} x {self.n_devices}")

    def save_trace(self, path) -> None:
        """Write :meth:`chrome_trace` as JSON to ``path`` (open it in https://ui.perfetto.dev)."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)

    def report(self, top: int = 10) -> str:
        """The text summary of :func:`~tessera_ref.sim.summary.machine_report`, then, when
        anything ran, :func:`~tessera_ref.sim.overlap.overlap_report` (SIM-REPORT-2)."""
        text = machine_report(self, top=top)
        return "\n".join([text, *overlap_report(self)]) if self.timeline.events else text

    def summary(self) -> MachineSummary:
        """The report's numbers as data: :func:`~tessera_ref.sim.analysis.summarize` (SIM-SUMMARY-1)."""
        return summarize(self)
