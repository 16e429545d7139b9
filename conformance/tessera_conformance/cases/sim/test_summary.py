"""SIM-SUMMARY-1, SIM-ACT-2, SIM-TRACE-2, SIM-CLI-2, SIM-PLOT-1: the machine's numbers as
data, single-device programs priced, the flows of a collective, JSON documents, figures."""
import json

import numpy as np
import pytest

from tessera_ref import op, sim
from tessera_ref.cli import main as cli_main
from tessera_ref.errors import SimError
from tessera_conformance import clause, eager, oracle_only

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the simulated machine's model (presets, costs, timelines, memory, reports) is the "
                      "library's; no backend computes it")

MIB = 1 << 20
BF16_1MS = (989.5e9, 0)  # 1 ms of bf16 work on an H100 (989.5 dense TFLOP/s)


def _machine():
    m = sim.Machine("H100", 4)
    h = m.alloc(2, 2 * MIB, "a")
    m.alloc(2, MIB, "b")
    m.free(h)
    m.record_compute([0, 1], "mm", BF16_1MS, "bf16")
    m.record_collective("all_gather", [(0, 1), (2, 3)], MIB, axis="tp")
    return m


@LIBRARY
@clause("SIM-SUMMARY-1")
def test_summary_holds_the_reports_numbers(backend):
    """Per device: peak and live bytes, compute seconds, comm seconds per axis, finish; per
    axis: calls per kind (one call over two groups is one), bytes sent; a JSON form with its schema."""
    s = _machine().summary()
    d = {x.name: x for x in s.devices}
    assert (d["cuda:2"].peak_bytes, d["cuda:2"].live_bytes) == (3 * MIB, MIB)
    assert d["cuda:0"].compute_s == pytest.approx(1e-3) and d["cuda:3"].compute_s == 0
    (tp,) = s.axes
    assert tp.axis == "tp" and tp.calls == {"all_gather": 1}
    assert tp.bytes_sent_per_device == MIB / 2 and tp.bytes_sent_total == 2 * MIB  # each rank sends its half
    assert s.step_time_s == pytest.approx(max(x.finish_s for x in s.devices))
    assert d["cuda:0"].finish_s == pytest.approx(1e-3 + d["cuda:0"].comm_s["tp"])
    data = s.as_dict()
    assert data["schema"] == "tessera-ref/sim-summary/1" and json.loads(json.dumps(data)) == data


@clause("SIM-ACT-2")
def test_single_device_ops_run_on_device_0(backend):
    """Ops on plain arrays under a machine are priced on its first device's compute stream;
    nothing is charged to HBM; nothing is recorded while paused."""
    m = sim.Machine("H100", 2)

    def go():
        with sim.use(m):
            op.matmul(np.ones((64, 32), np.float32), np.ones((32, 16), np.float32))
            with sim.paused():
                op.exp(np.ones(4, np.float32))
        return np.zeros(1, np.float32)

    eager(backend, go)
    (e,) = m.timeline.events
    assert (e.device, e.stream, e.name, e.args["flops"]) == (0, "compute", "matmul", 2 * 64 * 32 * 16)
    assert m.memory.peak(0) == 0


@LIBRARY
@clause("SIM-TRACE-2")
def test_a_collective_group_is_one_flow_in_device_order(backend):
    flows = [e for e in _machine().chrome_trace()["traceEvents"] if e["ph"] in ("s", "t", "f")]
    ids: dict = {}
    for e in flows:
        ids.setdefault(e["id"], []).append((e["pid"], e["ph"], e["bp"]))
    assert sorted(ids.values()) == [[(0, "s", "e"), (1, "f", "e")], [(2, "s", "e"), (3, "f", "e")]]


@clause("SIM-CLI-2")
def test_json_documents(backend, tmp_path, capsys):
    """``sim --json`` and ``ops --json``: one JSON object on stdout, schema first; the
    script's prints go to stderr."""
    script = tmp_path / "p.py"
    script.write_text("from tessera import sim\nprint('from the script')\n"
                      "sim.current().record_collective('all_reduce', [(0, 1)], 1024, axis='dp')\n")
    assert eager(backend, lambda: cli_main(["sim", "--json", "--preset", "H100", "--devices", "2",
                                            str(script)])) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert list(doc)[0] == "schema" and doc["schema"] == "tessera-ref/sim/1" and doc["error"] is None
    assert doc["machines"][0]["axes"][0]["calls"] == {"all_reduce": 1} and "from the script" in out.err
    assert eager(backend, lambda: cli_main(["ops", "--json"])) == 0
    ops = json.loads(capsys.readouterr().out)
    assert ops["schema"] == "tessera-ref/ops/1"
    assert {o["name"]: o["rules"]["kernel_family"] for o in ops["ops"]}["matmul"] == "matmul"


@LIBRARY
@clause("SIM-PLOT-1")
def test_figures_are_written_or_refused_cleanly(backend, tmp_path):
    """With matplotlib: three PNG files; a directory that does not exist is a SimError."""
    pytest.importorskip("matplotlib")
    paths = sim.plot(_machine(), str(tmp_path))
    assert sorted(paths) == ["memory", "roofline", "timeline"]
    assert all(open(p, "rb").read(4) == b"\x89PNG" for p in paths.values())
    with pytest.raises(SimError, match="not a directory"):
        sim.plot(_machine(), str(tmp_path / "missing"))
