"""``tessera-ref formats``: the table of number formats."""
from __future__ import annotations

import argparse
import json

from ..numerics import ALIASES, all_formats
from ..numerics.formats import Format
from ..numerics.packing import packed_nbytes

__all__ = ["add_parser", "run", "format_rows"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``formats`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("formats", help="print the table of number formats")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    return p


def _layout(fmt: Format) -> str:
    """``S1.E4.M3``-style field widths; two's complement for integers."""
    if fmt.is_int:
        return f"int{fmt.bits} (two's complement)"
    fields = [f"E{fmt.exp_bits}", f"M{fmt.man_bits}"]
    return ".".join((["S1"] if fmt.signed else []) + fields)


def _num(value) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}"


def _specials(fmt: Format) -> str:
    parts = []
    if fmt.inf_code is not None:
        parts.append(f"inf=0x{fmt.inf_code:X}")
    if fmt.nan_code is not None:
        parts.append(f"NaN=0x{fmt.nan_code:X}")
    return " ".join(parts) or "none"


def format_rows() -> list[dict]:
    """One dict per registered format: the facts the ``formats`` command prints."""
    bare = {alias: name for alias, name in ALIASES.items() if alias in ("fp8", "fp6", "fp4")}
    rows = []
    for fmt in all_formats():
        rows.append({
            "name": fmt.name,
            "aka": ",".join(a for a, n in bare.items() if n == fmt.name),
            "bits": fmt.bits,
            "layout": _layout(fmt),
            "bias": fmt.bias,
            "max": fmt.max,
            "min_normal": None if fmt.is_int else fmt.min_normal,
            "min_subnormal": fmt.min_subnormal,
            "specials": _specials(fmt),
            "bytes_per_1k": packed_nbytes(1024, fmt),
            "dtype": str(fmt.dtype),
        })
    return rows


def run(args: argparse.Namespace) -> int:
    """Print the table (``--json``: as JSON)."""
    rows = format_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    headers = ["format", "aka", "bits", "layout", "bias", "max", "min normal", "min subnormal",
               "inf / NaN codes", "bytes/1024 (packed)", "storage dtype"]
    table = [[r["name"], r["aka"], str(r["bits"]), r["layout"], str(r["bias"]), _num(r["max"]),
              _num(r["min_normal"]), _num(r["min_subnormal"]), r["specials"], str(r["bytes_per_1k"]),
              r["dtype"]] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    print("\nRounding: rne (default), rtz, rup, rdown, stochastic. Overflow: native (default), saturate.")
    print("Spec: docs/spec/numerics.md (clauses NUM-FMT-*, NUM-CVT-*).")
    return 0
