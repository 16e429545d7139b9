"""Atomic saves (CKPT-ATOMIC-1): a save that fails or is killed midway leaves the previous
checkpoint as it was; saves from several threads leave one complete checkpoint."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from tessera_ref import checkpoint, dist
from tessera_ref.checkpoint import saving as save_module
from tessera_ref.errors import CheckpointError

from checkpoint_cases import S, dp_tp

REPO = Path(__file__).resolve().parents[2]


def _tree(seed: int) -> dict:
    return {"w": dist.tensor((8, 6), S(("row",), ("tp",)), dp_tp(), init="randn", seed=seed), "seed": seed}


def _seed_of(path) -> int:
    got = checkpoint.restore(path)
    assert np.array_equal(got["w"].numpy(), _tree(got["seed"])["w"].numpy())  # complete and consistent
    return got["seed"]


def test_a_save_that_fails_midway_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    checkpoint.save(tmp_path / "ck", _tree(1), step=1)

    real = save_module.write_file

    def write_then_fail(path, tensors):
        real(path, tensors)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(save_module, "write_file", write_then_fail)
    with pytest.raises(CheckpointError, match="No space left on device"):
        checkpoint.save(tmp_path / "ck", _tree(2), step=2)
    assert _seed_of(tmp_path / "ck") == 1 and checkpoint.info(tmp_path / "ck").step == 1
    assert os.listdir(tmp_path) == ["ck"]  # the temporary directory is gone


def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path):
    """The process dies (SIGKILL) after its file is written, before the rename."""
    checkpoint.save(tmp_path / "ck", _tree(1), step=1)
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO / "tests" / "checkpoint")!r})
        from tessera_ref import checkpoint
        from tessera_ref.checkpoint import saving as save_module
        from test_checkpoint_atomic import _tree
        real = save_module.write_file
        def write_then_die(path, tensors):
            real(path, tensors)
            os.kill(os.getpid(), signal.SIGKILL)
        save_module.write_file = write_then_die
        checkpoint.save({str(tmp_path / "ck")!r}, _tree(2), step=2)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "conformance")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr
    leftovers = sorted(p for p in os.listdir(tmp_path) if p != "ck")
    assert len(leftovers) == 1 and leftovers[0].startswith(".ck.tmp-")  # what the killed save left
    assert (tmp_path / leftovers[0]).stat().st_mode & 0o077 == 0  # private, unpredictable name
    assert _seed_of(tmp_path / "ck") == 1


def test_saves_from_several_threads_leave_one_complete_checkpoint(tmp_path):
    errors = []

    def save(seed):
        try:
            checkpoint.save(tmp_path / "ck", _tree(seed), step=seed)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
    threads = [threading.Thread(target=save, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _seed_of(tmp_path / "ck") in {1, 2, 3, 4} and os.listdir(tmp_path) == ["ck"]


def test_save_replaces_an_earlier_checkpoint(tmp_path):
    checkpoint.save(tmp_path / "ck", _tree(1), step=1)
    checkpoint.save(tmp_path / "ck", _tree(2), step=2)
    assert _seed_of(tmp_path / "ck") == 2 and checkpoint.info(tmp_path / "ck").step == 2
    assert os.listdir(tmp_path) == ["ck"]
