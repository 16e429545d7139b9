"""Planting and damaging cache entries as a co-tenant or an accident would (DESIGN §19,
BACKEND-CACHE-1 … 3): shared by the tests of the cache rules and of each cache that follows them.

A planted entry carries metadata that matches its files (an attacker can compute SHA-256 as
well as we can), so only the ownership and mode rules stand between it and a load. Planting
"as another user" writes the files as uid/gid 65534 from a shell (the tests' Python may live
where that user cannot read); it needs root, and skips otherwise.
"""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tessera_ref import cache

#: The other user (``nobody`` on Debian and most Linux systems).
NOBODY = 65534


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("writing files as another user needs root (os.setuid)")


def write_as_nobody(path: Path, data: bytes, mode: int = 0o600) -> None:
    """``data`` into ``path``, created by uid/gid 65534."""
    needs_root()

    def demote():
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    done = subprocess.run(["/bin/sh", "-c", 'cat > "$1" && chmod "$2" "$1"', "sh", str(path), f"{mode:o}"],
                          input=data, capture_output=True, preexec_fn=demote)
    assert done.returncode == 0, done.stderr.decode()


@pytest.fixture
def shared_dir():
    """A fresh directory every user can reach and write (0777, in the system temp folder,
    not under pytest's private one), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="tsr-shared-cache-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def metadata(key: str, files: dict, programs=()) -> bytes:
    """The metadata of entry ``key`` that matches ``files`` (what an attacker would write)."""
    return json.dumps({"key": key, "files": {
        n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest(), "mode": 0o700 if n in programs else 0o600}
        for n, d in files.items()}}).encode()


def plant(folder: Path, key: str, files: dict, *, programs=(), as_nobody: bool = False) -> None:
    """Entry ``key`` of ``folder``: ``files`` and matching metadata, written by the current
    user or by uid 65534."""
    for name, data in [*files.items(), ("json", metadata(key, files, programs))]:
        target, mode = cache.path(folder, key, name), 0o700 if name in programs else 0o600
        if as_nobody:
            write_as_nobody(target, data, mode)
        else:
            target.write_bytes(data)
            target.chmod(mode)


def evil_library(tmp_path: Path, marker: Path) -> bytes:
    """A shared library whose constructor creates ``marker`` when it is loaded."""
    src = tmp_path / "planted.c"
    src.write_text('#include <fcntl.h>\n#include <unistd.h>\n'
                   f'__attribute__((constructor)) static void planted(void) {{ close(creat("{marker}", 0644)); }}\n')
    out = tmp_path / "planted.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True, capture_output=True)
    return out.read_bytes()


def evil_program(marker: Path) -> bytes:
    """A program that creates ``marker`` when it is run."""
    return f"#!/bin/sh\ntouch '{marker}'\n".encode()


class Calls:
    """Counts the calls of a module's function (a compiler) while still calling it."""

    def __init__(self, monkeypatch, module, name):
        self.count, real = 0, getattr(module, name)

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, counted)
