"""The ``tessera-ref`` command: one module per subcommand, each with ``add_parser(sub)`` (its
parser) and ``run(args)`` (its exit status)."""
from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from . import backends, conformance, cuda, demo, formats, gpu_check, launch, ops, run, sim

__all__ = ["main", "build_parser"]

#: The subcommands, in the order ``--help`` lists them.
COMMANDS = (formats, ops, run, demo, sim, backends, conformance, cuda, gpu_check, launch)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``tessera-ref`` with every subcommand's."""
    parser = argparse.ArgumentParser(
        prog="tessera-ref",
        description="tessera_ref: the exact reference implementation of the Tessera programming model.",
    )
    parser.add_argument("--version", action="version", version=f"tessera-ref {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(handler=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``tessera-ref`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        status = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except BrokenPipeError:  # `tessera-ref ops | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
