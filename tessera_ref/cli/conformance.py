"""``tessera-ref conformance``: run the conformance suite against backends (docs/conformance.md)."""
from __future__ import annotations

import argparse
import importlib.util
import sys

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``conformance`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("conformance", help="run the spec conformance suite against one or more backends")
    p.add_argument("--backend", action="append", metavar="NAME",
                   help="a backend to judge (repeatable; default interp); see `tessera-ref backends`")
    p.add_argument("--profile", default="all", choices=("kernel", "single-device", "mesh", "all"),
                   help="tile kernels only, single-device programs, mesh programs, or all (default)")
    p.add_argument("-k", dest="keyword", metavar="EXPR", help="only cases matching EXPR (pytest -k syntax)")
    p.add_argument("--mesh-shapes", metavar="SHAPES", help="simulated meshes for mesh cases (default 1,2x2x2,4x9x2)")
    p.add_argument("--fuzz-examples", type=int, metavar="N", help="random programs per backend (default 25)")
    p.add_argument("--junit", metavar="FILE.xml", help="write JUnit XML (each case's clauses and backend as properties)")
    p.add_argument("--report", metavar="FILE.md|.html|.json", help="write the clause x backend matrix")
    p.add_argument("--slow", action="store_true", help="include the exhaustive cases marked slow")
    p.add_argument("-j", "--jobs", metavar="N", help="run on N processes (pytest-xdist; 'auto' for every core)")
    return p


def pytest_args(args: argparse.Namespace, cases: str) -> list:
    """The pytest command line of a ``conformance`` invocation."""
    out = [cases, "-p", "no:cacheprovider", "-q", "-rfE"]
    for name in args.backend or ["interp"]:
        out += ["--backend", name]
    out += ["--profile", args.profile]
    for flag, value in (("-k", args.keyword), ("--mesh-shapes", args.mesh_shapes), ("--junitxml", args.junit),
                        ("--conformance-report", args.report), ("-n", args.jobs)):
        if value is not None:
            out += [flag, str(value)]
    if args.fuzz_examples is not None:
        out += ["--fuzz-examples", str(args.fuzz_examples)]
    if not args.slow:
        out += ["-m", "not slow"]
    return out


def run(args: argparse.Namespace) -> int:
    """Run the suite with pytest; 0 when every selected case passed, 1 otherwise."""
    missing = [m for m in ("pytest", "hypothesis", "tessera_conformance") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"tessera-ref conformance needs {', '.join(missing)}: "
              "python -m pip install 'tessera_ref[conformance]' (from a clone: pip install -e '.[conformance]')",
              file=sys.stderr)
        return 2
    if args.jobs is not None and importlib.util.find_spec("xdist") is None:
        print("--jobs needs pytest-xdist, which the conformance extra brings: python -m pip install "
              "'tessera_ref[conformance]'", file=sys.stderr)
        return 2
    import pytest
    from tessera_conformance.plugin import CASES

    status = pytest.main(pytest_args(args, str(CASES)))
    return 0 if status == 0 else 1
