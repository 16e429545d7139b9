"""``tessera-ref launch`` without ranks (MESH-MP-5, MESH-MP-8): which rank is named as the
first to fail, from the records the ranks and their guards leave; the guard runs without the
package; bad settings are refused before anything starts."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tessera_ref.cli import rank_guard
from tessera_ref.cli.launch import _summary, first_failure

REPO = Path(__file__).resolve().parents[2]


def test_the_guard_imports_only_the_standard_library():
    """It runs by path with ``python -I``; importing ``tessera_ref`` would start MPI in it."""
    tree = ast.parse(Path(rank_guard.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))
    assert names - {"__future__"} <= set(sys.stdlib_module_names), names


def _failed(t, why, peer=False):
    return {"t": t, "why": why, "peer": peer}


def _ended(t, status):
    return {"t": t, "status": status}


@pytest.mark.parametrize("records, want", [
    ({}, None),
    ({"rank.0": {"guard": 1, "pid": 2}}, None),
    # rank 2 killed; rank 0 then saw MPI fail a message, before rank 2's guard wrote its record
    ({"ended.2": _ended(200, -9), "failed.0": _failed(150, "PeerError: rank 0: the MPI runtime failed", True),
      "ended.0": _ended(300, 1)}, (2, "killed by signal 9 (SIGKILL)")),
    # ranks killed by the runtime leave no record: only the first is named
    ({"ended.3": _ended(100, -9)}, (3, "killed by signal 9 (SIGKILL)")),
    # a rank's own report beats its guard's status; the earliest own failure is the cause
    ({"failed.1": _failed(100, "MeshError: x"), "ended.1": _ended(120, 1), "failed.0": _failed(90, "ValueError: y"),
      "ended.0": _ended(95, 1)}, (0, "ValueError: y")),
    # only peers blamed (a rank that neither answers nor dies): the first to give up is named
    ({"failed.1": _failed(50, "PeerError: b", True), "failed.0": _failed(40, "PeerError: a", True)},
     (0, "PeerError: a")),
    ({"ended.1": _ended(10, 3)}, (1, "exit status 3")),
])
def test_the_first_rank_to_fail_on_its_own_is_the_cause(records, want):
    assert first_failure(records) == want


def test_records_are_written_whole_and_read_back(tmp_path):
    rank_guard.write_record(str(tmp_path), "failed.3", {"t": 1, "why": "w", "peer": False})
    (tmp_path / ".ended.1.77").write_text('{"t": 2, "sta')   # a record cut short while written
    (tmp_path / "ended.2").write_text('{"t": 2, "sta')       # a malformed one
    assert rank_guard.read_records(str(tmp_path)) == {"failed.3": {"t": 1, "why": "w", "peer": False}}


def test_without_any_rank_record_the_runtimes_statuses_are_decoded():
    # Hydra's list holds raw wait statuses: 9 is signal 9, 768 is exit status 3
    assert _summary(None, [0, 9, 768], 9) == (
        "tessera-ref launch: the MPI runtime ended with exit status 9 and no rank reported a failure (the ranks' "
        "statuses: exit status 0, killed by signal 9 (SIGKILL), exit status 3)")


@pytest.mark.parametrize("option, env, words", [
    (["--timeout", "nan"], {}, "--timeout='nan' is not a finite number of seconds"),
    ([], {"TESSERA_COMM_TIMEOUT": "0.001"}, "TESSERA_COMM_TIMEOUT='0.001' is out of range: under 1 s"),
])
def test_bad_settings_are_refused_before_any_rank_starts(tmp_path, option, env, words):
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('a rank started')\n")
    done = subprocess.run([sys.executable, "-m", "tessera_ref", "launch", "-n", "2", *option, str(script)],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                                   **env))
    assert done.returncode == 2
    assert done.stderr.startswith(f"tessera-ref launch: {words}") and "Fix: set " in done.stderr
    assert "a rank started" not in done.stderr
