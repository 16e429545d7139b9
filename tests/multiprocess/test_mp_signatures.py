"""Collectives whose processes disagree (MESH-MP-10): each ends with a CollectiveError on every
rank naming both calls and both source lines — never wrong data with exit 0, never a hang —
over real MPI processes, under the launcher, over the thread-ranks transport and over the
``nccl`` transport's test double. Received sizes are checked on MPI. Agreeing collectives
raise nothing and move the same payload bytes (``test_mp_collectives`` and ``test_mp_demo``
check their bits: the one-process digests, the demo's SHA-256)."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from _ranks import HERE, launch, mpiexec, run
from test_mp_launch import named
from test_mp_p2p_threads import on_threads
from tessera_ref import dist
from tessera_ref.dist import signature
from tessera_ref.errors import CollectiveError
from tessera_ref.numerics import Policy, as_policy

FAILURES = HERE / "failures.py"
CASES = ("broadcast-size", "reduce-op", "gather-scatter")
MESH = dist.Mesh(("r",), range(4))


def _disagreement(text: str, rank: int) -> str:
    """Rank ``rank``'s CollectiveError about a disagreement, from a run's output."""
    found = re.findall(rf"CollectiveError: rank {rank}: processes disagree on a collective.*", text)
    assert found, text
    return found[0]


@pytest.mark.parametrize("case", CASES)
def test_mismatched_collectives_raise_on_every_rank_naming_both_calls(case):
    """Over ``mpiexec -n 2``: rank 1 calls the collective differently; both ranks raise at once
    (well within the 20 s timeout), each naming its own call, the peer's, and both lines."""
    done = run([mpiexec(), "-n", "2", sys.executable, str(FAILURES), case], timeout=60, TESSERA_COMM_TIMEOUT=20)
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "gathered" not in text   # no rank went on past the collective
    mine, theirs = _disagreement(text, 0), _disagreement(text, 1)
    for rank, error in ((0, mine), (1, theirs)):
        here, peer = error.split("; rank ")
        assert "failures.py:" in here and "failures.py:" in peer.split("Fix:")[0]
        assert f"rank {1 - rank} called" in "rank " + peer
        assert "collective #1" in here and "collective #1" in peer
    want = {"broadcast-size": ("broadcast(r root=0) of float32 local shape (2, 8)",
                               "broadcast(r root=0) of float32 local shape (2, 16)"),
            "reduce-op": ("all_reduce(r op=sum)", "all_reduce(r op=max)"),
            "gather-scatter": ("all_gather(r dim=0)", "reduce_scatter(r op=sum dim=0)")}[case]
    assert want[0] in mine.split("; rank ")[0] and want[1] in mine.split("; rank ")[1]
    assert want[1] in theirs.split("; rank ")[0] and want[0] in theirs.split("; rank ")[1]


def test_with_four_processes_every_rank_raises_naming_the_odd_one():
    """Ranks 0, 2 and 3 agree and name rank 1, whose call differs; rank 1 names rank 0."""
    done = run([mpiexec(), "-n", "4", sys.executable, str(FAILURES), "reduce-op"], timeout=90, TESSERA_COMM_TIMEOUT=20)
    text = done.stdout + done.stderr
    assert done.returncode != 0 and "gathered" not in text
    for rank in (0, 2, 3):
        assert "this rank called all_reduce(r op=sum)" in _disagreement(text, rank)
        assert "; rank 1 called all_reduce(r op=max)" in _disagreement(text, rank)
    assert "; rank 0 called all_reduce(r op=sum)" in _disagreement(text, 1)


def test_the_launcher_names_the_mismatch_as_the_first_failure():
    done = launch(2, FAILURES, "reduce-op", timeout=60, TESSERA_COMM_TIMEOUT=20)
    assert done.returncode == 1
    (rank, why), = named(done.stderr)
    assert why.startswith(f"CollectiveError: rank {rank}: processes disagree on a collective")
    assert "all_reduce(r op=sum)" in why and "all_reduce(r op=max)" in why


def test_mpi_checks_the_size_of_every_received_message():
    """Below the signatures: a message longer or shorter than its receive is a CollectiveError
    on the receiver naming the sender and both sizes (MPI truncates or leaves bytes unwritten)."""
    code = ("import numpy as np\nfrom tessera_ref.backends.p2p import world_transport\n"
            "from tessera_ref.errors import CollectiveError\nt = world_transport('mpi')\n"
            "for n in (16, 4):\n"
            "    if t.rank == 0:\n        t.exchange({1: np.zeros(n, np.uint8)}, {})\n"
            "    else:\n        try:\n            t.exchange({}, {0: ((8,), np.uint8)})\n"
            "        except CollectiveError as e:\n            print(e.what, flush=True)\n")
    done = run([mpiexec(), "-n", "2", sys.executable, "-c", code], timeout=60, TESSERA_COMM_TIMEOUT=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"rank 1: rank 0 sent {what} where this rank expected 8 bytes, in a message outside any collective — the "
        f"processes are not running the same collective" for what in ("more bytes", "4 bytes")]


