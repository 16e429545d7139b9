"""The overlapped timeline: dependencies, comm lanes, links taken in turns, both step times,
exposed vs hidden communication and the critical path (SIM-TL-5 … SIM-TL-8, SIM-REPORT-2).

Every expected time is worked out by hand from the H100 preset's numbers: bf16 peak
989.5 TFLOP/s (so 989.5 GFLOP take 1 ms), NVLink β = 450 GB/s and α = 1 µs, network
β = 50 GB/s and α = 5 µs (SIM-HW-2), and the formulas of SIM-COLL-2.
"""
import numpy as np
import pytest

from tessera_ref import dist, jit, sim
from tessera_ref.errors import SimError
from tessera_ref.sim import Machine
from tessera_ref.sim.overlap import comm_exposure

MS = 1e-3
US = 1e-6
BF16_1MS = (989.5e9, 0)  # 1 ms of bf16 tensor-core work on an H100
# all_reduce over 4 NVLink ranks of n bytes: nvls 2α + n/β beats ring and tree (SIM-COLL-3)
AR_HALF_MS = 225_000_000  # 2 µs + 225e6 / 450e9 s = 502 µs
AR_2MS = 900_000_000  # 2 µs + 2 ms = 2.002 ms


def _program(m, nbytes, independent: bool):
    """fwd writes 1; all_reduce reads 1, writes 2; [indep: an op on other data]; dep reads 2."""
    devs = [0, 1, 2, 3]
    m.record_compute(devs, "fwd", BF16_1MS, "bf16", reads=(), writes=(1,))
    m.record_collective("all_reduce", [tuple(devs)], nbytes, axis="dp", reads=(1,), writes=(2,))
    if independent:
        m.record_compute(devs, "indep", BF16_1MS, "bf16", reads=(9,), writes=(3,))
    m.record_compute(devs, "dep", BF16_1MS, "bf16", reads=(2,), writes=(4,))


def _spans(m, device=0):
    return [(e.name, e.start, e.end) for e in m.timeline.events if e.device == device]


def _close(got, want):
    assert len(got) == len(want)
    for (n1, s1, e1), (n2, s2, e2) in zip(got, want):
        assert n1 == n2 and s1 == pytest.approx(s2, rel=1e-12, abs=1e-15) and e1 == pytest.approx(e2, rel=1e-12)


def test_a_collective_is_hidden_under_independent_compute():
    m = Machine("H100", 4, overlap=True)
    _program(m, AR_HALF_MS, independent=True)
    _close(_spans(m), [("fwd", 0, 1 * MS), ("all_reduce[dp]", 1 * MS, 1.502 * MS),
                       ("indep", 1 * MS, 2 * MS), ("dep", 2 * MS, 3 * MS)])
    assert m.step_time == pytest.approx(3 * MS) == m.overlapped_step_time
    exposed, hidden = comm_exposure(m.timeline)[0, "dp"]
    assert exposed == pytest.approx(0, abs=1e-15) and hidden == pytest.approx(502 * US)
    # the critical path is the compute stream: fwd, indep, dep
    assert [e.name for e in m.critical_path()] == ["fwd", "indep", "dep"]


def test_a_dependent_collective_is_exposed():
    m = Machine("H100", 4, overlap=True)
    _program(m, AR_HALF_MS, independent=False)
    _close(_spans(m), [("fwd", 0, 1 * MS), ("all_reduce[dp]", 1 * MS, 1.502 * MS), ("dep", 1.502 * MS, 2.502 * MS)])
    assert comm_exposure(m.timeline)[0, "dp"] == pytest.approx((502 * US, 0))
    assert [e.name for e in m.critical_path()] == ["fwd", "all_reduce[dp]", "dep"]


