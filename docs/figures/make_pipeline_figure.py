"""Make docs/figures/pipeline_schedules.png: GPipe, 1F1B and interleaved 1F1B on 4 devices and 8
micro-batches, placed by ``tessera_ref.sim.pipeline.timing`` (SIM-PP-1, SIM-PP-2), forward 1 and
backward 2 time units (interleaved: each of the 2 chunks half of that).

Run from the repository root with matplotlib installed::

    python docs/figures/make_pipeline_figure.py
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tessera_ref.sim.pipeline import bubble_fraction, order, timing

HERE = os.path.dirname(os.path.abspath(__file__))
P, M = 4, 8


def main() -> None:
    rows = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)]
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 6.5), sharex=True)
    for ax, (schedule, v) in zip(axes, rows):
        placed = timing(order(schedule, P, M, v), lambda d, a: (1.0 if a.kind == "F" else 2.0) / v)
        for x in placed:
            color = "#4c72b0" if x.action.kind == "F" else "#dd8452"
            if x.action.chunk >= P:  # the second model chunk of a device, interleaved
                color = "#8fa8d8" if x.action.kind == "F" else "#f0b58c"
            ax.broken_barh([(x.start, x.end - x.start)], (x.device - 0.4, 0.8), facecolors=color, edgecolor="white")
            ax.text((x.start + x.end) / 2, x.device, str(x.action.microbatch), ha="center", va="center", fontsize=7,
                    color="white")
        end = max(x.end for x in placed)
        label = f"{schedule}" + (f", v={v}" if v > 1 else "")
        ax.set_title(f"{label}: step {end:g} units for {M * 3} of work per device, bubble "
                     f"{(end - 3 * M) / (3 * M):.3f} = (p-1)/{'(v·m)' if v > 1 else 'm'} = "
                     f"{bubble_fraction(schedule, P, M, v):.3f}", fontsize=9, loc="left")
        ax.set_yticks(range(P), [f"stage {d}" for d in range(P)])
        ax.invert_yaxis()
    axes[-1].set_xlabel("time (forward = 1, backward = 2; numbers are micro-batches; blue forward, orange backward)")
    fig.tight_layout()
    path = os.path.join(HERE, "pipeline_schedules.png")
    fig.savefig(path, dpi=110)
    print("wrote", os.path.relpath(path))


if __name__ == "__main__":
    main()
