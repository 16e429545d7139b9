"""Running programs as real processes from the tests: plain Python (one process), ``mpiexec``
and ``tessera-ref launch``, each with a time limit (a hang fails the test instead of the CI job)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parent.parent
PROGRAMS = HERE / "programs.py"


def environment(**extra) -> dict:
    """This environment with the worktree first on the path and no launcher variables of ours."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "TESSERA_DEVICES_PER_PROCESS")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "conformance"), env.get("PYTHONPATH", "")])
    env.update({k: str(v) for k, v in extra.items()})
    return env


def mpiexec() -> str:
    """The MPI runtime's launcher; the test is skipped without mpi4py and one."""
    pytest.importorskip("mpi4py")
    from tessera_ref.cli.launch import mpiexec as find
    found = find()
    if found is None:
        pytest.skip("no mpiexec (pip install mpich)")
    return found


def run(command: list, *, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    """``command`` with :func:`environment`; its output (a hang past ``timeout`` fails the test)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=environment(**env), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher, mpiexec and every rank it started
        out, err = proc.communicate()
        pytest.fail(f"{command} did not finish in {timeout} s: {out!r} {err!r}")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def one_process(*names: str, **env) -> str:
    done = run([sys.executable, str(PROGRAMS), *names], **env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ranks(n: int, *names: str, **env) -> str:
    """Rank 0's output of ``programs.py NAMES`` as ``n`` processes under ``mpiexec``."""
    done = run([mpiexec(), "-n", str(n), sys.executable, str(PROGRAMS), *names], **env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def launch(n: int, script, *args, options=(), timeout: float = 120, **env) -> subprocess.CompletedProcess:
    """``tessera-ref launch -n n [options] script args`` (the mpiexec it needs, or a skip); checks
    that it left no process behind (:func:`left_behind`)."""
    mpiexec()
    job = uuid.uuid4().hex
    done = run([sys.executable, "-m", "tessera_ref", "launch", "-n", str(n), *options, str(script), *map(str, args)],
               timeout=timeout, TESSERA_TEST_JOB=job, **env)
    assert left_behind(job) == [], done.stderr
    return done


def left_behind(job: str, within: float = 10.0) -> list:
    """The processes still running (not zombies) ``within`` seconds from now whose environment
    carries ``TESSERA_TEST_JOB=job`` — what a launcher started with it left behind: ``mpiexec``,
    its proxy, guards, ranks. Read from Linux's ``/proc`` (another user's processes are not
    readable, and not ours)."""
    mark = f"TESSERA_TEST_JOB={job}".encode() + b"\0"
    deadline = time.monotonic() + within
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if mark not in f.read():
                        continue
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rpartition(")")[2].split()[0] == "Z":
                        continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    found.append((int(pid), f.read().replace(b"\0", b" ").decode(errors="replace")[:120]))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def thread_ranks(size: int, body) -> list:
    """``body(rank)`` on ``size`` threads at once (ranks of one process); the results by rank.
    An exception in any rank fails the test; a rank still running after 60 s is left behind."""
    out, errors = [None] * size, []

    def run_rank(r):
        try:
            out[r] = body(r)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run_rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return out
