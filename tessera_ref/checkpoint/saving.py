"""``checkpoint.save``: a pytree to a checkpoint directory (CKPT-SAVE-1 … CKPT-SAVE-4)."""
from __future__ import annotations

import os

import numpy as np
from safetensors import SafetensorError

from ..dist.tensor import DistTensor
from ..dist.world import placement
from ..errors import CheckpointError, TesseraError
from ..numerics.rng import RNGKey
from ..ops.values import Array, TensorOperators
from .atomic import discard, make_temp, publish
from .boxes import saved_blocks
from .files import write_file
from .leaves import encode_element, encode_scalar, encode_tree, paths_of, savable, stored_words
from .manifest import FORMAT, VERSION, library_version, write_manifest
from .processes import broadcast, gather, rank_and_size

__all__ = ["save", "file_name"]


def file_name(rank: int) -> str:
    """The file process ``rank`` writes."""
    return f"process-{rank:05d}.safetensors"


def save(path, tree, *, step: int | None = None) -> str:
    """Save ``tree`` (arrays, Arrays, real DistTensors, RNG keys, Python scalars in dicts,
    lists, tuples, records) and ``step`` as a checkpoint directory at ``path``, atomically
    (CKPT-ATOMIC-1). Every process of a multi-process program calls it with the same tree
    structure; each writes the blocks it is the lowest-rank holder of (CKPT-SAVE-2). Returns
    the absolute path."""
    path = os.path.abspath(os.fspath(path))
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, np.integer))):
        raise CheckpointError(f"checkpoint.save step={step!r} is not an int", fix="pass step=an int (or None)")
    rank, size = rank_and_size()
    leaves, paths, treedef = paths_of(tree)
    meshes, mine = [], {}
    records = [_describe(i, leaf, p, meshes, mine, rank) for i, (leaf, p) in enumerate(zip(leaves, paths))]
    manifest = {"format": FORMAT, "version": VERSION, "library": library_version(),
                "step": None if step is None else int(step), "processes": size, "meshes": meshes,
                "tree": encode_tree(treedef), "leaves": records, "files": {}}
    temp = broadcast(_attempt(lambda: make_temp(path)) if rank == 0 else None)
    _raise_if_failed([temp], path)
    report = _attempt(lambda: _write(temp["ok"], rank, mine))
    outcome = None
    if rank == 0:
        reports = gather(report)
        outcome = _attempt(lambda: _commit(path, temp["ok"], manifest, reports))
        if "error" in outcome:
            discard(temp["ok"])
    else:
        gather(report)
    outcome = broadcast(outcome)
    _raise_if_failed([report, outcome], path)
    return path


def _attempt(fn) -> dict:
    """``{"ok": fn()}``, or ``{"error": message}`` for a failure every process must hear of."""
    try:
        return {"ok": fn()}
    except TesseraError as exc:
        return {"error": exc.what, "fix": exc.fix}
    except (OSError, SafetensorError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "fix": "check the disk space and the directory's permissions"}


def _raise_if_failed(results: list, path: str) -> None:
    for r in results:
        if "error" in r:
            raise CheckpointError(f"checkpoint.save({path!r}) failed: {r['error']}", fix=r.get("fix"))


def _write(temp: str, rank: int, mine: dict) -> dict | None:
    if not mine:
        return None
    name = file_name(rank)
    return {"file": name, **write_file(os.path.join(temp, name), mine)}


def _commit(path: str, temp: str, manifest: dict, reports: list) -> bool:
    """Rank 0: fill in every file's size and hashes, write the manifest, publish."""
    for r, report in enumerate(reports):
        if report is not None and "error" in report:
            raise CheckpointError(f"process {r} could not write its file: {report['error']}", fix=report.get("fix"))
    crcs = {}
    for report in reports:
        if report and report["ok"]:
            info = report["ok"]
            manifest["files"][info["file"]] = {"bytes": info["bytes"], "sha256": info["sha256"]}
            crcs.update({(info["file"], t): c for t, c in info["crc32"].items()})
    for record in manifest["leaves"]:
        for shard in record.get("shards", ()):
            shard["crc32"] = crcs[(shard["file"], shard["tensor"])]
    write_manifest(temp, manifest)
    publish(temp, path)
    return True


