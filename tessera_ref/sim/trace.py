"""The timeline as a Chrome trace, the JSON that Perfetto and chrome://tracing open (SIM-TRACE-1)."""
from __future__ import annotations

from .timeline import STREAMS
from .units import GiB

__all__ = ["chrome_trace"]


def _us(seconds: float) -> float:
    return seconds * 1e6


def chrome_trace(timeline, device_names: tuple, title: str) -> dict:
    """``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``: one process per
    device (``pid`` = device index, named by metadata events), one thread per stream (``tid``
    0 = compute, 1 = comm, and ``1 + k`` for comm lane ``k`` when communication overlaps), one complete event (``ph: "X"``, ``ts``/``dur`` in µs) per op with
    its facts in ``args``, and an ``HBM live`` counter (``ph: "C"``, GiB) per device."""
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
    for device, time, live in timeline.memory_samples:
        events.append({"name": "HBM live", "ph": "C", "ts": _us(time), "pid": device,
                       "args": {"GiB": live / GiB}})
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"machine": title}}
