"""The clause × backend matrix of a conformance run (Markdown, HTML or JSON; deterministic).

Below the table: each failing case with its message, and why each ``n/a``, ``unsupported``
or ``skip`` entry did not run (its cases' reasons). Each clause links to its chapter of the
spec shipped with the suite (``tessera_conformance/spec``), relative to the report's folder.
"""
from __future__ import annotations

import html
import json
import os
from collections import defaultdict
from pathlib import Path

from .clauses import HERE, load, load_not_testable

__all__ = ["Matrix", "cell", "ORDER", "SPEC"]

#: How a clause stands on a backend, worst first (``xfail``: a case marked as a known bug).
ORDER = ("fail", "xfail", "pass", "unsupported", "n/a", "skip")
#: The spec's chapters as shipped with the suite (a link to docs/spec in a clone).
SPEC = HERE / "spec"
#: How many distinct reasons an entry lists (the rest are counted).
_REASONS = 3


def cell(outcomes: list) -> str:
    """The matrix entry of one clause on one backend from its cases' outcomes: any failure
    fails it; else a case marked as a known bug makes it one; else any pass passes it; else
    the cases' reason for not running."""
    if not outcomes:
        return "no case"
    for outcome in ORDER:
        if outcome in outcomes:
            return {"fail": "FAIL", "xfail": "known bug"}.get(outcome, outcome)
    return outcomes[0]


def spec_link(chapter: str, report: Path | None) -> str:
    """The link to spec chapter ``chapter`` from a report written at ``report``: relative to
    its folder (absolute where no relative path exists)."""
    target = (SPEC / chapter).resolve()
    if report is None:
        return target.as_uri()
    try:
        return Path(os.path.relpath(target, Path(report).resolve().parent)).as_posix()
    except ValueError:  # another drive
        return target.as_uri()


