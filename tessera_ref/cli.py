"""The ``tessera-ref`` command."""
from __future__ import annotations

import argparse
import json
import sys

from . import __version__
from .numerics import ALIASES, all_formats
from .numerics.formats import Format
from .numerics.packing import packed_nbytes
from .sim.cli import add_sim_parser, run_sim


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


def _print_formats(as_json: bool) -> None:
    rows = format_rows()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tessera-ref",
        description="tessera_ref: the exact reference implementation of the Tessera programming model.",
    )
    parser.add_argument("--version", action="version", version=f"tessera-ref {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    formats = sub.add_parser("formats", help="print the table of number formats")
    formats.add_argument("--json", action="store_true", help="print the table as JSON")
    ops = sub.add_parser("ops", help="print the primitive registry: every Graph IR op and its rules")
    ops.add_argument("--missing", action="store_true", help="list only the ops with an empty rule slot")
    run = sub.add_parser("run", help="run a Python file in which `import tessera` means tessera_ref")
    run.add_argument("file", help="the Python file to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the file (sys.argv[1:])")
    demo = sub.add_parser("demo", help="the main job: a tensor-parallel block on a simulated 72-GPU GB200 NVL72")
    demo.add_argument("--trace", metavar="OUT.json", help="write the simulated timeline as a Chrome trace")
    add_sim_parser(sub)
    return parser


def _print_ops(missing_only: bool) -> None:
    from .ops import NOT_DIFFERENTIABLE, PRIMITIVES, RULES
    headers = ["op", "spec", *RULES]
    rows = []
    for name, prim in sorted(PRIMITIVES.items()):
        if missing_only and not prim.missing():
            continue
        marks = ["-" if getattr(prim, r) is None else "n/a" if getattr(prim, r) is NOT_DIFFERENTIABLE
                 else "yes" for r in RULES]
        rows.append([name, prim.spec, *marks])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    gaps = sum(1 for p in PRIMITIVES.values() if p.missing())
    print(f"\n{len(PRIMITIVES)} ops; {gaps} with an empty rule slot ('-'): vjp/jvp arrive with autodiff, "
          "shard with the mesh, lower with tiles. Spec: docs/spec/graph_ir.md.")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "formats":
        _print_formats(args.json)
        return 0
    if args.command == "ops":
        _print_ops(args.missing)
        return 0
    if args.command == "run":
        from .runner import run_path
        run_path(args.file, args.args)
        return 0
    if args.command == "sim":
        return run_sim(args)
    if args.command == "demo":
        from .demo import main as demo
        return demo(args.trace)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
