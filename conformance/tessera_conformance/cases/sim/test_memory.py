"""SIM-MEM-1 … SIM-MEM-4: live and peak bytes per device as a program runs on the backend with
a machine current, the 80% warning, out of memory, and failures that change nothing."""
import warnings

import numpy as np
import pytest

from tessera_ref import dist, op, sim
from tessera_ref.errors import MemoryWarning, OutOfMemoryError, SimError
from tessera_conformance import clause, eager, not_applicable, oracle_only

from ._reference import AXES, GiB, PRESETS, mesh_of

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the simulated machine's model (presets, costs, timelines, memory, reports) is the "
                      "library's; no backend computes it")

S = dist.ShardSpec
CAP = PRESETS["H100"]["hbm"]


def _state(m):
    return ([m.memory.live(d) for d in range(m.n_devices)], [m.memory.peak(d) for d in range(m.n_devices)],
            [[a.name for a in m.memory.live_tensors(d)] for d in range(m.n_devices)])


def _within(backend, machine, fn):
    """``fn()`` run on the backend with ``machine`` current; returns what it returns."""
    out = {}

    def go():
        with sim.use(machine):
            out["value"] = fn()
        return np.zeros(1, np.float32)

    eager(backend, go)
    return out.get("value")


@pytest.mark.parametrize("dtype, bits", [("f32", 32), ("bf16", 16), ("fp4", 4)])
@clause("SIM-MEM-1")
def test_tensors_charge_their_bytes_per_device(backend, mesh_shape, dtype, bits):
    """A sharded tensor charges its packed per-device bytes on every device holding a shard;
    op results are charged too; collected tensors free theirs; peak keeps the most."""
    mesh = mesh_of(mesh_shape)
    axis = AXES[len(mesh_shape) - 1]
    p = mesh_shape[-1]
    m = sim.Machine("H100", mesh.size)
    local = 8 * 16  # (8p, 16) rows over the last axis: (8, 16) per device
    per_device = local * bits // 8

    def program():
        x = dist.tensor((8 * p, 16), S(("row",), (axis,)), mesh, dtype=dtype, init="randn", seed=1)
        after_x = [m.memory.live(d) for d in range(mesh.size)]
        y = op.neg(x)
        after_y = [m.memory.live(d) for d in range(mesh.size)]
        del x, y
        return after_x, after_y, [m.memory.live(d) for d in range(mesh.size)]

    after_x, after_y, after_del = _within(backend, m, program)
    assert after_x == [per_device] * mesh.size
    assert after_y == [2 * per_device] * mesh.size
    assert after_del == [0] * mesh.size
    assert [m.memory.peak(d) for d in range(mesh.size)] == [2 * per_device] * mesh.size


@clause("SIM-MEM-1")
def test_a_sub_mesh_tensor_lives_on_its_devices_and_lists_largest_first(backend, mesh_shape):
    """Only the sub-mesh's devices are charged; the accountant lists live tensors largest first."""
    if len(mesh_shape) < 2:
        not_applicable("needs a sub-mesh")
    mesh = mesh_of(mesh_shape)
    last = AXES[len(mesh_shape) - 1]
    stage = mesh.sub(**{last: 1})
    m = sim.Machine("H100", mesh.size)

    def program():
        small = dist.tensor((4,), None, stage, name="small")
        big = dist.tensor((64,), None, stage, name="big")
        return [m.memory.live(d) for d in range(mesh.size)], [[a.name for a in m.memory.live_tensors(d)]
                                                              for d in range(mesh.size)], (small, big)

    live, names, _ = _within(backend, m, program)
    holders = {int(name.split(":")[1]) for name in stage.devices}
    assert live == [(4 + 64) * 4 if d in holders else 0 for d in range(mesh.size)]
    assert names == [["big", "small"] if d in holders else [] for d in range(mesh.size)]


@LIBRARY
@clause("SIM-MEM-1")
def test_alloc_and_free(backend):
    """``alloc`` adds a tensor's bytes on one device and returns a handle; ``free`` takes them away."""
    m = sim.Machine("H100", 2)
    a = m.alloc("cuda:1", 300, "a")
    b = m.alloc(1, 500, "b")
    assert (m.memory.live(1), m.memory.peak(1), m.memory.live(0)) == (800, 800, 0)
    m.free(a)
    assert (m.memory.live(1), m.memory.peak(1)) == (500, 800)
    m.free(b)
    assert m.memory.live(1) == 0


