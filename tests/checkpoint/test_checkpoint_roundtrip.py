"""Round trips and resharding (CKPT-SAVE-1 … 3, CKPT-RESTORE-1 … 3, CKPT-FMT-1/2): the bits
come back on the saved mesh and on other meshes, each process reads each saved byte at most
once and only the boxes its own blocks need, and replicas are written once."""
from __future__ import annotations

import math
import typing

import numpy as np
import pytest
from safetensors import safe_open

from tessera_ref import checkpoint, dist
from tessera_ref.frontend.pytree import flatten
from tessera_ref.numerics.rng import RNGKey

from checkpoint_cases import S, assert_same_leaves, dp_tp, mixed_tree, reads_are_disjoint


def _leaves(tree):
    return flatten(tree, is_leaf=lambda x: isinstance(x, RNGKey))[0]


def test_a_mixed_tree_comes_back_with_the_same_bits_types_and_step(tmp_path):
    tree = mixed_tree(dp_tp())
    checkpoint.save(tmp_path / "ck", tree, step=12)
    got = checkpoint.restore(tmp_path / "ck", like=tree)
    assert_same_leaves(_leaves(got), _leaves(tree))
    assert got["params"]["w"].mesh == tree["params"]["w"].mesh and got["params"]["w"].layout == tree["params"]["w"].layout
    assert math.isnan(got["odd"][1]) and got["odd"][2] == 2 ** 70 and got["key"] == RNGKey(7, 1).fold(3)
    assert checkpoint.info(tmp_path / "ck").step == 12


def test_without_like_the_saved_structure_mesh_and_layouts_come_back(tmp_path):
    tree = mixed_tree(dp_tp())
    checkpoint.save(tmp_path / "ck", tree)
    got = checkpoint.restore(tmp_path / "ck")
    assert_same_leaves(_leaves(got), _leaves(tree))
    assert isinstance(got["odd"], tuple) and isinstance(got["opt"]["m"], list)


class Pair(typing.NamedTuple):
    first: object
    second: object


def test_records_come_back_as_dicts_or_through_like_as_their_class(tmp_path):
    tree = {"p": Pair(np.ones(2), 3)}
    checkpoint.save(tmp_path / "ck", tree)
    assert checkpoint.restore(tmp_path / "ck")["p"].keys() == {"first", "second"}
    assert isinstance(checkpoint.restore(tmp_path / "ck", like=tree)["p"], Pair)


# the saved tree's dist leaves: w (8x6 bf16 rows over tp), v (8x4 f32 over dp x tp), b (6 f16
# replicated), m (8x6 f32 rows over tp); each target below is a layout on another mesh
TARGETS = {
    "one device": (dist.Mesh(("d",), range(1)), {"w": None, "v": None, "b": None, "m": None}),
    "tp=4": (dist.Mesh(("tp",), range(4)), {"w": S(("row",), ("tp",)), "v": S(("col",), ("tp",)),
                                           "b": None, "m": S(("col",), ("tp",), pad=True)}),
    "3x2, padded": (dist.Mesh(("x", "y"), range(6), (3, 2)),
                    {"w": S(("row", "col"), ("x", "y"), pad=True), "v": S(("row", "col"), ("y", "x"), pad=True),
                     "b": S(("row",), ("x",)), "m": None}),
}


def _like(tree: dict, layouts: dict) -> dict:
    like = dict(tree)
    like["params"] = {k: layouts[k] if layouts[k] is not None else S() for k in ("w", "v", "b")}
    like["opt"] = {**tree["opt"], "m": [layouts["m"] if layouts["m"] is not None else S()]}
    return like


@pytest.mark.parametrize("name", list(TARGETS))
def test_restore_onto_another_mesh_moves_each_saved_byte_once(tmp_path, name):
    mesh, layouts = TARGETS[name]
    tree = mixed_tree(dp_tp())
    checkpoint.save(tmp_path / "ck", tree)
    log = checkpoint.ReadLog()
    got = checkpoint.restore(tmp_path / "ck", like=_like(tree, layouts), mesh=mesh, log=log)
    assert_same_leaves(_leaves(got), _leaves(tree))  # global values, bit for bit
    assert got["params"]["w"].mesh == mesh
    assert reads_are_disjoint(log)
    # one process holds every block: it reads every saved byte exactly once, replicas included
    saved = sum(np.asarray(x).nbytes if not isinstance(x, dist.DistTensor) else x.nbytes
                for x in _leaves(tree) if hasattr(x, "shape"))
    assert log.bytes_read == saved


def test_padding_of_restored_blocks_is_zero(tmp_path):
    mesh = dist.Mesh(("tp",), range(4))
    x = dist.tensor((6,), None, mesh, dtype="f32", data=np.arange(1, 7, dtype=np.float32))
    checkpoint.save(tmp_path / "ck", {"x": x})
    got = checkpoint.restore(tmp_path / "ck", like={"x": S(("row",), ("tp",), pad=True)}, mesh=mesh)["x"]
    assert [list(got.shard(i)) for i in range(4)] == [[1, 2], [3, 4], [5, 6], [0, 0]]


