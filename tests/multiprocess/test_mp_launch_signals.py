"""The launcher itself stopped (MESH-MP-5): SIGINT, SIGTERM and SIGHUP are passed on to the
ranks and the launcher ends with 128 + the signal; SIGKILL takes mpiexec and the ranks with it
(Linux: the guards watch the launcher, mpiexec dies with it). Each time the process table shows
nothing left of the launch: no mpiexec, proxy, guard or rank — nor its folder."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from _ranks import HERE, REPO, environment, left_behind, mpiexec

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process table is read from /proc")


def _started(tmp_path, *how: str) -> tuple:
    """A launch of 2 ranks that each say they are ready, then sleep (``failures.py wait``):
    the launcher's process and job marker, once both ranks are ready."""
    mpiexec()
    job = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-m", "tessera_ref", "launch", "-n", "2", str(HERE / "failures.py"),
                             "wait", str(tmp_path), *how], cwd=REPO, env=environment(TESSERA_TEST_JOB=job),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 90
    while not all((tmp_path / f"ready.{r}").exists() for r in range(2)):
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"the ranks did not start: {proc.communicate()}")
        time.sleep(0.05)
    return proc, job


def _ended(proc: subprocess.Popen, limit: float = 60) -> tuple:
    try:
        return proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the launcher did not end in {limit} s: {proc.communicate()}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_launcher_stops_every_rank_and_leaves_nothing(tmp_path, sig):
    proc, job = _started(tmp_path)
    folder = (tmp_path / "ready.0").read_text()
    proc.send_signal(sig)
    out, err = _ended(proc)
    assert proc.returncode == 128 + sig, err
    assert f"tessera-ref launch: stopped by {sig.name}: passed on to 2 of 2 rank(s); they ended" in err
    assert left_behind(job) == [] and not os.path.exists(folder)


def test_a_launcher_killed_outright_takes_mpiexec_and_the_ranks_with_it(tmp_path):
    proc, job = _started(tmp_path)
    folder = (tmp_path / "ready.0").read_text()
    assert os.path.isdir(folder)
    proc.kill()
    _ended(proc)
    assert proc.returncode == -signal.SIGKILL
    assert left_behind(job) == []
    assert not os.path.exists(folder)   # the launch's folder, removed by the guards


@pytest.mark.slow
def test_ranks_that_ignore_the_signal_are_killed_after_the_grace_period(tmp_path):
    from tessera_ref.cli.launch import GRACE
    proc, job = _started(tmp_path, "deaf")
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = _ended(proc)
    assert time.monotonic() - start >= GRACE
    assert proc.returncode == 128 + signal.SIGTERM
    assert f"what was still running {GRACE:g} s later (or at a second signal) was killed" in err
    assert left_behind(job) == []
