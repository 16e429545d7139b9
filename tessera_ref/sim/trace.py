"""The timeline as a Chrome trace, the JSON that Perfetto and chrome://tracing open (SIM-TRACE-1)."""
from __future__ import annotations

from .timeline import STREAMS
from .units import GiB

__all__ = ["chrome_trace", "collective_flows"]


def _us(seconds: float) -> float:
    return seconds * 1e6


def chrome_trace(timeline, device_names: tuple, title: str) -> dict:
    """``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``: one process per
    device (``pid`` = device index, named by metadata events), one thread per stream (``tid``
    0 = compute, 1 = comm, and ``1 + k`` for comm lane ``k`` when communication overlaps), one
    complete event (``ph: "X"``, ``ts``/``dur`` in µs) per op with its facts in ``args``, the
    flows joining the ranks of each collective (:func:`collective_flows`), and an ``HBM live``
    counter (``ph: "C"``, GiB) per device."""
    events = []
    for d, name in enumerate(device_names):
        events.append({"name": "process_name", "ph": "M", "pid": d, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": d, "tid": 0, "args": {"sort_index": d}})
        for tid, stream in enumerate(STREAMS):
            events.append({"name": "thread_name", "ph": "M", "pid": d, "tid": tid, "args": {"name": stream}})
    lanes = {}  # (device, tid) of a further comm lane (SIM-TL-6) -> its mesh axis
    for e in timeline.events:
        tid = STREAMS.index(e.stream) + e.lane
        if e.lane:
            lanes.setdefault((e.device, tid), e.args.get("axis"))
        events.append({"name": e.name, "cat": e.stream, "ph": "X", "ts": _us(e.start), "dur": _us(e.duration),
                       "pid": e.device, "tid": tid, "args": dict(e.args)})
    for (d, tid), axis in sorted(lanes.items()):
        events.append({"name": "thread_name", "ph": "M", "pid": d, "tid": tid, "args": {"name": f"comm[{axis}]"}})
    events += collective_flows(timeline)
    for device, time, live in timeline.memory_samples:
        events.append({"name": "HBM live", "ph": "C", "ts": _us(time), "pid": device,
                       "args": {"GiB": live / GiB}})
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"machine": title}}


def collective_flows(timeline) -> list:
    """Flow events (``ph`` ``"s"``, ``"t"`` … ``"f"``, one ``id`` per group of one collective
    call) joining the comm events of a collective's ranks in device order, each at the middle
    of its rank's event and bound to it (``bp: "e"``), so Perfetto draws arrows from rank to
    rank (SIM-TRACE-2). Point-to-point transfers and groups of one have none."""
    groups: dict = {}  # (call, group) -> its events in device order
    for e in timeline.events:
        if e.stream == "comm" and "group" in e.args:
            groups.setdefault((e.args["call"], e.args["group"]), []).append(e)
    flows = []
    for flow_id, members in enumerate(groups.values(), start=1):
        members.sort(key=lambda e: e.device)
        if len(members) < 2:
            continue
        for k, e in enumerate(members):
            phase = "s" if k == 0 else "f" if k == len(members) - 1 else "t"
            flows.append({"name": e.name, "cat": "collective", "ph": phase, "id": flow_id, "bp": "e",
                          "ts": _us(e.start + e.duration / 2), "pid": e.device,
                          "tid": STREAMS.index(e.stream) + e.lane})
    return flows
