"""The text report of a simulated machine (SIM-REPORT-1).

Per device: HBM peak and live against capacity, compute time, communication time per mesh
axis, time spent waiting for other devices, and when it finished; devices whose rows read
the same are one row. Then communication per mesh axis (collectives, bytes sent), the ops
that took the most device time, and the live tensors of the fullest device.
"""
from __future__ import annotations

from collections import defaultdict

from .units import GB, TB, device_ranges, fmt_bytes, fmt_time

__all__ = ["machine_report"]

NO_AXIS = "-"


def _table(headers: list, rows: list, indent: str = "  ") -> list:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return lines


def _axis(event) -> str:
    return event.args.get("axis") or NO_AXIS


def machine_report(machine, top: int = 10) -> str:
    """The report of ``machine``: its hardware, the step time, a per-device table with
    identical rows collapsed, communication per mesh axis, the ``top`` ops by device time and
    the live tensors of the fullest device (SIM-REPORT-1)."""
    p, names, mem, tl = machine.preset, machine.device_names, machine.memory, machine.timeline
    n = len(names)
    events = tl.events
    axes = list(dict.fromkeys(_axis(e) for e in events if e.stream == "comm"))
    compute = [0.0] * n
    comm = defaultdict(float)  # (device, axis) -> seconds
    sent = defaultdict(float)  # (device, axis) -> bytes
    for e in events:
        if e.stream == "compute":
            compute[e.device] += e.duration
        else:
            comm[e.device, _axis(e)] += e.duration
            sent[e.device, _axis(e)] += e.args.get("bytes_sent", 0.0)

    cap = mem.capacity
    lines = [f"Simulated machine: {p.name}, {n} x {p.gpu}",
             f"  per GPU: {fmt_bytes(cap)} of {p.hbm_kind} (capacity in binary units)",
             f"  bandwidths: {p.hbm_kind} {p.hbm_bandwidth / TB:g} TB/s; {p.nvlink.name} "
             f"{p.nvlink.bandwidth / GB:g} GB/s per direction, {p.devices_per_domain} GPUs per domain; "
             f"{p.network.name} {p.network.bandwidth / GB:g} GB/s between domains"]
    if not events and not any(mem.peak(d) for d in range(n)):
        lines.append("  nothing was recorded (no allocations, compute or communication)")
        return "\n".join(lines)
    step = tl.end
    last = max(range(n), key=lambda d: tl.ready(d))
    lines.append(f"Step time: {fmt_time(step)} (max over devices; last to finish: {names[last]})")

    # -- per device, identical rows collapsed -----------------------------------------------------
    def pct(b: int) -> str:
        return f"{fmt_bytes(b)} ({100 * b / cap:.1f}%)"

    rows: dict = {}
    for d in range(n):
        busy = compute[d] + sum(comm[d, a] for a in axes)
        row = (pct(mem.peak(d)), pct(mem.live(d)), fmt_time(compute[d]),
               *(fmt_time(comm[d, a]) for a in axes), fmt_time(max(0.0, tl.ready(d) - busy)),  # not -1e-21
               fmt_time(tl.ready(d)))
        rows.setdefault(row, []).append(d)
    headers = ["devices", "HBM peak", "HBM live", "compute", *(f"comm[{a}]" for a in axes), "waiting", "finish"]
    lines += ["", f"Devices (HBM capacity {fmt_bytes(cap)}; guideline: peak within 80%):"]
    lines += _table(headers, [[device_ranges(names, ds), *row] for row, ds in rows.items()])
    over = [d for d in range(n) if mem.peak(d) * 5 > cap * 4]
    if over:
        lines.append(f"  over 80% of HBM at peak: {device_ranges(names, over)}")

    # -- communication per mesh axis ----------------------------------------------------------------
    if axes:
        lines += ["", "Communication by mesh axis (per device: the busiest device):"]
        table = []
        for a in axes:
            evs = [e for e in events if e.stream == "comm" and _axis(e) == a]
            calls = defaultdict(set)  # (kind, algorithm, tier) -> ids of the record_* calls
            for e in evs:
                calls[e.args["kind"], e.args.get("algorithm", "direct"), e.args["tier"]].add(e.args["call"])
            what = ", ".join(f"{k} x{len(c)} ({alg}, {tier})" for (k, alg, tier), c in calls.items())
            table.append([a, what, fmt_time(max(comm[d, a] for d in range(n))),
                          fmt_bytes(max(sent[d, a] for d in range(n))), fmt_bytes(sum(sent[d, a] for d in range(n)))])
        lines += _table(["axis", "collectives (algorithm, tier)", "time/device", "sent/device", "sent, all devices"],
                        table)

    # -- top ops -------------------------------------------------------------------------------------
    if events:
        ops = defaultdict(lambda: [0, 0.0, None])  # (name, stream) -> events, device-time, location
        for e in events:
            op = ops[e.name, e.stream]
            op[0] += 1
            op[1] += e.duration
            op[2] = op[2] or e.args.get("location")
        total = sum(op[1] for op in ops.values()) or 1.0
        ranked = sorted(ops.items(), key=lambda kv: -kv[1][1])[:top]
        lines += ["", f"Top ops by device time (summed over devices; {len(ops)} distinct):"]
        lines += _table(["op", "stream", "events", "device time", "share", "first at"],
                        [[name, stream, str(k), fmt_time(t), f"{100 * t / total:.1f}%", loc or "-"]
                         for (name, stream), (k, t, loc) in ranked])

    # -- live tensors ---------------------------------------------------------------------------------
    fullest = max(range(n), key=lambda d: mem.live(d))
    live = mem.live_tensors(fullest)
    if live:
        shown = ", ".join(f"{a.name} ({fmt_bytes(a.nbytes)})" for a in live[:5])
        more = f", and {len(live) - 5} more" if len(live) > 5 else ""
        lines += ["", f"Live tensors on {names[fullest]} (the fullest device, {fmt_bytes(mem.live(fullest))}): "
                      f"{shown}{more}"]
    return "\n".join(lines)
