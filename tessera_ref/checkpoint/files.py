"""Safetensors files of a checkpoint: writing one process's file durably with its SHA-256 and
per-tensor CRC-32 (CKPT-SAVE-3), and reading byte ranges of saved tensors with every check of
CKPT-ERR-1 and a count of the bytes read (CKPT-RESTORE-3).
"""
from __future__ import annotations

import hashlib
import mmap
import os
import threading
import zlib

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from ..errors import CheckpointError
from .leaves import from_words, safetensors_dtype

__all__ = ["write_file", "sha256_of", "Reader", "ReadLog"]


def _crc(a: np.ndarray) -> int:
    return zlib.crc32(memoryview(a).cast("B")) if a.size else 0


def write_file(path: str, tensors: dict) -> dict:
    """Write ``tensors`` (name -> contiguous stored words) as a safetensors file, fsync it, and
    return ``{"bytes", "sha256", "crc32": {name: crc}}``."""
    save_file(tensors, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"bytes": os.path.getsize(path), "sha256": sha256_of(path),
            "crc32": {name: _crc(a) for name, a in tensors.items()}}


def sha256_of(path: str) -> str:
    """The SHA-256 of a file's bytes (read through a memory map)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                h.update(m)
    return h.hexdigest()


class ReadLog:
    """What one restore read: ``(file, tensor, box, bytes)`` per read, in order; thread-safe."""

    def __init__(self):
        self.reads: list = []
        self._lock = threading.Lock()

    def add(self, file: str, tensor: str, box: tuple, nbytes: int) -> None:
        with self._lock:
            self.reads.append((file, tensor, box, nbytes))

    @property
    def bytes_read(self) -> int:
        return sum(r[3] for r in self.reads)


class Reader:
    """Opens the files of one checkpoint lazily (structure checked on open: size, header dtype
    and shape of every tensor the manifest puts there) and reads boxes of saved tensors."""

    def __init__(self, root: str, files: dict, verify: str, log: ReadLog):
        self.root, self.files, self.verify, self.log = root, files, verify, log
        self.entries: dict = {}  # file -> {tensor: (stored dtype, shape, crc)} the manifest expects
        self._open: dict = {}

    def expect(self, file: str, tensor: str, dtype: np.dtype, shape: tuple, crc: int) -> None:
        self.entries.setdefault(file, {})[tensor] = (dtype, shape, crc)

    def _handle(self, file: str):
        if file in self._open:
            return self._open[file]
        path = os.path.join(self.root, file)
        info = self.files[file]
        names = sorted(self.entries.get(file, {}))
        held = f"(it holds {', '.join(names[:4])}{'...' if len(names) > 4 else ''})"
        if not os.path.isfile(path):
            raise CheckpointError(f"checkpoint file {path} is missing {held}",
                                  fix="copy the whole checkpoint directory, or restore an older checkpoint")
        size = os.path.getsize(path)
        if size != info["bytes"]:
            raise CheckpointError(f"checkpoint file {path} has {size} bytes, the manifest says {info['bytes']}: it "
                                  f"is truncated or was replaced {held}",
                                  fix="copy the file again from the original checkpoint")
        if self.verify == "full" and sha256_of(path) != info["sha256"]:
            bad = self._corrupt_tensors(path)
            raise CheckpointError(f"checkpoint file {path} is corrupt: its SHA-256 differs from the manifest's; "
                                  f"tensor(s) {', '.join(bad) or 'none (the header)'} differ",
                                  fix="copy the file again from the original checkpoint")
        try:
            handle = safe_open(path, framework="np", backend="pread")
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"checkpoint file {path} is not a readable safetensors file ({exc}) {held}",
                                  fix="copy the file again from the original checkpoint") from None
        keys = set(handle.keys())
        for tensor, (dtype, shape, _) in self.entries.get(file, {}).items():
            if tensor not in keys:
                raise CheckpointError(f"checkpoint file {path} has no tensor {tensor!r}",
                                      fix="the file belongs to another checkpoint; copy the right one")
            sl = handle.get_slice(tensor)
            got = (sl.get_dtype(), tuple(sl.get_shape()))
            if got != (safetensors_dtype(dtype), shape):
                raise CheckpointError(f"checkpoint file {path}, tensor {tensor!r}: the file holds {got[0]} "
                                      f"{list(got[1])}, the manifest says {safetensors_dtype(dtype)} {list(shape)}",
                                      fix="the file belongs to another checkpoint; copy the right one")
        self._open[file] = handle
        return handle

    def _corrupt_tensors(self, path: str) -> list:
        """The tensors of a corrupt file whose CRC-32 differs (best effort: [] if it cannot be read)."""
        file = os.path.basename(path)
        bad = []
        try:
            with safe_open(path, framework="np", backend="pread") as f:
                for tensor, (dtype, shape, crc) in sorted(self.entries.get(file, {}).items()):
                    if _crc(f.get_tensor(tensor)) != crc:
                        bad.append(repr(tensor))
        except (SafetensorError, OSError, ValueError):
            return []
        return bad

    def read(self, file: str, tensor: str, offset: tuple, box: tuple, dtype: np.dtype, what: str) -> np.ndarray:
        """Box ``box`` (global coordinates) of the saved tensor whose box starts at ``offset``."""
        handle = self._handle(file)
        stored, shape, crc = self.entries[file][tensor]
        index = tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(box, offset))
        whole = all(s.start == 0 and s.stop == n for s, n in zip(index, shape))
        try:
            words = handle.get_tensor(tensor) if whole else handle.get_slice(tensor)[index]
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"checkpoint file {os.path.join(self.root, file)}, tensor {tensor!r} ({what}): "
                                  f"read failed ({exc})", fix="copy the file again from the original checkpoint") from None
        words = np.asarray(words).reshape(tuple(hi - lo for lo, hi in box))
        self.log.add(file, tensor, box, words.nbytes)
        if whole and self.verify != "none" and _crc(np.ascontiguousarray(words)) != crc:
            raise CheckpointError(f"checkpoint file {os.path.join(self.root, file)} is corrupt: tensor {tensor!r} "
                                  f"({what}) fails its CRC-32 check",
                                  fix="copy the file again from the original checkpoint")
        return from_words(words, dtype)

    def close(self) -> None:
        for handle in self._open.values():
            try:
                handle.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - closing a read-only handle cannot lose data
                pass
        self._open.clear()
