"""The on-disk caches' rules: the directory, an entry, the lock (BACKEND-CACHE-1 … 3).

:func:`directory` is ``$TESSERA_CACHE_DIR`` (default ``~/.cache/tessera_ref``) or a folder of
it, created 0700 and used only when the current user owns it and nobody else can write it
(else a :class:`~tessera_ref.errors.CacheError`). An entry ``key`` of a directory is its
files ``<key>.<name>`` and its metadata ``<key>.json`` (each file's size, SHA-256 and mode):
:func:`store` writes them under :func:`locked`, each by :func:`write_atomic`, the metadata
last; :func:`load` returns their bytes only when the metadata and every file check out —
otherwise a miss, with one :class:`~tessera_ref.errors.CacheWarning` when the entry was
damaged, so the caller rebuilds it and its :func:`store` repairs it. :func:`read_private`
reads any other file of the directory (the autotune records) under the same ownership rules.
:func:`numba_guard` holds numba's own cache of the package's compiled kernels to the
directory rule (BACKEND-CACHE-4).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import warnings
from pathlib import Path

from .errors import CacheError, CacheWarning

__all__ = ["ENV", "MISSING", "root", "directory", "unsafe", "load", "store", "path", "locked", "write_atomic", "read_private",
           "warn_once", "numba_guard"]

#: The environment variable naming the cache's root directory.
ENV = "TESSERA_CACHE_DIR"
#: The modes of what :func:`store` writes: data files, programs (executed), directories.
FILE_MODE, PROGRAM_MODE, DIR_MODE = 0o600, 0o700, 0o700
MISSING = "is missing"
_KEY = re.compile(r"[0-9a-f]{16,64}")
_NAME = re.compile(r"[a-z0-9]+")
_META_BYTES = 1 << 20


def root() -> Path:
    """The cache's root directory (not created, not checked)."""
    return Path(os.environ.get(ENV) or os.path.join(os.path.expanduser("~"), ".cache", "tessera_ref"))


def _user(uid: int) -> str:
    try:
        import pwd
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def unsafe(folder) -> str | None:
    """Why another user could write the directory ``folder`` — it is not a directory, the
    current user does not own it, or its group or others may write it — or None."""
    try:
        st = os.stat(folder)
    except OSError as exc:
        return f"it cannot be examined ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid():
        return f"it is owned by {_user(st.st_uid)}, not by the current user {_user(os.geteuid())}"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("its group", 0o020), ("other users", 0o002)) if st.st_mode & bit)
        return f"its mode {stat.S_IMODE(st.st_mode):04o} lets {who} write it"
    return None


def _unsafe_holder(folder) -> str | None:
    """Why another user could replace the directory ``folder`` by renaming it away: the
    directory holding it belongs to someone else than the user or root, or anyone may
    write it and it is not sticky (as ``/tmp`` is). None otherwise."""
    holder = os.path.dirname(os.path.abspath(folder))
    try:
        st = os.stat(holder)
    except OSError as exc:
        return f"the directory holding it, {holder}, cannot be examined ({exc.strerror})"
    if st.st_uid not in (os.geteuid(), 0):
        return f"the directory holding it, {holder}, is owned by {_user(st.st_uid)}"
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        return (f"the directory holding it, {holder}, has mode {stat.S_IMODE(st.st_mode):04o}: anyone may rename "
                f"it away and put another in its place")
    return None


def _make(folder: Path) -> None:
    """``folder`` created with mode 0700 whatever the umask (its parents as the umask says),
    unless something is there already (which :func:`unsafe` then judges)."""
    try:
        os.makedirs(folder.parent, exist_ok=True)
        os.mkdir(folder, DIR_MODE)
    except OSError as exc:
        if os.path.lexists(folder):
            return
        raise CacheError(f"cannot create the cache directory {folder}: {exc.strerror} ({exc.filename})",
                         fix=f"set {ENV} to a directory you own and can write") from None
    os.chmod(folder, DIR_MODE)


def directory(*parts: str) -> Path:
    """``root() / parts``, each level created 0700 where missing and checked: a CacheError
    naming the directory, what is wrong and the fix when another user could write one
    (BACKEND-CACHE-1)."""
    folder = root()
    for part in ("", *parts):
        folder = folder / part if part else folder
        _make(folder)
        why = unsafe(folder) or (_unsafe_holder(folder) if not part else None)
        if why is not None:
            mine = why.startswith("its mode")
            raise CacheError(
                f"the cache directory {folder} is not private: {why}. tessera_ref loads compiled kernels "
                f"(shared libraries, programs, cubins) and autotune records from it, which anyone who can write "
                f"it could replace",
                fix=(f"run `chmod 700 {folder}` and remove what others may have put there (`rm -rf {folder}`), or "
                     if mine else "") + f"set {ENV} to a directory only you can write (it is created 0700)")
    return folder


def path(folder: Path, key: str, name: str) -> Path:
    """The file ``name`` of entry ``key`` in ``folder`` (``json``: its metadata)."""
    if not _KEY.fullmatch(key) or not _NAME.fullmatch(name):
        raise ValueError(f"a cache key is 16-64 hex digits and a file name lower-case letters and digits: "
                         f"{key!r}, {name!r}")
    return folder / f"{key}.{name}"


