"""Clause coverage: which clauses the collected cases check (``python -m
tessera_conformance.coverage`` prints the count and every clause still unaccounted for)."""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

from .clauses import load, load_not_testable

__all__ = ["collected_clauses", "report"]


class _Collector:
    """A pytest plugin that records the clause marks of every collected case."""

    def __init__(self):
        self.clauses: dict = {}

    def pytest_collection_modifyitems(self, items):
        for item in items:
            for mark in item.iter_markers("clause"):
                for cid in mark.args:
                    self.clauses.setdefault(cid, set()).add(item.nodeid.split("[")[0])


def collected_clauses() -> dict:
    """``{clause: number of case functions}`` from a collection run in a fresh process."""
    out = subprocess.run([sys.executable, "-m", "tessera_conformance.coverage", "--json"], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _collect() -> dict:
    import pytest

    from .plugin import CASES
    collector = _Collector()
    with contextlib.redirect_stdout(io.StringIO()):  # the collection listing is not the output
        pytest.main([str(CASES), "--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[collector])
    return {cid: len(nodes) for cid, nodes in sorted(collector.clauses.items())}


def report(counts: dict) -> str:
    ids = [c["id"] for c in load()]
    untestable = load_not_testable()
    missing = [i for i in ids if i not in counts and i not in untestable]
    cased = sum(i in counts for i in ids)
    return (f"{cased} of {len(ids)} clauses have a case ({100 * cased / len(ids):.1f}%), {len(untestable)} are not "
            f"testable by a black-box suite (each names the tests that check it), {len(missing)} unaccounted for"
            + (f": {missing}" if missing else ""))


if __name__ == "__main__":
    counts = _collect()
    print(json.dumps(counts) if "--json" in sys.argv else report(counts))