def test_a_long_collective_is_partly_hidden():
    m = Machine("H100", 4, overlap=True)
    _program(m, AR_2MS, independent=True)
    _close(_spans(m), [("fwd", 0, 1 * MS), ("all_reduce[dp]", 1 * MS, 3.002 * MS),
                       ("indep", 1 * MS, 2 * MS), ("dep", 3.002 * MS, 4.002 * MS)])
    assert comm_exposure(m.timeline)[0, "dp"] == pytest.approx((1.002 * MS, 1 * MS))


def test_without_overlap_the_schedule_is_program_order():
    """overlap=False (the default) places every op at its devices' ready time (SIM-TL-2),
    whatever the dependencies say; both step times are kept either way (SIM-TL-8)."""
    for m in (Machine("H100", 4), Machine("H100", 4, overlap=False)):
        assert m.overlap is False
        _program(m, AR_HALF_MS, independent=True)
        _close(_spans(m), [("fwd", 0, 1 * MS), ("all_reduce[dp]", 1 * MS, 1.502 * MS),
                           ("indep", 1.502 * MS, 2.502 * MS), ("dep", 2.502 * MS, 3.502 * MS)])
        assert m.step_time == m.conservative_step_time == pytest.approx(3.502 * MS)
        assert m.overlapped_step_time == pytest.approx(3 * MS)
        assert comm_exposure(m.timeline)[0, "dp"] == pytest.approx((502 * US, 0))
        assert [e.name for e in m.critical_path()] == ["fwd", "all_reduce[dp]", "indep", "dep"]
        assert all(e.lane == 0 for e in m.timeline.events)


def test_collectives_on_one_link_take_turns_and_tiers_run_concurrently():
    """Device 0 starts three independent collectives at time 0: tp over (0..3) and sp over
    (0, 4) both on NVLink, dp over (0, 8) on the network (two domains of 8)."""
    n = 4_500_000
    tp = 2 * US + 0.75 * n / 450e9  # all_gather, 4 ranks, recursive doubling: L·α + (p-1)/p·n/β = 9.5 µs
    sp = 1 * US + 0.5 * n / 450e9  # 2 ranks: 6 µs
    dp = 5 * US + 0.5 * n / 50e9  # 2 ranks over the network: 50 µs
    for overlap, want in ((True, [("all_gather[tp]", 0, tp), ("all_gather[sp]", tp, tp + sp),
                                  ("all_gather[dp]", 0, dp)]),
                          (False, [("all_gather[tp]", 0, tp), ("all_gather[sp]", tp, tp + sp),
                                   ("all_gather[dp]", tp + sp, tp + sp + dp)])):
        m = Machine("H100", 16, overlap=overlap)
        m.record_collective("all_gather", [(0, 1, 2, 3)], n, axis="tp", reads=(1,), writes=(2,))
        m.record_collective("all_gather", [(0, 4)], n, axis="sp", reads=(3,), writes=(4,))
        m.record_collective("all_gather", [(0, 8)], n, axis="dp", reads=(5,), writes=(6,))
        _close(_spans(m), want)
        # device 4 waits for device 0's NVLink port: its group starts together (SIM-TL-3)
        assert _spans(m, 4)[0][1] == pytest.approx(tp)
    lanes = {e.args["axis"]: e.lane for e in m.timeline.events if e.device == 0}
    assert lanes == {"tp": 0, "sp": 0, "dp": 0}
    m = Machine("H100", 16, overlap=True)
    m.record_collective("all_gather", [(0, 1)], n, axis="tp")
    m.record_collective("all_gather", [(0, 8)], n, axis="dp")
    trace = m.chrome_trace()["traceEvents"]
    assert {(e["pid"], e["tid"]) for e in trace if e["ph"] == "X"} == {(0, 1), (1, 1), (0, 2), (8, 2)}
    assert {"pid": 0, "tid": 2, "name": "thread_name", "ph": "M", "args": {"name": "comm[dp]"}} in trace


