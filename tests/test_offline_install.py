"""The README's path for a GPU machine without a package index (issue 32, item 3): in a fresh
virtual environment holding only the core dependencies and CUDA 13's own NVRTC/header wheels —
what such machines carry — the checkout runs with ``PYTHONPATH`` alone and installs with
``pip install --no-deps --no-build-isolation``, and ``gpu-check --dry-run`` runs there with the
``cuda13-wheels`` toolchain (CUDA-COMPILE-2). The environment is made from PyPI, so the test
needs the network, as CI has; without it, it skips."""
import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what a GPU machine without an index is assumed to have (besides CuPy, which the dry run replaces)
PREINSTALLED = ["numpy", "ml_dtypes", "numba", "llvmlite", "setuptools>=77", "wheel", "nvidia-cuda-nvrtc>=13.0",
                "nvidia-cuda-runtime>=13.0", "nvidia-cuda-cuobjdump==13.5.37", "nvidia-cuda-nvdisasm==13.5.37"]


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, **kw)


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """A fresh venv with only :data:`PREINSTALLED` (no pytest, no hypothesis, no scipy, no
    tessera_ref), and a copy of the checkout's tracked files."""
    if shutil.which("g++") is None:
        pytest.skip("the dry run's device is the CUDA-on-CPU harness, which needs g++")
    base = tmp_path_factory.mktemp("offline")
    venv.create(base / "venv", with_pip=True)
    python = base / "venv" / "bin" / "python"
    done = _run([str(python), "-m", "pip", "install", "-q", *PREINSTALLED])
    if done.returncode != 0 and ("No matching distribution" in done.stderr or "connection" in done.stderr.lower()):
        pytest.skip(f"PyPI is not reachable to make the environment: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr
    files = _run(["git", "ls-files"], cwd=ROOT).stdout.split()
    tree = base / "checkout"
    for name in files:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name, follow_symlinks=False)  # spec/ links to docs/spec
    return python, tree, base


@pytest.mark.slow
def test_the_checkout_runs_in_place_with_pythonpath(machine, tmp_path):
    python, tree, _ = machine
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(tree)}
    done = _run([str(python), "-m", "tessera_ref", "gpu-check", "--dry-run", "--quick", "--stage", "bits",
                 "--out", str(tmp_path / "out"), "--jobs", "2"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "out").glob("gpu-*.json")
    rep = json.loads(path.read_text())
    assert rep["environment"]["toolchain"] == "cuda13-wheels" and rep["status"] == "pass"
    assert [s["name"] for s in rep["stages"]] == ["environment", "bits"]


@pytest.mark.slow
def test_the_checkout_installs_without_its_dependencies_or_an_index(machine, tmp_path):
    python, tree, base = machine
    env = {"PATH": f"{base / 'venv' / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "PIP_NO_INDEX": "1"}
    done = _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(tree)],
                env=env)
    assert done.returncode == 0, done.stderr
    done = _run(["tessera-ref", "gpu-check", "--dry-run", "--quick", "--stage", "nccl", "--out",
                 str(tmp_path / "out")], cwd=tmp_path, env=env)
    assert done.returncode == 0 and done.stdout.splitlines()[0].startswith("environment  pass"), done.stdout
    assert "nccl         skipped" in done.stdout  # the stand-in has no NCCL: skipped, not failed
