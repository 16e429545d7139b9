"""LOWER-TUNE-*: sweeping schedule and kernel spaces with the cost model, rejecting, caching."""
import json
import os
import time

import numpy as np
import pytest

from cache_attacks import shared_dir  # noqa: F401 (a fixture)
from tessera_ref import cache, kernel, op
from tessera_ref.errors import AutotuneError, AutotuneWarning, CacheError, CacheWarning
from tessera_ref.ir import TensorType
from tessera_ref.lowering import autotune as AT
from tessera_ref.numerics import as_policy
from tessera_ref.ops.values import Trace


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    AT._MEMORY.clear()
    yield
    AT._MEMORY.clear()


def _abstract_matmul(n):
    """The Graph IR of an n x n x n f32 matmul, traced on types only (no data)."""
    trace = Trace("mm")
    a, b = trace.arguments([TensorType((n, n), as_policy("f32"))] * 2)
    with trace:
        c = op.matmul(a, b)
    return trace.finish([c])


SPACE = dict(tile=[(64, 64, 32), (128, 128, 32), (256, 256, 64)], stages=[2, 4])


def _abstract(fn, *shapes, dtype="f32"):
    trace = Trace("f")
    args = trace.arguments([TensorType(s, as_policy(dtype)) for s in shapes])
    with trace:
        out = fn(*args)
    return trace.finish([out])


def test_seed_003_flash_attention_schedule_fits_with_three_stages():
    """LOWER-FA-2: with the accumulator in registers, seed 003's 3-stage schedule needs
    200,576 B of shared memory, under H100's 232,448 B; a fourth stage does not fit."""
    graph = _abstract(lambda q, k, v: op.flash_attention(q, k, v, block_k=128), *[(1024, 64)] * 3, dtype="f16")
    result = AT.autotune_schedule(graph, dict(tile=[(128, 128, 64)], padding=[1], stages=[3, 4]), "H100",
                                  progress=False, cache=False)
    by_stages = {t.config["stages"]: t for t in result.trials}
    assert by_stages[3].reason is None and by_stages[3].details["smem_bytes"] == 200_576
    assert "233,856 B" in by_stages[4].reason and "232,448 B" in by_stages[4].reason
    assert result.best["stages"] == 3


def test_schedule_sweep_prices_batched_and_transposed_matmuls():
    graph = _abstract(lambda a, b: op.matmul(a, b, transpose_a=True), (4, 256, 128), (256, 512))
    result = AT.autotune_schedule(graph, dict(tile=[(64, 64, 32), (128, 128, 32)]), "H100", progress=False, cache=False)
    small = next(t for t in result.trials if list(t.config["tile"]) == [64, 64, 32])
    # 4 products of [128 x 256] @ [256 x 512]: A once per column tile, B once per row tile, D once
    assert small.details["hbm_bytes"] == 4 * (128 * 256 * 8 + 256 * 512 * 2 + 128 * 512) * 4


def test_schedule_sweep_rejects_over_the_shared_memory_limit_with_the_reason(capsys):
    result = AT.autotune_schedule(_abstract_matmul(4096), SPACE, "H100")
    rejected = {tuple(t.config["tile"]) + (t.config["stages"],): t.reason for t in result.trials if t.reason}
    # 256x256x64, 2 stages of f32: 2 * (256*64 + 64*256) * 4 = 262,144 B > 227 KiB
    assert "262,144 B" in rejected[(256, 256, 64, 2)] and "232,448 B" in rejected[(256, 256, 64, 2)]
    assert (128, 128, 32, 4) not in rejected  # 4 * 32 KiB = 128 KiB fits
    assert result.best["tile"] == [128, 128, 32]  # fewer waves re-reading A and B than 64x64
    err = capsys.readouterr().err
    assert err.count("[autotune]") == 6 and "rejected" in err and "6/6" in err


def test_results_are_cached_by_problem_and_preset(capsys):
    graph = _abstract_matmul(2048)
    first = AT.autotune_schedule(graph, SPACE, "H100")
    capsys.readouterr()
    again = AT.autotune_schedule(graph, SPACE, "H100")
    assert again.cached and again.best == first.best
    assert "cached" in capsys.readouterr().err
    AT._MEMORY.clear()  # the disk cache still has it
    assert AT.autotune_schedule(graph, SPACE, "H100").cached
    assert not AT.autotune_schedule(graph, SPACE, "B200").cached  # another preset is another key
    assert not AT.autotune_schedule(_abstract_matmul(1024), SPACE, "H100").cached  # another problem


