"""``tessera-ref run``: a Python file in which ``import tessera`` means tessera_ref."""
from __future__ import annotations

import argparse

from ..runner import run_path

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``run`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("run", help="run a Python file in which `import tessera` means tessera_ref")
    p.add_argument("file", help="the Python file to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the file (sys.argv[1:])")
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``args.file`` with ``args.args`` as its ``sys.argv[1:]``."""
    run_path(args.file, args.args)
    return 0
