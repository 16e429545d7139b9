"""The CUDA-on-CPU harness passes the conformance suite's kernel profile: every case passes, or
is n/a or unsupported on it with a reason; none fails (issue 16)."""
import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_kernel_profile_has_no_failures(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tessera_ref", "conformance", "--backend", "cuda-cpu", "--profile",
                          "kernel", "--report", str(tmp_path / "m.md")], capture_output=True, text=True, cwd=tmp_path)
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-3000:]
    assert out.returncode == 0 and "failed" not in summary, out.stdout[-3000:] + out.stderr[-3000:]
    assert int(re.search(r"(\d+) passed", summary).group(1)) > 250, summary
    assert "| FAIL |" not in (tmp_path / "m.md").read_text()
