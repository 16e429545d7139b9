"""The manifest: one JSON file describing a checkpoint (CKPT-FMT-2), read as untrusted input
(CKPT-ERR-3, DESIGN §19): a bounded size, every field type- and range-checked, file names
that cannot leave the directory, no pickle, nothing imported by name.
"""
from __future__ import annotations

import json
import os
import re
from importlib import metadata

from ..errors import CheckpointError
from .atomic import MANIFEST

__all__ = ["FORMAT", "VERSION", "MAX_BYTES", "library_version", "write_manifest", "read_manifest", "FILE_RE"]

FORMAT = "tessera_ref.checkpoint"
VERSION = 1
MAX_BYTES = 256 << 20          # a manifest larger than this is refused before parsing
MAX_ITEMS = 1 << 22            # leaves, shards, devices, dimensions: bounded counts
FILE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.safetensors")
TENSOR_RE = re.compile(r"[A-Za-z0-9_.:/-]{1,200}")
_KINDS = ("dist", "array", "ndarray", "rng", "none", "bool", "int", "float", "str")


def library_version() -> str:
    try:
        return f"tessera_ref {metadata.version('tessera_ref')}"
    except metadata.PackageNotFoundError:
        return "tessera_ref (not installed)"


def write_manifest(directory: str, manifest: dict) -> None:
    """Write ``manifest.json`` into ``directory`` and fsync it."""
    path = os.path.join(directory, MANIFEST)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, allow_nan=False)
        f.flush()
        os.fsync(f.fileno())


def _fail(where: str, what: str):
    raise CheckpointError(f"{where}: {what}", fix="the manifest is damaged, truncated or not a tessera_ref "
                                                  "checkpoint's; restore another checkpoint")


def _int(x, where: str, low: int = 0, high: int = 1 << 62) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not low <= x <= high:
        _fail(where, f"expected an int in {low}..{high}, got {str(x)[:40]!r}")
    return x


def _list(x, where: str, length: int | None = None) -> list:
    if not isinstance(x, list) or len(x) > MAX_ITEMS or (length is not None and len(x) != length):
        _fail(where, f"expected a list{'' if length is None else f' of {length}'}, got {str(x)[:40]!r}")
    return x


def _str(x, where: str, pattern=None, limit: int = 256) -> str:
    if not isinstance(x, str) or len(x) > limit or (pattern is not None and not pattern.fullmatch(x)):
        _fail(where, f"expected a name{'' if pattern is None else f' matching {pattern.pattern}'}, got "
                     f"{str(x)[:60]!r}")
    return x


def _obj(x, where: str, keys: tuple) -> dict:
    if not isinstance(x, dict) or any(k not in x for k in keys):
        _fail(where, f"expected an object with {list(keys)}")
    return x


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def read_manifest(root: str) -> dict:
    """The validated manifest of the checkpoint directory ``root``."""
    path = os.path.join(root, MANIFEST)
    if not os.path.isdir(root):
        raise CheckpointError(f"no checkpoint at {root}: it is not a directory",
                              fix="pass the directory that checkpoint.save wrote")
    if not os.path.isfile(path):
        raise CheckpointError(f"{root} is not a checkpoint: {MANIFEST} is missing",
                              fix="pass the directory that checkpoint.save wrote (an interrupted save leaves "
                                  "only a .NAME.tmp-* directory, which is not a checkpoint)")
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        _fail(path, f"{size} bytes is more than a manifest may have ({MAX_BYTES})")
    with open(path, "rb") as f:
        text = f.read(MAX_BYTES + 1)
    try:
        m = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:
        _fail(path, f"not valid JSON ({str(exc)[:80]})")
    _obj(m, path, ("format", "version", "library", "step", "processes", "meshes", "tree", "leaves", "files"))
    if m["format"] != FORMAT or m["version"] != VERSION:
        _fail(path, f"format {str(m['format'])[:40]!r} version {str(m['version'])[:10]!r}, expected {FORMAT!r} "
                    f"version {VERSION}")
    if m["step"] is not None:
        _int(m["step"], f"{path} step", -(1 << 62))
    _int(m["processes"], f"{path} processes", 1, 1 << 20)
    files = m["files"]
    if not isinstance(files, dict) or len(files) > MAX_ITEMS:
        _fail(path, "files is not an object")
    for name, info in files.items():
        _str(name, f"{path} file name", FILE_RE)
        _obj(info, f"{path} file {name}", ("bytes", "sha256"))
        _int(info["bytes"], f"{path} file {name} bytes")
        _str(info["sha256"], f"{path} file {name} sha256", re.compile(r"[0-9a-f]{64}"))
    for i, mesh in enumerate(_list(m["meshes"], f"{path} meshes")):
        where = f"{path} mesh {i}"
        _obj(mesh, where, ("axes", "shape", "devices"))
        axes = [_str(a, where, re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")) for a in _list(mesh["axes"], where)]
        shape = [_int(s, where, 1, MAX_ITEMS) for s in _list(mesh["shape"], where, len(axes))]
        devices = [_str(d, where) for d in _list(mesh["devices"], where)]
        n = 1
        for s in shape:
            n *= s
        if n != len(devices):
            _fail(where, f"shape {shape} does not hold {len(devices)} devices")
    for i, leaf in enumerate(_list(m["leaves"], f"{path} leaves")):
        _leaf(leaf, f"{path} leaf {i}", m, files)
    return m


def _leaf(leaf, where: str, m: dict, files: dict) -> None:
    _obj(leaf, where, ("path", "kind"))
    _str(leaf["path"], where, limit=4096)
    kind = leaf["kind"]
    if kind not in _KINDS:
        _fail(where, f"unknown kind {str(kind)[:20]!r}")
    where = f"{where} ({leaf['path']})"
    if kind == "rng":
        _obj(leaf, where, ("seed", "stream", "folds"))
        for v in [leaf["seed"], leaf["stream"], *_list(leaf["folds"], where)]:
            _int(v, where, 0, (1 << 64) - 1)
    if kind not in ("dist", "array", "ndarray"):
        return
    _obj(leaf, where, ("shape", "dtype", "shards"))
    shape = [_int(n, where) for n in _list(leaf["shape"], where)]
    if len(shape) > 64:
        _fail(where, f"rank {len(shape)} is more than 64")
    _str(leaf["dtype"], where, limit=64)
    if kind == "dist":
        _obj(leaf, where, ("layout", "mesh", "element"))
        _int(leaf["mesh"], where, 0, len(m["meshes"]) - 1)
        layout = _obj(leaf["layout"], where, ("dims", "padded"))
        for d in _list(layout["dims"], where, len(shape)):
            for a in _list(d, where):
                _str(a, where)
        if not isinstance(layout["padded"], bool):
            _fail(where, "layout padded is not a bool")
    for j, shard in enumerate(_list(leaf["shards"], where)):
        w = f"{where} shard {j}"
        _obj(shard, w, ("file", "tensor", "box", "crc32"))
        if _str(shard["file"], w, FILE_RE) not in files:
            _fail(w, f"file {shard['file']!r} is not among the manifest's files")
        _str(shard["tensor"], w, TENSOR_RE)
        _int(shard["crc32"], w, 0, (1 << 32) - 1)
        box = _list(shard["box"], w, len(shape))
        for (d, n), span in zip(enumerate(shape), box):
            lo, hi = (_int(v, w, 0, n) for v in _list(span, w, 2))
            if lo > hi:
                _fail(w, f"dimension {d}: box {lo}..{hi} is empty the wrong way round")
        shard["box"] = [tuple(span) for span in box]
