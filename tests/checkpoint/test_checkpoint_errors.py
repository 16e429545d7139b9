"""Bad checkpoints and bad requests (CKPT-ERR-1 … CKPT-ERR-4): corrupt, missing, truncated and
mismatched files, another model's checkpoint, a mesh the layout cannot divide, manifests as
untrusted input, and what save refuses — each a TesseraError naming the file, the tensor and
the user's line, with a fix."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tessera_ref import checkpoint, dist
from tessera_ref.errors import CheckpointError, LayoutError

from checkpoint_cases import S, dp_tp

HERE = os.path.basename(__file__)


def _saved(tmp_path):
    mesh = dp_tp()
    tree = {"w": dist.tensor((8, 6), S(("row",), ("tp",)), mesh, init="randn", seed=1),
            "b": dist.tensor((6,), None, mesh, init="randn", seed=2), "step": 3}
    return checkpoint.save(tmp_path / "ck", tree, step=3), tree


def _manifest(path):
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


def _rewrite(path, manifest):
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def _first_shard(path, leaf_path):
    m = _manifest(path)
    leaf = next(r for r in m["leaves"] if r["path"] == leaf_path)
    return leaf["shards"][0]["file"], leaf["shards"][0]["tensor"]


def _data_offset(path, file, tensor):
    with open(os.path.join(path, file), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return 8 + n + header[tensor]["data_offsets"][0]


def _flip(path, file, at):
    with open(os.path.join(path, file), "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))


def test_a_corrupt_block_read_whole_names_the_file_and_tensor(tmp_path):
    path, tree = _saved(tmp_path)
    file, tensor = _first_shard(path, "['w']")
    _flip(path, file, _data_offset(path, file, tensor) + 5)
    with pytest.raises(CheckpointError, match=rf"{file} is corrupt: tensor '{tensor}' \(.*\['w'\].*CRC-32") as e:
        checkpoint.restore(path, like=tree)
    assert e.value.location.split(":")[0].endswith(HERE) and e.value.fix


def test_a_corrupt_block_read_in_part_is_caught_by_verify_full(tmp_path):
    path, tree = _saved(tmp_path)
    file, tensor = _first_shard(path, "['w']")
    _flip(path, file, _data_offset(path, file, tensor))
    like = {**tree, "w": S(("col",), ("tp",))}  # each new block reads part of each saved block
    checkpoint.restore(path, like=like, mesh=dp_tp(), verify="none")  # not checked: wrong bits come back
    with pytest.raises(CheckpointError, match=rf"{file} is corrupt: its SHA-256 .* tensor\(s\) '{tensor}' differ"):
        checkpoint.restore(path, like=like, mesh=dp_tp(), verify="full")


def test_a_missing_or_truncated_file_is_named(tmp_path):
    path, tree = _saved(tmp_path)
    file, _ = _first_shard(path, "['w']")
    full = os.path.join(path, file)
    os.truncate(full, os.path.getsize(full) - 3)
    with pytest.raises(CheckpointError, match=rf"{file} has \d+ bytes, the manifest says \d+: it is truncated"):
        checkpoint.restore(path, like=tree)
    os.remove(full)
    with pytest.raises(CheckpointError, match=rf"{file} is missing \(it holds '0.0', '2.0'"):
        checkpoint.restore(path, like=tree)


def test_a_file_replaced_by_a_symbolic_link_is_not_followed(tmp_path):
    path, tree = _saved(tmp_path)
    file, _ = _first_shard(path, "['w']")
    os.replace(os.path.join(path, file), tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", os.path.join(path, file))
    with pytest.raises(CheckpointError, match=rf"{file} cannot be opened as a regular file .*Fix: replace a symbolic"):
        checkpoint.restore(path, like=tree)


def test_a_file_of_another_checkpoint_is_a_mismatch(tmp_path):
    path, tree = _saved(tmp_path)
    other = checkpoint.save(tmp_path / "other", {"b": np.zeros(12, np.float32), "step": 1,
                                                 "w": np.zeros((8, 6), np.float32)})
    file, _ = _first_shard(path, "['w']")
    os.replace(os.path.join(other, file), os.path.join(path, file))
    m = _manifest(path)
    m["files"][file]["bytes"] = os.path.getsize(os.path.join(path, file))
    _rewrite(path, m)
    with pytest.raises(CheckpointError, match=r"tensor '0.0': the file holds F32 \[12\], the manifest says F32 \[6\]"):
        checkpoint.restore(path, like=tree)


def test_a_mismatched_like_names_the_tensor_its_shapes_and_policies(tmp_path):
    path, tree = _saved(tmp_path)
    wrong = {**tree, "w": dist.tensor((8, 6), S(("row",), ("tp",)), dp_tp(), dtype="bf16")}
    with pytest.raises(CheckpointError, match=r"\['w'\] \(file process-00000.safetensors, tensor 2.\d\) is \[8, 6\] "
                                              r"f32 @accum\(f32\) in the checkpoint, like= wants \[8, 6\] bf16"):
        checkpoint.restore(path, like=wrong)
    with pytest.raises(CheckpointError, match=r"is \[8, 6\] .* like= wants \[6, 8\]"):
        checkpoint.restore(path, like={**tree, "w": np.zeros((6, 8), np.float32)})


def test_another_models_checkpoint_lists_the_first_mismatched_names(tmp_path):
    path, tree = _saved(tmp_path)
    with pytest.raises(CheckpointError, match=r"first names only in like=: \[\"\['layers'\]\[0\]\"\]; first names "
                                              r"only in the checkpoint: \[\"\['b'\]\", \"\['w'\]\"\]"):
        checkpoint.restore(path, like={"layers": [np.zeros(2)], "step": 0})


def test_a_mesh_the_layout_cannot_divide_is_a_layout_error_with_the_fix(tmp_path):
    path, tree = _saved(tmp_path)
    with pytest.raises(LayoutError, match=r"\['w'\].*onto Mesh\(tp=3.*does not split evenly.*pad=True"):
        checkpoint.restore(path, like={**tree, "w": S(("row",), ("tp",))}, mesh=dist.Mesh(("tp",), range(3)))
    with pytest.raises(LayoutError, match=r"'dp' is not an axis.*Fix: pass like= with layouts over this mesh's axes"):
        checkpoint.restore(path, like={**tree, "w": S(("row",), ("dp",))}, mesh=dist.Mesh(("tp",), range(2)))


@pytest.mark.parametrize("change, message", [
    (lambda m: m["files"].update({"../escape.safetensors": {"bytes": 1, "sha256": "0" * 64}}), "file name"),
    (lambda m: m["leaves"][0]["shards"][0].update(file="/etc/passwd"), "expected a name matching"),
    (lambda m: m["leaves"][0]["shards"][0].update(file="absent.safetensors"), "is not among the manifest's files"),
    (lambda m: m["leaves"][0]["shards"][0].update(box=[[0, 99]]), r"expected an int in 0\.\.6"),
    (lambda m: m["leaves"][2]["shards"].pop(), "do not tile|do not cover"),
    (lambda m: m["leaves"][0].update(dtype="object"), "unknown dtype 'object'"),
    (lambda m: m["leaves"][0]["element"]["policy"].update(rounding="__import__('os')"), "recorded policy is invalid"),
    (lambda m: m.update(version=99), "version '99', expected"),
    (lambda m: m.update(step="3; rm -rf"), "step: expected an int"),
    (lambda m: m["meshes"][0].update(shape=[2, 3]), r"shape \[2, 3\] does not hold 4 devices"),
    (lambda m: m.update(leaves=7), "leaves: expected a list"),
], ids=["traversal", "absolute", "unknown-file", "box", "gap", "dtype", "policy", "version", "step", "mesh", "type"])
def test_a_manifest_is_untrusted_input(tmp_path, change, message):
    path, tree = _saved(tmp_path)
    m = _manifest(path)
    change(m)
    _rewrite(path, m)
    with pytest.raises(CheckpointError, match=message):
        checkpoint.restore(path)


def test_a_manifest_that_is_not_json_or_too_deep_is_refused(tmp_path):
    path, _ = _saved(tmp_path)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        f.write('{"format": NaN}')
    with pytest.raises(CheckpointError, match="NaN is not JSON"):
        checkpoint.restore(path)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        f.write("[" * 100000 + "]" * 100000)
    with pytest.raises(CheckpointError, match="not valid JSON"):
        checkpoint.info(path)
    with pytest.raises(CheckpointError, match="is not a checkpoint: manifest.json is missing"):
        checkpoint.restore(tmp_path)


def test_save_refuses_what_a_checkpoint_cannot_hold(tmp_path):
    mesh = dp_tp()
    abstract = dist.tensor((4, 4), S(("row",), ("tp",)), mesh)
    with pytest.raises(CheckpointError, match=r"\['p'\] .* is abstract.*Fix: give it values") as e:
        checkpoint.save(tmp_path / "a", {"p": abstract})
    assert e.value.location.split(":")[0].endswith(HERE)
    pending = dist.tensor((4,), S(None, ("tp",), reduce="sum"), mesh, data=np.ones(4))
    with pytest.raises(CheckpointError, match=r"pending sum over tp.*dist.all_reduce\(x, axis='tp'\)"):
        checkpoint.save(tmp_path / "a", {"g": pending})
    with pytest.raises(CheckpointError, match=r"\['f'\] is a function"):
        checkpoint.save(tmp_path / "a", {"f": lambda: 0})
    with pytest.raises(CheckpointError, match="step='7' is not an int"):
        checkpoint.save(tmp_path / "a", {}, step="7")
    (tmp_path / "mine").mkdir()
    with pytest.raises(CheckpointError, match="exists and is not a checkpoint"):
        checkpoint.save(tmp_path / "mine", {"x": np.ones(2)})
    assert not os.path.exists(tmp_path / "a") and os.listdir(tmp_path) == ["mine"]
