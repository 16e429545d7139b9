"""How much communication compute hides, and the critical path (SIM-REPORT-2).

A comm event's *hidden* time is the part of it during which its device computes; the rest is
*exposed*: the device only communicates (or waits). In program order every comm event is
exposed, so the report shows the overlapped schedule's.
"""
from __future__ import annotations

import bisect
from collections import defaultdict

from .units import device_ranges, fmt_time

__all__ = ["comm_exposure", "overlap_report"]

NO_AXIS = "-"


def comm_exposure(timeline) -> dict:
    """``{(device, axis): (exposed, hidden)}`` seconds of communication, per device and mesh
    axis (``"-"`` for none)."""
    busy = defaultdict(list)  # device -> its compute intervals, in time order (one compute lane)
    for e in timeline.events:
        if e.stream == "compute" and e.duration > 0:
            busy[e.device].append((e.start, e.end))
    for intervals in busy.values():
        intervals.sort()
    out = defaultdict(lambda: [0.0, 0.0])
    for e in timeline.events:
        if e.stream != "comm":
            continue
        intervals = busy.get(e.device, [])
        hidden = 0.0
        i = max(0, bisect.bisect_left(intervals, (e.start, e.start)) - 1)
        for start, end in intervals[i:]:
            if start >= e.end:
                break
            hidden += max(0.0, min(end, e.end) - max(start, e.start))
        slot = out[e.device, e.args.get("axis") or NO_AXIS]
        slot[0] += e.duration - hidden
        slot[1] += hidden
    return {k: tuple(v) for k, v in out.items()}


def overlap_report(machine, top: int = 8) -> list:
    """The report's lines on overlap (SIM-REPORT-2): both step times, then, for the overlapped
    schedule, communication exposed vs hidden per mesh axis and per device (identical devices
    collapsed) and the critical path."""
    names = machine.device_names
    lines = ["", f"Overlap: step time {fmt_time(machine.conservative_step_time)} in program order (all "
                 f"communication exposed), {fmt_time(machine.overlapped_step_time)} with communication under "
                 "independent compute; with overlap:"]
    exposure = comm_exposure(machine.timeline_of(overlap=True))
    axes = list(dict.fromkeys(axis for _, axis in exposure))
    if axes:
        rows: dict = {}
        for d in range(len(names)):
            row = tuple(f"{fmt_time(exposure.get((d, a), (0.0, 0.0))[0])} / "
                        f"{fmt_time(exposure.get((d, a), (0.0, 0.0))[1])}" for a in axes)
            rows.setdefault(row, []).append(d)
        lines.append("  communication exposed / hidden under compute, per device:")
        headers = ["devices", *(f"comm[{a}]" for a in axes)]
        table = [[device_ranges(names, ds), *row] for row, ds in rows.items()]
        widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(headers)]
        lines += ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [headers, *table]]
    path = machine.critical_path(overlap=True)
    if path:
        compute = sum(e.duration for e in path if e.stream == "compute")
        comm = sum(e.duration for e in path if e.stream == "comm")
        waiting = path[-1].end - compute - comm
        waiting = waiting if waiting > 1e-9 * path[-1].end else 0.0  # not the rounding of the sums
        lines.append(f"  critical path: {len(path)} ops on {device_ranges(names, sorted({e.device for e in path}))}, "
                     f"{fmt_time(compute)} compute + {fmt_time(comm)} communication + {fmt_time(waiting)} waiting")
        shown = path if len(path) <= top else path[:top // 2] + [None] + path[-(top - top // 2):]
        lines += ["    ..." if e is None else f"    {fmt_time(e.start):>10} {e.name} on {names[e.device]} "
                  f"({e.stream}, {fmt_time(e.duration)})" for e in shown]
    return lines
