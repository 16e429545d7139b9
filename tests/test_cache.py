"""BACKEND-CACHE-1 … 4: the cache directory is private, an entry is loaded only when it checks
out, damage is a miss with one warning and the next store repairs it, writes never follow a
planted link, and numba's cache of our kernels obeys the directory rule."""
import errno
import hashlib
import os
import stat
import threading
import warnings

import pytest

from tessera_ref import cache
from tessera_ref.errors import CacheError, CacheWarning

from cache_attacks import NOBODY, needs_root, plant, shared_dir  # noqa: F401 (a fixture)

KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "c"))
    monkeypatch.setattr(cache, "_WARNED", set())
    return tmp_path / "c"


def _mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.mark.parametrize("umask", [0o002, 0o000, 0o077])
def test_directories_are_0700_and_files_0600_whatever_the_umask(root, umask):
    old = os.umask(umask)
    try:
        folder = cache.directory("cuda-cpu")
        assert cache.store(folder, KEY, {"so": b"library", "asan": b"program"}, programs=("asan",))
    finally:
        os.umask(old)
    assert folder == root / "cuda-cpu" and _mode(root) == _mode(folder) == 0o700
    assert _mode(folder / f"{KEY}.so") == _mode(folder / f"{KEY}.json") == 0o600
    assert _mode(folder / f"{KEY}.asan") == 0o700
    assert cache.load(folder, KEY, ("so", "asan")) == {"so": b"library", "asan": b"program"}


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775, 0o757])
@pytest.mark.parametrize("level", ["root", "sub"])
def test_a_directory_others_can_write_is_refused_naming_it_and_the_fix(root, mode, level):
    cache.directory("cuda")
    folder = root if level == "root" else root / "cuda"
    folder.chmod(mode)
    with pytest.raises(CacheError) as info:
        cache.directory("cuda")
    assert str(folder) in info.value.what and f"mode {mode:04o}" in info.value.what
    assert f"chmod 700 {folder}" in info.value.fix and cache.ENV in info.value.fix


def test_a_directory_of_another_user_is_refused(root):
    needs_root()
    cache.directory()
    os.chown(root, NOBODY, NOBODY)
    with pytest.raises(CacheError, match=f"owned by .*uid {NOBODY}") as info:
        cache.directory()
    assert "chmod" not in info.value.fix and cache.ENV in info.value.fix


