"""Atomic publication of a checkpoint directory (CKPT-ATOMIC-1): everything is written into
a temporary directory beside the target (an unpredictable name, mode 0700), files and
directories are fsynced, and the directory is renamed into place — swapped with an existing
checkpoint in one ``renameat2(RENAME_EXCHANGE)`` where Linux offers it. A crash before the
rename leaves the previous checkpoint as it was (and a ``.<name>.tmp-*`` directory behind).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import tempfile

from ..errors import CheckpointError

__all__ = ["make_temp", "fsync_dir", "publish", "discard", "MANIFEST"]

MANIFEST = "manifest.json"
_RENAME_EXCHANGE = 2


def make_temp(target: str) -> str:
    """A new private directory beside ``target`` for its next version."""
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        raise CheckpointError(f"cannot save a checkpoint at {target}: directory {parent} does not exist",
                              fix=f"create it first (os.makedirs({parent!r}))")
    if os.path.exists(target) and not os.path.isfile(os.path.join(target, MANIFEST)):
        raise CheckpointError(f"{target} exists and is not a checkpoint (it has no {MANIFEST}); save replaces "
                              "only an earlier checkpoint", fix="choose a new path, or remove that one")
    return tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.tmp-", dir=parent)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where that is not available."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        call = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if call(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    return False


def publish(temp: str, target: str) -> None:
    """Rename the finished ``temp`` to ``target`` (replacing an earlier checkpoint there)."""
    fsync_dir(temp)
    parent = os.path.dirname(target) or "."
    if os.path.exists(target):
        if _exchange(temp, target):
            fsync_dir(parent)
            shutil.rmtree(temp, ignore_errors=True)  # the previous checkpoint, now at the temp name
            return
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.old-", dir=parent)
        os.rename(target, os.path.join(old, "previous"))  # a window in which target is absent
        os.rename(temp, target)
        fsync_dir(parent)
        shutil.rmtree(old, ignore_errors=True)
        return
    os.rename(temp, target)
    fsync_dir(parent)


def discard(temp: str) -> None:
    shutil.rmtree(temp, ignore_errors=True)
