"""Safetensors files of a checkpoint: writing one process's file durably with its SHA-256 and
per-tensor CRC-32 (CKPT-SAVE-3), and reading byte ranges of saved tensors with every check of
CKPT-ERR-1 and a count of the bytes read (CKPT-RESTORE-3).
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from safetensors.numpy import save_file

from ..errors import CheckpointError
from .leaves import NATIVE, safetensors_dtype, stored_dtype

_SAFETENSORS_NP = {name: dtype for dtype, name in NATIVE.items()}

__all__ = ["write_file", "sha256_of", "Reader", "ReadLog"]


def _crc(a: np.ndarray) -> int:
    return zlib.crc32(memoryview(a).cast("B")) if a.size else 0


def write_file(path: str, tensors: dict) -> dict:
    """Write ``tensors`` (name -> contiguous stored words) as a safetensors file, fsync it, and
    return ``{"bytes", "sha256", "crc32": {name: crc}}``. One helper thread computes the CRC-32s
    while the file is written, then fsyncs it while this thread computes its SHA-256 (both
    hashes release the GIL)."""
    with ThreadPoolExecutor(1, thread_name_prefix="tessera-checkpoint") as helper:
        crcs = helper.submit(lambda: {name: _crc(a) for name, a in tensors.items()})
        save_file(tensors, path)
        synced = helper.submit(_fsync, path)
        sha = sha256_of(path)
        synced.result()
        return {"bytes": os.path.getsize(path), "sha256": sha, "crc32": crcs.result()}


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    """Opens the files of one checkpoint lazily — checking the size, the safetensors header
    (bounded, validated) and the dtype, shape and extent of every tensor the manifest puts
    there — and copies boxes of saved tensors out of them (:meth:`read_into`, CKPT-RESTORE-3).
    Thread-safe: ``pread`` carries its own offset, the memory map is read-only."""

    def __init__(self, root: str, files: dict, verify: str, log: ReadLog):
        self.root, self.files, self.verify, self.log = root, files, verify, log
        self.entries: dict = {}  # file -> {tensor: (dtype, shape, crc)} the manifest expects
        self._open: dict = {}    # file -> (fd, {tensor: byte offset of its data}, read-only memory map)
        self._lock = threading.Lock()

    def expect(self, file: str, tensor: str, dtype: np.dtype, shape: tuple, crc: int) -> None:
        self.entries.setdefault(file, {})[tensor] = (dtype, shape, crc)

    def _handle(self, file: str):
        with self._lock:
            if file not in self._open:
                self._open[file] = self._check(file)
            return self._open[file]

    def _check(self, file: str):
        path = os.path.join(self.root, file)
        names = sorted(self.entries.get(file, {}))
        held = f"(it holds {', '.join(map(repr, names[:4]))}{'...' if len(names) > 4 else ''})"
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint file {path} is missing {held}",
                                  fix="copy the whole checkpoint directory, or restore an older checkpoint") from None
        except OSError as exc:  # ELOOP: a symbolic link, which could point anywhere (DESIGN §19)
            raise CheckpointError(f"checkpoint file {path} cannot be opened as a regular file ({exc.strerror}) {held}",
                                  fix="replace a symbolic link by the file itself") from None
        try:
            size = os.fstat(fd).st_size
            if size != self.files[file]["bytes"]:
                raise CheckpointError(f"checkpoint file {path} has {size} bytes, the manifest says "
                                      f"{self.files[file]['bytes']}: it is truncated or was replaced {held}",
                                      fix="copy the file again from the original checkpoint")
            if self.verify == "full" and sha256_of(path) != self.files[file]["sha256"]:
                bad = self._corrupt_tensors(fd, path, _header(fd, size, path))
                raise CheckpointError(f"checkpoint file {path} is corrupt: its SHA-256 differs from the "
                                      f"manifest's; tensor(s) {', '.join(bad) or 'none (the header)'} differ",
                                      fix="copy the file again from the original checkpoint")
            header = _header(fd, size, path)
            offsets = {}
            for tensor, (dtype, shape, _) in self.entries.get(file, {}).items():
                entry = header.get(tensor)
                want = (safetensors_dtype(dtype), list(shape))
                if not isinstance(entry, dict) or (entry.get("dtype"), entry.get("shape")) != want:
                    got = "no such tensor" if not isinstance(entry, dict) else \
                        f"{entry.get('dtype')} {entry.get('shape')}"
                    raise CheckpointError(f"checkpoint file {path}, tensor {tensor!r}: the file holds {got}, the "
                                          f"manifest says {want[0]} {want[1]}",
                                          fix="the file belongs to another checkpoint; copy the right one")
                offsets[tensor] = entry["start"]
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else None
            return fd, offsets, mapped
        except BaseException:
            os.close(fd)
            raise

    def _corrupt_tensors(self, fd: int, path: str, header: dict) -> list:
        """The tensors of a corrupt file whose CRC-32 differs from the manifest's."""
        bad = []
        for tensor, (dtype, shape, crc) in sorted(self.entries.get(os.path.basename(path), {}).items()):
            if tensor in header:
                words = np.empty(shape, stored_dtype(dtype))
                _pread_into(fd, memoryview(words).cast("B"), header[tensor]["start"], path)
                if _crc(words) != crc:
                    bad.append(repr(tensor))
        return bad

    def read_into(self, dest: np.ndarray, file: str, tensor: str, offset: tuple, box: tuple, what: str) -> None:
        """Fill ``dest`` (a view of the value dtype, of the box's shape) with box ``box`` (global
        coordinates) of the saved tensor whose box starts at ``offset``. Runs of a page or more
        are read with ``pread`` (straight into ``dest`` when the box is the whole block and
        ``dest`` is contiguous); shorter runs are copied out of a memory map of the file, which
        the operating system reads by pages (CKPT-RESTORE-3)."""
        fd, starts, mapped = self._handle(file)
        _, shape, crc = self.entries[file][tensor]
        path = os.path.join(self.root, file)
        local = [(lo - o, hi - o) for (lo, hi), o in zip(box, offset)] or [(0, 1)]
        words = dest if dest.ndim else dest.reshape(1)  # a view: the box has the block's rank
        words = words.view(stored_dtype(dest.dtype)) if words.dtype != stored_dtype(dest.dtype) else words
        runs = _runs(shape, local, words.itemsize)
        whole = all(lo == 0 and hi == n for (lo, hi), n in zip(local, shape))
        if runs and runs[0][1] < _PAGE and len(runs) > 1:
            saved = np.ndarray(shape, words.dtype, buffer=mapped, offset=starts[tensor])
            words[...] = saved[tuple(slice(lo, hi) for lo, hi in local)]
        elif runs:
            target = words if words.flags.c_contiguous else np.empty(words.shape, words.dtype)
            buf = memoryview(target.reshape(-1)).cast("B")
            for at, (start, length) in enumerate(runs):
                _pread_into(fd, buf[at * length:(at + 1) * length], starts[tensor] + start, path)
            if target is not words:
                words[...] = target
        self.log.add(file, tensor, box, words.nbytes)
        if whole and self.verify != "none" and _crc(np.ascontiguousarray(words)) != crc:
            raise CheckpointError(f"checkpoint file {path} is corrupt: tensor {tensor!r} (a block of {what}) fails "
                                  "its CRC-32 check", fix="copy the file again from the original checkpoint")

    def close(self) -> None:
        with self._lock:
            for fd, _, mapped in self._open.values():
                if mapped is not None:
                    mapped.close()
                os.close(fd)
            self._open.clear()


