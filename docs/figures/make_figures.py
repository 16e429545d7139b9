"""Make the figures in docs/figures: the demo's machine after its forward pass and training
step (``tessera-ref demo``, sections 2 and 5), drawn by ``sim.plot`` (SIM-PLOT-1), and the
barrier phases of the race tutorial's kernel (docs/tutorials/find_the_race.md), drawn from
the accesses the tile interpreter's checkers see (TILE-CHECK-7).

Run from the repository root with matplotlib installed (``pip install ".[plot]"``)::

    python docs/figures/make_figures.py

The Sphinx build does not run it (the demo's steps take longer than a docs build should);
the PNGs it writes are committed.
"""
import os
import re

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from tessera_ref import demo, dist, sim
from tessera_ref.interp.tile.checkers import describe_lanes
from tessera_ref.interp.tile.executor import run
from tessera_ref.interp.tile.memory import ALL_LANES

HERE = os.path.dirname(os.path.abspath(__file__))
TUTORIAL = os.path.join(HERE, "..", "tutorials", "find_the_race.md")
BUFFER_COLORS = ("#4C72B0", "#DD8452")


def demo_figures() -> None:
    machine = sim.machine("GB200-NVL72", devices=72)
    with sim.use(machine):
        mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
        x, Wqkv, Wo = (dist.tensor(shape, spec, mesh, dtype="f32", init="randn", seed=seed, name=name)
                       for seed, name, shape, spec in (
                           (0, "x", (4, 288, demo.HEADS * 64), dist.ShardSpec(("batch",), ("dp",))),
                           (1, "Wqkv", (demo.HEADS * 64, 3 * demo.HEADS * 64), dist.ShardSpec(("col",), ("tp",))),
                           (2, "Wo", (demo.HEADS * 64, demo.HEADS * 64), dist.ShardSpec(("row",), ("tp",)))))
        demo.tp_block(x, Wqkv, Wo)
        demo.loss_gradients(x)(Wqkv, Wo)
    for name, path in sim.plot(machine, HERE, figures=("timeline", "roofline")).items():
        os.replace(path, os.path.join(HERE, f"demo_{name}.png"))
        print("wrote", os.path.join("docs", "figures", f"demo_{name}.png"))


def tutorial_accesses(end_of_iteration: str) -> list:
    """The shared-memory accesses of the race tutorial's kernel (its first code block, run as
    written) with ``END_OF_ITERATION`` replaced, on one tile of 128 lanes, findings collected."""
    blocks = re.findall(r"^```python\n(.*?)^```", open(TUTORIAL).read(), re.S | re.M)
    scope: dict = {}
    exec(compile(blocks[0], "find_the_race.md", "exec"), scope)
    k = scope["kernel"].from_source(scope["SOURCE"].replace("END_OF_ITERATION", end_of_iteration),
                                    filename="axpy.tsr")
    accesses: list = []
    report = run(k.module, [scope["X"], scope["Y0"].copy(), scope["alpha"]], grid=1, lanes=128,
                 on_error="collect", observer=accesses.append)
    return accesses, report.findings


def _lane_runs(lanes, lanes_per_tile: int) -> list:
    """``(first, count)`` runs of the lanes of one access (every lane for a tile-collective op)."""
    ids = np.arange(lanes_per_tile) if (lanes == ALL_LANES).any() else np.unique(lanes)
    starts = np.flatnonzero(np.r_[True, np.diff(ids) != 1])
    return [(int(ids[a]), int(b - a)) for a, b in zip(starts, np.r_[starts[1:], len(ids)])]


