"""SIM-TL-1 … SIM-TL-4, SIM-TL-9: devices and streams, program order, collectives
synchronizing their group, point-to-point transfers, the bound on what a timeline holds — the
timeline of a program run on the backend."""
import pytest

from tessera_ref import dist, op, sim
from tessera_ref.errors import SimError
from tessera_conformance import clause, not_applicable, oracle_only

from ._machine import run_on
from ._reference import AXES, PRESETS, choose, formula, groups_of, mesh_of, roofline_time, tier

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the simulated machine's model (presets, costs, timelines, memory, reports) is the "
                      "library's; no backend computes it")

S = dist.ShardSpec



@LIBRARY
@clause("SIM-TL-1")
def test_devices_streams_and_ready_times(backend):
    """Devices are indexed and named (``cuda:i`` by default); either addresses them; each has a
    compute and a comm stream and a ready time, 0 at first."""
    m = sim.Machine("H100", 4)
    assert m.device_names == ("cuda:0", "cuda:1", "cuda:2", "cuda:3")
    named = sim.Machine("H100", 2, ["gpu-a", "gpu-b"])
    assert named.device("gpu-b") == 1
    assert [m.timeline.ready(d) for d in range(4)] == [0.0] * 4
    r = m.record_compute("cuda:2", "op", (67e12, 0), "f32")  # one second of f32 work
    assert m.timeline.ready(2) == pytest.approx(1.0) and r.time == pytest.approx(1.0)
    m.record_collective("all_reduce", [(0, "cuda:1")], 1 << 20)
    assert {e.stream for e in m.timeline.events} == {"compute", "comm"}
    assert sim.machine("H100", devices=["x", "y", 5]).device_names == ("x", "y", "cuda:5")


@clause("SIM-TL-2")
def test_program_order(backend, mesh_shape):
    """Events are placed in recording order from each device's ready time; communication does
    not overlap compute; the step time is the largest ready time."""
    mesh = mesh_of(mesh_shape)
    axis = max(AXES[:len(mesh_shape)], key=lambda a: mesh.axis_size(a))
    m = sim.Machine("GB200-NVL72", mesh.size)
    p = mesh.axis_size(axis)

    def program():
        x = dist.tensor((512, 512 * p), S(("col",), (axis,)), mesh, dtype="bf16")
        w = dist.tensor((512 * p, 512), S(("row",), (axis,)), mesh, dtype="bf16")
        y = dist.all_reduce(op.matmul(x, w), axis)
        op.exp(y)

    events = run_on(backend, m, program)
    for d in range(mesh.size):
        mine = [e for e in m.timeline.events if e.device == d]
        kinds = [e.name for e in mine]
        assert kinds == (["matmul", f"all_reduce[{axis}]", "exp"] if p > 1 else ["matmul", "exp"]), kinds
        for before, after in zip(mine, mine[1:]):
            assert after.start == pytest.approx(before.end, rel=1e-12, abs=1e-18)
        assert mine[0].start == 0.0
        mm = mine[0]
        assert mm.duration == pytest.approx(roofline_time(mm.args["flops"], mm.args["bytes"], "GB200-NVL72",
                                                          "bf16")[0], rel=1e-12)
    assert m.step_time == max(m.timeline.ready(d) for d in range(mesh.size)) == max(e.end for e in events)


@clause("SIM-TL-3")
def test_a_collective_waits_for_its_slowest_member(backend, mesh_shape):
    """Work on one stage only, then a collective over the stage axis: each group starts when its
    last member is ready and finishes together; the others wait (idle)."""
    if len(mesh_shape) < 2:
        not_applicable("needs a stage axis")
    mesh = mesh_of(mesh_shape)
    last = AXES[len(mesh_shape) - 1]
    stage = mesh.sub(**{last: 0})
    m = sim.Machine("H100", mesh.size)

    def program():
        busy = dist.tensor((2048, 2048), None, stage, dtype="bf16")
        op.matmul(busy, busy)  # only the devices of stage 0 compute
        pend = dist.tensor((256, 256), S(None, (last,), reduce="sum"), mesh)
        dist.all_reduce(pend, last)

    run_on(backend, m, program)
    compute_end = {e.device: e.end for e in m.timeline.events if e.stream == "compute"}
    holders = {mesh.index_of(name) for name in stage.devices}
    assert set(compute_end) == holders
    for g in groups_of(mesh_shape, last):
        comm = [e for e in m.timeline.events if e.stream == "comm" and e.device in g]
        start = max(compute_end.get(d, 0.0) for d in g)
        assert len(comm) == len(g)
        assert all(e.start == start for e in comm) and len({e.end for e in comm}) == 1
        alg, _, time, _ = choose("all_reduce", g, 256 * 256 * 4, "H100")
        assert comm[0].duration == pytest.approx(time, rel=1e-12) and comm[0].args["algorithm"] == alg


