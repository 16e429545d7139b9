"""``tessera-ref demo``: the main job, a tensor-parallel block on a simulated GB200 NVL72."""
from __future__ import annotations

import argparse

from ..demo import main

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``demo`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("demo", help="the main job: a tensor-parallel block on a simulated 72-GPU GB200 NVL72")
    p.add_argument("--trace", metavar="OUT.json", help="write the simulated timeline as a Chrome trace")
    return p


def run(args: argparse.Namespace) -> int:
    """Run :func:`tessera_ref.demo.main` (``--trace``: also write its Chrome trace)."""
    return main(args.trace)
