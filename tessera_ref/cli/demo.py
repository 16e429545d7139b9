"""``tessera-ref demo``: the main job, a tensor-parallel block on a simulated GB200 NVL72."""
from __future__ import annotations

import argparse
import sys

from ..counters import counting
from ..demo import main
from .jsonout import add_json_option, emit, prints_to_stderr
from .script import output_problem

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``demo`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("demo", help="the main job: a tensor-parallel block on a simulated 72-GPU GB200 NVL72")
    p.add_argument("--trace", metavar="OUT.json",
                   help="also write the simulated timeline as a Chrome trace (open it in ui.perfetto.dev)")
    add_json_option(p, "the results (the output's SHA-256, the machine's numbers, the backward's communication plan, "
                       "the runtime's counters)")
    return p


def run(args: argparse.Namespace) -> int:
    """Run :func:`tessera_ref.demo.main` (``--trace``: also write its Chrome trace, checked first;
    ``--json``: its results as one JSON document, the demo's text on stderr)."""
    problem = args.trace and output_problem(args.trace)
    if problem:
        print(f"tessera-ref demo: {problem}", file=sys.stderr)
        return 2
    record: dict = {}
    with prints_to_stderr(args.json), counting() as counts:
        status = main(args.trace, record)
    record["counters"] = counts.as_dict()
    if args.json:
        emit("demo", record)
    return status
