"""``tessera-ref launch`` (MESH-MP-5): the same output as one process, and every failure ends
with one line naming the first rank that failed and why — only that rank —, within a bounded
time, never a hang, and leaves no process behind (``_ranks.launch`` checks the process table)."""
from __future__ import annotations

import io
import re
import sys
import time

import pytest

from _ranks import HERE, PROGRAMS, launch, mpiexec, one_process, run
from tessera_ref.cli.launch import _forward

FAILURES = HERE / "failures.py"


def _line(text: str) -> int:
    """The line of failures.py that starts with ``text``."""
    return next(i for i, line in enumerate(FAILURES.read_text().splitlines(), 1) if line.startswith(text))


def named(stderr: str) -> list:
    """The launcher's ``rank R failed first: WHY`` lines, as (R, WHY)."""
    return [(int(r), why) for r, why in re.findall(r"^tessera-ref launch: rank (\d+) failed first: (.*)$", stderr, re.M)]


def test_launch_prints_what_one_process_prints():
    done = launch(4, PROGRAMS, "order", "train")
    assert done.returncode == 0, done.stderr
    assert done.stdout == one_process("order", "train")   # only rank 0's output is shown


def test_launch_sets_torchruns_variables(tmp_path):
    script = tmp_path / "env.py"
    script.write_text("import os, sys\nsys.stdout.write(' '.join(os.environ[v] for v in ('RANK', 'WORLD_SIZE', "
                      "'LOCAL_RANK', 'MASTER_ADDR', 'TESSERA_DEVICES_PER_PROCESS', 'TESSERA_JOB_TOKEN')) + '\\n')\n")
    done = launch(2, script, options=("--all-output", "--devices-per-process", "3"))
    lines = sorted(done.stdout.splitlines())   # one write a line: the ranks' lines do not mix
    assert [line.rsplit(" ", 1)[0] for line in lines] == ["0 2 0 127.0.0.1 3", "1 2 1 127.0.0.1 3"]
    tokens = {line.rsplit(" ", 1)[1] for line in lines}
    assert len(tokens) == 1 and len(tokens.pop()) == 64   # one fresh job token (32 random bytes, hex)


def test_a_killed_rank_stops_every_rank_and_is_named():
    start = time.monotonic()
    done = launch(2, FAILURES, "kill", timeout=60)
    assert time.monotonic() - start < 30
    assert done.returncode == 1
    assert named(done.stderr) == [(1, "killed by signal 9 (SIGKILL)")]
    assert "BAD TERMINATION" not in done.stdout + done.stderr and "FAQ" not in done.stdout + done.stderr


@pytest.mark.parametrize("trial", range(3))
def test_a_rank_killed_among_collectives_is_the_only_one_named(trial):
    """Rank 3 of 4 killed in the middle of a run of collectives: the runtime then kills the
    others with the same signal, and a survivor may see MPI fail a message first; the cause
    named is rank 3 alone (the guards' records, not the runtime's exit statuses)."""
    done = launch(4, FAILURES, "kill-mid", timeout=90)
    assert done.returncode == 1
    assert named(done.stderr) == [(3, "killed by signal 9 (SIGKILL)")], done.stderr


def test_the_runtimes_banner_is_left_out_and_nothing_else():
    rule = "=" * 83 + "\n"
    banner = ("\n" + rule + "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 7745 RUNNING AT vm\n"
              "=   EXIT CODE: 9\n" + rule + "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
              "This typically refers to a problem with your application.\n"
              "Please see the FAQ page for debugging suggestions\n")
    mine = "step 1\n\n" + rule + "=   a table of my own\n" + rule + "\nThis typically refers to a problem with it\n"
    stream = io.BytesIO(("loss 0.5\n" + banner + mine + "[mpiexec@vm] Exit codes: [vm] 0,9\n\n").encode())
    out, codes = io.TextIOWrapper(io.BytesIO()), []
    _forward(stream, out, codes)
    assert out.buffer.getvalue().decode() == "loss 0.5\n" + mine + "\n" and codes == [0, 9]


def test_a_raising_rank_stops_every_rank_with_its_error():
    done = launch(2, FAILURES, "raise", timeout=60)
    assert done.returncode == 1
    assert "[rank 1] error: MeshError: device 'cuda:0'" in done.stderr
    [(rank, why)] = named(done.stderr)
    assert rank == 1 and why.startswith("MeshError: device 'cuda:0'") and why.endswith(f"failures.py:{_line('        x.shard(0)')}]")
    assert "gathered" not in done.stdout


def test_a_peer_that_never_answers_is_named_after_the_timeout():
    start = time.monotonic()
    done = launch(2, FAILURES, "skip", options=("--timeout", "3"), timeout=60)
    assert time.monotonic() - start < 40
    assert done.returncode == 1
    [(rank, why)] = named(done.stderr)
    assert rank == 0 and why.startswith("PeerError: rank 0: no answer from rank(s) [1] in 3 s")


def test_a_mesh_that_does_not_match_the_world_is_a_mesh_error():
    done = launch(3, FAILURES, "none", timeout=60)
    assert done.returncode == 1
    assert "3 processes cannot each own a box of Mesh(r=4" in done.stderr and "e.g. one of [1, 2, 4]" in done.stderr


def test_mismatched_world_sizes_are_an_error():
    done = run([mpiexec(), "-n", "2", sys.executable, str(FAILURES), "none"], timeout=60, RANK=0, WORLD_SIZE=4)
    assert done.returncode != 0
    assert "mismatched world sizes" in done.stdout + done.stderr


def test_a_torchrun_start_without_mpi_stops_at_the_mesh_with_the_fix():
    """Started as torchrun starts it (its variables, no MPI runtime): the first mesh says why the
    collectives could reach no other rank and how to start the program instead (MESH-MP-7)."""
    start = time.monotonic()
    done = run([sys.executable, str(FAILURES), "none"], timeout=60, RANK=1, WORLD_SIZE=2, LOCAL_RANK=1,
               MASTER_ADDR="127.0.0.1", MASTER_PORT=29511)
    assert time.monotonic() - start < 30
    assert done.returncode == 1 and "gathered" not in done.stdout
    assert "MeshError: this process is rank 1 of 2 by torchrun-style variables" in done.stderr
    assert f"failures.py:{_line('mesh = dist.Mesh')}" in done.stderr and "tessera-ref launch -n 2 SCRIPT" in done.stderr


def test_launch_refuses_what_it_cannot_start(tmp_path):
    done = run([sys.executable, "-m", "tessera_ref", "launch", "-n", "0", str(FAILURES)])
    assert done.returncode == 2 and "the number of processes is at least 1" in done.stderr
    done = run([sys.executable, "-m", "tessera_ref", "launch", "-n", "2", str(tmp_path / "missing.py")])
    assert done.returncode == 2 and "no such file" in done.stderr
