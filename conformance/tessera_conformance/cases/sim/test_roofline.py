"""SIM-ROOF-1, SIM-ROOF-2: the roofline time of the ops of a program run on the backend, and the
peak each storage format runs at."""
import numpy as np
import pytest

from tessera_ref import dist, op, sim
from tessera_ref.errors import SimError
from tessera_ref.numerics import Policy
from tessera_conformance import clause, eager, oracle_only

from ._reference import AXES, PRESETS, mesh_of, rate_key, roofline_time

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the simulated machine's model (presets, costs, timelines, memory, reports) is the "
                      "library's; no backend computes it")

S = dist.ShardSpec
BITS = {"f32": 32, "bf16": 16, "fp8_e4m3": 8, "fp4_e2m1": 4}


def _compute_events(backend, machine, fn):
    def go():
        with sim.use(machine):
            fn()
        return np.zeros(1, np.float32)

    eager(backend, go)
    return [e for e in machine.timeline.events if e.stream == "compute"]


@pytest.mark.parametrize("fmt", ["f32", "bf16"])
@pytest.mark.parametrize("preset", ["H100", "B200"])
@clause("SIM-ROOF-1")
def test_a_sharded_matmul_takes_its_roofline_time(backend, mesh_shape, fmt, preset):
    """Each device's block product: ``F = 2·M·N·K`` of the local shapes, ``B`` the packed bytes of
    its operands and result; ``T = max(F/peak, B/bw) + launch overhead``; bound by the larger."""
    mesh = mesh_of(mesh_shape)
    axis = AXES[len(mesh_shape) - 1]
    p = mesh_shape[-1]
    overhead = 3e-6
    m = sim.Machine(preset, mesh.size, launch_overhead=overhead)
    shapes = [(8, 256 * p, 8), (4096, 4096 * p, 4096)]  # memory-bound, compute-bound

    def program():
        for mm, kk, nn in shapes:
            a = dist.tensor((mm, kk), S(("col",), (axis,)), mesh, dtype=fmt)  # abstract: costs, no values
            b = dist.tensor((kk, nn), S(("row",), (axis,)), mesh, dtype=fmt)
            op.matmul(a, b)

    events = _compute_events(backend, m, program)
    assert len(events) == len(shapes) * mesh.size
    bounds = set()
    for k, (mm, kk, nn) in enumerate(shapes):
        kl = kk // p
        flops = 2 * mm * nn * kl
        nbytes = (mm * kl + kl * nn + mm * nn) * BITS[fmt] // 8
        time, bound = roofline_time(flops, nbytes, preset, fmt, overhead)
        for e in events[k * mesh.size:(k + 1) * mesh.size]:
            assert (e.args["flops"], e.args["bytes"], e.args["bound"]) == (flops, nbytes, bound)
            assert e.duration == pytest.approx(time, rel=1e-12)
        bounds.add(bound)
    assert bounds == {"memory", "compute"}


@LIBRARY
@pytest.mark.parametrize("cost, bound", [((0, 0), "memory"), ((67e12, 3.35e12), "memory"),
                                         ((67e12 * 2, 3.35e12), "compute"), ((1, 10**9), "memory")])
@clause("SIM-ROOF-1")
def test_ties_and_empty_ops_are_memory_bound(backend, cost, bound):
    """``F/peak > B/bw`` is compute-bound, anything else (ties, empty ops) memory-bound; no
    launch overhead by default."""
    r = sim.roofline(cost, "f32", "H100")
    time, want = roofline_time(cost[0], cost[1], "H100", "f32")
    assert (r.bound, r.time) == (want, pytest.approx(time, rel=1e-12)) and want == bound
    m = sim.Machine("H100", 1)
    assert m.record_compute(0, "op", cost, "f32").time == pytest.approx(time, rel=1e-12)


FORMATS = ["f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "int8", "int4"]


@LIBRARY
@pytest.mark.parametrize("preset", list(PRESETS))
@clause("SIM-ROOF-2")
def test_which_peak(backend, preset):
    """Each storage format's rate, or the next wider one the part has (fp4 → fp6 → fp8 → bf16 →
    f32, int4 → int8 → bf16, f16/tf32 → f32); ``"tf32"`` names the f32 tensor-core rate."""
    for fmt in FORMATS:
        assert sim.peak_key(preset, fmt) == rate_key(preset, fmt), fmt
    assert sim.peak_key(preset, "tf32") == "tf32"
    assert sim.peak_key(preset, Policy("fp6_e2m3", accum="f32")) == rate_key(preset, "fp6_e2m3")
    assert sim.peak_key(preset, np.float32) == "f32" and sim.peak_key(preset, "float16") == rate_key(preset, "f16")
    with pytest.raises(SimError):
        sim.peak_key(preset, "e8m0")


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp4_e2m1", "bf16"])
@clause("SIM-ROOF-2")
def test_a_programs_ops_run_at_their_formats_rate(backend, fmt):
    """An op on fp4 operands on an H100 runs at the fp8 rate (no fp4 there), at fp4 on a B200."""
    mesh = mesh_of((2,))
    for preset in ("H100", "B200"):
        m = sim.Machine(preset, 2)
        events = _compute_events(backend, m, lambda: op.matmul(dist.tensor((4096, 4096), None, mesh, dtype=fmt),
                                                               dist.tensor((4096, 4096), None, mesh, dtype=fmt)))
        (e, _) = events
        assert e.args["dtype"] == rate_key(preset, fmt)
        flops = 2 * 4096 ** 3
        assert e.duration == pytest.approx(roofline_time(flops, e.args["bytes"], preset, fmt)[0], rel=1e-12)
