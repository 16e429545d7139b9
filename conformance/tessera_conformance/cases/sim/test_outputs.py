"""SIM-TRACE-1, SIM-REPORT-1, SIM-ACT-1, SIM-CLI-1: the trace, the report, the current machine
and ``tessera-ref sim`` for programs run on the backend."""
import json
import re
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tessera_ref import dist, op, sim
from tessera_ref.cli import main as cli_main
from tessera_ref.errors import SimError
from tessera_conformance import clause, eager

from ._machine import run_on
from ._reference import AXES, GiB, choose, groups_of, mesh_of

S = dist.ShardSpec
HERE = Path(__file__).name


def _program(mesh_shape):
    """A small step: a K-split matmul, its all_reduce, an elementwise op; keeps ``y`` alive."""
    mesh = mesh_of(mesh_shape)
    axis = max(AXES[:len(mesh_shape)], key=lambda a: mesh.axis_size(a))
    p = mesh.axis_size(axis)
    kept = []

    def program():
        x = dist.tensor((256, 256 * p), S(("col",), (axis,)), mesh, dtype="bf16", name="x")
        w = dist.tensor((256 * p, 256), S(("row",), (axis,)), mesh, dtype="bf16", name="w")
        y = dist.all_reduce(op.matmul(x, w), axis)
        kept.append(op.exp(y))
        del x, w, y

    return mesh, axis, program, kept



@clause("SIM-TRACE-1")
def test_chrome_trace(backend, mesh_shape, tmp_path):
    """Metadata naming each device and its two streams; one complete event per op per device
    with its facts and the user's line; an HBM counter per device; no overlap on a stream;
    ``save_trace`` writes the same JSON."""
    mesh, _, program, _ = _program(mesh_shape)
    m = sim.Machine("H100", mesh.size)
    run_on(backend, m, program)
    trace = m.chrome_trace()
    events = json.loads(json.dumps(trace))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {d: f"cuda:{d}" for d in range(mesh.size)}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all(threads[d, 0] == "compute" and threads[d, 1] == "comm" for d in range(mesh.size))
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(m.timeline.events)
    for e, ev in zip(complete, m.timeline.events):
        assert (e["pid"], e["cat"], e["tid"], e["name"]) == (ev.device, ev.stream, 0 if ev.stream == "compute" else 1,
                                                            ev.name)
        assert e["ts"] == pytest.approx(ev.start * 1e6) and e["dur"] == pytest.approx(ev.duration * 1e6)
        assert HERE in e["args"]["location"]
        if ev.stream == "compute":
            assert {"flops", "bytes", "bound"} <= set(e["args"]) and "bf16" in e["args"].values()
        else:
            assert {"kind", "axis", "algorithm", "tier", "bytes", "bytes_sent", "group", "call"} <= set(e["args"])
    spans = defaultdict(list)
    for e in complete:
        spans[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for s in spans.values():
        s.sort()
        assert all(b[0] >= a[1] - 1e-9 for a, b in zip(s, s[1:]))
    counters = [e for e in events if e["ph"] == "C" and e["name"] == "HBM live"]
    assert {e["pid"] for e in counters} == set(range(mesh.size))
    per_device = [e["args"]["GiB"] for e in counters if e["pid"] == 0]
    block = 256 * 256 * 2  # x's and w's bf16 blocks on each device
    assert per_device[:2] == [pytest.approx(block / GiB), pytest.approx(2 * block / GiB)]
    assert len(per_device) >= 6  # x, w, the product, y, exp(y) allocated; some freed
    path = tmp_path / "trace.json"
    m.save_trace(path)
    assert json.loads(path.read_text()) == json.loads(json.dumps(trace))


@clause("SIM-REPORT-1")
def test_report(backend, mesh_shape):
    """The preset, step time and last device; identical devices collapsed into one row; per
    axis the collectives with algorithm and tier; the top ops with their first line; the live
    tensors of the fullest device."""
    mesh, axis, program, _ = _program(mesh_shape)  # the program keeps exp(y) alive
    m = sim.Machine("H100", mesh.size)
    run_on(backend, m, program)
    text = m.report()
    assert "H100" in text and "Step time" in text
    rows = [line.split()[0] for line in text.splitlines() if line.startswith("  cuda:")]
    n = mesh.size
    algorithms = set()
    if mesh.axis_size(axis) > 1:
        assert f"comm[{axis}]" in text and "all_reduce x1" in text
        algorithms = {choose("all_reduce", g, 256 * 256 * 2, "H100")[:2] for g in groups_of(mesh_shape, axis)}
        for alg, tier in algorithms:
            assert f"{alg}, {tier}" in text
    if len(algorithms) <= 1:  # every device did the same: one row
        assert rows == [f"cuda:0..{n - 1}" if n > 1 else "cuda:0"]
    assert re.search(rf"matmul .*{re.escape(HERE)}:\d+", text)
    assert "Live tensors" in text and "tensor<256x256xbf16" in text


@clause("SIM-REPORT-1")
def test_report_separates_devices_that_differ_and_names_the_full_ones(backend):
    """Devices whose rows differ get rows of their own; devices past 80% of HBM are listed."""
    mesh = mesh_of((2, 4))
    m = sim.Machine("H100", 8)

    def program():
        program.kept = [dist.tensor((70 * GiB,), None, mesh.sub(dp=1), dtype="fp8", name="big")]
        op.exp(dist.tensor((1024, 1024), None, mesh.sub(dp=0)))

    with pytest.warns(Warning):
        run_on(backend, m, program)
    text = m.report()
    rows = [line.split()[0].rstrip(",") for line in text.splitlines() if line.startswith("  cuda:")]
    assert rows == ["cuda:0..3", "cuda:4..7"]
    assert re.search(r"80% of HBM.*cuda:4\.\.7", text)
    assert "'big'" in text or "big" in text


@clause("SIM-ACT-1")
def test_current_machine_nests_pauses_and_records(backend):
    """``use`` blocks nest, the innermost wins; ``current`` is None outside them and inside
    ``paused``; the mesh records into the current machine only; ``report`` is the innermost's,
    or the last one's."""
    mesh = mesh_of((2,))
    a, b = sim.machine("H100", devices=2), sim.machine("H100", devices=["cuda:0", "cuda:1"])
    seen = {}

    def go():
        seen["outside"] = sim.current()
        with sim.use(a):
            x = dist.tensor((64, 64), None, mesh, init="randn", seed=1)
            with sim.use(b):
                seen["inner"] = sim.current()
                op.exp(x)
                with sim.paused():
                    seen["paused"] = sim.current()
                    op.neg(x)
            seen["after"] = sim.current()
            seen["report"], seen["a"] = sim.report(), a.report()
        seen["last"] = sim.last_used()
        return np.zeros(1, np.float32)

    eager(backend, go)
    assert seen["outside"] is None and seen["inner"] is b and seen["paused"] is None and seen["after"] is a
    assert seen["last"] is b  # made current most recently
    assert [e.name for e in b.timeline.events] == ["exp", "exp"]
    assert [e.name for e in a.timeline.events] == []
    assert seen["report"] == seen["a"] and "16 KiB" in seen["a"]  # x: 64·64 f32 on each device
    with pytest.raises(SimError):
        with sim.use("H100"):
            pass


@clause("SIM-ACT-1")
def test_machines_are_per_thread(backend):
    """A new thread starts with no current and no last machine; its blocks change nothing here."""
    m = sim.machine("H100", devices=2)
    seen = {}

    def other():
        seen["current"], seen["last"] = sim.current(), sim.last_used()
        with sim.use(sim.machine("H100", devices=2)):
            seen["inside"] = sim.current()

    def go():
        with sim.use(m):
            t = threading.Thread(target=other)
            t.start()
            t.join()
            seen["here"] = sim.current()
        return np.zeros(1, np.float32)

    eager(backend, go)
    assert seen["current"] is None and seen["last"] is None
    assert seen["inside"] is not m and seen["here"] is m


@clause("SIM-CLI-1")
def test_presets_command(backend, capsys):
    """``tessera-ref sim --presets`` lists the presets; with ``--preset`` one in full with its tiers."""
    assert eager(backend, lambda: cli_main(["sim", "--presets"])) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("H100", "H200", "B200", "GB200-NVL72"))
    assert eager(backend, lambda: cli_main(["sim", "--presets", "--preset", "h100"])) == 0
    out = capsys.readouterr().out
    assert "H100" in out and "registers" in out and "shared memory" in out and "L2" in out