def test_a_group_of_one_forwards_its_operand():
    m = Machine("H100", 4, overlap=True)
    m.record_compute([0], "fwd", BF16_1MS, "bf16", writes=(1,))
    m.record_collective("all_reduce", [(0,)], 100, axis="dp", reads=(1,), writes=(2,))
    m.record_compute([1], "other", BF16_1MS, "bf16", writes=(7,))
    m.record_compute([0], "dep", BF16_1MS, "bf16", reads=(2,))
    assert _spans(m) == [("fwd", 0, 1 * MS), ("dep", 1 * MS, 2 * MS)]


def test_transfers_carry_dependencies():
    m = Machine("H100", 2, overlap=True)
    m.record_compute([0], "produce", BF16_1MS, "bf16", writes=(1,))
    m.record_transfer(0, 1, 4_500_000, reads=(1,), writes=(2,))  # α + n/β = 1 µs + 10 µs
    m.record_compute([1], "early", BF16_1MS, "bf16", reads=(5,))
    m.record_compute([1], "consume", BF16_1MS, "bf16", reads=(2,))
    _close(_spans(m, 1), [("send/recv", 1 * MS, 1.011 * MS), ("early", 0, 1 * MS), ("consume", 1.011 * MS, 2.011 * MS)])


def test_overlap_must_be_a_bool_and_values_hashable_ids():
    with pytest.raises(SimError, match="overlap must be True or False"):
        Machine("H100", 2, overlap="yes")
    m = Machine("H100", 2, overlap=True)
    with pytest.raises(SimError, match="reads= must be a sequence of value ids"):
        m.record_compute([0], "op", BF16_1MS, "bf16", reads=5)
    with pytest.raises(SimError, match="writes= must be a sequence of value ids"):
        m.record_collective("all_reduce", [(0, 1)], 8, writes=[[1]])
    assert m.timeline.events == []  # refused calls record nothing
    # one-shot iterables serve both schedules (the overlapped one is placed second here)
    m = Machine("H100", 2, overlap=False)
    m.record_collective("all_reduce", [(0, 1)], 4_500_000, writes=(v for v in (1,)))  # α + n/β = 11 µs
    m.record_compute([0], "dep", BF16_1MS, "bf16", reads=iter((1,)))
    assert m.overlapped_step_time == m.conservative_step_time == pytest.approx(11 * US + 1 * MS)


@pytest.mark.parametrize("overlap", [False, True])
def test_the_report_shows_exposed_hidden_and_the_critical_path(overlap):
    """Whichever schedule the machine shows, the overlap section describes the overlapped one."""
    m = Machine("H100", 4, overlap=overlap)
    _program(m, AR_HALF_MS, independent=True)
    text = m.report()
    assert ("step time 3.5 ms in program order (all communication exposed), 3 ms with communication under "
            "independent compute; with overlap:") in text
    assert "cuda:0..3  0 / 502 us" in text
    assert "critical path: 3 ops on cuda:0, 3 ms compute + 0 communication + 0 waiting" in text
    assert [e.name for e in m.critical_path(overlap=False)] == ["fwd", "all_reduce[dp]", "indep", "dep"]


def _tp_step(a, b, c):
    reduced = dist.all_reduce(a @ b, axis="tp")
    other = c @ c  # reads nothing the all_reduce writes
    return reduced + other


@pytest.mark.parametrize("traced", [False, True])
def test_the_mesh_tells_the_machine_what_each_op_reads_and_writes(traced):
    """A tensor-parallel matmul leaves a partial sum; its all_reduce runs on the comm stream
    under an independent matmul, and the add of the reduced value waits for it — eagerly and
    in a traced program alike (SIM-TL-5)."""
    m = sim.machine("H100", 4, overlap=True)
    with sim.use(m):
        mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("tp",), shape=(4,))
        a = dist.tensor((256, 512), dist.ShardSpec(("col",), ("tp",)), mesh, dtype="bf16", seed=1)
        b = dist.tensor((512, 256), dist.ShardSpec(("row",), ("tp",)), mesh, dtype="bf16", seed=2)
        c = dist.tensor((256, 256), None, mesh, dtype="bf16", seed=3)
        (jit(_tp_step) if traced else _tp_step)(a, b, c)
    on0 = [e for e in m.timeline.events if e.device == 0]
    names = [e.name for e in on0]
    assert names == ["matmul", "all_reduce[tp]", "matmul", "add"]
    mm1, ar, mm2, add = on0
    assert ar.start == mm1.end and mm2.start == mm1.end  # the second matmul runs under the all_reduce
    assert add.start == max(ar.end, mm2.end) and ar.end > mm2.end  # 2 µs of α alone outlast the small matmul
    assert m.overlapped_step_time == add.end < m.conservative_step_time