def _phase_panel(ax, accesses, title: str, buffers: list, lanes: int = 128) -> None:
    """One kernel run: an access per column, lanes up the side, barrier phases shaded."""
    first_race = None
    for x, a in enumerate(accesses):
        color = BUFFER_COLORS[buffers.index(a.buffer) % 2]
        for first, count in _lane_runs(a.lanes, lanes):
            if a.verb.startswith("cp.async writes"):
                style = dict(facecolor="none", edgecolor=color, hatch="///", linewidth=0.8)
            elif a.verb.startswith("cp.async lands"):
                style = dict(facecolor=color, alpha=0.35, edgecolor="none")
            else:
                style = dict(facecolor=color, edgecolor="none")
            ax.add_patch(Rectangle((x - 0.4, first), 0.8, count, **style))
        if a.conflicts.any():
            ax.add_patch(Rectangle((x - 0.45, 0), 0.9, lanes, facecolor="none", edgecolor="#C44E52", linewidth=2))
            if first_race is None:
                first_race = (x, a)
    if first_race is not None:  # the first race, with the reads it conflicts with
        x, a = first_race
        bad = np.flatnonzero(a.conflicts)
        read = next(j for j in range(x - 1, -1, -1) if accesses[j].phase == a.phase
                    and accesses[j].buffer == a.buffer and accesses[j].verb == "reads")
        who = "every lane" if (a.lanes == ALL_LANES).any() else describe_lanes(a.lanes[bad])
        readers = describe_lanes(accesses[read].lanes[np.isin(accesses[read].index[:, 0], a.index[bad, 0])])
        ax.annotate(f"race at {a.location}: {a.verb} {a.buffer}[{int(a.index[bad[0]][0])}:{int(a.index[bad[-1]][0]) + 1}] "
                    f"by {who} in phase {a.phase},\nafter {readers} read them in that phase; the same in every "
                    "later iteration", xy=(x + 0.45, lanes * 0.75), xytext=(x + 1.2, lanes * 1.06), fontsize=7,
                    color="#C44E52", annotation_clip=False, arrowprops=dict(arrowstyle="->", color="#C44E52"))
    phases = [a.phase for a in accesses]
    for p in sorted(set(phases)):
        xs = [x for x, q in enumerate(phases) if q == p]
        ax.axvspan(xs[0] - 0.5, xs[-1] + 0.5, color="0.93" if p % 2 else "white", zorder=0)
        ax.text((xs[0] + xs[-1]) / 2, -9, f"{p}", ha="center", va="top", fontsize=7)
        if p:
            ax.axvline(xs[0] - 0.5, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlim(-0.6, len(accesses) - 0.4)
    ax.set_ylim(-22, lanes + 30)
    ax.set_yticks([0, 32, 64, 96, 128])
    ax.set_xticks([])
    ax.set_ylabel("lane")
    ax.set_title(title, fontsize=9, loc="left")


def race_figure() -> str:
    """The tutorial's racy and fixed kernels side by side: each shared-memory access the
    checkers saw, per lane, in barrier phases (dashed lines: tbarrier()), the race in red."""
    runs = [("pass", "the planted bug: nothing at the end of an iteration"),
            ("tbarrier()", "the fix: tbarrier() at the end of each iteration")]
    fig = Figure(figsize=(9, 5.6), layout="constrained")
    axes = fig.subplots(2, 1)
    for ax, (end, what) in zip(axes, runs):
        accesses, findings = tutorial_accesses(end)
        buffers = sorted({a.buffer for a in accesses})
        races = sum(f.count for f in findings if f.kind == "race")
        _phase_panel(ax, accesses, f"END_OF_ITERATION = {end}: {what} ({races} race findings)", buffers)
    handles = [Patch(facecolor=BUFFER_COLORS[0], label="lane reads s0"),
               Patch(facecolor=BUFFER_COLORS[1], label="lane reads s1"),
               Patch(facecolor="none", edgecolor="black", hatch="///", label="cp.async issued (whole tile)"),
               Patch(facecolor="0.6", alpha=0.35, label="cp.async lands (its wait)"),
               Patch(facecolor="none", edgecolor="#C44E52", linewidth=2, label="access in a race finding")]
    axes[-1].legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=5, fontsize=7)
    axes[-1].set_xlabel("shared-memory accesses of tile 0 in execution order, numbered by barrier phase "
                        "(dashed: tbarrier())")
    path = os.path.join(HERE, "race_phases.png")
    fig.savefig(path, dpi=130)
    return path


def main() -> None:
    demo_figures()
    print("wrote", os.path.relpath(race_figure(), os.path.join(HERE, "..", "..")))


if __name__ == "__main__":
    main()