def test_a_process_reads_only_the_boxes_of_its_own_blocks(tmp_path, monkeypatch):
    """Restored as rank 1 of 2 (MPICH's variables; restore exchanges no message): the process
    reads the second half of the rows only, and the operating system agrees (rchar)."""
    data = np.arange(64 * 1024, dtype=np.float32).reshape(256, 256)
    x = dist.tensor(data.shape, S(("col",), ("tp",)), dist.Mesh(("tp",), range(4)), data=data)
    checkpoint.save(tmp_path / "ck", {"x": x})
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    log = checkpoint.ReadLog()
    before = _rchar()
    got = checkpoint.restore(tmp_path / "ck", like={"x": S(("row",), ("dp",))}, mesh=mesh, log=log)["x"]
    read = _rchar() - before
    assert log.bytes_read == data.nbytes // 2 and reads_are_disjoint(log)
    assert {box for _, _, box, _ in log.reads} == {((128, 256), (64 * k, 64 * k + 64)) for k in range(4)}
    assert np.array_equal(got.shard("cuda:2"), data[128:])
    assert read < data.nbytes // 2 + 64 * 1024  # the half it needs, headers and the manifest; never the whole
    assert got.local.shape == (1, 1, 128, 256)  # replicated over tp: held (and read) once


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_each_replica_is_written_once_by_its_lowest_rank_holder(tmp_path):
    mesh = dp_tp(2, 3)
    w = dist.tensor((6, 4), S(("row",), ("tp",)), mesh, init="randn", seed=1)  # replicated over dp
    r = dist.tensor((5,), None, mesh, init="randn", seed=2)  # replicated everywhere
    checkpoint.save(tmp_path / "ck", {"w": w, "r": r})
    with safe_open(str(tmp_path / "ck" / "process-00000.safetensors"), framework="np") as f:
        shapes = sorted(tuple(f.get_slice(k).get_shape()) for k in f.keys())
    assert shapes == [(2, 4)] * 3 + [(5,)]


def test_restore_can_run_in_several_threads_at_once(tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    tree = mixed_tree(dp_tp())
    checkpoint.save(tmp_path / "ck", tree)
    mesh = dist.Mesh(("tp",), range(4))
    like = _like(tree, TARGETS["tp=4"][1])
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: checkpoint.restore(tmp_path / "ck", like=like, mesh=mesh), range(4)))
    for got in results:
        assert_same_leaves(_leaves(got), _leaves(tree))


def test_the_byte_runs_of_a_box_are_exactly_its_bytes_in_order():
    """CKPT-RESTORE-3's reads: the runs of random boxes of random shapes against a mask."""
    from tessera_ref.checkpoint.files import _runs
    rng = np.random.default_rng(0)
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(1, 6, rng.integers(1, 4)))
        box = []
        for n in shape:
            lo = int(rng.integers(0, n + 1))
            box.append((lo, int(rng.integers(lo, n + 1))))
        mask = np.zeros(shape, bool)
        mask[tuple(slice(lo, hi) for lo, hi in box)] = True
        got = [b for start, length in _runs(shape, box, 2) for b in range(start, start + length)]
        assert got == [2 * e + k for e in np.flatnonzero(mask.reshape(-1)) for k in range(2)]


def test_numpy_dtypes_and_empty_tensors_come_back(tmp_path):
    import ml_dtypes
    tree = {"u16": np.arange(3, dtype=np.uint16), "i32": np.arange(3, dtype=np.int32) - 1,
            "bf": np.array([1.5, -0.0], ml_dtypes.bfloat16), "c": np.array([1 - 2j], np.complex64),
            "empty": np.zeros((0, 3), np.float32),
            "none": dist.tensor((0, 4), None, dist.Mesh(("tp",), range(2)), data=np.zeros((0, 4), np.float32))}
    checkpoint.save(tmp_path / "ck", tree)
    assert_same_leaves(_leaves(checkpoint.restore(tmp_path / "ck")), _leaves(tree))
    with pytest.raises(checkpoint.CheckpointError, match="dtype uint16 has no tessera element type"):
        checkpoint.restore(tmp_path / "ck", like={**tree, "u16": S()}, mesh=dist.Mesh(("tp",), range(2)))


def test_a_0d_dist_tensor_restores_as_a_whole_array(tmp_path):
    """CKPT-RESTORE-1: a 0-d DistTensor (an optimizer's step count on a mesh) restored with
    like= an array or Array gets its saved value — the box of a 0-d array was read into a copy."""
    import tessera_ref as tr
    mesh = dp_tp()
    count = dist.tensor((), None, mesh, "f64", data=np.float64(7.0))
    checkpoint.save(tmp_path / "ck", {"count": count}, step=7)
    for like in (np.zeros((), np.float64), tr.asarray(np.float64(0.0))):
        got = checkpoint.restore(tmp_path / "ck", like={"count": like})["count"]
        assert float(np.asarray(got)) == 7.0
