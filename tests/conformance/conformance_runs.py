"""Running ``tessera-ref conformance`` from the tests, and what its runs are compared with."""
import json
import os
import subprocess
import sys
from pathlib import Path

from tessera_conformance.summary import rows_of

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "conformance.md"


def conformance(*args, cwd, pythonpath=None) -> subprocess.CompletedProcess:
    """``tessera-ref conformance ARGS`` in ``cwd`` (with ``pythonpath`` prepended)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath)] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-m", "tessera_ref", "conformance", *args], capture_output=True,
                          text=True, cwd=cwd, env=env)


def matrix(path) -> dict:
    """The JSON matrix a run wrote (``--report FILE.json``)."""
    return json.loads(Path(path).read_text())


def documented(backend: str) -> dict:
    """The clause counts docs/conformance.md's summary gives ``backend``."""
    return rows_of(DOC.read_text()).get(backend, {})


def assert_documented(report: dict, backend: str) -> None:
    """``backend``'s clause counts in a run equal docs/conformance.md's (written by a run)."""
    got = {e: n for e, n in report["counts"][backend].items() if n}
    assert got == documented(backend), (
        f"docs/conformance.md's summary of {backend} is not this run's {got}: run "
        f"python -m tessera_conformance.summary docs/conformance.md --backend {backend}")