def _random_program(rng, m, n_ops):
    """Record ``n_ops`` random ops on ``m`` (16 H100s: two NVLink domains of 8, so groups may
    run on either tier); returns, per op, (kind, groups, reads, writes, axis or None)."""
    ops = []
    next_value = [1]

    def fresh():
        next_value[0] += 1
        return next_value[0]

    for _ in range(n_ops):
        reads = tuple(int(v) for v in rng.choice(range(1, next_value[0] + 1), size=rng.integers(0, 3)))
        writes = (fresh(),)
        if rng.random() < 0.5:
            devs = sorted(int(d) for d in rng.choice(16, size=rng.integers(1, 5), replace=False))
            m.record_compute(devs, "op", (float(rng.integers(1, 100)) * 1e9, int(rng.integers(0, 10**9))), "bf16",
                             reads=reads, writes=writes)
            ops.append(("compute", [tuple(devs)], reads, writes, None))
        else:
            axis = str(rng.choice(["tp", "dp", "sp"]))
            size = int(rng.choice([2, 4]))
            devs = [int(d) for d in rng.choice(16, size=2 * size, replace=False)]
            groups = [tuple(sorted(devs[:size])), tuple(sorted(devs[size:]))]
            m.record_collective(str(rng.choice(["all_reduce", "all_gather"])), groups, int(rng.integers(1, 10**7)),
                                axis=axis, reads=reads, writes=writes)
            ops.append(("comm", groups, reads, writes, axis))
    return ops


@pytest.mark.parametrize("seed", range(20))
def test_random_programs_start_every_op_as_early_as_the_rules_allow(seed):
    """Declarative check of SIM-TL-2 and SIM-TL-5 … SIM-TL-7 on random programs: each
    event's start is exactly the latest of its constraints, read back from the events already
    placed (program order: every earlier event of its devices; overlap: its lane, its link,
    the values it reads), and the overlapped step is never longer."""
    for overlap in (False, True):
        rng = np.random.default_rng(seed)
        m = Machine("H100", 16, overlap=overlap)
        ops = _random_program(rng, m, 30)
        events = iter(m.timeline.events)
        placed = []  # (event, reads, writes)
        for kind, groups, reads, writes, axis in ops:
            for g in groups:
                if kind == "comm" and len(g) < 2:
                    continue
                evs = [next(events) for _ in g]
                assert [e.device for e in evs] == list(g)
                bounds = []
                for e in evs:
                    before = [p for p, _, _ in placed if p.device == e.device]
                    if not overlap:
                        bounds.append(max([0.0] + [p.end for p in before]))
                        continue
                    same_lane = [p for p in before if (p.stream, p.lane) == (e.stream, e.lane)]
                    same_link = [p for p in before if kind == "comm" and p.stream == "comm"
                                 and p.args["tier"] == e.args["tier"]]
                    writers = [p for p, _, w in placed if p.device == e.device and set(w) & set(reads)]
                    bounds.append(max([0.0] + [p.end for p in same_lane + same_link + writers]))
                if kind == "comm":  # a group starts together, at its latest member's bound
                    bounds = [max(bounds)] * len(bounds)
                assert [e.start for e in evs] == bounds
                placed += [(e, reads, writes) for e in evs]
        if overlap:
            assert {e.lane for e in m.timeline.events if e.stream == "comm"} <= {0, 1, 2}
        assert m.overlapped_step_time <= m.conservative_step_time
