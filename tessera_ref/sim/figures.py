"""Pictures of a simulated machine (SIM-PLOT-1), with matplotlib (the ``plot`` extra).

:func:`memory_figure` (HBM peak and live per device against the capacity and the 80%
guideline), :func:`roofline_figure` (each compute op's arithmetic intensity and achieved
FLOP/s under the preset's roofs) and :func:`timeline_figure` (each device's compute and comm
streams over time) return matplotlib figures; :func:`plot` writes all three as PNG files. They
read the machine's public records only: :meth:`~tessera_ref.sim.Machine.summary`, the
timeline's events and the preset.
"""
from __future__ import annotations

import os

from ..errors import SimError
from .memory import WARN_FRACTION
from .units import GiB

__all__ = ["plot", "memory_figure", "roofline_figure", "timeline_figure", "roofline_points", "FIGURES"]

#: The figures :func:`plot` writes, by file stem.
FIGURES = ("memory", "roofline", "timeline")

_COLORS = {"compute": "#4C72B0", "comm": "#DD8452"}


def _figure(width: float, height: float):
    """A matplotlib Figure (no pyplot, no global backend change); a SimError without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise SimError("plots need matplotlib, which is not installed",
                       fix='pip install "tessera_ref[plot]" (or pip install matplotlib)') from None
    return Figure(figsize=(width, height), layout="constrained")


def memory_figure(machine):
    """Bars of HBM peak and live GiB per device, with the capacity and 80% lines."""
    s = machine.summary()
    fig = _figure(max(6.0, 0.12 * len(s.devices) + 2), 3.5)
    ax = fig.add_subplot()
    xs = range(len(s.devices))
    ax.bar(xs, [d.peak_bytes / GiB for d in s.devices], color="#8172B3", label="peak")
    ax.bar(xs, [d.live_bytes / GiB for d in s.devices], color="#55A868", width=0.5, label="live at the end")
    ax.axhline(s.hbm_capacity_bytes / GiB, color="black", linewidth=1, label="capacity")
    ax.axhline(s.hbm_capacity_bytes * float(WARN_FRACTION) / GiB, color="gray", linestyle="--", linewidth=1,
               label="80% guideline")
    ax.set_xlabel("device")
    ax.set_ylabel("HBM (GiB)")
    ax.set_title(f"HBM per device: {s.preset} x {len(s.devices)}")
    ax.legend(loc="upper right", fontsize="small")
    return fig


def roofline_points(machine) -> dict:
    """``{(op, peak key): (arithmetic intensity in FLOP/byte, achieved FLOP/s)}`` over the
    compute events of ``machine`` (all devices; an op's FLOPs and bytes summed over its events,
    divided by their summed time). Ops that move no bytes or take no time are left out."""
    sums: dict = {}
    for e in machine.timeline.events:
        if e.stream == "compute":
            flops, nbytes, time = sums.get((e.name, e.args["dtype"]), (0.0, 0.0, 0.0))
            sums[e.name, e.args["dtype"]] = (flops + e.args["flops"], nbytes + e.args["bytes"], time + e.duration)
    return {key: (f / b, f / t) for key, (f, b, t) in sums.items() if b > 0 and t > 0 and f > 0}


def roofline_figure(machine):
    """Log-log roofline of the preset (HBM slope, one flat roof per peak used) with one point per op."""
    p = machine.preset
    points = roofline_points(machine)
    fig = _figure(6.5, 4.5)
    ax = fig.add_subplot()
    keys = sorted({k for _, k in points}, key=lambda k: -p.peaks[k]) or ["f32"]
    lo = min([x for x, _ in points.values()] + [0.1]) / 2
    hi = max([x for x, _ in points.values()] + [p.peaks[k] / p.hbm_bandwidth for k in keys]) * 4
    for k in keys:
        ridge = p.peaks[k] / p.hbm_bandwidth
        ax.plot([lo, ridge, hi], [lo * p.hbm_bandwidth, p.peaks[k], p.peaks[k]], color="gray", linewidth=1)
        ax.annotate(f"{k} {p.peaks[k] / 1e12:g} TFLOP/s", (hi, p.peaks[k]), ha="right", va="bottom", fontsize="small")
    for (name, k), (x, y) in sorted(points.items()):
        ax.scatter([x], [y], s=18, zorder=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, -10), fontsize="x-small")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"Roofline: {p.name} (HBM {p.hbm_bandwidth / 1e12:g} TB/s)")
    return fig


def timeline_figure(machine):
    """One row per device (two lanes: compute above, comm below), time in microseconds."""
    n = machine.n_devices
    fig = _figure(9.0, max(2.5, 0.16 * n + 1.2))
    ax = fig.add_subplot()
    lanes: dict = {}
    for e in machine.timeline.events:
        lanes.setdefault((e.device, e.stream), []).append((e.start * 1e6, e.duration * 1e6))
    handles = {}  # one legend entry per stream
    for (device, stream), spans in lanes.items():
        y = device + (0.0 if stream == "compute" else 0.42)
        handles[stream] = ax.broken_barh(spans, (y, 0.4), facecolors=_COLORS[stream])
    if handles:
        ax.legend([handles[s] for s in _COLORS if s in handles], [s for s in _COLORS if s in handles],
                  loc="upper right", fontsize="small")
    ax.set_ylim(n, 0)
    step = max(1, n // 12)
    ax.set_yticks([d + 0.4 for d in range(0, n, step)], [machine.device_names[d] for d in range(0, n, step)],
                  fontsize="x-small")
    ax.set_xlabel("time (us)")
    ax.set_title(f"Timeline: {machine.preset.name} x {n}, step {machine.step_time * 1e6:.3g} us")
    return fig


def plot(machine=None, directory: str = ".", figures=FIGURES) -> dict:
    """Write the ``figures`` of ``machine`` (default: the current or last used machine) as
    ``DIRECTORY/<figure>.png``; returns ``{figure: path}``."""
    from .active import current, last_used

    machine = machine or current() or last_used()
    if machine is None:
        raise SimError("sim.plot(): no simulated machine has been used",
                       fix="pass a machine, or run the program inside `with sim.use(sim.machine(...)):`")
    unknown = [f for f in figures if f not in FIGURES]
    if unknown:
        raise SimError(f"sim.plot(): unknown figure(s) {unknown}", fix=f"choose from {list(FIGURES)}")
    if not os.path.isdir(directory):
        raise SimError(f"sim.plot(): {directory} is not a directory", fix="create it first, or pass another")
    makers = {"memory": memory_figure, "roofline": roofline_figure, "timeline": timeline_figure}
    paths = {}
    for name in figures:
        paths[name] = os.path.join(directory, f"{name}.png")
        makers[name](machine).savefig(paths[name], dpi=110, metadata={"Software": None})
    return paths