def test_a_directory_that_is_a_file_or_cannot_be_made_is_a_cache_error(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(cache.ENV, str(tmp_path / "file"))
    with pytest.raises(CacheError, match="is not private: it is not a directory"):
        cache.directory()
    monkeypatch.setenv(cache.ENV, str(tmp_path / "file" / "below"))
    with pytest.raises(CacheError, match="cannot create the cache directory .*below") as info:
        cache.directory()
    assert cache.ENV in info.value.fix


def _truncate(p):
    p.write_bytes(p.read_bytes()[:3])


def _chown(p):
    needs_root()
    os.chown(p, NOBODY, NOBODY)


def _link(p):
    good = p.with_name("elsewhere")
    good.write_bytes(p.read_bytes())
    good.chmod(0o600)
    p.unlink()
    p.symlink_to(good)


DAMAGE = {  # what befalls the file .so (or the metadata .json): the warning says
    "truncated": ("so", _truncate, r"has 3 bytes, its metadata records 7 \(truncated\)"),
    "empty": ("so", lambda p: p.write_bytes(b""), "has 0 bytes"),
    "longer": ("so", lambda p: p.write_bytes(b"library!"), "over the size its metadata records"),
    "other content": ("so", lambda p: p.write_bytes(b"LIBRARY"), "another SHA-256"),
    "missing": ("so", lambda p: p.unlink(), "is missing"),
    "mode 0644": ("so", lambda p: p.chmod(0o644), "mode 0644, not 0600"),
    "mode 0666": ("so", lambda p: p.chmod(0o666), "mode 0666, not 0600"),
    "a link": ("so", _link, "symbolic link"),
    "another owner": ("so", _chown, f"owned by .*uid {NOBODY}"),
    "a directory": ("so", lambda p: (p.unlink(), p.mkdir()), "not a regular file"),
    "garbage metadata": ("json", lambda p: p.write_bytes(b"{not json"), "is not the metadata of files so"),
    "metadata of another key": ("json", lambda p: p.write_bytes(p.read_bytes().replace(KEY.encode(), b"f" * 32)),
                                "is not the metadata"),
    "metadata with a bad size": ("json", lambda p: p.write_bytes(p.read_bytes().replace(b'"size": 7', b'"size": -7')),
                                 "is not the metadata"),
    "metadata mode 0664": ("json", lambda p: p.chmod(0o664), "mode 0664"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_a_miss_with_one_warning_and_a_store_repairs_it(root, damage):
    name, harm, why = DAMAGE[damage]
    folder = cache.directory("cuda-cpu")
    cache.store(folder, KEY, {"so": b"library"})
    harm(cache.path(folder, KEY, name))
    with pytest.warns(CacheWarning, match=why) as caught:
        assert cache.load(folder, KEY, ("so",)) is None
    assert len(caught) == 1 and str(cache.path(folder, KEY, name)) in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.load(folder, KEY, ("so",)) is None  # still a miss; the warning was given once
        assert cache.store(folder, KEY, {"so": b"library"})
        assert cache.load(folder, KEY, ("so",)) == {"so": b"library"}  # repaired
    assert _mode(cache.path(folder, KEY, "so")) == 0o600


def test_an_entry_without_metadata_is_a_plain_miss(root):
    folder = cache.directory("cuda-cpu")
    cache.path(folder, KEY, "so").write_bytes(b"an entry of an older version")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.load(folder, KEY, ("so",)) is None


@pytest.mark.parametrize("as_nobody", [False, True], ids=["same user", "another user"])
def test_an_entry_planted_in_a_shared_directory_is_never_read(shared_dir, monkeypatch, as_nobody):
    plant(shared_dir, KEY, {"so": b"planted"}, as_nobody=as_nobody)
    monkeypatch.setenv(cache.ENV, str(shared_dir))
    with pytest.raises(CacheError, match="mode 0777 lets its group and other users write it"):
        cache.directory()


@pytest.mark.parametrize("sticky", [False, True])
def test_a_cache_directory_in_a_directory_anyone_may_write_needs_the_sticky_bit(shared_dir, monkeypatch, sticky):
    """Else anyone may rename the private directory away and put theirs in its place."""
    shared_dir.chmod(0o1777 if sticky else 0o777)
    monkeypatch.setenv(cache.ENV, str(shared_dir / "mine"))
    if sticky:
        assert cache.directory("cuda") == shared_dir / "mine" / "cuda"
    else:
        with pytest.raises(CacheError, match=f"the directory holding it, {shared_dir}, has mode 0777"):
            cache.directory("cuda")


def test_an_entry_planted_in_another_users_directory_is_never_read(shared_dir, monkeypatch):
    needs_root()
    os.chown(shared_dir, NOBODY, NOBODY)
    shared_dir.chmod(0o700)
    plant(shared_dir, KEY, {"so": b"planted"}, as_nobody=True)
    monkeypatch.setenv(cache.ENV, str(shared_dir))
    with pytest.raises(CacheError, match="owned by"):
        cache.directory()


def test_an_atomic_write_replaces_a_planted_link_and_never_follows_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("the victim's own file")
    target = tmp_path / "autotune.json"
    target.symlink_to(victim)
    for pid in range(os.getpid() - 2, os.getpid() + 3):  # the old predictable temp names, all links
        (tmp_path / f"autotune.json.{pid}.tmp").symlink_to(victim)
    cache.write_atomic(target, b"{}")
    assert victim.read_text() == "the victim's own file"
    assert not target.is_symlink() and target.read_bytes() == b"{}" and _mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if not p.is_symlink()) == ["autotune.json", "victim"]


def test_concurrent_stores_of_one_key_never_mix_their_files(root):
    folder = cache.directory("cuda")
    files = [{"ptx": bytes([i]) * 1000, "cubin": bytes([i]) * 3000} for i in range(8)]
    threads = [threading.Thread(target=lambda f=f: [cache.store(folder, KEY, f) for _ in range(20)]) for f in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.load(folder, KEY, ("ptx", "cubin")) in files
    assert sorted(p.name for p in folder.iterdir()) == sorted([".lock"] + [f"{KEY}.{n}" for n in ("cubin", "json",
                                                                                                    "ptx")])


def test_a_store_that_cannot_write_warns_once_and_returns_false(root, monkeypatch):
    folder = cache.directory("cuda")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(cache, "write_atomic", full)
    with pytest.warns(CacheWarning, match=f"cannot write to the cache directory {folder} .No space left") as caught:
        assert not cache.store(folder, KEY, {"ptx": b"x"})
        assert not cache.store(folder, KEY, {"ptx": b"x"})
    assert len(caught) == 1


NUMBA_MODULE = '''
from numba import njit


@njit(cache=True)
def twice(x):
    return 2 * x
'''


@pytest.mark.parametrize("private", [True, False])
def test_numbas_cache_of_our_kernels_is_used_only_from_a_private_directory(tmp_path, monkeypatch, private):
    """numba unpickles its index and data files: in a directory others can write, the guard
    turns the cache off (no file is read or written there) and says so once."""
    import importlib.util

    import numba
    numba_dir = tmp_path / "numba"
    numba_dir.mkdir(mode=0o700)
    if not private:
        numba_dir.chmod(0o777)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(numba_dir))
    monkeypatch.setattr(cache, "_WARNED", set())
    (tmp_path / "jitted.py").write_text(NUMBA_MODULE)
    spec = importlib.util.spec_from_file_location("jitted", tmp_path / "jitted.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.numba_guard(module.twice)
    assert module.twice(21) == 42
    written = [p.name for p in numba_dir.rglob("*.nbi")]
    if private:
        assert not caught and len(written) == 1  # numba wrote its index there
    else:
        assert len(caught) == 1 and issubclass(caught[0].category, CacheWarning)
        assert str(numba_dir) in str(caught[0].message) and "mode 0777: anyone may rename" in str(caught[0].message)
        assert written == []


def test_the_package_kernels_guard_their_numba_cache():
    """Every ``cache=True`` kernel of the numerics package is in a numba_guard call."""
    import ast
    from pathlib import Path

    import tessera_ref
    for path in (Path(tessera_ref.__file__).parent / "numerics").glob("*.py"):
        tree = ast.parse(path.read_text())
        cached = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and any(
            isinstance(d, ast.Call) and any(k.arg == "cache" for k in d.keywords) for d in f.decorator_list)}
        guarded = {a.id for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") ==
                   "numba_guard" for a in n.args}
        assert cached == guarded, f"{path.name}: cache=True kernels outside numba_guard: {cached - guarded}"


def test_hashes_are_of_the_bytes_loaded(root):
    """The metadata is what an independent SHA-256 of the stored bytes says."""
    import json
    folder = cache.directory("cuda")
    cache.store(folder, KEY, {"cubin": b"\x7fELF cubin"})
    meta = json.loads(cache.path(folder, KEY, "json").read_text())
    assert meta["files"]["cubin"] == {"size": 10, "sha256": hashlib.sha256(b"\x7fELF cubin").hexdigest(),
                                      "mode": 0o600}
