"""``tessera-ref ops``: the primitive registry, every Graph IR op and its rules."""
from __future__ import annotations

import argparse

from ..ops import NOT_DIFFERENTIABLE, PRIMITIVES, RULES
from .jsonout import add_json_option, emit

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``ops`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("ops", help="print the primitive registry: every Graph IR op and its rules")
    p.add_argument("--missing", action="store_true", help="list only the ops with an empty rule slot")
    add_json_option(p, "the registry")
    return p


def _slot(prim, rule: str):
    """A rule slot as data: None (empty), "n/a" (not differentiable), the kernel family's
    name, or True (filled)."""
    value = getattr(prim, rule)
    if value is None:
        return None
    if value is NOT_DIFFERENTIABLE:
        return "n/a"
    return value.name if rule == "kernel_family" else True


def run(args: argparse.Namespace) -> int:
    """Print one row per op (``--missing``: only those with an empty rule slot; ``--json``: as data)."""
    shown = [(name, prim) for name, prim in sorted(PRIMITIVES.items()) if not args.missing or prim.missing()]
    if args.json:
        emit("ops", {"ops": [{"name": name, "spec": prim.spec, "rules": {r: _slot(prim, r) for r in RULES}}
                             for name, prim in shown]})
        return 0
    headers = ["op", "spec", *RULES]
    rows = []
    for name, prim in shown:
        marks = ["-" if m is None else "yes" if m is True else m for m in (_slot(prim, r) for r in RULES)]
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