@clause("SIM-MEM-2")
def test_crossing_80_percent_warns_once_per_device(backend, mesh_shape):
    """Exactly 80% does not warn; the first allocation past it warns once per device, naming the
    device, the live bytes, the percentage and the tensor; a device never warns again."""
    mesh = mesh_of(mesh_shape)
    m = sim.Machine("H100", mesh.size)
    eighty = CAP * 4 // 5  # 64 GiB: 5·live == 4·capacity

    def program():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            at = dist.tensor((eighty,), None, mesh, dtype="fp8", name="at_80")
            quiet = list(caught)
            over = dist.tensor((1,), None, mesh, dtype="fp8", name="crosser")
            more = dist.tensor((2,), None, mesh, dtype="fp8", name="more")
        return quiet, [w for w in caught if issubclass(w.category, MemoryWarning)], (at, over, more)

    quiet, warned, _ = _within(backend, m, program)
    assert quiet == []
    assert len(warned) == mesh.size
    for d, w in enumerate(warned):
        text = str(w.message)
        assert f"cuda:{d}" in text and "'crosser'" in text and "80.0%" in text
        assert f"{eighty + 1:,}" in text


@clause("SIM-MEM-3")
def test_out_of_memory_names_everything(backend, mesh_shape):
    """Past the capacity: OutOfMemoryError naming the tensor, device, requested, live, free,
    capacity, the largest live tensors and the fixes; live bytes may equal the capacity."""
    mesh = mesh_of(mesh_shape)
    m = sim.Machine("H100", mesh.size)

    def program():
        held = dist.tensor((50 * GiB,), None, mesh, dtype="fp8", name="weights")
        with pytest.raises(OutOfMemoryError) as info:
            dist.tensor((31 * GiB,), None, mesh, dtype="fp8", name="W_big")
        with pytest.warns(MemoryWarning):
            exact = dist.tensor((30 * GiB,), None, mesh, dtype="fp8", name="fits_exactly")
        return info.value, [m.memory.live(d) for d in range(mesh.size)], (held, exact)

    err, live, _ = _within(backend, m, program)
    text = str(err)
    assert "'W_big'" in text and "cuda:0" in text
    for n in (31 * GiB, 50 * GiB, CAP, CAP - 50 * GiB):
        assert f"{n:,}" in text, n
    assert "'weights'" in text
    assert all(word in err.fix for word in ("shard", "smaller format", "free", "preset"))
    assert isinstance(err, MemoryError)
    assert live == [CAP] * mesh.size


@pytest.mark.filterwarnings("ignore::tessera_ref.errors.MemoryWarning")
@clause("SIM-MEM-4")
def test_a_failed_tensor_allocation_on_a_mesh_changes_nothing(backend, mesh_shape):
    """Devices of the last stage are nearly full, the others at 60 GiB: a 10 GiB tensor over the
    whole mesh does not fit, and leaves every live and peak count and tensor list as it was,
    with no warning — so the first stage's devices still warn once when they do cross 80%."""
    if len(mesh_shape) < 2:
        not_applicable("needs a sub-mesh to fill some devices only")
    mesh = mesh_of(mesh_shape)
    last = AXES[len(mesh_shape) - 1]
    m = sim.Machine("H100", mesh.size)
    first_stage = mesh.sub(**{last: 0})

    def program():
        kept = [dist.tensor((75 * GiB,), None, mesh.sub(**{last: mesh_shape[-1] - 1}), dtype="fp8", name="full")]
        kept += [dist.tensor((60 * GiB,), None, mesh.sub(**{last: c}), dtype="fp8", name="base")
                 for c in range(mesh_shape[-1] - 1)]
        before = _state(m)
        with warnings.catch_warnings(record=True) as failed:
            warnings.simplefilter("always")
            with pytest.raises(OutOfMemoryError):
                dist.tensor((10 * GiB,), None, mesh, dtype="fp8", name="too_big")
        after = _state(m)
        with warnings.catch_warnings(record=True) as crossing:
            warnings.simplefilter("always")
            kept.append(dist.tensor((10 * GiB,), None, first_stage, dtype="fp8", name="crossing"))
        return before, after, failed, crossing, kept

    before, after, failed, crossing, _ = _within(backend, m, program)
    assert [w for w in failed if issubclass(w.category, MemoryWarning)] == []
    assert after == before
    assert len([w for w in crossing if issubclass(w.category, MemoryWarning)]) == first_stage.size


@LIBRARY
@pytest.mark.parametrize("device, nbytes", [(2, 10), ("cuda:9", 10), (0, -1), (0, 1.5), (0, True)])
@clause("SIM-MEM-4")
def test_bad_allocations_and_frees_change_nothing(backend, device, nbytes):
    """A device not in the machine or a size that is not a non-negative integer is an error;
    freeing twice or another machine's handle is an error; nothing changes."""
    m, other = sim.Machine("H100", 2), sim.Machine("H100", 2)
    h = m.alloc(0, 100, "a")
    foreign = other.alloc(0, 10, "g")
    before = _state(m)
    with pytest.raises(SimError):
        m.alloc(device, nbytes, "bad")
    assert _state(m) == before
    m.free(h)
    before = _state(m)
    for handle in (h, foreign):
        with pytest.raises(SimError):
            m.free(handle)
    assert _state(m) == before
