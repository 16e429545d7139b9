"""Flow events between the ranks of a collective in the Chrome trace (SIM-TRACE-2)."""
import json

from tessera_ref.sim import Machine


def _flows(m):
    return [e for e in json.loads(json.dumps(m.chrome_trace()))["traceEvents"] if e["ph"] in "stf"]


def test_each_group_of_a_collective_is_one_flow_through_its_ranks():
    m = Machine("H100", 8)
    m.record_collective("all_gather", [(0, 1, 2, 3), (4, 5, 6, 7)], 1 << 20, axis="tp")
    m.record_collective("all_reduce", [(7, 2)], 1 << 10, axis="dp")
    flows = _flows(m)
    by_id: dict = {}
    for e in flows:
        by_id.setdefault(e["id"], []).append((e["pid"], e["ph"]))
    assert sorted(by_id.values()) == sorted([
        [(0, "s"), (1, "t"), (2, "t"), (3, "f")],
        [(4, "s"), (5, "t"), (6, "t"), (7, "f")],
        [(2, "s"), (7, "f")],  # in device order, whatever the group's order
    ])
    comm = {(e.device, e.name): e for e in m.timeline.events}
    for e in flows:
        assert e["tid"] == 1 and e["bp"] == "e" and e["cat"] == "collective"
        event = comm[e["pid"], e["name"]]  # the flow sits inside its rank's comm event
        assert event.start * 1e6 < e["ts"] < (event.start + event.duration) * 1e6


def test_transfers_and_lone_ranks_have_no_flows():
    m = Machine("H100", 4)
    m.record_transfer([0, 1], [2, 3], 1 << 20, axis="pp")
    m.record_collective("all_reduce", [(0,), (1,)], 1 << 20, axis="dp")  # groups of one: nothing moves
    m.record_compute(0, "matmul", (1e9, 1e6), "bf16")
    assert _flows(m) == []