# -- the same protocol over ranks that are threads (the NCCL double's: test_mp_nccl_double) ----------

def _pending(comm, n=4):
    """This rank's contributions to a reduction over ``r``: stacked values of its 2 devices."""
    return np.arange(2 * n, dtype=np.float32).reshape(2, n) + comm.transport.rank


def calls(kind: str):
    """``work(comm, rank)`` of a collective that rank 1 calls differently from rank 0, on
    :data:`MESH` over 2 processes; it returns the CollectiveError raised (else the result)."""
    f32 = as_policy("f32")

    def work(comm, rank):
        odd = rank == 1
        try:
            if kind == "size":
                return comm.broadcast(np.zeros((2, 16 if odd else 8), np.float32), "r", 0)
            if kind == "op":
                return comm.reduce(_pending(comm), ("r",), "max" if odd else "sum", f32)
            if kind == "policy":   # the same storage, another accum format: another fold
                return comm.reduce(_pending(comm), ("r",), "sum", Policy("bf16", accum="bf16" if odd else "f32"))
            if kind == "kind":
                return (comm.reduce_scatter(_pending(comm), "r", 0, "sum", f32) if odd
                        else comm.all_gather(_pending(comm), "r", 0))
            if kind == "avg":      # one fold, but one rank divides: told apart by the user's op
                with signature.calling("all_reduce", "avg" if odd else "sum"):
                    return comm.reduce(_pending(comm), ("r",), "sum", f32)
            if kind == "skipped":  # rank 1 leaves a collective out: the next one is another's
                if not odd:
                    comm.all_gather(_pending(comm), "r", 0)
                return comm.broadcast(_pending(comm), "r", 0)
        except CollectiveError as exc:
            return exc

    return work


KINDS = ("size", "op", "policy", "kind", "avg", "skipped")


@pytest.mark.parametrize("kind", KINDS)
def test_thread_ranks_that_disagree_all_raise(kind):
    for got in on_threads(2, MESH, lambda comm: calls(kind)(comm, comm.transport.rank)):
        assert isinstance(got, CollectiveError), got
        assert "processes disagree on a collective" in got.what


def test_the_skipped_collective_names_the_call_each_rank_is_at():
    rank0, rank1 = on_threads(2, MESH, lambda comm: calls("skipped")(comm, comm.transport.rank))
    assert "this rank called all_gather(r dim=0)" in rank0.what and "rank 1 called broadcast(r root=0)" in rank0.what
    assert "this rank called broadcast(r root=0)" in rank1.what and "rank 0 called all_gather(r dim=0)" in rank1.what


def test_agreeing_collectives_count_their_signatures_apart_from_the_payload():
    """Matching calls raise nothing; ``bytes_sent`` stays the payload's (the ring bound the
    collectives tests assert) and the signatures are counted on their own, one per peer."""
    f32 = as_policy("f32")

    def work(comm, rank):
        out = comm.reduce(_pending(comm, n=1000), ("r",), "sum", f32)
        t = comm.transport
        return out, t.bytes_sent, t.signature_bytes, t.collectives

    results = on_threads(2, MESH, lambda comm: work(comm, comm.transport.rank))
    assert np.array_equal(results[0][0], results[1][0])
    ring = (2 * 4000 + 4000) // 2   # (p-1)/p of the 2 devices' contributions, then of the folded result
    for _, sent, signatures, count in results:
        assert (sent, signatures, count) == (ring, signature.SIGNATURE_BYTES, 1)


def test_a_signature_keeps_the_end_of_a_long_line_and_a_long_detail_as_its_digest():
    sig = signature.Signature("permute", "", "float32", (2, 8), ("r",), (0, 1),
                                   "pairs=" + str([(i, i + 1) for i in range(200)]), 7, "/x" * 400 + "/prog.py:12")
    back = signature.Signature.decode(sig.encode())
    assert back.location.endswith("/prog.py:12") and back.detail.startswith("sha256:") and back.seq == 7
    assert signature.Signature.decode(np.zeros(512, np.uint8)) is None

