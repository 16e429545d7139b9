"""CKPT-*: values a backend computed, saved on its mesh and restored onto other meshes, come
back with the same bits in the blocks the layout's definition gives (checked against NumPy
slices, ``_reference.expected_shard``); the files, manifest and read log say what the spec
says; a run resumed from a checkpoint continues with the bits of the run that never stopped;
bad checkpoints and bad targets raise the named errors."""
from __future__ import annotations

import hashlib
import json
import math
import os

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open

from tessera_ref import backends, checkpoint, dist, op
from tessera_ref.errors import BackendError, CheckpointError, LayoutError
from tessera_ref.numerics import Policy
from tessera_ref.numerics.rng import RNGKey
from tessera_conformance import assert_bits, clause, oracle_only

from ..mesh._reference import AXES, expected_shard, mesh_of

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")


def _on(backend, fn):
    """``fn()`` with ``backend`` in force; a backend that cannot run it is 'unsupported'."""
    try:
        with backends.use(backend):
            return fn()
    except BackendError as exc:
        pytest.skip(f"unsupported: {backend} cannot run it ({exc.what})")


def _state(backend, mesh_shape):
    """``y = x @ W`` computed on the backend (W split over the mesh's first axis by columns)."""
    mesh = mesh_of(mesh_shape)
    rng = np.random.default_rng(7)
    n = 2 * math.prod(mesh_shape)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((6, n)).astype(np.float32)
    X = dist.tensor(x.shape, None, mesh, data=x)
    W = dist.tensor(w.shape, S(("col",), (AXES[0],)), mesh, data=w)
    return mesh, _on(backend, lambda: op.matmul(X, W))


LIBRARY = oracle_only("the checkpoint files, their manifest and their errors are the library's own; no backend runs")

@clause("CKPT-RESTORE-1", "CKPT-RESTORE-2", "CKPT-SAVE-1")
def test_values_come_back_on_any_mesh_in_the_blocks_of_their_layout(backend, mesh_shape, tmp_path):
    mesh, y = _state(backend, mesh_shape)
    want = y.numpy()
    path = checkpoint.save(tmp_path / "ck", {"y": y}, step=1)
    again = checkpoint.restore(path, like={"y": y})["y"]
    for i in range(mesh.size):
        assert_bits(again.shard(i), y.shard(i), f"device {i}")
    for shape in ((1,), (3,), (2, 3)):
        other = mesh_of(shape)
        spec = S(("row", "col"), AXES[:2], pad=True) if len(shape) == 2 else S(("col",), ("dp",), pad=True)
        moved = checkpoint.restore(path, like={"y": spec}, mesh=other)["y"]
        dims = moved.layout.dims
        for i in range(other.size):
            assert_bits(moved.shard(i), expected_shard(want, dims, AXES[:len(shape)], shape, i, padded=True),
                        f"{shape} device {i}")


@pytest.mark.parametrize("fmt", ["bf16", "f16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp4_e2m1", "i1", "index"])
@clause("CKPT-FMT-1")
@LIBRARY
def test_every_element_type_comes_back_with_its_bits(backend, tmp_path, fmt):
    codes = np.arange(256, dtype=np.uint8)
    data = {"i1": codes % 2 == 1, "index": codes.astype(np.int64) * 2 ** 40 - 3}.get(fmt)
    if data is None:
        dtype = np.dtype({"bf16": ml_dtypes.bfloat16, "f16": np.float16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
                          "fp8_e5m2": ml_dtypes.float8_e5m2, "fp6_e2m3": ml_dtypes.float6_e2m3fn,
                          "fp4_e2m1": ml_dtypes.float4_e2m1fn}[fmt])
        bits = np.arange(256, dtype=np.uint16 if dtype.itemsize == 2 else np.uint8)
        if fmt.startswith(("fp6", "fp4")):
            bits = bits % (1 << (6 if fmt.startswith("fp6") else 4))
        data = bits.view(dtype) if dtype.itemsize == bits.itemsize else (bits * 257).view(dtype)
    mesh = mesh_of((2, 2))
    x = dist.tensor(data.shape, S(("row",), ("tp",)), mesh, data=data, dtype=None if fmt in ("i1", "index") else fmt)
    tree = {"x": x, "f": -0.0, "n": 2 ** 70, "key": RNGKey(3, 1).fold(2)}
    got = checkpoint.restore(checkpoint.save(tmp_path / "ck", tree), like=tree, mesh=dist.Mesh(("tp",), range(4)))
    assert_bits(got["x"].numpy(), x.numpy(), fmt)
    assert str(got["x"].policy) == str(x.policy) and got["f"].hex() == "-0x0.0p+0" and got["n"] == 2 ** 70
    assert got["key"] == tree["key"]


@clause("CKPT-TREE-1")
@LIBRARY
def test_abstract_and_pending_tensors_are_refused(backend, tmp_path):
    mesh = mesh_of((2, 2))
    with pytest.raises(CheckpointError, match="abstract"):
        checkpoint.save(tmp_path / "a", {"w": dist.tensor((4, 4), None, mesh)})
    pending = dist.tensor((4,), S(None, ("tp",), reduce="sum"), mesh, data=np.ones(4, np.float32))
    with pytest.raises(CheckpointError, match="pending"):
        checkpoint.save(tmp_path / "a", {"g": pending})
    assert not os.path.exists(tmp_path / "a")


