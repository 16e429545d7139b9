"""The machine: timeline and synchronization, the Chrome trace, the report, the current
machine, the bound on its timeline (SIM-TL-1 … SIM-TL-4, SIM-TL-9, SIM-TRACE-1, SIM-REPORT-1,
SIM-ACT-1)."""
import json
import re
import tracemalloc
import warnings
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera_ref import dist, sim
from tessera_ref.errors import MemoryWarning, OutOfMemoryError, SimError
from tessera_ref.context import LAST_MACHINE, MACHINES, PAUSED, scoped
from tessera_ref.sim import Machine
from tessera_ref.sim.machine import MAX_EVENTS

BF16_1MS = (989.5e9, 0)  # 1 ms of bf16 tensor-core work on an H100


def _events(m, device=None, stream=None):
    return [e for e in m.timeline.events
            if (device is None or e.device == device) and (stream is None or e.stream == stream)]


def test_machine_defaults_to_one_nvlink_domain():
    assert Machine("H100").n_devices == 8
    m = Machine("nvl72")
    assert m.n_devices == 72 and m.device_names[71] == "cuda:71" and m.domain_of(71) == 0
    assert Machine("H100", 16).domain_of("cuda:9") == 1


def test_compute_runs_from_each_device_ready_time():
    m = Machine("H100", 4)
    r = m.record_compute([0, 1], "matmul", BF16_1MS, "bf16")
    m.record_compute(0, "matmul", BF16_1MS, "bf16")
    assert r.time == pytest.approx(1e-3)
    assert [e.start for e in _events(m, 0)] == [0.0, pytest.approx(1e-3)]
    assert m.timeline.ready(0) == pytest.approx(2e-3) and m.timeline.ready(1) == pytest.approx(1e-3)
    assert m.timeline.ready(2) == 0.0
    assert m.step_time == pytest.approx(2e-3)
    assert _events(m, 0)[0].args["flops"] == 989.5e9 and _events(m, 0)[0].args["bound"] == "compute"


def test_a_collective_waits_for_its_slowest_member():
    m = Machine("H100", 8)
    m.record_compute(3, "slow", BF16_1MS, "bf16")  # device 3 is ready at 1 ms, the others at 0
    (c,) = m.record_collective("all_reduce", [tuple(range(8))], 1 << 20, axis="dp")
    comm = _events(m, stream="comm")
    assert len(comm) == 8
    assert all(e.start == pytest.approx(1e-3) for e in comm)
    assert len({e.end for e in comm}) == 1
    assert m.step_time == pytest.approx(1e-3 + c.time)
    assert c.time == pytest.approx(2e-6 + 2**20 / 450e9)  # nvls inside the domain


def test_groups_of_one_call_are_independent():
    m = Machine("H100", 8)
    m.record_compute(0, "slow", BF16_1MS, "bf16")
    m.record_collective("all_gather", [(0, 1, 2, 3), (4, 5, 6, 7)], 1 << 20, axis="tp")
    assert all(e.start == pytest.approx(1e-3) for e in _events(m, stream="comm") if e.device < 4)
    assert all(e.start == 0.0 for e in _events(m, stream="comm") if e.device >= 4)


def test_bad_groups_are_errors_and_record_nothing():
    m = Machine("H100", 8)
    for groups in ([(0, 1), (1, 2)], [(0, 0, 1)], [()], [(0, 9)], 3):
        with pytest.raises(SimError):
            m.record_collective("all_reduce", groups, 10)
    with pytest.raises(SimError):
        m.record_collective("all_reduce", [(0, 1), (2, 3)], -1)
    with pytest.raises(SimError):
        m.record_collective("all_reduce", [(0, 1), (2, 3)], 10, algorithm="bogus")
    with pytest.raises(SimError):
        m.record_compute([0, 99], "x", (1, 1), "f32")
    assert m.timeline.events == [] and m.step_time == 0


