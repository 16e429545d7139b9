"""benchmarks/cuda_bench.py on a machine without a GPU says so in one line and exits 0."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _gpu() -> bool:
    try:
        import cupy
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


@pytest.mark.skipif(_gpu(), reason="this machine has a GPU: the script measures")
def test_without_a_gpu_nothing_is_measured():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda_bench.py")], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no GPU: nothing measured") and done.stdout.count("\n") == 1