@clause("CKPT-SAVE-2", "CKPT-SAVE-3", "CKPT-FMT-2")
@LIBRARY
def test_each_block_once_in_a_hashed_file_the_manifest_describes(backend, tmp_path):
    mesh = mesh_of((2, 3))
    w = dist.tensor((6, 4), S(("row",), ("tp",)), mesh, data=np.arange(24, dtype=np.float32).reshape(6, 4))
    path = checkpoint.save(tmp_path / "ck", {"w": w, "h": np.arange(3.0)}, step=4)
    m = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert (m["format"], m["version"], m["step"], m["processes"]) == ("tessera_ref.checkpoint", 1, 4, 1)
    assert m["meshes"] == [{"axes": ["dp", "tp"], "shape": [2, 3], "devices": [f"cuda:{i}" for i in range(6)]}]
    for name, info in m["files"].items():
        data = (tmp_path / "ck" / name).read_bytes()
        assert info == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    leaf = next(r for r in m["leaves"] if r["path"] == "['w']")
    assert leaf["layout"] == {"dims": [["tp"], []], "padded": False}
    assert [s["box"] for s in leaf["shards"]] == [[[2 * k, 2 * k + 2], [0, 4]] for k in range(3)]  # replicas once
    with safe_open(os.path.join(path, leaf["shards"][1]["file"]), framework="np") as f:
        assert_bits(f.get_tensor(leaf["shards"][1]["tensor"]), np.arange(8, 16, dtype=np.float32).reshape(2, 4))


@clause("CKPT-RESTORE-3")
@LIBRARY
def test_each_saved_byte_is_read_at_most_once(backend, tmp_path):
    mesh = mesh_of((4,))
    w = dist.tensor((8, 8), S(("col",), ("dp",)), mesh, data=np.ones((8, 8), np.float32))
    path = checkpoint.save(tmp_path / "ck", {"w": w})
    log = checkpoint.ReadLog()
    checkpoint.restore(path, like={"w": S(("row",), ("dp",))}, mesh=mesh_of((2,)), log=log)
    assert log.bytes_read == 8 * 8 * 4 and len(log.reads) == 4 * 2  # 4 saved blocks x 2 new blocks
    assert len({(r[1], r[2]) for r in log.reads}) == len(log.reads)


@clause("CKPT-RESUME-1")
def test_a_resumed_step_has_the_bits_of_the_step_that_never_stopped(backend, tmp_path):
    def step(W, x):
        g = op.matmul(op.transpose(x), op.matmul(x, W))  # the gradient of ||xW||^2 / 2
        return W - 0.125 * g
    rng = np.random.default_rng(1)
    x0, w0 = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)

    def tensors(mesh):
        return (dist.tensor(w0.shape, S(("row",), ("tp",)), mesh, dtype=EXACT, data=w0),
                dist.tensor(x0.shape, S(("col",), ("tp",)), mesh, dtype=EXACT, data=x0))
    first, other = dist.Mesh(("tp",), range(2)), dist.Mesh(("tp",), range(3))
    W, x = tensors(first)
    straight = _on(backend, lambda: step(step(W, x), x)).numpy()
    path = checkpoint.save(tmp_path / "ck", {"W": _on(backend, lambda: step(W, x))}, step=1)
    W2 = checkpoint.restore(path, like={"W": S(("row",), ("tp",))}, mesh=other)["W"]
    resumed = _on(backend, lambda: step(W2, tensors(other)[1]))
    assert_bits(resumed.numpy(), straight)


@clause("CKPT-ERR-1")
@LIBRARY
def test_a_damaged_file_names_the_file_and_tensor(backend, tmp_path):
    w = dist.tensor((4, 4), S(("row",), ("tp",)), mesh_of((2, 2)), data=np.ones((4, 4), np.float32))
    path = checkpoint.save(tmp_path / "ck", {"w": w})
    name = "process-00000.safetensors"
    data = bytearray((tmp_path / "ck" / name).read_bytes())
    data[-1] ^= 0x80
    (tmp_path / "ck" / name).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"{name} is corrupt: tensor '0.1'"):
        checkpoint.restore(path)
    (tmp_path / "ck" / name).write_bytes(bytes(data[:-5]))
    with pytest.raises(CheckpointError, match=rf"{name} has \d+ bytes, the manifest says"):
        checkpoint.restore(path)
    with pytest.raises(CheckpointError, match=r"is \[4, 4\] f32 .* like= wants \[4, 4\] bf16"):
        checkpoint.restore(path, like={"w": dist.tensor((4, 4), None, mesh_of((2, 2)), dtype="bf16")})


@clause("CKPT-ERR-2")
@LIBRARY
def test_another_models_checkpoint_lists_the_names(backend, tmp_path):
    path = checkpoint.save(tmp_path / "ck", {"a": np.zeros(2), "b": 1})
    with pytest.raises(CheckpointError, match=r"only in like=: \[\"\['c'\]\"\]; .* only in the checkpoint: \[\"\['b'\]\"\]"):
        checkpoint.restore(path, like={"a": np.zeros(2), "c": 1})


@clause("CKPT-ERR-3")
@LIBRARY
def test_a_manifest_naming_a_file_outside_the_checkpoint_is_refused(backend, tmp_path):
    path = checkpoint.save(tmp_path / "ck", {"a": np.zeros(2)})
    m = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    m["leaves"][0]["shards"][0]["file"] = "../outside.safetensors"
    (tmp_path / "ck" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointError, match="manifest.json"):
        checkpoint.restore(path)


@clause("CKPT-ERR-4")
@LIBRARY
def test_a_mesh_the_layout_cannot_divide_is_a_layout_error(backend, tmp_path):
    w = dist.tensor((4, 4), S(("row",), ("tp",)), mesh_of((2, 2)), data=np.ones((4, 4), np.float32))
    path = checkpoint.save(tmp_path / "ck", {"w": w})
    with pytest.raises(LayoutError, match="pad=True"):
        checkpoint.restore(path, like={"w": S(("row",), ("dp",))}, mesh=mesh_of((3,)))