def test_transfers_run_concurrently():
    m = Machine("H100", 16)
    costs = m.record_transfer([0, 1, 2, 3], [1, 2, 3, 0], 10**6, axis="pp")  # a ring shift in one call
    t = 1e-6 + 10**6 / 450e9
    assert [c.time for c in costs] == [pytest.approx(t)] * 4
    comm = _events(m, stream="comm")
    assert len(comm) == 4 and all(e.start == 0 and e.duration == pytest.approx(t) for e in comm)
    assert all(e.args["bytes_sent"] == 10**6 for e in comm)
    m.record_transfer(0, 8, 10**6)  # across domains: the network tier
    (last,) = _events(m, device=8)
    assert last.args["tier"] == "network" and last.duration == pytest.approx(5e-6 + 10**6 / 50e9)
    assert last.start == pytest.approx(t)  # waits for device 0


@pytest.mark.parametrize("src,dst", [([0, 1], [2]), ([0, 0], [1, 2]), ([0, 1], [2, 2]), ([0], [0])])
def test_bad_transfers_record_nothing(src, dst):
    m = Machine("H100", 4)
    with pytest.raises(SimError):
        m.record_transfer(src, dst, 100)
    assert m.timeline.events == []


def test_memory_through_the_machine():
    m = Machine("H100", 2)
    h = m.alloc("cuda:1", 10 * 2**30, "W")
    assert m.memory.live(1) == 10 * 2**30
    m.free(h)
    assert m.memory.live(1) == 0 and m.memory.peak(1) == 10 * 2**30
    with pytest.raises(OutOfMemoryError):
        m.alloc(0, 81 * 2**30, "huge")
    assert m.memory.peak(0) == 0


