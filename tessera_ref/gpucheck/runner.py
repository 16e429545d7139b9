"""The GPU check's driver (CUDA-CHECK-1): the stages in order, each item in a process of its own
(side by side where the stage allows), every item and stage bounded in time, one line printed
per stage as it ends, and the report written at the end."""
from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .report import SCHEMA, summary_markdown, validate
from .stages import STAGES

__all__ = ["run_check", "FAILING"]

#: item statuses that fail their stage (``pass`` and ``skipped`` do not)
FAILING = ("differ", "error", "fault", "timeout")
#: how much longer the dry run's stages may take: the CUDA-on-CPU harness runs every thread as a fiber
DRY_RUN_SLOWER = 8
_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding the tessera_ref package


def _command(stage: str, item: str, out: Path, quick: bool, dry_run: bool) -> list:
    return [sys.executable, "-m", "tessera_ref.gpucheck.worker", stage, item, "--out", str(out)] + \
        ["--quick"] * quick + ["--dry-run"] * dry_run


def _result(proc, logs, item: str, timed_out: str | None) -> dict:
    out, err = (Path(f).read_text(errors="replace") for f in logs)
    for f in logs:
        os.unlink(f)
    if timed_out:
        return {"name": item, "status": "timeout", "detail": timed_out, "stderr": err[-1500:]}
    for line in reversed(out.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "status" in found:
            return {"name": item, **found}
    code = proc.returncode
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    return {"name": item, "status": "fault", "detail": f"the item's process ended ({how}) without a result: "
                                                     f"{(err.strip().splitlines() or ['no output'])[-1][:300]}",
            "stderr": err[-1500:]}


def _run_items(stage, items: list, budget: float, jobs: int, out: Path, quick: bool, dry_run: bool) -> list:
    scale = DRY_RUN_SLOWER if dry_run else 1
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    deadline = time.monotonic() + budget
    waiting, running, done = list(items), {}, {}
    width = jobs if stage.parallel else 1
    while waiting or running:
        now = time.monotonic()
        while waiting and len(running) < width and now < deadline:
            item = waiting.pop(0)
            logs = [tempfile.mkstemp(prefix="tessera-gpu-check-")[1] for _ in range(2)]
            with open(logs[0], "w") as so, open(logs[1], "w") as se:
                proc = subprocess.Popen(_command(stage.name, item, out, quick, dry_run), stdout=so, stderr=se,
                                        env=env, start_new_session=True)
            running[item] = (proc, logs, min(now + stage.item_seconds * scale, deadline), now)
        for item, (proc, logs, end, began) in list(running.items()):
            late = None
            if proc.poll() is None:
                if time.monotonic() < end:
                    continue
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                late = (f"stopped after {stage.item_seconds * scale:g} s (the item's limit)" if end < deadline
                        else f"stopped when the stage's {budget:g} s ran out")
            done[item] = {**_result(proc, logs, item, late), "wall_seconds": round(time.monotonic() - began, 1)}
            del running[item]
        if waiting and time.monotonic() >= deadline and not running:
            for item in waiting:
                done[item] = {"name": item, "status": "timeout", "detail": f"not started: the stage's {budget:g} s "
                                                                           f"ran out"}
            waiting = []
        time.sleep(0.05)
    return [done[i] for i in items]


def _merge_mma(out: Path, name: str) -> str | None:
    parts = sorted(out.glob("mma-*.npz"))
    if not parts:
        return None
    merged = {}
    for p in parts:
        with np.load(p) as data:
            merged.update({k: data[k] for k in data.files})
        p.unlink()
    np.savez_compressed(out / name, **merged)
    return name


def run_check(out, quick: bool = False, dry_run: bool = False, only=None, jobs: int | None = None,
              echo=print) -> dict:
    """Run the check (module docstring); write ``gpu-<device>-<date>.json`` and ``.md`` (and
    ``mma-<device>-<date>.npz``, the tensor-core cases) under ``out``; return the report."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = jobs or max(1, min(8, os.cpu_count() or 1))
    started, clock = datetime.datetime.now(datetime.timezone.utc), time.monotonic()
    env, arch, stages = {}, "sm_90", []
    for st in STAGES:
        if only and st.name not in only and st.name != "environment":
            continue
        budget = st.budget[1 if quick else 0] * (DRY_RUN_SLOWER if dry_run and st.budget[1 if quick else 0] else 1)
        items = st.module.items(arch, quick)
        t0 = time.monotonic()
        if budget == 0 or not items:
            results, status = [], "skipped"
            note = "not part of --quick" if quick else "nothing to run"
        else:
            results = _run_items(st, items, budget, jobs, out, quick, dry_run)
            failing = [r for r in results if r["status"] in FAILING]
            status = "fail" if failing else "pass" if any(r["status"] == "pass" for r in results) else "skipped"
            counts = {s: sum(r["status"] == s for r in results) for s in dict.fromkeys(r["status"] for r in results)}
            note = ", ".join(f"{n} {s}" for s, n in counts.items())
            if failing:
                note += f"; first: {failing[0]['name']}: {failing[0].get('detail', '')[:160]}"
        seconds = round(time.monotonic() - t0, 1)
        if st.name == "environment":
            env = dict(results[0]) if results else {}
            arch = env.get("arch", arch)
            if results and results[0]["status"] != "pass":
                stages.append({"name": st.name, "what": st.what, "status": "fail", "seconds": seconds,
                               "budget": budget, "items": results})
                echo(f"environment  fail  {seconds:6.1f} s  {results[0].get('detail', '')[:200]}")
                break  # without a device nothing else can run
            note = env.get("detail", "")
        stages.append({"name": st.name, "what": st.what, "status": status, "seconds": seconds, "budget": budget,
                       "items": results})
        echo(f"{st.name:<12} {status:<5} {seconds:6.1f} s  {note}")
        _write(out, started, clock, quick, dry_run, env, stages, final=False)
    return _write(out, started, clock, quick, dry_run, env, stages, final=True)


def _write(out: Path, started, clock, quick, dry_run, env, stages, final: bool) -> dict:
    """The report so far (after every stage, so a run cut short still leaves one); the last
    call also merges the tensor-core cases into one file."""
    stamp = started.strftime("%Y-%m-%d")
    slug = env.get("device_slug", "device")
    base = f"gpu-{slug}-{stamp}"
    files = [f"{base}.json", f"{base}.md"]
    mma = _merge_mma(out, f"mma-{slug}-{stamp}.npz") if final else None
    files += [mma] if mma else []
    report = {"schema": SCHEMA, "mode": "quick" if quick else "full", "dry_run": dry_run,
              "started": started.isoformat(timespec="seconds"), "seconds": round(time.monotonic() - clock, 1),
              "environment": {k: v for k, v in env.items() if k not in ("name", "status", "seconds")},
              "stages": stages, "status": "fail" if any(s["status"] == "fail" for s in stages) else "pass",
              "complete": final, "files": files}
    validate(report)
    (out / files[0]).write_text(json.dumps(report, indent=1) + "\n")
    (out / files[1]).write_text(summary_markdown(report))
    return report
