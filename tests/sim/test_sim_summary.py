"""The machine's numbers as data (SIM-SUMMARY-1) and single-device ops priced on device 0
(SIM-ACT-2). Expected values are computed by hand from the H100 preset's numbers."""
import json

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op, sim
from tessera_ref.sim import SCHEMA, Machine

BF16_1MS = (989.5e9, 0)  # 1 ms of bf16 tensor-core work on an H100
MIB = 1 << 20


def _recorded_machine():
    m = Machine("H100", 4)
    a = m.alloc(0, 3 * MIB, "x")
    m.alloc(1, MIB, "y")
    m.free(a)  # device 0: peak 3 MiB, live 0
    m.record_compute(3, "slow", BF16_1MS, "bf16")  # device 3 busy 1 ms
    m.record_collective("all_reduce", [(0, 1, 2, 3)], MIB, axis="dp")
    m.record_collective("all_gather", [(0, 1), (2, 3)], MIB, axis="tp")
    return m


def test_summary_numbers_per_device():
    s = _recorded_machine().summary()
    nvls = 2e-6 + MIB / 450e9  # all_reduce inside one NVLink domain: nvls, alpha + n / beta
    assert s.preset == "H100" and s.hbm_capacity_bytes == 80 * 2**30
    d0, d3 = s.device("cuda:0"), s.device("cuda:3")
    assert (d0.peak_bytes, d0.live_bytes) == (3 * MIB, 0)
    assert (s.device("cuda:1").peak_bytes, s.device("cuda:1").live_bytes) == (MIB, MIB)
    assert d3.compute_s == pytest.approx(1e-3) and d0.compute_s == 0.0
    assert d0.comm_s["dp"] == pytest.approx(nvls) and set(d0.comm_s) == {"dp", "tp"}
    # everyone waits for device 3 before the all_reduce; the tp gather of (0, 1) needs only them
    assert d3.finish_s == pytest.approx(1e-3 + nvls + d3.comm_s["tp"])
    assert s.step_time_s == pytest.approx(max(d.finish_s for d in s.devices))
    assert s.compute_s == pytest.approx(1e-3)
    assert s.comm_s == pytest.approx(sum(sum(d.comm_s.values()) for d in s.devices))


def test_summary_numbers_per_axis():
    s = _recorded_machine().summary()
    dp, tp = s.axis("dp"), s.axis("tp")
    assert [a.axis for a in s.axes] == ["dp", "tp"]
    assert dp.calls == {"all_reduce": 1} and tp.calls == {"all_gather": 1}  # one call over two groups
    # all_gather of 1 MiB (the gathered size) over 2 ranks: each rank sends its half; 4 devices
    assert tp.bytes_sent_per_device == MIB / 2 and tp.bytes_sent_total == 4 * MIB / 2


def test_summary_json_form_is_plain_data_with_a_schema():
    data = _recorded_machine().summary().as_dict()
    assert data["schema"] == SCHEMA == "tessera-ref/sim-summary/1"
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {"schema", "preset", "hbm_capacity_bytes", "step_time_s", "devices", "axes"}
    assert set(data["devices"][0]) == {"name", "peak_bytes", "live_bytes", "compute_s", "comm_s", "finish_s"}
    assert data["devices"][0]["peak_bytes"] == 3 * MIB


def test_an_empty_machine_summarizes_to_zeros():
    s = Machine("H100", 2).summary()
    assert s.step_time_s == 0 and s.axes == () and all(d.peak_bytes == 0 and d.compute_s == 0 for d in s.devices)


def test_single_device_ops_are_priced_on_device_0():
    m = Machine("H100", 2)
    a = np.ones((256, 512), np.float32)
    b = np.ones((512, 128), np.float32)
    with sim.use(m):
        op.matmul(a, b)  # eagerly
        tr.jit(lambda x, y: op.matmul(x, y) + 1.0)(a, b)  # a jit function without distributed arguments
    names = [(e.device, e.name) for e in m.timeline.events]
    assert names == [(0, "matmul"), (0, "matmul"), (0, "constant"), (0, "add")]  # the 1.0 is a constant op
    flops = 2 * 256 * 512 * 128
    assert m.timeline.events[0].args["flops"] == flops
    assert m.summary().device("cuda:1").compute_s == 0 and m.summary().device("cuda:0").compute_s > 0
    with sim.use(m), sim.paused():
        op.matmul(a, b)
    assert len(m.timeline.events) == 4