class Matrix:
    """Outcomes of cases by (clause, backend), with failure messages and reasons."""

    def __init__(self, backends: list):
        self.backends = list(dict.fromkeys(backends))
        self.outcomes: dict = defaultdict(list)
        self.failures: dict = defaultdict(list)   # (clause, backend) -> [(nodeid, message)]
        self.reasons: dict = defaultdict(lambda: defaultdict(list))  # (clause, backend) -> {reason: [nodeid]}

    def add(self, clauses, backend: str, outcome: str, detail: str, nodeid: str) -> None:
        """One case's ``outcome`` on ``backend`` for each of its ``clauses``; ``detail`` is the
        failure's message or the reason it did not run."""
        for c in clauses:
            self.outcomes[(c, backend)].append(outcome)
            if outcome == "fail":
                self.failures[(c, backend)].append((nodeid, detail))
            elif outcome in ("unsupported", "n/a", "skip", "xfail"):
                self.reasons[(c, backend)][f"{outcome}: {detail}"].append(nodeid)

    def rows(self) -> list:
        """``[(clause, title, spec, [entry per backend])]`` for every clause of the spec."""
        untestable = load_not_testable()
        out = []
        for c in load():
            if c["id"] in untestable:
                entries = ["not testable"] * len(self.backends)
            else:
                entries = [cell(self.outcomes.get((c["id"], b), [])) for b in self.backends]
            out.append((c["id"], c["title"], c["spec"], entries))
        return out

    def counts(self) -> dict:
        """``{backend: {entry: number of clauses}}``."""
        counts = {b: defaultdict(int) for b in self.backends}
        for _, _, _, entries in self.rows():
            for b, e in zip(self.backends, entries):
                counts[b][e] += 1
        return {b: dict(sorted(c.items())) for b, c in counts.items()}

    def summary(self) -> str:
        return "; ".join(f"{b}: " + ", ".join(f"{n} {e}" for e, n in c.items()) for b, c in self.counts().items())

    def failing(self) -> list:
        """``[(clause, backend, nodeid, message)]`` of every failing case, sorted."""
        return sorted((c, b, nodeid, msg) for (c, b), cases in self.failures.items() for nodeid, msg in set(cases))

    def why_not_run(self) -> list:
        """``[(clause, backend, entry, [reason (cases)])]`` for each n/a, unsupported, skip or
        known-bug entry: its distinct reasons, at most three, the rest counted."""
        out = []
        for cid, _, _, entries in self.rows():
            for b, e in zip(self.backends, entries):
                if e in ("n/a", "unsupported", "skip", "known bug"):
                    reasons = sorted(self.reasons[(cid, b)].items())
                    lines = [f"{r} ({len(ids)} case{'s' * (len(ids) > 1)})" for r, ids in reasons[:_REASONS]]
                    if len(reasons) > _REASONS:
                        lines.append(f"and {len(reasons) - _REASONS} other reasons")
                    out.append((cid, b, e, lines))
        return out

    def markdown(self, path: Path | None = None) -> str:
        lines = ["# Tessera conformance: clauses × backends", "", self.summary(), "",
                 "| clause | title | " + " | ".join(self.backends) + " |",
                 "|---|---|" + "---|" * len(self.backends)]
        for cid, title, spec, entries in self.rows():
            lines.append(f"| [{cid}]({spec_link(spec, path)}) | {title} | " + " | ".join(entries) + " |")
        failing = self.failing()
        if failing:
            lines += ["", "## Failing cases", ""]
            lines += [f"- {cid} on {b}: `{nodeid}`: {_one_line(msg)}" for cid, b, nodeid, msg in failing]
        why = self.why_not_run()
        if why:
            lines += ["", "## Why not run", ""]
            lines += [f"- {cid} on {b}: " + "; ".join(_one_line(r) for r in reasons) for cid, b, _, reasons in why]
        return "\n".join(lines) + "\n"

    def html(self, path: Path | None = None) -> str:
        head = "".join(f"<th>{html.escape(b)}</th>" for b in self.backends)
        body = "".join(
            f"<tr><td><a href=\"{html.escape(spec_link(spec, path))}\">{cid}</a></td><td>{html.escape(title)}</td>"
            + "".join(f"<td class=\"{e.replace(' ', '-').replace('/', '').lower()}\">{e}</td>" for e in entries)
            + "</tr>" for cid, title, spec, entries in self.rows())
        failing = "".join(f"<li>{cid} on {html.escape(b)}: <code>{html.escape(nodeid)}</code>: "
                          f"{html.escape(_one_line(msg))}</li>" for cid, b, nodeid, msg in self.failing())
        why = "".join(f"<li>{cid} on {html.escape(b)}: {html.escape('; '.join(map(_one_line, reasons)))}</li>"
                      for cid, b, _, reasons in self.why_not_run())
        return ("<!doctype html><meta charset=\"utf-8\"><title>Tessera conformance</title>"
                "<style>td.fail{background:#f88}td.pass{background:#8e8}td{padding:0 .5em}</style>"
                f"<h1>Tessera conformance: clauses × backends</h1><p>{html.escape(self.summary())}</p>"
                f"<table><tr><th>clause</th><th>title</th>{head}</tr>{body}</table>"
                + (f"<h2>Failing cases</h2><ul>{failing}</ul>" if failing else "")
                + (f"<h2>Why not run</h2><ul>{why}</ul>" if why else "") + "\n")

    def json(self) -> str:
        """``{"counts": {backend: {entry: clauses}}, "entries": {clause: {backend: entry}},
        "failing": [[clause, backend, case, message]]}``: the matrix for programs."""
        entries = {cid: dict(zip(self.backends, row)) for cid, _, _, row in self.rows()}
        return json.dumps({"counts": self.counts(), "entries": entries,
                           "failing": [list(f) for f in self.failing()]}, indent=1) + "\n"

    def write(self, path: Path) -> None:
        """The matrix as ``.md``, ``.html`` or ``.json``, by the suffix of ``path``."""
        path = Path(path)
        suffix = path.suffix.lower()
        path.write_text(self.html(path) if suffix in (".html", ".htm") else self.json() if suffix == ".json"
                        else self.markdown(path))


def _one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line (a table cell or list item), at most ``limit`` characters."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"
