"""``tessera-ref backends``: the executors a program can run on (BACKEND-REG-1)."""
from __future__ import annotations

import argparse
import json

from ..backends import describe
from ..backends.registry import DEFAULT

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``backends`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("backends", help="list the backends: built-in ones and those installed packages register")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    """Print one line per backend: its name, where it comes from and what it is."""
    rows = [{"name": name, "origin": origin, "description": text, "default": name == DEFAULT}
            for name, origin, text in describe()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows) + 2
    for r in rows:
        mark = " (default)" if r["default"] else ""
        print(f"{r['name']:<{width}}{r['description']}{mark}\n{'':<{width}}from {r['origin']}")
    return 0
