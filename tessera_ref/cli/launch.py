"""``tessera-ref launch -n N [--devices-per-process K] SCRIPT [ARGS]``: one program as N processes
on this machine (DESIGN §14, §19; docs/spec/mesh.md MESH-MP-5).

The ranks are started by the MPI runtime's ``mpiexec`` (the ``mpich`` wheel provides one) and
talk over MPI; each runs under a guard (:mod:`tessera_ref.cli.rank_guard`). Each rank gets
torchrun's variables — ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT`` —, the job's fresh ``TESSERA_JOB_TOKEN`` and ``TESSERA_DEVICES_PER_PROCESS``
when given, then runs SCRIPT as ``tessera-ref run`` would (``import tessera`` works). Only rank
0's standard output is shown unless ``--all-output``; every rank's errors are. A rank that
raises prints its error prefixed by its rank and stops every rank (``MPI_Abort``); a rank that
dies (killed) makes the runtime stop the others at once. Either way the launcher ends with one
line naming the first rank that failed and why (:func:`first_failure`). A rank whose peer
neither answers nor dies (it took another path through the program) gives up after
``--timeout`` seconds with an error naming the peer. SIGINT, SIGTERM and SIGHUP are passed on
to the ranks; what still runs :data:`GRACE` seconds later is killed; a launcher killed outright
(SIGKILL) takes ``mpiexec`` and the ranks with it (Linux). A script may also be started directly
by ``mpiexec``/``srun``: the world then comes from their variables (MESH-MP-1).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from . import rank_guard
from .script import add_traceback_option, report_error, script_problem

__all__ = ["add_parser", "run", "rank_main", "mpiexec", "first_failure", "GRACE"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``launch`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("launch", help="run a script as N processes (multi-controller SPMD over MPI)")
    p.add_argument("-n", "--nproc", type=int, required=True, help="the number of processes (ranks)")
    p.add_argument("--devices-per-process", type=int, default=None,
                   help="simulated devices each process owns (default: a mesh's devices / N)")
    p.add_argument("--all-output", action="store_true", help="show every rank's standard output, not only rank 0's")
    p.add_argument("--timeout", default=None,
                   help="seconds a rank waits for a peer's message before it gives up (TESSERA_COMM_TIMEOUT; "
                        "default 120)")
    add_traceback_option(p)
    p.add_argument("file", help="the Python file every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the file (sys.argv[1:])")
    return p


def mpiexec() -> str | None:
    """The ``mpiexec`` beside this Python (the mpich wheel's), else the one on PATH, or None."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Hydra's banner about a rank that died: a blank line, a rule, lines starting "=   " (the first
#: "=   BAD TERMINATION"), a rule, then three lines of advice. The launcher's summary replaces it.
_BANNER_START = b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
_BANNER_ADVICE = (b"YOUR APPLICATION TERMINATED WITH THE EXIT STRING:", b"This typically refers to a problem with",
                  b"Please see the FAQ page for debugging suggestions")


def _is_rule(line: bytes) -> bool:
    return len(line.strip()) > 20 and not line.strip().strip(b"=")


def _forward(stream, out, codes: list) -> None:
    """Copy ``stream`` to ``out`` line by line, keeping the runtime's line of exit statuses
    (``[mpiexec@host] Exit codes: [host] 0,9,0``) in ``codes`` instead and leaving out Hydra's
    banner about a bad termination (:data:`_BANNER_START`); everything else passes unchanged.
    A blank line or a rule is held until the next line shows whether the banner starts. When
    ``out`` can no longer be written, ``stream`` is still read to its end."""
    held: list = []
    in_banner, after_banner, closed = False, False, False

    def write(lines) -> None:
        nonlocal closed
        try:
            if not closed:
                for line in lines:
                    out.buffer.write(line)
                out.flush()
        except OSError:   # the launcher's output is gone (a closed terminal): keep draining the ranks'
            closed = True

    for line in iter(stream.readline, b""):
        found = re.fullmatch(rb"\[mpiexec@[^]]*\] Exit codes: \[[^]]*\] ([0-9,]+)\s*", line)
        if found:
            codes.extend(int(c) for c in found.group(1).split(b","))
            continue
        if in_banner:
            in_banner = not _is_rule(line)
            after_banner = not in_banner
            continue
        if line.startswith(_BANNER_START) and held and _is_rule(held[-1]):
            held, in_banner = [], True
            continue
        if after_banner and line.startswith(_BANNER_ADVICE):
            continue
        after_banner = False
        if not line.strip() or _is_rule(line):
            held.append(line)
            continue
        write(held + [line])
        held = []
    write(held)


def _setting_problem(args: argparse.Namespace) -> str | None:
    """Why ``--timeout`` or ``TESSERA_COMM_TIMEOUT`` cannot be used (MESH-MP-8), or None."""
    from ..errors import TesseraError
    from ..settings import comm_timeout, seconds
    try:
        if args.timeout is not None:
            seconds("--timeout", args.timeout)
        else:
            comm_timeout()
    except TesseraError as error:
        return f"{error.what}. Fix: {error.fix}"
    return None


def run(args: argparse.Namespace) -> int:
    """Start ``args.nproc`` ranks of ``args.file``; exit status 0, 1 when a rank failed, 2 when
    the program cannot be started, 128 + N when stopped by signal N."""
    problem = script_problem(args.file) or (f"-n {args.nproc}: the number of processes is at least 1"
                                            if args.nproc < 1 else None)
    if problem is None and args.devices_per_process is not None and args.devices_per_process < 1:
        problem = f"--devices-per-process {args.devices_per_process}: a process owns at least one device"
    problem = problem or _setting_problem(args)
    runner = mpiexec()
    if problem is None and runner is None:
        problem = "no mpiexec found; install an MPI runtime: pip install mpi4py mpich (or tessera_ref[mpi])"
    if problem:
        print(f"tessera-ref launch: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tessera-launch-") as where:
        env = dict(os.environ, WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                   TESSERA_LAUNCH_DIR=where, TESSERA_JOB_TOKEN=secrets.token_hex(32))
        for var in ("RANK", "LOCAL_RANK"):
            env.pop(var, None)  # each rank's guard sets its own from the runtime's
        if args.devices_per_process is not None:
            env["TESSERA_DEVICES_PER_PROCESS"] = str(args.devices_per_process)
        if args.timeout is not None:
            env["TESSERA_COMM_TIMEOUT"] = args.timeout
        me = os.getpid()
        guard = [sys.executable, "-I", rank_guard.__file__, str(me), rank_guard.start_time(me), where, "--"]
        flags = ["--all-output"] * args.all_output + ["--traceback"] * args.traceback
        command = [runner, "-print-all-exitcodes", "-n", str(args.nproc), *guard, sys.executable, "-c", _RANK_ENTRY,
                   *flags, args.file, *args.args]
        stopper = _Stopper(where)   # from here on, SIGINT/SIGTERM/SIGHUP reach the ranks
        try:
            # mpiexec gets SIGTERM when the launcher dies (Linux), and ends its ranks; their guards
            # see the launcher gone first, kill their ranks and remove this folder
            proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, preexec_fn=rank_guard.die_with(me, signal.SIGTERM))
            codes: list = []
            threads = [threading.Thread(target=_forward, args=(s, o, codes), daemon=True)
                       for s, o in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
            for t in threads:
                t.start()
            status = stopper.wait(proc)
        finally:
            stopper.restore()
        for t in threads:
            t.join(GRACE)   # a rank left holding the pipes cannot hold the launcher
        if stopper.signal is not None:
            print(stopper.report(args.nproc), file=sys.stderr)
            return 128 + stopper.signal
        cause = first_failure(rank_guard.read_records(where))
        if status == 0 and cause is None:
            return 0
        print(_summary(cause, codes, status), file=sys.stderr)
        return 1


#: Seconds the ranks have to end after the launcher passed them a signal, before they are killed.
GRACE = 5.0


class _Stopper:
    """SIGINT and SIGTERM to the launcher are passed on to every rank's guard (which passes them
    to the rank), SIGHUP as SIGTERM (UCX, the transport of the ``mpich`` wheel, takes SIGHUP for
    its signal to start logging: ``UCX_DEBUG_SIGNO``); whatever still runs :data:`GRACE` seconds
    later, or at a second signal, is killed — ``mpiexec``, the guards and the ranks. The guards
    and ranks are found in ``/proc`` (Linux); elsewhere only ``mpiexec`` is killed."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, where: str):
        self.where, self.signal, self.deadline, self.passed, self.killed = where, None, None, set(), False
        self.saved = {s: signal.signal(s, self._received) for s in self.SIGNALS}

    def _received(self, signum, _frame) -> None:
        if self.signal is None:
            self.signal, self.deadline = signum, time.monotonic() + GRACE
        else:
            self.deadline = 0.0

    def restore(self) -> None:
        for s, handler in self.saved.items():
            signal.signal(s, handler)

    def wait(self, proc: subprocess.Popen) -> int:
        """``proc``'s exit status, once it ends (stopped as the class docstring says)."""
        while True:
            try:
                return proc.wait(timeout=0.05 if self.signal is not None else 0.5)
            except subprocess.TimeoutExpired:
                pass
            if self.signal is not None and not self.killed:
                late = time.monotonic() >= self.deadline
                for rank, pids in self._ranks().items():
                    if late:
                        for pid in pids:
                            self._kill(pid, signal.SIGKILL)
                    elif rank not in self.passed:
                        self.passed.add(rank)
                        self._kill(pids[0], signal.SIGTERM if self.signal == signal.SIGHUP else self.signal)
                if late:
                    proc.kill()
                    self.killed = True

    def _ranks(self) -> dict:
        """``{rank: (guard pid, rank pid)}`` of the guards that have started their rank."""
        return {name.partition(".")[2]: (r["guard"], r["pid"])
                for name, r in rank_guard.read_records(self.where).items() if name.startswith("rank.")}

    def _kill(self, pid: int, signum: int) -> None:
        """Send ``signum`` to ``pid`` if it is still a process of this launch (its environment
        names this launch's folder: a process id can be reused once its process is gone)."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"TESSERA_LAUNCH_DIR={self.where}".encode() + b"\0" not in f.read():
                    return
            os.kill(pid, signum)
        except OSError:
            return

    def report(self, nproc: int) -> str:
        name = signal.Signals(self.signal).name
        end = (f"what was still running {GRACE:g} s later (or at a second signal) was killed" if self.killed
               else "they ended")
        return f"tessera-ref launch: stopped by {name}: passed on to {len(self.passed)} of {nproc} rank(s); {end}"


def first_failure(records: dict):
    """``(rank, why)`` of the first rank to fail, from the launch folder's ``records``
    (:func:`rank_guard.read_records`): ``failed.R`` (the rank's own report of its error, with
    ``peer`` true for a :class:`~tessera_ref.errors.PeerError` — it blames another rank) and
    ``ended.R`` (its guard's report of a nonzero end). A rank that failed on its own is the cause
    before any rank that blamed a peer; among those, the earliest. None when no rank failed."""
    failed = {}
    for name, record in records.items():
        kind, _, rank = name.partition(".")
        if kind not in ("failed", "ended"):
            continue
        t, why, peer = failed.get(rank, (record["t"], None, False))
        if kind == "failed":
            why, peer = record["why"], record["peer"]
        else:
            why = why or _status_text(record["status"])
        failed[rank] = (min(t, record["t"]), why, peer)
    if not failed:
        return None
    own = {r: f for r, f in failed.items() if not f[2]} or failed
    rank = min(own, key=lambda r: own[r][0])
    return int(rank), own[rank][1]


def _summary(cause, codes: list, status: int) -> str:
    """The launcher's last line: the first rank that failed and why, or, when no rank said, the
    runtime's exit status and each rank's (``codes``, raw wait statuses, one per rank)."""
    if cause is not None:
        return f"tessera-ref launch: rank {cause[0]} failed first: {cause[1]}"
    ranks = ", ".join(_status_text(-(c & 0x7F) if c & 0x7F else c >> 8) for c in codes) or "not reported"
    return (f"tessera-ref launch: the MPI runtime ended with exit status {status} and no rank reported a failure "
            f"(the ranks' statuses: {ranks})")


def _status_text(code: int) -> str:
    """A process's end from its return code (negative: the signal that killed it)."""
    if code < 0:
        return f"killed by signal {-code} ({signal.Signals(-code).name})"
    return f"exit status {code}"


def _summary_of(error: BaseException) -> str:
    """The one-line summary of a rank's error: its type, what went wrong and where."""
    from ..errors import TesseraError
    text = error.what + (f" [at {error.location}]" if error.location else "") if isinstance(error, TesseraError) \
        else str(error)
    lines = text.strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def rank_main(argv: list[str]) -> int:
    """One rank of ``tessera-ref launch`` (its guard set ``RANK`` and ``LOCAL_RANK``): the
    script run; a failure reported with the rank and turned into ``MPI_Abort``."""
    from ..errors import PeerError
    from ..runner import run_path
    parser = argparse.ArgumentParser(prog="tessera-ref launch (rank)")
    parser.add_argument("--all-output", action="store_true")
    add_traceback_option(parser)
    parser.add_argument("file")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rank = os.environ["RANK"]
    if rank != "0" and not args.all_output:
        sys.stdout = open(os.devnull, "w")
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(args.file)))  # as `python SCRIPT` does
        run_path(args.file, args.args)
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            return _abort(rank, exit_.code if isinstance(exit_.code, int) else 1, f"exit status {exit_.code}")
    except KeyboardInterrupt:   # SIGINT, passed on by the launcher to every rank
        print(f"[rank {rank}] interrupted (SIGINT)", file=sys.stderr)
        return 128 + signal.SIGINT
    except BaseException as error:  # any failure of the rank's program stops every rank
        text = io.StringIO()
        with contextlib.redirect_stderr(text):
            report_error(error, args.traceback)
        sys.stderr.write(f"[rank {rank}] {text.getvalue()}")   # one write: another rank's lines cannot cut in
        return _abort(rank, 1, _summary_of(error), isinstance(error, PeerError))
    return 0


def _abort(rank: str, status: int, why: str, peer: bool = False) -> int:
    """Tell the launcher why this rank failed and when, then stop every rank (``MPI_Abort``)."""
    rank_guard.write_record(os.environ["TESSERA_LAUNCH_DIR"], f"failed.{rank}",
                            {"t": time.monotonic_ns(), "why": why, "peer": peer})
    sys.stderr.flush()
    from mpi4py import MPI
    MPI.COMM_WORLD.Abort(status)
    return status


#: What each rank runs (``python -c``; its arguments follow).
_RANK_ENTRY = ("import sys\ntry:\n    from tessera_ref.cli.launch import rank_main\nexcept KeyboardInterrupt:\n"
               "    sys.exit(130)  # SIGINT, passed on by the launcher while the package was loading\n"
               "sys.exit(rank_main(sys.argv[1:]))")
