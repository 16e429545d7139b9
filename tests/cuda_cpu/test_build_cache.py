"""CUDA-CPU-6, BACKEND-CACHE-1 … 3: the harness loads a cached shared library (``dlopen``) and runs
a cached ASan program only after the entry checks out. A truncated or empty library is built
again (never a SIGBUS, never a raw OSError), a missing file is rebuilt once and the entry
repaired, and a library or program planted — in a shared directory, with a mode others can
write, or owned by another user — is never loaded or run (its constructor or script would
leave a marker file)."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from cache_attacks import NOBODY, Calls, evil_library, evil_program, needs_root, plant, shared_dir  # noqa: F401
from cpu_programs import PRELUDE, run_text
from tessera_ref import cache
from tessera_ref.backends.cuda.cpu import build, harness
from tessera_ref.backends.cuda.source import Source
from tessera_ref.errors import CacheError, CacheWarning

TWICE = r"""
extern "C" __global__ void twice(const float* x, float* y) {
  y[threadIdx.x] = 2.0f * x[threadIdx.x];
}
"""
SOURCE = Source(PRELUDE + TWICE)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_LOADED", {})  # nothing loaded yet: a fresh process
    monkeypatch.setattr(cache, "_WARNED", set())
    return tmp_path / "cache" / "cuda-cpu"


def _twice_runs():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    run_text(TWICE, "twice", (1,), 32, [x, y])
    assert (y == 2 * x).all()


def _library_file(folder) -> Path:
    return cache.path(folder, build._key(build.translation_unit(SOURCE, ["twice"]), build.FLAGS), "so")


TRUNCATED = """
import numpy as np
from pathlib import Path
from tessera_ref.backends.cuda.cpu import build
from test_build_cache import _library_file, _twice_runs
_twice_runs()
lib = _library_file(Path({folder!r}))
data = lib.read_bytes()
lib.unlink()  # (a new file: truncating the one this process has mapped would fault here, not in a load)
lib.write_bytes(data[:len(data) // 2])
lib.chmod(0o600)
build._LOADED.clear()  # a later process: the library comes from the disk
_twice_runs()
print("ran", len(lib.read_bytes()) > 0)
"""


def test_a_truncated_library_is_built_again_not_loaded(cache_dir):
    """dlopen of a truncated ELF is a SIGBUS: the launch runs in a child process, so a check
    that let it through kills the child, not the test run."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    done = subprocess.run([sys.executable, "-c", TRUNCATED.format(folder=str(cache_dir))], capture_output=True,
                          text=True, env=env, cwd=Path(__file__).parent, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ran", "True"]
    assert "CacheWarning" in done.stderr and "(truncated): it is not used, and is rebuilt" in done.stderr


@pytest.mark.parametrize("harm, why", [("empty", "has 0 bytes"), ("missing", "is missing")])
def test_an_empty_or_missing_library_is_rebuilt_once_and_repaired(cache_dir, monkeypatch, harm, why):
    _twice_runs()
    lib = _library_file(cache_dir)
    lib.unlink()  # (a new file: truncating the one this process has mapped would fault here)
    if harm == "empty":
        lib.write_bytes(b"")
        lib.chmod(0o600)
    gxx = Calls(monkeypatch, build.subprocess, "run")
    monkeypatch.setattr(build, "_LOADED", {})
    with pytest.warns(CacheWarning, match=why):
        _twice_runs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            monkeypatch.setattr(build, "_LOADED", {})
            _twice_runs()
    assert gxx.count == 1 and lib.stat().st_size > 0


@pytest.mark.parametrize("as_nobody", [False, True], ids=["same user", "another user"])
def test_a_library_planted_in_a_shared_directory_is_never_loaded(monkeypatch, tmp_path, shared_dir, as_nobody):
    marker = tmp_path / "planted-code-ran"
    evil = evil_library(tmp_path, marker)
    (shared_dir / "cuda-cpu").mkdir()
    (shared_dir / "cuda-cpu").chmod(0o777)
    key = build._key(build.translation_unit(SOURCE, ["twice"]), build.FLAGS)
    plant(shared_dir / "cuda-cpu", key, {"so": evil}, as_nobody=as_nobody)
    monkeypatch.setenv(cache.ENV, str(shared_dir))
    monkeypatch.setattr(build, "_LOADED", {})
    with pytest.raises(CacheError, match="not private"):
        _twice_runs()
    assert not marker.exists()


@pytest.mark.parametrize("harm", ["mode 0666", "another owner"])
def test_a_planted_library_others_could_have_written_is_never_loaded(cache_dir, monkeypatch, tmp_path, harm):
    marker = tmp_path / "planted-code-ran"
    cache.directory("cuda-cpu")
    lib = _library_file(cache_dir)
    plant(cache_dir, lib.stem, {"so": evil_library(tmp_path, marker)})
    if harm == "mode 0666":
        lib.chmod(0o666)
    else:
        needs_root()
        os.chown(lib, NOBODY, NOBODY)
    with pytest.warns(CacheWarning, match=f"{lib}"):
        _twice_runs()
    assert not marker.exists() and lib.stat().st_uid == os.geteuid() and (lib.stat().st_mode & 0o777) == 0o600


def test_the_control_a_library_planted_by_the_user_in_the_private_directory_is_loaded(cache_dir, tmp_path):
    """The planting works: the same entry, as the user's own, is loaded (the user trusts
    themself) — so the tests above fail if the rules go."""
    marker = tmp_path / "planted-code-ran"
    cache.directory("cuda-cpu")
    lib = _library_file(cache_dir)
    plant(cache_dir, lib.stem, {"so": evil_library(tmp_path, marker)})
    with pytest.raises(AttributeError):  # no launcher in it
        _twice_runs()
    assert marker.exists()


@pytest.mark.parametrize("harm", ["mode 0777", "another owner", "shared directory"])
def test_a_planted_asan_program_is_never_run(cache_dir, monkeypatch, tmp_path, shared_dir, harm):
    marker = tmp_path / "planted-program-ran"
    key = build._key(build.translation_unit(SOURCE, ["twice"], main=True), build.ASAN_FLAGS)
    folder = cache.directory("cuda-cpu")
    if harm == "shared directory":
        folder = shared_dir / "cuda-cpu"
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)
        monkeypatch.setenv(cache.ENV, str(shared_dir))
    plant(folder, key, {"asan": evil_program(marker)}, programs=("asan",))
    program = cache.path(folder, key, "asan")
    if harm == "mode 0777":
        program.chmod(0o777)
    elif harm == "another owner":
        needs_root()
        os.chown(program, NOBODY, NOBODY)
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    options = harness.Options(memcheck="asan")
    if harm == "shared directory":
        with pytest.raises(CacheError, match="not private"):
            harness.run(None, "twice", 1, 32, [x, y], 0, options, SOURCE)
    else:
        with pytest.warns(CacheWarning, match=str(program)):
            harness.run(None, "twice", 1, 32, [x, y], 0, options, SOURCE)
        assert (y == 2 * x).all() and b"touch" not in program.read_bytes()
    assert not marker.exists()
