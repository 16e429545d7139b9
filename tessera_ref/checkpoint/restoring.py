"""``checkpoint.restore``: a checkpoint onto any mesh and process count, each process reading
only the boxes of the saved blocks its own blocks need (CKPT-RESTORE-1 … CKPT-RESTORE-3)."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..dist.mesh import Mesh
from ..dist.spec import ShardSpec, resolve_layout
from ..dist.tensor import DistTensor, local_shape, stack_shape
from ..errors import CheckpointError, LayoutError, MeshError, TesseraError
from ..ir import ShardLayout, TensorType
from ..numerics.rng import RNGKey
from ..ops.values import Array, element_of_dtype
from .boxes import SavedGrid, my_blocks
from .files import Reader, ReadLog
from .leaves import file_shape, decode_element, decode_scalar, decode_tree, numpy_dtype, paths_of
from .manifest import read_manifest

__all__ = ["restore", "info", "CheckpointInfo"]

_VERIFY = ("read", "full", "none")


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint's manifest says: the step, the library that wrote it, how many
    processes wrote it and the path of every leaf."""

    step: int | None
    library: str
    processes: int
    paths: tuple


def info(path) -> CheckpointInfo:
    """The validated summary of the checkpoint at ``path`` (reads only its manifest)."""
    m = read_manifest(os.path.abspath(os.fspath(path)))
    return CheckpointInfo(m["step"], m["library"], m["processes"], tuple(r["path"] for r in m["leaves"]))


def restore(path, like=None, *, mesh: Mesh | None = None, verify: str = "read", log: ReadLog | None = None):
    """The tree saved at ``path``. ``like`` (a tree of the same paths) says what each leaf
    becomes: a DistTensor (real or abstract: its mesh and layout), a ``ShardSpec``/``ShardLayout``
    (on ``mesh``), an array or Array (the whole value), anything else (as saved); without it
    records come back as dicts. ``mesh`` places DistTensors (default: the leaf's own mesh, or
    the saved one). ``verify``: ``"read"`` checks the CRC-32 of every saved block read whole,
    ``"full"`` also the SHA-256 of every file opened, ``"none"`` only sizes and headers
    (CKPT-ERR-1). ``log`` (a :class:`ReadLog`) receives every read (CKPT-RESTORE-3)."""
    root = os.path.abspath(os.fspath(path))
    if verify not in _VERIFY:
        raise CheckpointError(f"checkpoint.restore verify={verify!r}", fix=f"use one of {_VERIFY}")
    if mesh is not None and not isinstance(mesh, Mesh):
        raise CheckpointError(f"checkpoint.restore mesh= is a {type(mesh).__name__}", fix="pass a dist.Mesh")
    m = read_manifest(root)
    records = m["leaves"]
    if like is not None:
        targets, paths, treedef = paths_of(like)
        _same_names(root, [r["path"] for r in records], paths)
    else:
        targets, treedef = [None] * len(records), None
    reader = Reader(root, m["files"], verify, log if log is not None else ReadLog())
    for record in records:
        if record["kind"] in ("dist", "array", "ndarray"):
            dtype = numpy_dtype(record["dtype"], f"{root}: {record['path']}")
            for s in record["shards"]:
                reader.expect(s["file"], s["tensor"], dtype, file_shape([hi - lo for lo, hi in s["box"]]), s["crc32"])
    try:
        out = [_leaf(root, m, record, target, mesh, reader) for record, target in zip(records, targets)]
    finally:
        reader.close()
    return treedef.unflatten(out) if treedef is not None else decode_tree(m["tree"], iter(out))


def _same_names(root: str, saved: list, wanted: list) -> None:
    """CKPT-ERR-2: a ``like`` tree whose leaf paths differ from the checkpoint's."""
    if saved == wanted:
        return
    have, want = set(saved), set(wanted)
    missing = [p for p in wanted if p not in have][:5]
    extra = [p for p in saved if p not in want][:5]
    raise CheckpointError(f"the checkpoint at {root} holds another tree: like= has {len(wanted)} leaves, the "
                          f"checkpoint {len(saved)}; first names only in like=: {missing or 'none'}; first names only "
                          f"in the checkpoint: {extra or 'none'}",
                          fix="restore with the tree the checkpoint was saved from (checkpoint.info(path).paths "
                              "lists its names), or restore without like= and pick the leaves you need")


def _leaf(root: str, m: dict, record: dict, target, mesh, reader: Reader):
    kind, where = record["kind"], f"{root}: {record['path']}"
    if kind == "rng":
        _expect(target, (RNGKey,), where, "an RNG key")
        return RNGKey(record["seed"], record["stream"], tuple(record["folds"]))
    if kind not in ("dist", "array", "ndarray"):
        value = decode_scalar(record, where)
        if target is not None and not isinstance(target, type(value)) and not (
                isinstance(value, (int, float)) and isinstance(target, (int, float))):
            raise CheckpointError(f"{where} is {kind} {value!r} in the checkpoint, like= has a "
                                  f"{type(target).__name__}", fix="pass a like= tree of the saved kinds")
        return value
    return _tensor(root, m, record, target, mesh, reader)


def _expect(target, types: tuple, where: str, what: str) -> None:
    if target is not None and not isinstance(target, types):
        raise CheckpointError(f"{where} is {what} in the checkpoint, like= has a {type(target).__name__}",
                              fix="pass a like= tree of the saved kinds")


