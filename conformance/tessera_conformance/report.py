"""The clause × backend matrix of a conformance run (Markdown or HTML; deterministic)."""
from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path

from .clauses import load, load_not_testable

__all__ = ["Matrix", "cell"]

#: How a clause stands on a backend, worst first (``xfail``: a case marked as a known bug).
ORDER = ("fail", "xfail", "pass", "unsupported", "n/a", "skip")


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


class Matrix:
    """Outcomes of cases by (clause, backend)."""

    def __init__(self, backends: list):
        self.backends = list(dict.fromkeys(backends))
        self.outcomes: dict = defaultdict(list)
        self.failures: dict = defaultdict(list)

    def add(self, clauses, backend: str, outcome: str, nodeid: str) -> None:
        for c in clauses:
            self.outcomes[(c, backend)].append(outcome)
            if outcome == "fail":
                self.failures[(c, backend)].append(nodeid)

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

    def summary(self) -> str:
        counts = defaultdict(lambda: defaultdict(int))
        for _, _, _, entries in self.rows():
            for b, e in zip(self.backends, entries):
                counts[b][e] += 1
        return "; ".join(f"{b}: " + ", ".join(f"{n} {e}" for e, n in sorted(counts[b].items()))
                         for b in self.backends)

    def markdown(self) -> str:
        lines = ["# Tessera conformance: clauses × backends", "", self.summary(), "",
                 "| clause | title | " + " | ".join(self.backends) + " |",
                 "|---|---|" + "---|" * len(self.backends)]
        for cid, title, spec, entries in self.rows():
            lines.append(f"| [{cid}](docs/spec/{spec}) | {title} | " + " | ".join(entries) + " |")
        failed = sorted(self.failures.items())
        if failed:
            lines += ["", "## Failing cases", ""]
            lines += [f"- {cid} on {b}: {', '.join(sorted(set(ids)))}" for (cid, b), ids in failed]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(b)}</th>" for b in self.backends)
        body = "".join(
            f"<tr><td><a href=\"docs/spec/{spec}\">{cid}</a></td><td>{html.escape(title)}</td>"
            + "".join(f"<td class=\"{e.replace(' ', '-').lower()}\">{e}</td>" for e in entries) + "</tr>"
            for cid, title, spec, entries in self.rows())
        return ("<!doctype html><meta charset=\"utf-8\"><title>Tessera conformance</title>"
                "<style>td.fail{background:#f88}td.pass{background:#8e8}td{padding:0 .5em}</style>"
                f"<h1>Tessera conformance: clauses × backends</h1><p>{html.escape(self.summary())}</p>"
                f"<table><tr><th>clause</th><th>title</th>{head}</tr>{body}</table>\n")

    def write(self, path: Path) -> None:
        path.write_text(self.html() if path.suffix.lower() in (".html", ".htm") else self.markdown())
