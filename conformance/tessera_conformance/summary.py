"""The matrix summary of docs/conformance.md, written by a run, never typed.

``python -m tessera_conformance.summary docs/conformance.md`` runs ``tessera-ref conformance``
on the built-in backends (:data:`BACKENDS`; ``--backend NAME`` for some of them, ``-j N`` for
pytest-xdist), or reads the JSON matrices of runs already made (``--from FILE.json``), and
rewrites what lies between the markers :data:`BEGIN` and :data:`END`: the clause coverage
(:mod:`.coverage`'s line) and a table of, per backend, how many clauses pass, fail, are
unsupported, n/a, not testable or have no case. A row not re-run is kept. The repository's
tests compare the line with a collection and the rows with their own runs of the suite.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["BACKENDS", "COLUMNS", "BEGIN", "END", "run", "rows_of", "coverage_of", "table", "update"]

#: The backends the docs summarize, in order.
BACKENDS = ("interp", "interp-tiles", "cuda-cpu", "numpy-naive")
#: The matrix entries counted, in the table's order.
COLUMNS = ("pass", "FAIL", "known bug", "unsupported", "n/a", "skip", "not testable", "no case")
BEGIN = "<!-- matrix summary: written by python -m tessera_conformance.summary; do not edit -->"
END = "<!-- end of the matrix summary -->"


def run(backends, jobs: str | None = None) -> dict:
    """``{backend: {entry: clauses}}`` of a ``tessera-ref conformance`` run on ``backends``
    (every profile, not the slow cases)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "matrix.json"
        cmd = [sys.executable, "-m", "tessera_ref", "conformance", "--report", str(report)]
        for b in backends:
            cmd += ["--backend", b]
        if jobs:
            cmd += ["-j", str(jobs)]
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        if not report.exists():
            raise SystemExit(f"the run wrote no matrix (exit {done.returncode}):\n{done.stdout[-3000:]}"
                             f"{done.stderr[-3000:]}")
        return json.loads(report.read_text())["counts"]


def table(rows: dict) -> str:
    """The Markdown table of ``{backend: {entry: clauses}}``."""
    lines = ["| backend | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for b, counts in rows.items():
        lines.append(f"| `{b}` | " + " | ".join(str(counts.get(c, 0)) for c in COLUMNS) + " |")
    return "\n".join(lines)


def _block(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)] if BEGIN in text and END in text else ""


def coverage_of(text: str) -> str:
    """The coverage line of the summary between the markers of a document ("" without one)."""
    return next((line.strip("` ") for line in _block(text).splitlines() if "clauses have a case" in line), "")


def rows_of(text: str) -> dict:
    """``{backend: {entry: clauses}}`` of the summary between the markers of a document."""
    block = _block(text)
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(COLUMNS) + 1 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = {c: int(n) for c, n in zip(COLUMNS, cells[1:]) if int(n)}
    return rows


def update(text: str, rows: dict, coverage: str) -> str:
    """``text`` with the summary between the markers holding the ``coverage`` line and ``rows``
    (other rows kept), in :data:`BACKENDS` order."""
    merged = {**rows_of(text), **rows}
    ordered = {b: merged[b] for b in BACKENDS if b in merged}
    ordered.update({b: c for b, c in merged.items() if b not in ordered})
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + f"\n`{coverage}`\n\n" + table(ordered) + "\n" + text[end:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tessera_conformance.summary", description=__doc__.splitlines()[0])
    parser.add_argument("document", type=Path, help="the Markdown file holding the markers (docs/conformance.md)")
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="re-run only these rows (repeatable)")
    parser.add_argument("-j", "--jobs", help="pytest-xdist processes")
    parser.add_argument("--from", dest="reports", action="append", type=Path, metavar="FILE.json",
                        help="take the rows from the matrix a run wrote (tessera-ref conformance --report FILE.json)")
    args = parser.parse_args(argv)
    text = args.document.read_text()
    if BEGIN not in text or END not in text:
        print(f"{args.document} has no summary markers:\n{BEGIN}\n{END}", file=sys.stderr)
        return 2
    if args.reports:
        rows = {b: c for f in args.reports for b, c in json.loads(f.read_text())["counts"].items()}
    else:
        rows = run(args.backend or BACKENDS, args.jobs)
    from .coverage import collected_clauses, report
    coverage = report(collected_clauses())
    args.document.write_text(update(text, rows, coverage))
    print(coverage)
    print(table({b: rows[b] for b in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
