"""Checkpoints of several processes (CKPT-SAVE-2, CKPT-SAVE-4, CKPT-RESTORE-1): a dp x tp tree
saved by 2 processes — each writing only the blocks it is the lowest-rank holder of — comes
back bit-identical on 1 process and on 2 processes, on the saved layouts and on another mesh,
each process reading only its own blocks' bytes."""
from __future__ import annotations

import sys

from safetensors import safe_open

from _ranks import HERE, launch, run
from checkpoint_programs import digests, tree

PROGRAM = HERE / "checkpoint_programs.py"


def _files(path) -> dict:
    out = {}
    for name in sorted(p.name for p in path.iterdir() if p.suffix == ".safetensors"):
        with safe_open(str(path / name), framework="np") as f:
            out[name] = sorted(tuple(f.get_slice(k).get_shape()) for k in f.keys())
    return out


def test_two_processes_save_and_one_or_two_restore_on_any_mesh(tmp_path):
    path = tmp_path / "ck"
    done = launch(2, PROGRAM, "save", path, timeout=120)
    assert done.returncode == 0, done.stderr
    want = digests(tree())  # the same tree built in this one process
    assert done.stdout.splitlines() == want
    # rank 0 owns dp=0 (devices 0, 1), rank 1 owns dp=1: w (replicated over dp) and the host
    # values are written by rank 0 only; v's four blocks by their owners
    files = _files(path)
    assert files["process-00001.safetensors"] == [(4, 2), (4, 2)]
    assert files["process-00000.safetensors"] == [(4, 2), (4, 2), (4, 6), (4, 6), (6,)]

    one = run([sys.executable, str(PROGRAM), "restore", str(path)])
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == [f"rank 0 read {8 * 6 * 2 + 8 * 4 * 4 + 6 * 4}"] + want

    moved = run([sys.executable, str(PROGRAM), "reshard", str(path)])
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.splitlines()[1:] == want

    both = launch(2, PROGRAM, "reshard", path, options=("--all-output",), timeout=120)
    assert both.returncode == 0, both.stderr
    lines = both.stdout.splitlines()
    # tp=4 over 2 processes, rank 0 holds tp=0,1: w's columns 0..4 of 6 (bf16, padded blocks of 2), v's rows
    # 0..4 of 8 (f32), b's elements 0..4 of 6 (f32); rank 1 the rest
    reads = [8 * 4 * 2 + 4 * 4 * 4 + 4 * 4, 8 * 2 * 2 + 4 * 4 * 4 + 2 * 4]
    assert sorted(line for line in lines if line.startswith("rank")) == [f"rank {r} read {n}" for r, n in enumerate(reads)]
    assert [line for line in lines if not line.startswith("rank")] == want
