"""What the mesh records on the active simulated machine lands on the right devices (sub-meshes
included): tensors are charged to their own mesh's devices, transfers go between the paired
devices, collectives run in the mesh's groups."""
import importlib

import pytest

from tessera_ref import dist

S = dist.ShardSpec


def _sim():
    sim = importlib.import_module("tessera_ref.sim")
    if not all(hasattr(sim, n) for n in ("Machine", "use", "current")):
        pytest.skip("tessera_ref.sim is not complete yet")
    return sim


def test_sub_mesh_memory_and_send_recv_are_recorded_on_their_devices():
    sim = _sim()
    mesh = dist.Mesh(("tp", "pp"), range(4), (2, 2))  # device = 2*tp + pp
    stage0, stage1 = mesh.sub(pp=0), mesh.sub(pp=1)
    machine = sim.Machine("GB200-NVL72", n_devices=4)
    with sim.use(machine):
        t = dist.tensor((8,), S((0,), ("tp",)), stage1, init="randn", seed=0)
        assert [machine.memory.live(d) for d in range(4)] == [0, 16, 0, 16]  # 4 f32 on cuda:1, cuda:3
        dist.send(t, stage0)
        r = dist.recv(stage1, stage0)
        assert [machine.memory.live(d) for d in range(4)] == [16, 16, 16, 16]
        del t, r


def test_collectives_are_recorded_in_mesh_groups():
    sim = _sim()
    mesh = dist.Mesh(("tp", "pp"), range(8, 12), (2, 2))  # devices cuda:8 … cuda:11
    machine = sim.Machine("GB200-NVL72", n_devices=12)
    with sim.use(machine):
        x = dist.tensor((4, 4), S(("row",), ("tp",)), mesh, init="randn", seed=0)
        assert [machine.memory.live(d) for d in range(12)] == [0] * 8 + [32] * 4
        dist.all_gather(x, "tp")
        dist.all_reduce(dist.tensor((4,), S(None, ("pp",), reduce="sum"), mesh, init="randn", seed=1), "pp")
    busy = [machine.timeline.ready(d) > 0 for d in range(12)]
    assert busy == [False] * 8 + [True] * 4  # the mesh's own devices, not cuda:0 … cuda:3