def test_a_space_with_nothing_that_fits_says_why():
    with pytest.raises(AutotuneError, match="every configuration was rejected"):
        AT.autotune_schedule(_abstract_matmul(4096), dict(tile=[(256, 256, 64)], stages=[3]), progress=False)
    with pytest.raises(AutotuneError, match="space"):
        AT.autotune_schedule(_abstract_matmul(64), dict(tile=[]), progress=False)


TILED_COPY = '''
@kernel.autotune(space=dict(BM=[128, 256, 2048, 65536], stages=[2]))
def tiled_copy(X: f32[m], Y: mut f32[m]):
    s = tshared.alloc[f32](BM)
    t = tile.id() * BM
    for i in range(BM // 128):
        s[i * 128 + tile.linear_id() % 128] = X[t + i * 128 + tile.linear_id() % 128]
    tbarrier()
    for i in range(BM // 128):
        Y[t + i * 128 + tile.linear_id() % 128] = s[i * 128 + tile.linear_id() % 128]
'''


def test_kernel_autotune_runs_the_variants_and_rejects_oversized_shared_memory(capsys):
    k = kernel.from_source(TILED_COPY)
    X = np.arange(1024, dtype=np.float32)
    Y = np.zeros(1024, np.float32)
    result = k.tune(dict(args=[X, Y], grid=lambda c: 1024 // c["BM"] if c["BM"] <= 1024 else 1, lanes=128))
    by_bm = {t.config["BM"]: t for t in result.trials}
    assert "262,144 B of shared memory" in by_bm[65536].reason  # 65536 f32 > 227 KiB: never run
    assert by_bm[2048].reason.startswith("TileBoundsError")  # a run that fails is rejected with its error
    assert by_bm[128].seconds is not None and by_bm[256].seconds is not None
    assert "4/4" in capsys.readouterr().err
    assert not Y.any()  # the sweep ran on copies
    assert result.best_variant is not None and result.best["BM"] in (128, 256)


RACY_FIRST = '''
@kernel.autotune(space=dict(SHIFT=[1, 0]))
def shifted(X: f32[m], Y: mut f32[m]):
    s = tshared.alloc[f32](129)
    l = tile.lane_id()
    s[l] = X[l]
    Y[l] = s[l + SHIFT]
'''


def test_the_winner_is_checked_and_a_racy_configuration_is_never_picked(capsys):
    # SHIFT=1 reads the neighbour's element in the barrier phase it was written in: a race. Both
    # configurations cost the same, so without the check the first in space order (racy) would win.
    k = kernel.from_source(RACY_FIRST)
    X = np.arange(128, dtype=np.float32)
    Y = np.zeros(128, np.float32)
    result = k.tune(dict(args=[X, Y], grid=1, lanes=128), cache=False)
    assert result.best == {"SHIFT": 0}
    racy = result.trials[0]
    assert racy.config == {"SHIFT": 1} and racy.seconds is None and "race" in racy.reason
    assert racy.details["seconds_unchecked"] == result.trials[1].seconds  # it ran, and was as fast
    assert "rejected with the checkers on" in capsys.readouterr().err
    assert not Y.any()  # the check ran on copies too


def test_a_space_of_racy_configurations_only_is_an_error():
    k = kernel.from_source(RACY_FIRST.replace("SHIFT=[1, 0]", "SHIFT=[1, 2]"))
    with pytest.raises(AutotuneError, match="every configuration was rejected.*race"):
        k.tune(dict(args=[np.zeros(128, np.float32), np.zeros(128, np.float32)], grid=1, lanes=128),
               cache=False, progress=False)


def test_a_space_parameter_the_kernel_never_reads_is_named():
    k = kernel.from_source(RACY_FIRST.replace("SHIFT=[1, 0]", "SHIFT=[0], BM=[64, 128], WARPS=[1, 2]"))
    args = [np.zeros(128, np.float32), np.zeros(128, np.float32)]
    with pytest.warns(AutotuneWarning, match=r"parameter 'BM' of kernel 'shifted' changes nothing.*\[64, 128\]") as w:
        k.tune(dict(args=args, grid=1, lanes=lambda c: 64 * c["WARPS"]), cache=False, progress=False)
    assert len(w) == 1  # WARPS changes the launch: it is used, though the body never reads it
    assert AT.unused_parameters(k.variants(), dict(args=args, grid=1, lanes=128)) == [("BM", [64, 128]),
                                                                                       ("WARPS", [1, 2])]
    # a parameter the body reads is used; one with a single value is never flagged
    assert AT.unused_parameters(kernel.from_source(RACY_FIRST).variants(), dict(args=args, grid=1)) == []


# --- LOWER-TUNE-6, BACKEND-CACHE-1: autotune.json is checked on read, updated under a lock, and
# a winner read from it is checked again (LOWER-TUNE-4)

def _stored(tmp_path) -> dict:
    return json.loads((tmp_path / "autotune.json").read_text())


def _edit_record(tmp_path, edit):
    """Apply ``edit(record)`` (returning the new record) to the only record of autotune.json."""
    records = _stored(tmp_path)
    (key,) = records
    records[key] = edit(records[key])
    (tmp_path / "autotune.json").write_text(json.dumps(records))
    AT._MEMORY.clear()  # a later process


def _set(record, path, value):
    *where, last = path
    target = record
    for step in where:
        target = target[step]
    target[last] = value
    return record


MALFORMED = {  # each raised a raw exception before (KeyError, TypeError, AttributeError, ...)
    "no trials": lambda r: {"best": r["best"]},
    "a list": lambda r: [r["best"]],
    "a string": lambda r: "fast",
    "trials of numbers": lambda r: _set(r, ["trials"], [1, 2, 3, 4, 5, 6]),
    "a trial of lists": lambda r: _set(r, ["trials", 0], [r["trials"][0]["config"]]),
    "best a list": lambda r: _set(r, ["best"], [64, 64, 32]),
    "best outside the space": lambda r: _set(r, ["best"], {"tile": [8, 8, 8], "stages": 9}),
    "best not the fastest": lambda r: _set(r, ["best"], max((t for t in r["trials"] if t["seconds"] is not None),
                                                            key=lambda t: t["seconds"])["config"]),
    "seconds a string": lambda r: _set(r, ["trials", 0, "seconds"], "fast"),
    "seconds negative": lambda r: _set(r, ["trials", 0, "seconds"], -1.0),
    "seconds NaN": lambda r: _set(r, ["trials", 0, "seconds"], float("nan")),
    "a trial's config changed": lambda r: _set(r, ["trials", 0, "config"], {"tile": [1, 2, 3], "stages": 2}),
    "a trial missing": lambda r: _set(r, ["trials"], r["trials"][1:]),
}


@pytest.mark.parametrize("bad", list(MALFORMED))
def test_a_malformed_record_is_ignored_with_one_warning_and_rewritten(tmp_path, monkeypatch, bad):
    monkeypatch.setattr(cache, "_WARNED", set())
    graph = _abstract_matmul(2048)
    first = AT.autotune_schedule(graph, SPACE, "H100", progress=False)
    _edit_record(tmp_path, MALFORMED[bad])
    with pytest.warns(CacheWarning, match="autotune record of matmul.* is not one a sweep writes") as caught:
        again = AT.autotune_schedule(graph, SPACE, "H100", progress=False)
    assert len(caught) == 1 and not again.cached and again.best == first.best
    AT._MEMORY.clear()
    assert AT.autotune_schedule(graph, SPACE, "H100", progress=False).cached  # the record was rewritten


def _make_a_directory(path):
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("bad, why", [
    (lambda p: p.write_text("[1, 2]"), "are not a JSON object"),
    (lambda p: p.write_text("{not json"), "is not JSON"),
    (_make_a_directory, "is not a regular file"),
    (lambda p: p.chmod(0o666), "has mode 0666"),
], ids=["a list", "not JSON", "a directory", "mode 0666"])
def test_a_bad_records_file_is_ignored_with_one_warning_and_replaced(tmp_path, monkeypatch, bad, why):
    monkeypatch.setattr(cache, "_WARNED", set())
    graph = _abstract_matmul(2048)
    AT.autotune_schedule(graph, SPACE, "H100", progress=False)
    bad(tmp_path / "autotune.json")
    AT._MEMORY.clear()
    with pytest.warns(CacheWarning, match=f"autotune records .*autotune.json {why}") as caught:
        assert not AT.autotune_schedule(graph, SPACE, "H100", progress=False).cached
    assert len(caught) == 1
    file = tmp_path / "autotune.json"
    assert file.is_file() and (file.stat().st_mode & 0o777) == 0o600 and len(_stored(tmp_path)) == 1
    AT._MEMORY.clear()
    assert AT.autotune_schedule(graph, SPACE, "H100", progress=False).cached


def test_planted_links_at_the_records_file_and_at_predictable_temp_names_change_nothing(tmp_path, monkeypatch):
    """The temp file was ``autotune.json.<pid>.tmp``: a link planted there overwrote its target."""
    monkeypatch.setattr(cache, "_WARNED", set())
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file")
    for pid in range(os.getpid() - 5, os.getpid() + 6):
        (tmp_path / f"autotune.json.{pid}.tmp").symlink_to(victim)
    (tmp_path / "autotune.json").symlink_to(victim)
    with pytest.warns(CacheWarning, match="autotune.json is a symbolic link"):
        AT.autotune_schedule(_abstract_matmul(2048), SPACE, "H100", progress=False)
    assert victim.read_text() == "the user's own file"
    assert not (tmp_path / "autotune.json").is_symlink() and len(_stored(tmp_path)) == 1


@pytest.mark.parametrize("as_nobody", [False, True], ids=["same user", "another user"])
def test_a_record_planted_in_a_shared_directory_is_never_read(shared_dir, monkeypatch, as_nobody):
    from cache_attacks import write_as_nobody
    planted = json.dumps({"0" * 32: {"best": {"SHIFT": 1}, "trials": []}}).encode()
    if as_nobody:
        write_as_nobody(shared_dir / "autotune.json", planted)
    else:
        (shared_dir / "autotune.json").write_bytes(planted)
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(shared_dir))
    with pytest.raises(CacheError, match="not private"):
        AT.autotune_schedule(_abstract_matmul(2048), SPACE, "H100", progress=False)
    assert (shared_dir / "autotune.json").read_bytes() == planted  # nor written


STORES = """
import sys, time
from pathlib import Path
from tessera_ref.lowering import autotune as AT
go = Path(sys.argv[1])
(go.parent / f"ready-{sys.argv[2]}").touch()
while not go.exists():
    time.sleep(0.001)
for i in range(3):
    AT._store_disk(f"{sys.argv[2]}{i:030d}", {"best": {}, "trials": []})
"""


def test_concurrent_stores_from_several_processes_lose_nothing(tmp_path):
    import subprocess
    import sys
    go = tmp_path / "go"
    children = [subprocess.Popen([sys.executable, "-c", STORES, str(go), f"{p:02d}"]) for p in range(4)]
    while len(list(tmp_path.glob("ready-*"))) < 4 and all(c.poll() is None for c in children):
        time.sleep(0.01)  # until every child has imported the package: then they store at once
    go.touch()
    assert [c.wait(timeout=120) for c in children] == [0] * 4
    assert sorted(_stored(tmp_path)) == sorted(f"{p:02d}{i:030d}" for p in range(4) for i in range(3))


def test_a_racy_winner_planted_in_the_cache_is_checked_again_and_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_WARNED", set())
    k = kernel.from_source(RACY_FIRST)
    problem = dict(args=[np.arange(128, dtype=np.float32), np.zeros(128, np.float32)], grid=1, lanes=128)
    first = k.tune(problem, progress=False)
    assert first.best == {"SHIFT": 0}

    def crown_the_racy_one(record):  # SHIFT=1 timed as fast as SHIFT=0 and first in space order: the winner
        racy, fine = record["trials"]
        racy.update(seconds=fine["seconds"], reason=None)
        return dict(record, best={"SHIFT": 1})
    _edit_record(tmp_path, crown_the_racy_one)
    with pytest.warns(CacheWarning, match=r"names SHIFT=1 as the winner, which the checkers reject: .*race"):
        again = k.tune(problem, progress=False)
    assert again.best == {"SHIFT": 0} and not again.cached
    assert next(iter(_stored(tmp_path).values()))["best"] == {"SHIFT": 0}  # the record was rewritten
    AT._MEMORY.clear()
    assert k.tune(problem, progress=False).cached  # and the checked winner is served (after its check)
