"""The demo as a program of several processes (MESH-MP-3, MESH-MP-6): rank 0 prints exactly what
one process prints — the block's SHA-256, its bits against one device, the backward pass and
the simulated machine's report (per-device memory, collective bytes, timeline) — apart from
the seconds each section took."""
from __future__ import annotations

import sys

import pytest

from _ranks import REPO, launch, run

DEMO_SHA = "c4f4295b1d88cb1e4431a149d38ada988bfbafeed988d9043b9f599d754d791f"


def _without_seconds(text: str) -> list:
    return [line for line in text.splitlines() if not (line.startswith("   (") and line.endswith(" s)"))]


@pytest.fixture(scope="module")
def one_process_demo() -> list:
    done = run([sys.executable, "-m", "tessera_ref", "demo"], timeout=300)
    assert done.returncode == 0, done.stderr
    return _without_seconds(done.stdout)


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_the_demo_on_n_processes_prints_what_one_process_prints(one_process_demo, n):
    done = launch(n, REPO / "examples" / "multiprocess_demo.py", timeout=300)
    assert done.returncode == 0, done.stderr
    lines = _without_seconds(done.stdout)
    assert any(DEMO_SHA in line for line in lines)
    assert any("estimated step time" in line for line in lines) and any("peak" in line for line in lines)
    assert lines == one_process_demo