def _mesh_index(mesh, meshes: list) -> int:
    entry = {"axes": list(mesh.axes), "shape": list(mesh.shape), "devices": list(mesh.devices)}
    if entry not in meshes:
        meshes.append(entry)
    return meshes.index(entry)


def _describe(i: int, leaf, path: str, meshes: list, mine: dict, rank: int) -> dict:
    """The manifest record of one leaf; the blocks this process writes go into ``mine``."""
    if isinstance(leaf, DistTensor):
        return _dist(i, leaf, path, meshes, mine)
    if isinstance(leaf, RNGKey):
        return {"path": path, "kind": "rng", "seed": leaf.seed, "stream": leaf.stream, "folds": list(leaf.folds)}
    if isinstance(leaf, Array):
        record = {"path": path, "kind": "array", "element": encode_element(leaf.type.policy)}
        return _whole(i, leaf.data, record, mine, rank)
    if isinstance(leaf, (np.ndarray, np.generic)) and savable(leaf.dtype):
        return _whole(i, np.asarray(leaf), {"path": path, "kind": "ndarray", "scalar": isinstance(leaf, np.generic)},
                      mine, rank)
    if leaf is None or type(leaf) in (bool, int, float, str):
        return {"path": path, **encode_scalar(leaf)}
    what = "a traced value (inside jit or a transform)" if isinstance(leaf, TensorOperators) else \
        f"a {type(leaf).__name__}"
    raise CheckpointError(f"checkpoint.save: the leaf at {path} is {what}, which a checkpoint cannot hold",
                          fix="checkpoint arrays, tessera Arrays, DistTensors with values, RNG keys and Python "
                              "scalars (call save outside traced code)")


def _whole(i: int, data: np.ndarray, record: dict, mine: dict, rank: int) -> dict:
    """A host value: one block, written by process 0."""
    name = f"{i}.0"
    if not data.size:  # nothing to store (CKPT-SAVE-2: empty blocks are left out)
        return {**record, "shape": list(data.shape), "dtype": data.dtype.name, "shards": []}
    if rank == 0:
        mine[name] = stored_words(data)
    box = [(0, n) for n in data.shape]
    return {**record, "shape": list(data.shape), "dtype": data.dtype.name,
            "shards": [{"file": file_name(0), "tensor": name, "box": box, "crc32": None}]}


def _dist(i: int, x: DistTensor, path: str, meshes: list, mine: dict) -> dict:
    if x.is_abstract:
        raise CheckpointError(f"checkpoint.save: the DistTensor at {path} ({x.type}) is abstract: it has no values "
                              "to save", fix="give it values (data= or init=), or leave it out of the tree; abstract "
                                             "tensors serve as like= templates for checkpoint.restore")
    lay = x.layout
    if lay.partial:
        raise CheckpointError(f"checkpoint.save: the DistTensor at {path} ({x.type}) is a pending "
                              f"{lay.partial_op} over {'+'.join(lay.partial)}, not a value",
                              fix=f"save dist.all_reduce(x, axis={lay.partial[0]!r}) (or reduce_scatter) instead")
    place, lshape = placement(x.mesh), x.local_shape
    shards = []
    for k, (box, writer, coords) in enumerate(saved_blocks(x.shape, lshape, lay, x.mesh)):
        name = f"{i}.{k}"
        shards.append({"file": file_name(writer), "tensor": name, "box": list(box), "crc32": None})
        if writer == place.rank:
            index = tuple(coords[a] - s if n > 1 else 0 for a, s, n in zip(x.mesh.axes, place.start, x.local.shape))
            block = x.local[index][tuple(slice(0, hi - lo) for lo, hi in box)]  # padding cut off
            mine[name] = stored_words(block)
    layout = {"dims": [list(d) for d in lay.dims], "padded": lay.padded}
    return {"path": path, "kind": "dist", "shape": list(x.shape), "dtype": x.type.dtype.name,
            "element": encode_element(x.type.policy), "mesh": _mesh_index(x.mesh, meshes), "layout": layout,
            "text": str(x.type), "shards": shards}
