"""The rendezvous that shares the NCCL unique id when no MPI world exists (torchrun;
MESH-MP-7), with real processes on this machine: rank 0's bytes reach every rank whatever the
order they start in, and a rank that never comes — rank 0 or another — is an error naming the
address within the time limit, never a hang. Its faults and attacks: test_mp_rendezvous_faults."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from _ranks import REPO, environment
from tessera_ref.backends.cuda.rendezvous import address
from tessera_ref.cli.launch import _free_port
from tessera_ref.errors import BackendError

#: One rank: shares TESSERA_TEST_ID (hex) from rank 0 and prints what it got, in hex.
RANK = ("import os, sys; from tessera_ref.backends.cuda.rendezvous import share_bytes; r = int(os.environ['RANK']); "
        "mine = bytes.fromhex(os.environ['TESSERA_TEST_ID']) if r == 0 else None; "
        "sys.stdout.write(share_bytes(mine, r, int(os.environ['WORLD_SIZE']), float(os.environ['WAIT'])).hex())")


def _start(rank: int, size: int, port: int, wait: float, payload: bytes = b"") -> subprocess.Popen:
    env = environment(RANK=rank, WORLD_SIZE=size, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WAIT=wait,
                      TESSERA_TEST_ID=payload.hex(), TESSERA_JOB_TOKEN="a job's token, the same on every rank")
    return subprocess.Popen([sys.executable, "-c", RANK], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, limit: float = 60) -> tuple:
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"a rank did not finish in {limit} s: {proc.communicate()}")
    return proc.returncode, out, err


def test_rank_0s_bytes_reach_every_rank_whichever_starts_first():
    fake_id = os.urandom(128)
    port = _free_port()
    late = [_start(r, 4, port, 30) for r in (3, 1)]     # before rank 0 listens: they retry
    time.sleep(0.5)
    procs = [_start(0, 4, port, 30, fake_id)] + late + [_start(2, 4, port, 30)]
    for proc in procs:
        code, out, err = _finish(proc)
        assert code == 0, err
        assert bytes.fromhex(out) == fake_id


def test_a_missing_rank_0_is_an_error_naming_the_address_not_a_hang():
    port = _free_port()
    start = time.monotonic()
    code, out, err = _finish(_start(1, 2, port, 2))
    assert time.monotonic() - start < 30
    assert code == 1 and out == ""
    assert f"rank 1: rank 0 did not serve the NCCL unique id at MASTER_ADDR:MASTER_PORT = 127.0.0.1:{port} in 2 s" \
        in err


def test_rank_0_names_the_ranks_that_never_came():
    port = _free_port()
    code, out, err = _finish(_start(0, 3, port, 2, b"\x01" * 128))
    assert code == 1
    assert f"rank 0: rank(s) [1, 2] did not come for the NCCL unique id at 127.0.0.1:{port} in 2 s" in err


@pytest.mark.parametrize("env, want", [
    ({"MASTER_ADDR": "node7", "MASTER_PORT": "29500"}, ("node7", 29500)),
    ({"MASTER_ADDR": "node7", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True"}, ("node7", 29501)),
    ({"MASTER_ADDR": "node7", "MASTER_PORT": "29500", "TESSERA_RENDEZVOUS_PORT": "4000"}, ("node7", 4000)),
])
def test_the_address_is_masters_unless_torchruns_agent_holds_the_port(env, want):
    assert address(env) == want


@pytest.mark.parametrize("env, words", [({"MASTER_PORT": "1"}, "MASTER_ADDR not set"),
                                        ({"MASTER_ADDR": "h", "MASTER_PORT": "x"}, "MASTER_PORT='x' is not an integer"),
                                        ({"MASTER_ADDR": "h", "MASTER_PORT": "70000"}, "MASTER_PORT='70000' is out"),
                                        ({"MASTER_ADDR": "h", "MASTER_PORT": "1", "TESSERA_RENDEZVOUS_PORT": "-2"},
                                         "TESSERA_RENDEZVOUS_PORT='-2' is out of range"),
                                        ({"MASTER_ADDR": "h", "MASTER_PORT": "65535",
                                          "TORCHELASTIC_USE_AGENT_STORE": "True"}, "MASTER_PORT \\+ 1")])
def test_a_missing_or_bad_address_is_a_backend_error(env, words):
    with pytest.raises(BackendError, match=words):
        address(env)
