"""Pictures of a machine (SIM-PLOT-1): the figures carry the machine's numbers; without
matplotlib, a clean SimError. Skipped when matplotlib is not installed."""
import builtins
import subprocess
import sys

import pytest

from tessera_ref import sim
from tessera_ref.errors import SimError
from tessera_ref.sim import Machine
from tessera_ref.sim.figures import memory_figure, roofline_figure, roofline_points, timeline_figure

MIB = 1 << 20
PNG = b"\x89PNG\r\n\x1a\n"


def _machine():
    m = Machine("H100", 2)
    m.alloc(0, 3 * 1024 * MIB, "W")  # 3 GiB on cuda:0
    m.record_compute([0, 1], "matmul", (989.5e9, 1e9), "bf16")  # 1 ms each, compute-bound
    m.record_compute(0, "add", (1e6, 3.35e9), "f32")  # 1 ms, memory-bound
    m.record_collective("all_reduce", [(0, 1)], MIB, axis="dp")
    return m


def test_roofline_points_are_intensity_and_achieved_rate():
    pts = roofline_points(_machine())
    # matmul: 2 events of 989.5 GFLOP and 1 GB in 1 ms each -> intensity 989.5, rate 989.5e12
    assert pts["matmul", "bf16"] == (pytest.approx(989.5), pytest.approx(989.5e12))
    assert pts["add", "f32"] == (pytest.approx(1e6 / 3.35e9), pytest.approx(1e9))
    assert set(pts) == {("matmul", "bf16"), ("add", "f32")}


def test_figures_carry_the_numbers():
    pytest.importorskip("matplotlib")
    m = _machine()
    bars = memory_figure(m).axes[0].patches
    assert [b.get_height() for b in bars[:2]] == [pytest.approx(3.0), 0.0]  # peak GiB per device
    ax = roofline_figure(m).axes[0]
    offsets = sorted(tuple(c.get_offsets()[0]) for c in ax.collections)
    assert offsets[1] == (pytest.approx(989.5), pytest.approx(989.5e12))
    tl = timeline_figure(m).axes[0]
    lanes = {}  # (lane top, rounded) -> [(start us, end us)]
    for c in tl.collections:
        for path in c.get_paths():
            v = path.vertices
            lanes.setdefault(round(float(v[:, 1].min()), 2), []).append(
                (round(float(v[:, 0].min()), 6), round(float(v[:, 0].max()), 6)))
    # device d's compute lane at y = d, its comm lane at d + 0.42; 1 ms = 1000 us per op; the
    # all_reduce waits for cuda:0's add, then takes what the timeline says
    ar = m.timeline.events[-1].duration * 1e6
    assert sorted(lanes[0.0]) == [(0, 1000), (1000, 2000)]
    assert lanes[1.0] == [(0, 1000)]
    assert lanes[0.42] == lanes[1.42] == [(2000, round(2000 + ar, 6))]


def test_plot_writes_png_files(tmp_path):
    pytest.importorskip("matplotlib")
    paths = sim.plot(_machine(), str(tmp_path))
    assert sorted(paths) == ["memory", "roofline", "timeline"]
    for path in paths.values():
        assert open(path, "rb").read(8) == PNG
    with pytest.raises(SimError, match="unknown figure"):
        sim.plot(_machine(), str(tmp_path), figures=("pie",))
    with pytest.raises(SimError, match="not a directory"):
        sim.plot(_machine(), str(tmp_path / "nope"))


def test_without_matplotlib_a_clean_error(monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(SimError, match="matplotlib") as e:
        memory_figure(_machine())
    assert "tessera_ref[plot]" in e.value.fix


def test_sim_plot_option(tmp_path):
    pytest.importorskip("matplotlib")
    script = tmp_path / "p.py"
    script.write_text("from tessera import sim\nsim.current().record_compute(0, 'matmul', (1e12, 1e9), 'bf16')\n")
    out = subprocess.run([sys.executable, "-m", "tessera_ref.cli", "sim", "--preset", "H100", "--plot",
                          str(tmp_path), str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "timeline.png").read_bytes()[:8] == PNG and "figures of" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "tessera_ref.cli", "sim", "--plot", str(tmp_path / "no"),
                          str(script)], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a directory" in bad.stderr and "Traceback" not in bad.stderr
