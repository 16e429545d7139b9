"""The normative clauses of the spec, as shipped with the suite (``clauses.json``).

``python -m tessera_conformance.clauses docs/spec`` regenerates the file from the spec's
Markdown (a clause is a bold ``**ID (title).**`` at the start of a paragraph); a test checks
that the shipped file matches the spec, so the suite and the spec never drift apart.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

__all__ = ["CLAUSE_ID", "scan", "load", "load_not_testable"]

HERE = Path(__file__).resolve().parent
#: A clause ID: a prefix, words, a number (``NUM-RED-2``, ``GRAPH-MATMUL-1``, ``NUM-CVT-2.1``, ``CUDA-CPU-4``,
#: ``RUNTIME-PROG-1``, ``OPTIM-ADAMW-1``, ``CKPT-SAVE-1``).
CLAUSE_ID = r"(?:NUM|GRAPH|MESH|SIM|AD|TILE|SCHED|LOWER|BACKEND|CUDA|RUNTIME|OPTIM|CKPT)(?:-[A-Z][A-Z0-9]*)*-\d+(?:\.\d+)?"
_DEFINITION = re.compile(rf"^\*\*({CLAUSE_ID})\s*(?:\(([^)]*)\))?", re.M)


def scan(spec_dir) -> list:
    """``[{"id", "title", "spec"}]`` of every clause defined in ``spec_dir``'s chapters, in order."""
    out = []
    for path in sorted(Path(spec_dir).glob("*.md")):
        for m in _DEFINITION.finditer(path.read_text()):
            out.append({"id": m.group(1), "title": (m.group(2) or "").strip(), "spec": path.name})
    return out


def load() -> list:
    """The shipped clause list."""
    return json.loads((HERE / "clauses.json").read_text())


def load_not_testable() -> dict:
    """``{clause: reason}``: clauses a black-box suite cannot check, each with its one-line
    reason, which names the repository tests that check it (``not_testable/<chapter>.json``)."""
    out = {}
    for path in sorted((HERE / "not_testable").glob("*.json")):
        out.update(json.loads(path.read_text()))
    return out


if __name__ == "__main__":
    spec = sys.argv[1] if len(sys.argv) > 1 else "docs/spec"
    (HERE / "clauses.json").write_text(json.dumps(scan(spec), indent=1) + "\n")
    print(f"{len(load())} clauses written to {HERE / 'clauses.json'}")