def _check_trace(trace):
    trace = json.loads(json.dumps(trace))
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["dur"] >= 0 and e["ts"] >= 0 and e["tid"] in (0, 1)
    by_stream = defaultdict(list)
    for e in complete:
        by_stream[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_stream.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-6, "events of one device overlap on one stream"
    return events


def test_chrome_trace_is_valid(tmp_path):
    m = Machine("H100", 16)
    m.alloc(0, 1 << 30, "W")
    m.record_compute(range(16), "matmul", BF16_1MS, "bf16")
    m.record_compute(5, "extra", (1e9, 1e9), "fp8")
    m.record_collective("all_reduce", [tuple(range(16))], 1 << 24, axis="dp")
    m.record_collective("all_gather", [tuple(range(8)), tuple(range(8, 16))], 1 << 20, axis="tp")
    m.record_transfer(range(8), range(8, 16), 1 << 20, axis="pp")
    path = tmp_path / "trace.json"
    m.save_trace(path)
    events = _check_trace(json.loads(path.read_text()))
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {i: f"cuda:{i}" for i in range(16)}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[0, 0] == "compute" and threads[0, 1] == "comm"
    x = [e for e in events if e["ph"] == "X"]
    assert len(x) == 16 + 1 + 16 + 16 + 16
    mm = next(e for e in x if e["name"] == "matmul")
    assert mm["dur"] == pytest.approx(1000.0) and mm["args"]["flops"] == 989.5e9  # microseconds
    ar = next(e for e in x if e["name"] == "all_reduce[dp]")
    assert ar["args"]["tier"] == "network" and ar["args"]["bytes"] == 1 << 24 and ar["tid"] == 1
    assert any(e["ph"] == "C" and e["name"] == "HBM live" for e in events)


@settings(max_examples=30)
@given(st.lists(st.tuples(st.sampled_from(["compute", "collective", "transfer"]),
                          st.lists(st.integers(0, 11), min_size=1, max_size=12, unique=True),
                          st.integers(0, 1 << 24)), max_size=25))
def test_random_programs_give_valid_traces_and_synchronized_groups(program):
    m = Machine("H100", 12)
    for what, devices, n in program:
        if what == "compute":
            m.record_compute(devices, "op", (n * 1000, n), "bf16")
        elif what == "collective":
            ready = max(m.timeline.ready(d) for d in devices)
            before = len(m.timeline.events)
            m.record_collective("all_reduce", [tuple(devices)], n)
            for e in m.timeline.events[before:]:
                assert e.start == ready
        elif len(devices) >= 2:
            half = len(devices) // 2
            m.record_transfer(devices[:half], devices[half:2 * half], n)
    _check_trace(m.chrome_trace())
    assert m.step_time == max([e.end for e in m.timeline.events], default=0.0)


def _device_table(report: str) -> list:
    """The per-device table of a report as dicts keyed by its headers."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("devices "))
    headers = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1:]:
        if not line.startswith("  cuda"):
            break
        rows.append(dict(zip(headers, re.split(r"\s{2,}", line.strip()))))
    return rows


def _device_rows(report: str) -> list:
    return [row["devices"] for row in _device_table(report)]


def test_report_collapses_identical_devices():
    m = Machine("GB200-NVL72")
    for d in range(72):
        m.alloc(d, 2**30, "W")
    m.record_compute(range(72), "matmul", (1e12, 1e9), "bf16")
    m.record_collective("all_reduce", [tuple(range(i, 72, 18)) for i in range(18)], 1 << 20, axis="dp")
    text = m.report()
    assert _device_rows(text) == ["cuda:0..71"]
    for needle in ["GB200-NVL72", "Step time", "comm[dp]", "all_reduce x1", "matmul", "Live tensors"]:
        assert needle in text


def test_report_separates_devices_that_differ():
    m = Machine("H100", 8)
    m.record_compute(range(8), "matmul", BF16_1MS, "bf16")
    m.record_compute([2, 3], "extra", BF16_1MS, "bf16")
    m.record_collective("all_reduce", [tuple(range(8))], 1 << 20, axis="dp")
    with pytest.warns(MemoryWarning):
        m.alloc(7, 70 * 2**30, "big")
    text = m.report()
    assert _device_rows(text) == ["cuda:0..1, cuda:4..6", "cuda:2..3", "cuda:7"]
    assert "over 80% of HBM at peak: cuda:7" in text
    rows = {row["devices"]: row for row in _device_table(text)}
    assert rows["cuda:0..1, cuda:4..6"]["waiting"] == "1 ms"  # for devices 2 and 3, before the all_reduce
    assert rows["cuda:2..3"]["waiting"] == "0" and rows["cuda:2..3"]["compute"] == "2 ms"
    assert rows["cuda:7"]["HBM peak"] == "70 GiB (87.5%)"


def test_empty_machine_report():
    assert "nothing was recorded" in Machine("H100").report()


@pytest.fixture
def clean_activation():
    """No machine in use nor used before (as in a new thread), restored afterwards."""
    with scoped(MACHINES, ()), scoped(LAST_MACHINE, None), scoped(PAUSED, False):
        yield


def test_use_current_paused_and_report(clean_activation, capsys):
    assert sim.current() is None
    with pytest.raises(SimError, match="no simulated machine"):
        sim.report()
    a, b = sim.machine("H100"), sim.machine("B200", devices=["x", "y"])
    assert b.device_names == ("x", "y") and b.n_devices == 2
    with sim.use(a) as used:
        assert used is a and sim.current() is a
        with sim.use(b):
            assert sim.current() is b
            with sim.paused():
                assert sim.current() is None
            assert sim.current() is b
        assert sim.current() is a
        a.record_compute(0, "op", (1, 1), "f32")
    assert sim.current() is None and sim.last_used() is b
    with sim.use(a):
        pass
    text = sim.report()
    assert text == a.report() and text in capsys.readouterr().out
    with pytest.raises(SimError):
        with sim.use("H100"):
            pass


def test_a_failing_block_still_restores_the_current_machine(clean_activation):
    m = sim.machine("H100", devices=2)
    with pytest.raises(OutOfMemoryError):
        with sim.use(m):
            m.alloc(0, 10**12, "too big")
    assert sim.current() is None


def test_bad_machines():
    with pytest.raises(SimError):
        Machine("H100", 0)
    with pytest.raises(SimError):
        Machine("H100", 2, ["a", "a"])
    with pytest.raises(SimError):
        Machine("H100", launch_overhead=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert repr(Machine("H100", 3)) == "Machine('H100', 3 devices)"


# -- a bounded timeline (SIM-TL-9) ------------------------------------------------------------------

def test_a_run_that_would_pass_max_events_is_refused_before_anything_is_recorded():
    """Issue 31: the timeline grew without bound (~4.8 KiB per all_gather). A loop of
    all_gathers under a machine of max_events=100 ends in a SimError; the machine holds at
    most 100 entries and still reports."""
    machine = sim.machine("H100", devices=9, max_events=100)
    mesh = dist.Mesh(("tp",), range(9), (9,))
    with sim.use(machine):
        x = dist.tensor((9, 4), dist.ShardSpec(("row",), ("tp",)), mesh, dtype="f32")
        with pytest.raises(SimError, match=r"timeline is full: it holds \d+ events and memory samples of "
                                           r"max_events=100 \(each under 1 KiB of host memory\)") as info:
            for _ in range(100):
                dist.all_gather(x, axis="tp")
                held = len(machine.timeline.events) + len(machine.timeline.memory_samples)
    assert "a new sim.machine(...) for each step" in info.value.fix and "max_events=" in info.value.fix
    assert 80 < held <= 100 and "all_gather x" in machine.report()


def test_a_refused_record_leaves_the_machine_as_it_was():
    """Each record is checked whole before any of it is kept (SIM-TL-9): a collective of 9
    events on a machine holding 92 of max_events=100 is refused, the next compute op of 8 is
    not."""
    m = Machine("H100", 9, max_events=100)
    groups = [tuple(range(9))]
    for _ in range(10):
        m.record_collective("all_gather", groups, 1024, axis="tp")
    m.record_compute([0, 1], "matmul", BF16_1MS, "bf16")
    held = (len(m.timeline.events), len(m.timeline_of(True).events), m.step_time, m.report())
    with pytest.raises(SimError, match=r"it holds 92 events .* and the all_gather\[tp\] would add 9 more"):
        m.record_collective("all_gather", groups, 1024, axis="tp")
    assert (len(m.timeline.events), len(m.timeline_of(True).events), m.step_time, m.report()) == held
    with pytest.raises(SimError, match="the send/recv would add 9 more"):
        m.record_transfer(list(range(9)), [(d + 1) % 9 for d in range(9)], 1024)
    m.record_compute(list(range(8)), "matmul", BF16_1MS, "bf16")
    with pytest.raises(SimError, match="the op 'matmul' would add 1 more"):
        m.record_compute(0, "matmul", BF16_1MS, "bf16")
    with pytest.raises(SimError, match="allocating 'w' would add 1 more"):
        m.alloc(0, 1024, "w")
    small = Machine("H100", 2, max_events=1)
    handle = small.alloc(0, 1024, "w")
    small.free(handle)  # always recorded: it ends an allocation the bound let in
    assert len(small.timeline.memory_samples) == 2 and small.memory.live(0) == 0


def test_max_events_bounds_the_host_memory_of_a_machine():
    """A machine at its bound holds under 1 KiB per entry (SIM-TL-9; about 310 B measured here)."""
    mesh = dist.Mesh(("tp",), range(72), (72,))
    tracemalloc.start()
    try:
        machine = sim.machine("GB200-NVL72", devices=72, max_events=20_000)
        with sim.use(machine):
            x = dist.tensor((72, 4), dist.ShardSpec(("row",), ("tp",)), mesh, dtype="f32")
            with pytest.raises(SimError, match="timeline is full"):
                while True:
                    dist.all_gather(x, axis="tp")
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 20_000 - 72 < len(machine.timeline.events) + len(machine.timeline.memory_samples) <= 20_000
    assert used < 20_000 * 1024, f"{used / 20_000:.0f} B per entry"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "many", None])
def test_max_events_must_be_a_positive_int(bad):
    with pytest.raises(SimError, match="max_events must be an int >= 1"):
        sim.machine("H100", max_events=bad)
    assert sim.machine("H100").max_events == MAX_EVENTS == 1_000_000
