"""SIM-ROOF-3, SIM-TL-5 … SIM-TL-8, SIM-REPORT-2: achievable fractions, the overlapped
schedule (dependencies, lanes, links taken in turns, both step times, the critical path) and
the report's exposed and hidden communication, for programs run on the backend."""
import pytest

from tessera_ref import dist, op, sim
from tessera_conformance import clause, oracle_only

from ._machine import run_on
from ._reference import GB, PRESETS, formula

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the simulated machine's model (presets, costs, timelines, memory, reports) is the "
                      "library's; no backend computes it")

S = dist.ShardSpec



def _tp_program(mesh):
    def program():
        a = dist.tensor((256, 512), S(("col",), ("tp",)), mesh, dtype="bf16")
        b = dist.tensor((512, 256), S(("row",), ("tp",)), mesh, dtype="bf16")
        c = dist.tensor((256, 256), None, mesh, dtype="bf16")
        reduced = dist.all_reduce(op.matmul(a, b), axis="tp")
        other = op.matmul(c, c)  # reads nothing the all_reduce writes
        op.add(reduced, other)
    return program


@clause("SIM-ROOF-3")
def test_fractions_scale_peak_and_bandwidth(backend):
    """On the A100 a matmul runs at 0.8 of its bf16 peak and 0.9 of HBM; an add at the full
    peak and 0.9 of HBM; ``efficiency=False`` is pure roofline."""
    mesh = dist.mesh(devices=["cuda:0"], axes=("tp",), shape=(1,))
    for efficiency in (True, False):
        m = sim.Machine("A100", 1, efficiency=efficiency)

        def program():
            x = dist.tensor((4096, 4096), None, mesh, dtype="bf16")
            op.add(op.matmul(x, x), x)

        events = run_on(backend, m, program)
        peak, bw = PRESETS["A100"]["peaks"]["bf16"], PRESETS["A100"]["hbm_bw"]
        for e in events:
            fc, fm = ((0.8, 0.9) if e.name == "matmul" else (1.0, 0.9)) if efficiency else (1.0, 1.0)
            want = max(e.args["flops"] / (fc * peak), e.args["bytes"] / (fm * bw))
            assert e.duration == pytest.approx(want, rel=1e-12), e.name


@pytest.mark.parametrize("overlap", [False, True])
@clause("SIM-TL-5", "SIM-TL-6", "SIM-TL-8")
def test_a_collective_runs_under_independent_compute(backend, overlap):
    """The all_reduce of a partial sum starts when its operand is ready; with overlap the
    matmul recorded after it, which reads other values, starts at the same time on the compute
    stream; the add that reads the reduced value waits for it. Program order is kept too, and
    the critical path ends at the add."""
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("tp",), shape=(4,))
    m = sim.Machine("H100", 4, overlap=overlap)
    run_on(backend, m, _tp_program(mesh))
    ends = []
    for d in range(4):
        mm1, ar, mm2, add = [e for e in m.timeline.events if e.device == d]
        assert (mm1.name, ar.name, mm2.name, add.name) == ("matmul", "all_reduce[tp]", "matmul", "add")
        assert ar.start == mm1.end
        assert ar.duration == pytest.approx(min(formula("all_reduce", a, 4, ar.args["bytes"], 1e-6, 450 * GB)[0]
                                                for a in ("ring", "tree", "nvls")), rel=1e-12)
        if overlap:
            assert mm2.start == mm1.end and add.start == max(ar.end, mm2.end)
        else:
            assert mm2.start == ar.end and add.start == mm2.end
        ends.append(add.end)
    serial = mm1.duration + ar.duration + mm2.duration + add.duration
    assert m.conservative_step_time == pytest.approx(serial, rel=1e-12)
    assert m.overlapped_step_time == pytest.approx(serial - min(ar.duration, mm2.duration), rel=1e-12)
    assert m.step_time == max(ends)
    assert m.critical_path()[-1].name == "add"


@LIBRARY
@pytest.mark.parametrize("overlap", [False, True])
@clause("SIM-TL-7")
def test_collectives_on_one_link_take_turns(backend, overlap):
    """Three independent collectives from device 0 (16 H100s, domains of 8): tp over (0..3) and
    sp over (0, 4) share its NVLink port and take turns; dp over (0, 8) uses the network, at
    once with overlap."""
    m = sim.Machine("H100", 16, overlap=overlap)
    n = 4_500_000
    m.record_collective("all_gather", [(0, 1, 2, 3)], n, axis="tp", algorithm="ring")
    m.record_collective("all_gather", [(0, 4)], n, axis="sp", algorithm="ring")
    m.record_collective("all_gather", [(0, 8)], n, axis="dp", algorithm="ring")
    tp = formula("all_gather", "ring", 4, n, 1e-6, 450 * GB)[0]
    sp = formula("all_gather", "ring", 2, n, 1e-6, 450 * GB)[0]
    dp = formula("all_gather", "ring", 2, n, 5e-6, 50 * GB)[0]
    starts = {e.args["axis"]: e.start for e in m.timeline.events if e.device == 0}
    assert starts["tp"] == 0 and starts["sp"] == pytest.approx(tp, rel=1e-12)
    assert starts["dp"] == (0 if overlap else pytest.approx(tp + sp, rel=1e-12))
    assert m.step_time == pytest.approx(max(tp + sp, dp) if overlap else tp + sp + dp, rel=1e-12)


@clause("SIM-REPORT-2")
def test_the_report_shows_exposed_and_hidden_communication(backend):
    """The report ends with both step times, communication exposed / hidden per device and
    axis for the overlapped schedule, and the critical path."""
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("tp",), shape=(4,))
    m = sim.Machine("H100", 4)
    run_on(backend, m, _tp_program(mesh))
    text = m.report()
    tail = text[text.index("Overlap: step time"):]
    assert "in program order (all communication exposed)" in tail
    assert "communication exposed / hidden under compute, per device:" in tail
    assert "comm[tp]" in tail and "cuda:0..3" in tail and "critical path:" in tail
    assert " add on cuda:" in tail.rstrip().splitlines()[-1]  # the critical path ends at the add
