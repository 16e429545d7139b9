"""CUDA-CHECK-1 … 7 without a GPU: `tessera-ref gpu-check --dry-run` against the CuPy stand-in
whose device is the CUDA-on-CPU harness, the driver's isolation and time bounds on processes
that fault, hang or lie, the report's schema, and the stand-in's own faithfulness."""
import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from cuda_programs import needs_toolchain
from tessera_ref.errors import UsageError
from tessera_ref.backends.cuda.fake_cupy import FakeCudaError, FakeCupy
from tessera_ref.gpucheck import report, runner, sanitize
from tessera_ref.gpucheck.device import compare_bits, hexbits
from tessera_ref.gpucheck.stages import STAGES, Stage

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(tmp_path, *flags):
    done = subprocess.run([sys.executable, "-m", "tessera_ref", "gpu-check", "--dry-run", "--out", str(tmp_path),
                           "--jobs", "2", *flags], capture_output=True, text=True, cwd=ROOT, timeout=1800)
    (path,) = tmp_path.glob("gpu-*.json")
    return done, report.validate(json.loads(path.read_text())), path


@needs_toolchain
def test_the_quick_dry_run_runs_every_stage_and_writes_a_valid_report(tmp_path):
    done, rep, path = _dry_run(tmp_path, "--quick")
    lines = done.stdout.splitlines()
    assert [ln.split()[0] for ln in lines[:len(STAGES)]] == [s.name for s in STAGES], done.stdout
    assert (rep["mode"], rep["dry_run"], rep["complete"]) == ("quick", True, True)
    statuses = {st["name"]: st["status"] for st in rep["stages"]}
    assert statuses["sanitizers"] == "skipped" and statuses["nccl"] == "skipped"  # not in --quick; no NCCL
    assert all(statuses[s] == "pass" for s in ("environment", "bits", "numerics", "tc", "speed")), done.stdout
    assert done.returncode == 0 and lines[-1].startswith("pass: ")
    env = rep["environment"]
    assert env["device"] == FakeCupy.DEVICE_NAME and env["toolchain"] in ("pinned", "cuda13-wheels", "toolkit")
    md = (tmp_path / path.name.replace(".json", ".md")).read_text()
    assert all(f"| {s.name} |" in md for s in STAGES) and "dry run" in md
    with np.load(tmp_path / rep["files"][2]) as cases:  # the tensor-core cases, in tests/cuda/data's format
        assert {k.rsplit("_", 1)[1] for k in cases.files} == {"a", "b", "c", "d"} and len(cases.files) > 100


@needs_toolchain
@pytest.mark.slow
def test_the_full_dry_run_passes_with_the_sanitizer_stage_on_the_harness(tmp_path):
    done, rep, _ = _dry_run(tmp_path)
    sanitizers = next(st for st in rep["stages"] if st["name"] == "sanitizers")
    assert len(sanitizers["items"]) == 8 and all(it["status"] == "pass" for it in sanitizers["items"])
    assert all("skipped" in it["gpu"] for it in sanitizers["items"])
    assert rep["status"] == "pass", done.stdout


# -- the driver, on processes that answer, fault, hang or print nothing -------------------------

_PROGRAMS = {
    "ok": "print('noise'); print('{\"status\": \"pass\", \"detail\": \"fine\"}')",
    "segv": "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
    "hang": "import time; time.sleep(60)",
    "silent": "import sys; print('partial output', file=sys.stderr); sys.exit(3)",
}


def test_each_item_is_isolated_and_bounded_in_time(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "_command", lambda stage, item, *a: [sys.executable, "-c", _PROGRAMS[item]])
    stage = Stage("t", None, "test", 2.0, (30, 30), True)
    results = runner._run_items(stage, ["segv", "ok", "hang", "silent", "ok"], 30, 2, tmp_path, False, False)
    got = [(r["name"], r["status"]) for r in results]
    assert got == [("segv", "fault"), ("ok", "pass"), ("hang", "timeout"), ("silent", "fault"), ("ok", "pass")]
    assert "signal 11" in results[0]["detail"] and "exit status 3" in results[3]["detail"]
    assert "partial output" in results[3]["detail"] and "item's limit" in results[2]["detail"]
    assert results[2]["wall_seconds"] < 10


def test_a_stage_budget_stops_running_items_and_never_starts_the_rest(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "_command", lambda stage, item, *a: [sys.executable, "-c", _PROGRAMS[item]])
    stage = Stage("t", None, "test", 60.0, (3, 3), False)
    results = runner._run_items(stage, ["hang", "ok", "ok"], 3, 4, tmp_path, False, False)
    assert [r["status"] for r in results] == ["timeout", "timeout", "timeout"]
    assert "stage's 3 s ran out" in results[0]["detail"] and "not started" in results[1]["detail"]


