"""The CUDA-on-CPU harness passes the whole conformance suite (issues 16 and 33): every case
passes, or is n/a or unsupported on it with a reason — it refuses meshes, does not make the
tile interpreter's checks and refuses what its CUDA emitter does not write; none fails. The
counts are docs/conformance.md's."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tessera_conformance.summary import rows_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"


@pytest.mark.slow
def test_the_whole_suite_has_no_failures(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tessera_ref", "conformance", "--backend", "cuda-cpu", "--profile",
                          "all", "-j", "2", "--report", str(tmp_path / "m.json")], capture_output=True, text=True,
                         cwd=tmp_path)
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-3000:]
    assert out.returncode == 0 and "failed" not in summary, out.stdout[-3000:] + out.stderr[-3000:]
    counts = json.loads((tmp_path / "m.json").read_text())["counts"]["cuda-cpu"]
    assert "FAIL" not in counts and counts["pass"] > 250, counts
    assert counts == rows_of(DOC.read_text())["cuda-cpu"], \
        "docs/conformance.md's cuda-cpu row is not this run's: python -m tessera_conformance.summary " \
        "docs/conformance.md --backend cuda-cpu"