_PAGE = 4096


def _runs(shape: tuple, box: list, itemsize: int) -> list:
    """``(byte offset, length)`` of the contiguous runs of a row-major tensor of ``shape`` that
    ``box`` covers, in row-major order (equal lengths)."""
    d = len(shape)
    inner = 1  # elements of the trailing dimensions the box covers whole
    while d > 0 and box[d - 1] == (0, shape[d - 1]):
        d -= 1
        inner *= shape[d]
    if d == 0:
        return [(0, inner * itemsize)] if inner else []
    lo, hi = box[d - 1]
    length = (hi - lo) * inner
    strides = [0] * d
    step = inner * shape[d - 1]
    for k in range(d - 2, -1, -1):
        strides[k] = step
        step *= shape[k]
    base = lo * inner
    starts = [base]
    for k in range(d - 2, -1, -1):
        klo, khi = box[k]
        starts = [s + i * strides[k] for i in range(klo, khi) for s in starts]
    starts.sort()
    return [(s * itemsize, length * itemsize) for s in starts] if length else []


def _pread_into(fd: int, buf: memoryview, offset: int, path: str) -> None:
    done = 0
    while done < len(buf):
        n = os.preadv(fd, [buf[done:]], offset + done)
        if n == 0:
            raise CheckpointError(f"checkpoint file {path} ends before byte {offset + len(buf)}: it is truncated",
                                  fix="copy the file again from the original checkpoint")
        done += n


_HEADER_MAX = 100 << 20  # the safetensors format's own bound on its header


def _header(fd: int, size: int, path: str) -> dict:
    """The validated header of a safetensors file: ``{tensor: {dtype, shape, start}}`` with
    ``start`` the absolute byte offset of the tensor's data, every extent inside the file."""
    def bad(what):
        raise CheckpointError(f"checkpoint file {path} is not a valid safetensors file: {what}",
                              fix="copy the file again from the original checkpoint")
    if size < 8:
        bad("shorter than its 8-byte header length")
    n = int.from_bytes(os.pread(fd, 8, 0), "little")
    if n > min(_HEADER_MAX, size - 8):
        bad(f"a header of {n} bytes")
    try:
        header = json.loads(os.pread(fd, n, 8))
    except (ValueError, RecursionError):
        bad("its header is not JSON")
    if not isinstance(header, dict):
        bad("its header is not a JSON object")
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = entry["data_offsets"]
            dtype, shape = entry["dtype"], entry["shape"]
            itemsize = np.dtype(_SAFETENSORS_NP[dtype]).itemsize
            count = 1
            for k in shape:
                count *= int(k) if isinstance(k, int) and k >= 0 else bad(f"tensor {name!r} has shape {shape}")
            ok = isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end and end - begin == count * itemsize
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok or 8 + n + end > size:
            bad(f"tensor {name!r} has a malformed or out-of-file entry")
        out[name] = {"dtype": dtype, "shape": list(shape), "start": 8 + n + begin}
    return out
