"""``tessera-ref launch -n N [--devices-per-process K] SCRIPT [ARGS]``: one program as N processes
on this machine (DESIGN §14; docs/spec/mesh.md MESH-MP-5).

The ranks are started by the MPI runtime's ``mpiexec`` (the ``mpich`` wheel provides one) and
talk over MPI. Each rank gets torchrun's variables — ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT`` — and ``TESSERA_DEVICES_PER_PROCESS`` when given, then runs
SCRIPT as ``tessera-ref run`` would (``import tessera`` works). Only rank 0's standard output is
shown unless ``--all-output``; every rank's errors are. A rank that raises prints its error
prefixed by its rank and stops every rank (``MPI_Abort``); a rank that dies (killed) makes the
runtime stop the others at once. Either way the launcher ends with the ranks that failed, by
their exit statuses, and their errors. A rank whose peer neither answers nor dies (it took
another path through the program) gives up after ``--timeout`` seconds with an error naming
the peer. A script may also be started directly by ``mpiexec``/``srun``: the world then comes
from their variables (MESH-MP-1).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

from .script import add_traceback_option, report_error, script_problem

__all__ = ["add_parser", "run", "rank_main", "mpiexec"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``launch`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("launch", help="run a script as N processes (multi-controller SPMD over MPI)")
    p.add_argument("-n", "--nproc", type=int, required=True, help="the number of processes (ranks)")
    p.add_argument("--devices-per-process", type=int, default=None,
                   help="simulated devices each process owns (default: a mesh's devices / N)")
    p.add_argument("--all-output", action="store_true", help="show every rank's standard output, not only rank 0's")
    p.add_argument("--timeout", type=float, default=None,
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
    A blank line or a rule is held until the next line shows whether the banner starts."""
    held: list = []
    in_banner, after_banner = False, False

    def write(lines) -> None:
        for line in lines:
            out.buffer.write(line)
        out.flush()

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


def run(args: argparse.Namespace) -> int:
    """Start ``args.nproc`` ranks of ``args.file``; exit status 0, 1 when a rank failed, 2 when
    the program cannot be started."""
    problem = script_problem(args.file) or (f"-n {args.nproc}: the number of processes is at least 1"
                                            if args.nproc < 1 else None)
    if problem is None and args.devices_per_process is not None and args.devices_per_process < 1:
        problem = f"--devices-per-process {args.devices_per_process}: a process owns at least one device"
    runner = mpiexec()
    if problem is None and runner is None:
        problem = "no mpiexec found; install an MPI runtime: pip install mpi4py mpich (or tessera_ref[mpi])"
    if problem:
        print(f"tessera-ref launch: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tessera-launch-") as where:
        env = dict(os.environ, WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                   TESSERA_LAUNCH_DIR=where)
        for var in ("RANK", "LOCAL_RANK"):
            env.pop(var, None)  # each rank sets its own from the runtime's
        if args.devices_per_process is not None:
            env["TESSERA_DEVICES_PER_PROCESS"] = str(args.devices_per_process)
        if args.timeout is not None:
            env["TESSERA_COMM_TIMEOUT"] = str(args.timeout)
        flags = ["--all-output"] * args.all_output + ["--traceback"] * args.traceback
        command = [runner, "-print-all-exitcodes", "-n", str(args.nproc), sys.executable, "-c", _RANK_ENTRY, *flags,
                   args.file, *args.args]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        codes: list = []
        threads = [threading.Thread(target=_forward, args=(s, o, codes), daemon=True)
                   for s, o in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for t in threads:
            t.start()
        status = proc.wait()
        for t in threads:
            t.join()
        if status:
            print(_summary(where, codes, status), file=sys.stderr)
        return 1 if status else 0


def _summary(where: str, codes: list, status: int) -> str:
    """The ranks that failed — those that reported an error (the files they wrote in ``where``)
    and those the runtime saw end with a nonzero status (``codes``, one per rank)."""
    why = {}
    for name in os.listdir(where):
        with open(os.path.join(where, name)) as f:
            why[int(name.partition(".")[2])] = f.read().strip()
    dead = {r: c for r, c in enumerate(codes) if c != 0 and r not in why}
    lines = [f"tessera-ref launch: the program stopped (exit status {status})"]
    lines += [f"  rank {r} failed: {text}" for r, text in sorted(why.items())]
    lines += [f"  rank {r} died ({_status_text(c)}); the runtime stopped the others" for r, c in sorted(dead.items())]
    return "\n".join(lines)


def _status_text(code: int) -> str:
    names = {9: "killed, signal 9", 11: "segmentation fault, signal 11", 15: "terminated, signal 15"}
    return names.get(code, f"exit status {code}")


def rank_main(argv: list[str]) -> int:
    """One rank of ``tessera-ref launch``: torchrun's variables from the MPI runtime's, the
    script run, a failure reported with the rank and turned into ``MPI_Abort``."""
    from ..runner import run_path
    parser = argparse.ArgumentParser(prog="tessera-ref launch (rank)")
    parser.add_argument("--all-output", action="store_true")
    add_traceback_option(parser)
    parser.add_argument("file")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    os.environ["RANK"] = rank
    os.environ["LOCAL_RANK"] = os.environ.get("MPI_LOCALRANKID", rank)
    where = os.environ.get("TESSERA_LAUNCH_DIR")
    if rank != "0" and not args.all_output:
        sys.stdout = open(os.devnull, "w")
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(args.file)))  # as `python SCRIPT` does
        run_path(args.file, args.args)
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            return _abort(rank, where, exit_.code if isinstance(exit_.code, int) else 1, f"exit status {exit_.code}")
    except BaseException as error:  # any failure of the rank's program stops every rank
        print(f"[rank {rank}] ", end="", file=sys.stderr)
        report_error(error, args.traceback)
        return _abort(rank, where, 1, f"{type(error).__name__}: {getattr(error, 'what', error)}")
    return 0


def _abort(rank: str, where: str | None, status: int, why: str) -> int:
    """Tell the launcher why this rank failed, then stop every rank (``MPI_Abort``)."""
    if where:
        with open(os.path.join(where, f"failed.{rank}"), "w") as f:
            f.write(why)
    sys.stderr.flush()
    from mpi4py import MPI
    MPI.COMM_WORLD.Abort(status)
    return status


#: What each rank runs (``python -c``; its arguments follow).
_RANK_ENTRY = "import sys; from tessera_ref.cli.launch import rank_main; sys.exit(rank_main(sys.argv[1:]))"