@clause("SIM-TL-4")
def test_send_recv_is_a_transfer(backend, mesh_shape):
    """dist.send records one message per device pair: it starts when both ends are ready and
    takes ``α + n/β`` of its tier."""
    if len(mesh_shape) < 2:
        not_applicable("needs two stages")
    mesh = mesh_of(mesh_shape)
    last = AXES[len(mesh_shape) - 1]
    s0, s1 = mesh.sub(**{last: 0}), mesh.sub(**{last: 1})
    m = sim.Machine("H100", mesh.size)
    n = 1024 * 64 * 4

    def program():
        busy = dist.tensor((1024, 1024), None, s1, dtype="bf16")
        op.matmul(busy, busy)  # the receivers are busy first
        with dist.mailbox_scope():
            dist.send(dist.tensor((1024, 64), None, s0), s1)
            dist.recv(s0, s1)

    run_on(backend, m, program)
    ready = {e.device: e.end for e in m.timeline.events if e.stream == "compute"}
    spec = PRESETS["H100"]
    for src, dst in zip(s0.devices, s1.devices):
        i, j = mesh.index_of(src), mesh.index_of(dst)
        t = tier((i, j), spec["domain"])
        alpha, beta = ((spec["nvlink_alpha"], spec["nvlink"]) if t == "nvlink"
                       else (spec["network_alpha"], spec["network"]))
        start = max(ready.get(i, 0.0), ready.get(j, 0.0))
        for d in (i, j):
            (e,) = [e for e in m.timeline.events if e.stream == "comm" and e.device == d]
            assert e.start == start and e.args["tier"] == t and e.args["bytes"] == n
            assert e.duration == pytest.approx(formula("send", "direct", 2, n, alpha, beta)[0], rel=1e-12)


@LIBRARY
@pytest.mark.parametrize("src, dst", [([0, 1], [2]), ([0, 0], [1, 2]), ([0, 1], [2, 2]), ([0], [0])])
@clause("SIM-TL-4")
def test_bad_transfers(backend, src, dst):
    """A device sends at most one and receives at most one message per call, never to itself."""
    m = sim.Machine("H100", 4)
    with pytest.raises(SimError):
        m.record_transfer(src, dst, 100)
    assert m.timeline.events == []


@LIBRARY
@clause("SIM-TL-4")
def test_a_device_is_busy_from_its_first_message_to_its_last(backend):
    """Messages of one call run concurrently; a device that sends one and receives another is
    busy from the first start to the last end."""
    m = sim.Machine("H100", 16)
    m.record_compute(2, "slow", (67e12 * 1e-3, 0), "f32")  # device 2 ready at 1 ms
    m.record_transfer([0, 1], [1, 2], 10 ** 6)              # 0 -> 1 at 0; 1 -> 2 at 1 ms
    t = formula("send", "direct", 2, 10 ** 6, 1e-6, 450e9)[0]
    (e1,) = [e for e in m.timeline.events if e.device == 1]
    assert e1.start == 0.0 and e1.duration == pytest.approx(1e-3 + t, rel=1e-9)


@clause("SIM-TL-9")
def test_a_timeline_holds_at_most_max_events(backend):
    """A program that records more than ``max_events`` events and memory samples stops with a
    SimError at the record that would pass the bound; nothing of that record is kept, and what
    was recorded before still reports."""
    mesh = mesh_of((4,))
    m = sim.machine("H100", devices=4, max_events=60)
    held = []

    def program():
        x = dist.tensor((8, 4), S(("row",), (AXES[0],)), mesh, dtype="f32")
        while True:
            held.append((len(m.timeline.events), len(m.timeline.memory_samples), m.step_time))
            dist.all_gather(x, axis=AXES[0])

    with pytest.raises(SimError, match="timeline is full") as info:
        run_on(backend, m, program)
    events, samples, step = held[-1]  # before the refused all_gather, whose 4 events would pass 60
    assert "max_events" in info.value.fix and events + samples + 4 > 60 and events <= 60
    assert len(m.timeline.events) == events and m.step_time == step
    assert sim.Machine("H100", 4).max_events == 1_000_000