def _element(record: dict, dtype: np.dtype, where: str):
    """The saved element type: recorded for Arrays and DistTensors, the dtype's for NumPy arrays."""
    if "element" in record:
        element = decode_element(record["element"], where)
        if TensorType((), element).dtype != dtype:
            raise CheckpointError(f"{where}: dtype {dtype} does not hold {element}", fix="the manifest is damaged")
        return element
    try:
        element = element_of_dtype(dtype)
    except TesseraError:
        element = None
    if element is None or TensorType((), element).dtype != dtype:
        raise CheckpointError(f"{where}: a NumPy array of dtype {dtype} has no tessera element type",
                              fix="restore it as an array (like= an array or None) and convert it")
    return element


def _saved_layout(record: dict, where: str) -> ShardLayout:
    try:
        return ShardLayout(tuple(tuple(d) for d in record["layout"]["dims"]), padded=record["layout"]["padded"])
    except TesseraError as exc:
        raise CheckpointError(f"{where}: the recorded layout is invalid: {exc.what}",
                              fix="the manifest is damaged") from None


def _tensor(root: str, m: dict, record: dict, target, mesh, reader: Reader):
    where = f"{root}: {record['path']}"
    shape, dtype = tuple(record["shape"]), numpy_dtype(record["dtype"], where)
    grid = SavedGrid(shape, record["shards"], where)
    first = record["shards"][0] if record["shards"] else {"file": "-", "tensor": "-"}
    named = f"{where} (file {first['file']}, tensor {first['tensor']})"
    if isinstance(target, DistTensor):
        element = _element(record, dtype, where)
        _check_like(named, shape, element, target.shape, target.type.policy)
        return _dist(named, shape, element, grid, target.layout, mesh or target.mesh, reader, record["path"])
    if isinstance(target, (ShardSpec, ShardLayout)):
        if mesh is None:
            raise CheckpointError(f"{named}: like= gives a layout but no mesh", fix="pass mesh=a dist.Mesh")
        return _dist(named, shape, _element(record, dtype, where), grid, target, mesh, reader, record["path"])
    if target is None and record["kind"] == "dist":
        saved = m["meshes"][record["mesh"]]
        if mesh is None:
            try:
                mesh = Mesh(saved["axes"], saved["devices"], saved["shape"])
            except TesseraError as exc:
                raise CheckpointError(f"{named}: the saved mesh cannot be rebuilt here: {exc.what}",
                                      fix="pass mesh= (the checkpoint moves the blocks onto it)") from None
        return _dist(named, shape, _element(record, dtype, where), grid, _saved_layout(record, where), mesh, reader,
                     record["path"])
    if target is not None and not isinstance(target, (np.ndarray, np.generic, Array)):
        raise CheckpointError(f"{named} is a tensor in the checkpoint, like= has a {type(target).__name__}",
                              fix="pass a DistTensor, layout, array or None for it in like=")
    as_array = isinstance(target, Array) or (target is None and record["kind"] == "array")
    if isinstance(target, Array):
        _check_like(named, shape, _element(record, dtype, where), target.shape, target.type.policy)
    elif target is not None:
        _check_like(named, shape, dtype, np.shape(target), np.asarray(target).dtype)
    data = _whole(shape, dtype, grid, reader, record["path"])
    if as_array:
        return Array(data, TensorType(shape, _element(record, dtype, where)))
    if isinstance(target, np.generic) or (target is None and record.get("scalar")):
        return data[()]
    return data


def _check_like(named: str, shape, element, want_shape, want_element) -> None:
    """CKPT-ERR-1: the saved shape and element type against what like= asks for."""
    if tuple(want_shape) != tuple(shape) or want_element != element:
        raise CheckpointError(f"{named} is {list(shape)} {element} in the checkpoint, like= wants "
                              f"{list(want_shape)} {want_element}",
                              fix="restore into a like= of the saved shape and policy, or convert after restoring")


def _whole(shape, dtype, grid: SavedGrid, reader: Reader, leaf: str) -> np.ndarray:
    out = np.empty(shape, dtype)
    box = tuple((0, n) for n in shape)
    for shard, inter in grid.overlapping(box):
        # (..., slices): a view even of a 0-d array (out[()] would be a copy of its scalar)
        reader.read_into(out[(Ellipsis,) + tuple(slice(lo, hi) for lo, hi in inter)], shard["file"], shard["tensor"],
                         tuple(lo for lo, _ in shard["box"]), inter, leaf)
    return out


def _dist(named: str, shape, element, grid: SavedGrid, layout, mesh: Mesh, reader: Reader, leaf: str) -> DistTensor:
    """The saved tensor as a DistTensor on ``mesh`` in ``layout``: each block of this process
    filled from the saved blocks it meets (CKPT-RESTORE-2)."""
    try:
        lay = resolve_layout(layout, len(shape))
        if lay.partial:
            raise LayoutError(f"the layout {lay} has a pending reduction; a restored value has none",
                              fix="restore into the layout without partial axes")
        lshape = local_shape(shape, lay, mesh)
        stack = stack_shape(lay, mesh)
    except MeshError as exc:
        raise LayoutError(f"restoring {named} onto {mesh!r}: {exc.what}",
                          fix=f"pass like= with layouts over this mesh's axes {mesh.axes}") from None
    except LayoutError as exc:
        raise LayoutError(f"restoring {named} onto {mesh!r}: {exc.what}", fix=exc.fix) from None
    ttype = TensorType(shape, element, lay)
    local = (np.zeros if lay.padded else np.empty)(stack + lshape, ttype.dtype)  # padding is zero
    for index, box in my_blocks(shape, lshape, lay, mesh):
        block = local[index]
        for shard, inter in grid.overlapping(box):
            dest = tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(inter, box))
            reader.read_into(block[dest], shard["file"], shard["tensor"], tuple(lo for lo, _ in shard["box"]), inter,
                             leaf)
    return DistTensor(ttype, mesh, local)
