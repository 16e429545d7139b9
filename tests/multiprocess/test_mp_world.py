"""The world and the boxes processes own (MESH-MP-1, MESH-MP-2, MESH-MP-3), without processes:
the placement arithmetic checked against hand-worked meshes."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref import dist
from tessera_ref.dist.world import World, check_engine, placement, world
from tessera_ref.errors import MeshError


@pytest.mark.parametrize("env, want", [
    ({}, (0, 1)),
    ({"RANK": "2", "WORLD_SIZE": "4"}, (2, 4)),
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2)),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}, (3, 8)),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "16"}, (0, 16)),
    ({"RANK": "1", "WORLD_SIZE": "2", "PMI_RANK": "0", "PMI_SIZE": "4"}, (1, 2)),  # torchrun's first
])
def test_the_world_comes_from_the_launchers_variables(env, want):
    w = world(env)
    assert (w.rank, w.size) == want


@pytest.mark.parametrize("env", [{"RANK": "4", "WORLD_SIZE": "4"}, {"RANK": "x", "WORLD_SIZE": "2"},
                                 {"RANK": "0", "WORLD_SIZE": "2", "TESSERA_DEVICES_PER_PROCESS": "0"}])
def test_a_bad_world_is_a_mesh_error(env):
    with pytest.raises(MeshError):
        world(env)


def test_the_boxes_of_the_demo_mesh():
    mesh = dist.mesh(devices=range(72), axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    # 18 consecutive devices: pp whole (2), tp whole (9) -> one dp coordinate each
    p = placement(mesh, World(3, 4))
    assert (p.box, p.grid, p.coords, p.start) == ((1, 9, 2), (4, 1, 1), (3, 0, 0), (3, 0, 0))
    # 36: two dp coordinates
    assert placement(mesh, World(1, 2)).start == (2, 0, 0)
    # 8 processes of 9 devices: 9 is neither a multiple of pp (2) nor does it divide it
    with pytest.raises(MeshError, match="MESH-MP-2"):
        placement(mesh, World(0, 8))


def test_a_box_may_be_a_run_of_one_axis():
    mesh = dist.Mesh(("dp", "tp"), range(8), (2, 4))
    p = placement(mesh, World(3, 4))           # 2 devices each: half of tp
    assert (p.box, p.grid, p.coords, p.start) == ((1, 2), (2, 2), (1, 1), (1, 2))
    assert p.group([1]) == [2, 3] and p.group([0]) == [1, 3] and p.group([0, 1]) == [0, 1, 2, 3]
    assert [p.owner(c) for c in ((0, 0), (0, 3), (1, 1), (1, 2))] == [0, 1, 2, 3]


def test_devices_per_process_must_match_the_mesh():
    mesh = dist.Mesh(("r",), range(8))
    assert placement(mesh, World(0, 2, 4)).box == (4,)
    with pytest.raises(MeshError, match="2 processes x 2 devices per process"):
        placement(mesh, World(0, 2, 2))


def test_a_process_holds_only_its_box_and_names_the_owner_of_remote_shards(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("PMI_SIZE", "2")   # as if mpiexec started it (MESH-MP-7); nothing here talks to MPI
    mesh = dist.Mesh(("dp", "tp"), range(8), (2, 4))
    data = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = dist.tensor((8, 4), dist.ShardSpec(("row",), ("tp",)), mesh, data=data)  # varies over tp only
    assert x.local.shape == (1, 4, 2, 4)           # replicated over dp: one copy; its box holds all of tp
    np.testing.assert_array_equal(x.shard(5), data[2:4])   # cuda:5 = (dp 1, tp 1), this process's
    assert set(x.shards()) == {f"cuda:{i}" for i in range(4, 8)}
    with pytest.raises(MeshError, match="owned by process 0; this is process 1 of 2"):
        x.shard(0)
    y = dist.tensor((8, 4), dist.ShardSpec(("row",), ("dp",)), mesh, data=data)
    np.testing.assert_array_equal(y.local[0, 0], data[4:])   # the second half of the rows: dp = 1


TORCHRUN = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("extra, ok", [({}, False), ({"PMI_SIZE": "4"}, True), ({"OMPI_COMM_WORLD_SIZE": "4"}, True),
                                       ({"PMIX_RANK": "1"}, True), ({"TESSERA_TRANSPORT": "nccl"}, True),
                                       ({"WORLD_SIZE": "1", "RANK": "0"}, True)])
def test_torchrun_variables_without_an_mpi_runtime_are_refused_when_collectives_go_over_mpi(extra, ok):
    env = dict(TORCHRUN, **extra)
    if ok:
        check_engine(env)
        return
    with pytest.raises(MeshError) as caught:
        check_engine(env)
    text = str(caught.value)
    for part in ("rank 1 of 4", "RANK=1, WORLD_SIZE=4, LOCAL_RANK=1, MASTER_ADDR=10.0.0.7, MASTER_PORT=29500",
                 "none of PMI_SIZE, OMPI_COMM_WORLD_SIZE, PMIX_RANK is set", "size 1 while WORLD_SIZE=4",
                 "tessera-ref launch -n 4", "mpiexec -n 4", "TESSERA_TRANSPORT=nccl"):
        assert part in text


def test_a_mesh_made_under_torchrun_without_mpi_is_a_mesh_error_naming_the_line(monkeypatch):
    for name, value in TORCHRUN.items():
        monkeypatch.setenv(name, value)
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "TESSERA_TRANSPORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(MeshError, match="no MPI runtime started it") as caught:
        dist.Mesh(("r",), range(4))
    assert "test_mp_world.py" in str(caught.value)