def read_private(file: Path, mode: int | None = None, limit: int = _META_BYTES) -> tuple[bytes | None, str]:
    """``(bytes, "")`` of ``file`` — a regular file (not a link) the current user owns, with
    mode ``mode`` (None: any mode its group and others cannot write), of at most ``limit``
    bytes — else ``(None, why not)``; ``why`` is ``"is missing"`` when there is no such file."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, MISSING
    except OSError as exc:
        return None, "is a symbolic link" if os.path.islink(file) else f"cannot be opened ({exc.strerror})"
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_uid != os.geteuid():
        why = f"is owned by {_user(st.st_uid)}"
    else:
        bits = stat.S_IMODE(st.st_mode)
        bad = bits & 0o022 if mode is None else bits != mode
        why = f"has mode {bits:04o}" + (f", not {mode:04o}" if mode is not None else "") if bad else ""
    if why:
        os.close(fd)
        return None, why
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        return None, f"is over {limit:,} bytes"
    return data, ""


_WARNED: set = set()
_WARNED_LOCK = threading.Lock()


def warn_once(what: str, message: str) -> None:
    """A CacheWarning ``message``, issued once per process for ``what`` (a file, a directory)."""
    with _WARNED_LOCK:
        if what in _WARNED:
            return
        _WARNED.add(what)
    warnings.warn(message, CacheWarning, stacklevel=3)


def _damaged(file: Path, why: str) -> None:
    warn_once(str(file), f"cache entry {file} {why}: it is not used, and is rebuilt and rewritten")


def _checked_meta(data: bytes, key: str, names) -> dict | None:
    try:
        meta = json.loads(data)
        files = meta["files"]
        ok = meta["key"] == key and all(
            isinstance(files[n]["sha256"], str) and re.fullmatch(r"[0-9a-f]{64}", files[n]["sha256"])
            and type(files[n]["size"]) is int and files[n]["size"] >= 0
            and files[n]["mode"] in (FILE_MODE, PROGRAM_MODE) for n in names)
    except (ValueError, KeyError, TypeError):
        return None
    return files if ok else None


def load(folder: Path, key: str, names) -> dict[str, bytes] | None:
    """``{name: bytes}`` of entry ``key``'s files ``names`` in ``folder`` (a checked
    :func:`directory`) when its metadata is one :func:`store` wrote for them and each file
    has the size, SHA-256 and mode it records, is owned by the current user and is no link;
    else None, with one CacheWarning unless the entry has no metadata at all (BACKEND-CACHE-3)."""
    meta = path(folder, key, "json")
    data, why = read_private(meta, FILE_MODE)
    if data is None:
        if why != MISSING:
            _damaged(meta, why)
        return None
    files = _checked_meta(data, key, names)
    if files is None:
        _damaged(meta, f"is not the metadata of files {', '.join(names)}")
        return None
    out = {}
    for name in names:
        file, want = path(folder, key, name), files[name]
        data, why = read_private(file, want["mode"], want["size"])
        if data is None:
            why = "is over the size its metadata records" if why.startswith("is over") else why
        elif len(data) != want["size"]:
            why = f"has {len(data):,} bytes, its metadata records {want['size']:,} (truncated)"
        elif hashlib.sha256(data).hexdigest() != want["sha256"]:
            why = "has another SHA-256 than its metadata records"
        if why:
            _damaged(file, why)
            return None
        out[name] = data
    return out


def store(folder: Path, key: str, files: dict[str, bytes], programs=()) -> bool:
    """Write entry ``key`` of ``folder``: each of ``files`` (mode 0600; 0700 for the names in
    ``programs``), then its metadata, each by :func:`write_atomic`, under :func:`locked` (so
    concurrent stores of one key never mix their files). False, with one CacheWarning, when
    the directory cannot be written (the caller keeps what it built)."""
    meta = {"key": key, "files": {}}
    try:
        with locked(folder / ".lock"):
            for name, data in files.items():
                mode = PROGRAM_MODE if name in programs else FILE_MODE
                write_atomic(path(folder, key, name), data, mode)
                meta["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "mode": mode}
            write_atomic(path(folder, key, "json"), json.dumps(meta, sort_keys=True).encode())
    except OSError as exc:
        warn_once(str(folder), f"cannot write to the cache directory {folder} ({exc.strerror}): builds are not "
                               f"cached, so each process builds them again")
        return False
    return True


@contextlib.contextmanager
def locked(file: Path):
    """An exclusive ``flock`` on ``file`` (created 0600, never followed if a link) for the
    block: between processes and between threads."""
    fd = os.open(file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_atomic(file: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """``data`` into ``file``: written to an unpredictable name (``mkstemp``) in its directory
    with ``mode`` whatever the umask, then renamed over ``file`` (a reader sees the old file or
    the new one, never part of one; a link or a directory at ``file`` is replaced)."""
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
        try:
            os.replace(tmp, file)
        except IsADirectoryError:  # a directory where the file belongs: removed, as damage is
            shutil.rmtree(file)
            os.replace(tmp, file)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def numba_guard(*functions) -> None:
    """Turn off numba's on-disk cache (``cache=True``) of each of ``functions`` (numba
    dispatchers) whose cache directory another user could write — numba unpickles what it
    finds there — with one CacheWarning naming the directory; they are then compiled in each
    process (BACKEND-CACHE-4)."""
    for f in functions:
        folder = f.stats.cache_path
        why = (unsafe(folder) or _unsafe_holder(folder)) if folder else None
        if why:
            f._cache.disable()  # numba has no public switch; the function compiles on its first call instead
            warn_once(folder, f"numba's cache directory {folder} is not private: {why}. numba loads pickled code "
                              f"from it, so tessera_ref's compiled numerics kernels are compiled in each process "
                              f"instead (slower first calls); fix: make it yours and `chmod 700` it, or set "
                              f"NUMBA_CACHE_DIR to a directory only you can write")
