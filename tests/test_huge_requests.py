"""Huge requests fail clearly before allocating (issue 19, item 10)."""
from __future__ import annotations

import importlib
import tracemalloc

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import f32, kernel, mut, op, sim, tile
from tessera_ref.errors import HostMemoryError, KernelError, SimError
from tessera_ref.frontend.tile_api import symbols

primitive = importlib.import_module("tessera_ref.ops.primitive")  # the module, not op.primitive()
n = symbols("n")

GiB = 2 ** 30


@pytest.fixture
def host_of_4_gib(monkeypatch):
    """A host of 4 GiB: results over 1 GiB are refused."""
    monkeypatch.setattr(primitive, "HOST_MEMORY", 4 * GiB)


@pytest.mark.parametrize("make, name, shape", [
    (lambda: op.randn((20000, 20000), seed=0), "randn", "20000x20000"),
    (lambda: op.matmul(np.ones((20000, 1), np.float32), np.ones((1, 20000), np.float32)), "matmul", "20000x20000"),
    (lambda: tr.jit(lambda x: op.broadcast_to(x, (10**9, 10**9)))(np.ones((1, 1), np.float32)), "broadcast_to",
     "1000000000x1000000000"),
])
def test_an_eager_result_beyond_the_host_is_refused_before_allocating(host_of_4_gib, make, name, shape):
    tracemalloc.start()
    try:
        with pytest.raises(HostMemoryError) as info:
            make()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(info.value)
    # 20000 * 20000 * 4 bytes = 1.49 GiB > 4 GiB / 4
    assert f"{name} would compute tensor<{shape}xf32>" in message and "1.0 GiB this host" in message
    assert info.value.location.startswith(__file__) and "abstract tensors" in info.value.fix
    assert peak < 64 * 2 ** 20  # nothing of the result's size was allocated


def test_a_result_within_the_limit_runs(host_of_4_gib):
    assert op.randn((100, 100), seed=0).shape == (100, 100)


def test_a_machine_of_a_hundred_million_devices_is_refused():
    with pytest.raises(SimError, match="at most 131072 devices, got 100000000"):
        sim.machine("H100", devices=10**8)


@kernel
def copy(x: f32[n], y: mut[f32[n]]):
    i = tile.lane_id()
    y[i] = x[i]


def test_a_launch_of_a_billion_tiles_or_too_many_lanes_is_refused_at_once():
    x, y = np.ones(128, np.float32), np.zeros(128, np.float32)
    with pytest.raises(KernelError, match="at most 1048576 tiles .* 1000000000 tiles"):
        copy(x, y, grid=(10**9,), lanes=128)
    with pytest.raises(KernelError, match="at most 1024 lanes"):
        copy(x, y, grid=1, lanes=4096)
    assert not y.any()


def test_inside_a_simulated_machine_its_out_of_memory_error_comes_first(host_of_4_gib):
    from tessera_ref import dist
    from tessera_ref.errors import OutOfMemoryError

    machine = sim.machine("H100", devices=2)
    with sim.use(machine):
        mesh = dist.Mesh(("tp",), range(2), (2,))
        a = dist.tensor((200000, 1), None, mesh, "f32", data=np.ones((200000, 1), np.float32))
        b = dist.tensor((1, 200000), None, mesh, "f32", data=np.ones((1, 200000), np.float32))
        before = len(machine.timeline.events)
        with pytest.raises(OutOfMemoryError, match="needs 149 GiB"):  # 200000^2 * 4 B on each device
            op.matmul(a, b)
        assert len(machine.timeline.events) == before  # nothing recorded for the refused op
    with pytest.raises(HostMemoryError):  # outside the machine: the host's limit
        op.matmul(np.ones((200000, 1), np.float32), np.ones((1, 200000), np.float32))
