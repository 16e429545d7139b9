"""``tessera-ref run``: a Python file in which ``import tessera`` means tessera_ref."""
from __future__ import annotations

import argparse
import sys

from ..counters import counting
from ..errors import TesseraError
from ..runner import run_path
from .script import add_traceback_option, report_error, script_problem

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``run`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("run", help="run a Python file in which `import tessera` means tessera_ref")
    add_traceback_option(p)
    p.add_argument("--counters", action="store_true",
                   help="print what ran when the file ends (compiles, launches, replays, host steps, bytes copied "
                        "to and from devices, allocations, collectives) on stderr")
    p.add_argument("file", help="the Python file to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the file (sys.argv[1:])")
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``args.file`` with ``args.args`` as its ``sys.argv[1:]``: status 0, 1 when it raised a
    Tessera error (one line; ``--traceback``: the traceback too), 2 when it cannot be run;
    ``--counters``: what ran, counted (RUNTIME-COUNT-1), on stderr at the end."""
    problem = script_problem(args.file)
    if problem:
        print(f"tessera-ref run: {problem}", file=sys.stderr)
        return 2
    with counting() as counts:
        try:
            run_path(args.file, args.args)
        except TesseraError as error:
            return report_error(error, args.traceback)
        finally:
            if args.counters:
                print(f"tessera-ref run: counters: {counts}", file=sys.stderr)
    return 0
