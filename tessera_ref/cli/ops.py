"""``tessera-ref ops``: the primitive registry, every Graph IR op and its rules."""
from __future__ import annotations

import argparse

from ..ops import NOT_DIFFERENTIABLE, PRIMITIVES, RULES

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``ops`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("ops", help="print the primitive registry: every Graph IR op and its rules")
    p.add_argument("--missing", action="store_true", help="list only the ops with an empty rule slot")
    return p


def run(args: argparse.Namespace) -> int:
    """Print one row per op (``--missing``: only those with an empty rule slot)."""
    headers = ["op", "spec", *RULES]
    rows = []
    for name, prim in sorted(PRIMITIVES.items()):
        if args.missing and not prim.missing():
            continue
        marks = ["-" if getattr(prim, r) is None else "n/a" if getattr(prim, r) is NOT_DIFFERENTIABLE
                 else prim.kernel_family.name if r == "kernel_family" else "yes" for r in RULES]
        rows.append([name, prim.spec, *marks])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    empty = {r: sum(1 for p in PRIMITIVES.values() if r in p.missing()) for r in RULES}
    empty = ", ".join(f"{r} of {n} ops" for r, n in empty.items() if n) or "none"
    print(f"\n{len(PRIMITIVES)} ops. Empty rule slots ('-'): {empty}. n/a: not differentiable; "
          "kernel_family '-': no tile lowering (the op runs at the Graph level). Spec: docs/spec/graph_ir.md.")
    return 0