SCRIPT = """\
import numpy as np
from tessera import dist, op
mesh = dist.Mesh(("tp",), range(8), (8,))
held = dist.tensor((1024, 1024), dist.ShardSpec(("row",), ("tp",)), mesh, dtype="bf16", name="held")
y = op.exp(held)
"""


@clause("SIM-CLI-1")
def test_sim_file_prints_the_report_and_writes_the_trace(backend, tmp_path, capsys):
    """``tessera-ref sim FILE --preset --devices --trace`` runs FILE with a machine current,
    prints its report (HBM live as the script holds it at its end) and writes the trace; a
    Tessera error ends the run with status 1 after the report."""
    script = tmp_path / "step.py"
    script.write_text(SCRIPT)
    trace = tmp_path / "out.json"
    status = eager(backend, lambda: cli_main(["sim", str(script), "--preset", "H100", "--devices", "8",
                                              "--trace", str(trace)]))
    out = capsys.readouterr().out
    assert status == 0 and "H100" in out and "cuda:0..7" in out and "held" in out
    assert "exp" in out and "step.py" in out
    assert any(e.get("name") == "exp" for e in json.loads(trace.read_text())["traceEvents"])
    bad = tmp_path / "bad.py"
    bad.write_text(SCRIPT + "op.matmul(held, dist.tensor((3, 3), None, mesh))\n")
    status = eager(backend, lambda: cli_main(["sim", str(bad), "--preset", "H100", "--devices", "8"]))
    captured = capsys.readouterr()
    assert status == 1 and "Step time" in captured.out and "error" in captured.err


@clause("SIM-CLI-1")
def test_default_machine_and_the_scripts_own(backend, tmp_path, capsys):
    """Default: GB200-NVL72 with one NVLink domain (72 devices); a machine the script makes
    current is reported as well."""
    script = tmp_path / "own.py"
    script.write_text(SCRIPT + "from tessera import sim\nwith sim.use(sim.machine('H200', devices=8)):\n"
                      "    z = op.neg(held)\n")
    assert eager(backend, lambda: cli_main(["sim", str(script)])) == 0
    out = capsys.readouterr().out
    assert "GB200-NVL72" in out and "H200" in out and out.count("Step time") == 2