# -- the report -------------------------------------------------------------------------------

def _minimal():
    return {"schema": report.SCHEMA, "mode": "full", "dry_run": False, "complete": True,
            "started": "2026-11-28T00:00:00+00:00",
            "seconds": 1.0, "environment": {}, "status": "pass", "files": [],
            "stages": [{"name": "bits", "status": "pass", "seconds": 1.0, "items": [{"name": "x", "status": "pass"}]}]}


@pytest.mark.parametrize("breaks", [
    lambda r: r.update(schema="other/1"), lambda r: r.pop("stages"), lambda r: r.update(mode="slow"),
    lambda r: r["stages"][0].update(status="ok"), lambda r: r["stages"][0]["items"][0].update(status="fine"),
    lambda r: r["stages"][0]["items"].append({"status": "pass"}),
])
def test_a_malformed_report_is_refused(breaks):
    assert report.validate(_minimal())
    bad = _minimal()
    breaks(bad)
    with pytest.raises(UsageError, match="not a tessera_ref.gpu-check/1 report"):
        report.validate(bad)


def test_the_summary_reads_the_speed_rows_against_the_copy_bandwidth():
    rep = _minimal()
    rep["stages"] = [{"name": "speed", "status": "pass", "seconds": 9.0, "items": [
        {"name": "copy_bandwidth", "status": "pass", "gb_s": 4000.0, "detail": "copy: 4000 GB/s"},
        {"name": "softmax_f32", "status": "pass", "unit": "GB/s", "ours_rate": 1000.0, "baseline_rate": 2000.0,
         "ratio": 2.0, "ours_ms": 1.0, "baseline": "CuPy"}]}]
    md = report.summary_markdown(rep)
    assert "| softmax_f32 | 1000.0 GB/s | 2000.0 GB/s | 2.00 | 25% | CuPy |" in md and "copy: 4000 GB/s" in md


def test_bits_are_compared_and_shown_as_the_values_bits():
    assert hexbits(np.float32(1.0)) == "0x3f800000" and hexbits(ml_dtypes.bfloat16(-2.0)) == "0xc000"
    want = np.array([[1.0, 2.0], [3.0, np.nan]], np.float32)
    got = want.copy()
    got[1, 0] = np.nextafter(np.float32(3.0), np.float32(4.0))
    r = compare_bits(got, want, [np.full((2, 2), 7.0, np.float32)])
    assert (r["status"], r["differing"], r["first_index"]) == ("differ", 1, [1, 0])
    assert (r["device"], r["reference"], r["inputs"]) == ("0x40400001", "0x40400000", {"input0": "0x40e00000"})
    assert compare_bits(want, want.copy())["status"] == "pass"  # the same NaN bits are equal bits


# -- the planted bugs and the stand-in ----------------------------------------------------------

@pytest.mark.parametrize("bug", list(sanitize.BUGS))
def test_the_harness_sees_each_planted_bug_and_not_its_fix(bug):
    _, planted, fixed, grid = sanitize.BUGS[bug]
    assert sanitize._cpu_verdict(bug, planted, grid) != "clean"
    assert sanitize._cpu_verdict(bug, fixed, grid) == "clean"


COUNT = r"""
extern "C" __global__ void bump(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] + 1.0f;
}
"""


@needs_toolchain
def test_the_double_is_cupy_where_the_check_relies_on_it(tmp_path):
    cp = FakeCupy()
    with pytest.raises(ValueError, match="Unsupported dtype float8_e5m2"):
        cp.asarray(np.zeros(4, ml_dtypes.float8_e5m2))
    path = tmp_path / "k.cubin"
    path.write_bytes(cp.build(COUNT, "sm_90").cubin)
    fn = cp.RawModule(path=str(path)).get_function("bump")
    y = cp.asarray(np.zeros(64, np.float32))
    stream = cp.cuda.Stream(non_blocking=True)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    with stream:
        stream.begin_capture()
        fn((1, 1, 1), (64, 1, 1), (y, np.int32(64)))  # on the current stream: captured, not run
        graph = stream.end_capture()
        assert np.all(y.get() == 0)
        start.record()
        graph.launch(stream)
        graph.launch(stream)
        stop.record()
    stop.synchronize()
    assert np.all(y.get() == 2) and cp.cuda.get_elapsed_time(start, stop) >= 0
    assert not np.any(cp.empty(8, dtype=np.float32).get() == 0)  # uninitialized, never zeros
    (tmp_path / "other.cubin").write_bytes(b"\x7fELF not built here")
    with pytest.raises(FakeCudaError, match="INVALID_IMAGE"):
        cp.RawModule(path=str(tmp_path / "other.cubin"))
