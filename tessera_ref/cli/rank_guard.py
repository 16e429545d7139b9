"""The guard of one rank of ``tessera-ref launch`` (docs/spec/mesh.md MESH-MP-5). The MPI
runtime starts the guard; the guard starts the rank's program as its child and stays beside it:

- it sets the child's ``RANK`` and ``LOCAL_RANK`` from the runtime's variables (MPICH's
  ``PMI_RANK``/``MPI_LOCALRANKID``, Open MPI's ``OMPI_COMM_WORLD_RANK``/``…_LOCAL_RANK``);
- it records its own and the child's process ids (``rank.R`` in the launch folder), so that the
  launcher can pass signals on and stop what is left;
- it passes every signal it is sent of :data:`PASSED` on to the child;
- when the launcher is gone (ended, or killed — with SIGKILL too) it kills the child and
  removes the launch folder; and the child dies with the guard (``PR_SET_PDEATHSIG``), so the runtime's SIGKILL of the guard stops
  it as well;
- when the child ends by itself with a nonzero status, it records when and how (``ended.R``),
  then ends the same way.

The records are the launcher's evidence of which rank failed first: the runtime's own list of
exit statuses cannot tell a rank killed by a signal from the ranks the runtime then killed.
Watching the launcher and dying with the parent are Linux's (``pidfd_open``, ``prctl``); elsewhere
the guard only passes signals on and records.

The guard imports only the standard library and runs by path (``python -I rank_guard.py``):
importing ``tessera_ref`` would start MPI (:mod:`tessera_ref.backends.mpi`) in this process.
Usage: ``rank_guard.py LAUNCHER_PID LAUNCHER_START FOLDER -- COMMAND …``.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

__all__ = ["PASSED", "die_with", "start_time", "write_record", "read_records", "main"]

#: The signals a guard passes on to its rank.
PASSED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

_PR_SET_PDEATHSIG = 1


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    return ctypes.CDLL(None, use_errno=True).prctl


_PRCTL = _prctl()


def die_with(parent: int, signum: int = signal.SIGKILL):
    """A ``preexec_fn``: the child is sent ``signum`` when ``parent`` (the process starting it)
    ends — on Linux; it ends at once if ``parent`` has ended already."""
    def arm() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signum)
            if os.getppid() != parent:
                os._exit(1)
    return arm


def start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from Linux's ``/proc``), or ``""``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def write_record(folder: str, name: str, record: dict) -> None:
    """``record`` as JSON in ``folder/name``, whole or not at all (written aside, then renamed)."""
    part = os.path.join(folder, f".{name}.{os.getpid()}")
    with open(part, "w") as f:
        json.dump(record, f)
    os.replace(part, os.path.join(folder, name))


def read_records(folder: str) -> dict:
    """``{name: record}`` of every whole record in ``folder``."""
    out = {}
    for name in os.listdir(folder):
        if not name.startswith("."):
            try:
                with open(os.path.join(folder, name)) as f:
                    out[name] = json.load(f)
            except (OSError, ValueError):
                continue
    return out


def _launcher_fd(pid: int, start: str):
    """A pidfd of the launcher (readable once it ends); None where there are no pidfds. Raises
    ProcessLookupError when it is gone already (its pid free, or reused by a later process)."""
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except OSError:   # a kernel without pidfds
        return None
    if start and start_time(pid) != start:
        os.close(fd)
        raise ProcessLookupError(pid)
    return fd


def main(argv: list[str]) -> int:
    launcher, start, folder = int(argv[0]), argv[1], argv[2]
    command = argv[argv.index("--") + 1:]
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    local = os.environ.get("MPI_LOCALRANKID") or os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK") or rank
    try:
        watch = _launcher_fd(launcher, start)
    except ProcessLookupError:   # the launcher is gone: nobody waits for this rank
        shutil.rmtree(folder, ignore_errors=True)
        return 1
    me = os.getpid()
    child = subprocess.Popen(command, env=dict(os.environ, RANK=rank, LOCAL_RANK=local), close_fds=False,
                             preexec_fn=die_with(me))   # close_fds=False: the runtime's PMI_FD stays open
    ended = None if watch is None else os.pidfd_open(child.pid)   # before a signal's poll() can reap it
    passed = []

    def pass_on(signum, _frame) -> None:
        passed.append(signum)
        child.send_signal(signum)

    for s in PASSED:
        signal.signal(s, pass_on)
    write_record(folder, f"rank.{rank}", {"guard": me, "pid": child.pid})
    orphaned = False
    if watch is not None:
        select.select([ended, watch], [], [])
        # a signal passed on may be the runtime's answer to the launcher's end (mpiexec dies with
        # it), come before the launcher's pidfd says so: then wait a little for that
        orphaned = bool(select.select([watch], [], [], 0.5 if passed else 0)[0])
    if orphaned:   # the launcher is gone: nobody waits for this rank, and nobody reads a record
        child.kill()
        shutil.rmtree(folder, ignore_errors=True)   # the launcher's, which it cannot remove now
    status = child.wait()
    if status and not orphaned:
        write_record(folder, f"ended.{rank}", {"t": time.monotonic_ns(), "status": status})
    if status < 0:   # end as the child did
        if -status in PASSED:
            signal.signal(-status, signal.SIG_DFL)
        os.kill(me, -status)
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
