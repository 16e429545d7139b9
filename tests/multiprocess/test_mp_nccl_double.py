"""The ``nccl`` transport's own code — grouping of sends and receives, its device buffers,
stream ordering and polling, the timeout and abort, the unique id's rendezvous — run on the CPU
against ``fake_nccl``, a test double of the few CuPy/NCCL calls it makes, ranks being threads.

This tests OUR USE of the API, not NCCL (the double has no algorithms and no GPU; see its
docstring): collectives over the transport give every rank its box of the one-process result —
the bits the MPI transport gives (``test_mp_collectives``) — and send the same bytes as the
queue transport. The real thing runs under the ``gpu`` marker (``test_mp_nccl``)."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from _ranks import thread_ranks
from fake_nccl import FakeCupy, FakeNccl, UsageError
from tessera_ref import op
from tessera_ref.backends.cuda.nccl import NCCLTransport
from tessera_ref.backends import p2p
from tessera_ref.backends.p2p import P2PCommunicator
from tessera_ref.cli.launch import _free_port
from tessera_ref.dist.world import World, placement
from tessera_ref.errors import BackendError, CollectiveError
from tessera_ref.numerics import ExactAccumulator, Policy, as_policy

from test_mp_p2p_threads import MESH, WHOLE, on_threads
from test_mp_signatures import KINDS, calls
from test_mp_signatures import MESH as LINE


@pytest.fixture(autouse=True)
def _torchrun(monkeypatch):
    """Ranks started as torchrun starts them: no MPI world, so the unique id goes by the rendezvous."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "LOCAL_RANK", "TORCHELASTIC_USE_AGENT_STORE",
                 "TESSERA_RENDEZVOUS_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    monkeypatch.setenv("TESSERA_COMM_TIMEOUT", "20")
    monkeypatch.setenv("TESSERA_JOB_TOKEN", "the test's job token, 16+ chars")


def on_nccl(size: int, work, mesh=MESH):
    """``work(communicator, rank)`` on ``size`` thread ranks, each over its own NCCLTransport on
    the double; the results by rank, and the double's nccl module."""
    cupy = FakeCupy(devices=8)
    nccl = FakeNccl(cupy)
    def rank(r):
        return work(P2PCommunicator(mesh, NCCLTransport(World(r, size), cupy=cupy, nccl=nccl)), r)

    out = thread_ranks(size, rank)
    return out, nccl


def _box(whole, comm):
    return np.ascontiguousarray(whole[comm.place.box_slices(whole.shape[:comm.mesh.ndim])])


def _index(rank, size, whole_axes=()):
    place = placement(MESH, World(rank, size))
    return tuple(slice(None) if i in whole_axes else slice(s, s + b) for i, (s, b) in enumerate(zip(place.start,
                                                                                                     place.box)))


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("op_name, policy", [("sum", "f32"), ("sum", Policy("bf16", accum="f32")), ("max", "f32"),
                                             ("sum", Policy("f32", reduction="exact"))])
def test_reductions_over_the_nccl_transport_are_the_one_process_bits(size, op_name, policy):
    policy = as_policy(policy) if isinstance(policy, str) else policy
    values = np.asarray(op.cast(WHOLE, policy.storage.name))
    one = P2PCommunicator(MESH)
    want_all = one.reduce(values, ("dp", "tp"), op_name, policy)
    want_rs = one.reduce_scatter(values, "tp", 1, op_name, policy)

    def work(comm, r):
        return (comm.reduce(_box(values, comm), ("dp", "tp"), op_name, policy),
                comm.reduce_scatter(_box(values, comm), "tp", 1, op_name, policy), comm.transport.bytes_sent)

    results, _ = on_nccl(size, work)
    queued = on_threads(size, MESH, lambda comm: (comm.reduce(_box(values, comm), ("dp", "tp"), op_name, policy),
                                                  comm.reduce_scatter(_box(values, comm), "tp", 1, op_name, policy),
                                                  comm.transport.bytes_sent))
    for r, (all_, rs, sent) in enumerate(results):
        np.testing.assert_array_equal(np.ascontiguousarray(all_).view(np.uint8),
                                      np.ascontiguousarray(want_all[_index(r, size, (0, 1))]).view(np.uint8))
        np.testing.assert_array_equal(np.ascontiguousarray(rs).view(np.uint8),
                                      np.ascontiguousarray(want_rs[_index(r, size)]).view(np.uint8))
        assert sent == queued[r][2] > 0


def test_small_rounds_over_the_nccl_transport_give_the_same_bits(monkeypatch):
    """Rounds of a few elements (``ROUND_BYTES``): many NCCL groups, one stream each, in order."""
    monkeypatch.setattr(p2p, "ROUND_BYTES", 40)
    policy = as_policy("f32")
    want = P2PCommunicator(MESH).reduce(WHOLE, ("dp", "tp"), "sum", policy)
    results, _ = on_nccl(4, lambda comm, r: comm.reduce(_box(WHOLE, comm), ("dp", "tp"), "sum", policy))
    for got in results:
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_exact_partial_sums_and_movement_over_the_nccl_transport_are_the_one_process_bits():
    whole = ExactAccumulator(WHOLE.shape).add(WHOLE)
    exact = Policy("f32", reduction="exact")
    one = P2PCommunicator(MESH)
    want_rs = one.reduce_scatter(whole, "dp", 0, "sum", exact)
    moved = np.arange(2 * 4 * 6, dtype=np.float32).reshape(2, 4, 6)

    def work(comm, r):
        acc = whole
        for i, (s, b) in enumerate(zip(comm.place.start, comm.place.box)):
            acc = acc.take(np.arange(s, s + b), i)
        return (comm.reduce_scatter(acc, "dp", 0, "sum", exact), comm.all_gather(_box(moved, comm), "tp", 0),
                comm.permute(_box(moved, comm), "tp", [(0, 3), (3, 1), (2, 2)]))

    results, nccl = on_nccl(4, work)
    for r, (rs, gathered, permuted) in enumerate(results):
        np.testing.assert_array_equal(rs.view(np.uint32), want_rs[_index(r, 4)].view(np.uint32))
        np.testing.assert_array_equal(gathered, one.all_gather(moved, "tp", 0)[_index(r, 4, (1,))])
        np.testing.assert_array_equal(permuted, one.permute(moved, "tp", [(0, 3), (3, 1), (2, 2)])[_index(r, 4)])
    assert nccl.aborted == []


def test_a_peer_that_never_exchanges_times_out_aborts_and_is_named(monkeypatch):
    monkeypatch.setenv("TESSERA_COMM_TIMEOUT", "1")
    cupy = FakeCupy()
    nccl = FakeNccl(cupy)
    errors = {}

    def run(r):
        transport = NCCLTransport(World(r, 2), cupy=cupy, nccl=nccl)   # both ranks meet here
        if r == 0:
            try:
                transport.exchange({1: np.ones(3, np.float32)}, {1: ((3,), np.float32)})
            except BackendError as exc:
                errors[r] = str(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert "rank 0: no answer from rank(s) [1] in 1 s over NCCL" in errors[0]
    assert nccl.aborted == [0]


def test_the_double_refuses_what_nccl_refuses():
    """The double's checks can fail: ungrouped sends, two ranks on one device, a bad id."""
    cupy = FakeCupy(devices=2)
    nccl = FakeNccl(cupy)
    uid = nccl.get_unique_id()
    cupy.cuda.Device(0).use()
    comm = nccl.NcclCommunicator(2, uid, 0)
    buf = cupy.asarray(np.zeros(4, np.uint8))
    stream = cupy.cuda.Stream(non_blocking=True)
    with pytest.raises(UsageError, match="outside groupStart"):
        comm.send(buf.data.ptr, 4, nccl.NCCL_UINT8, 1, stream.ptr)
    nccl.groupStart()
    with pytest.raises(UsageError, match="another stream"):
        comm.send(buf.data.ptr, 4, nccl.NCCL_UINT8, 1, stream.ptr)
    nccl.groupEnd()
    with pytest.raises(UsageError, match="one device a rank"):
        nccl.NcclCommunicator(2, uid, 1)   # same thread, so device 0 again
    with pytest.raises(UsageError, match="128 C chars"):
        nccl.NcclCommunicator(2, tuple(range(200, 328)), 1)


@pytest.mark.parametrize("kind", KINDS)
def test_ranks_that_disagree_all_raise_before_any_payload(kind):
    """The signatures go first (MESH-MP-10), so no rank posts a receive of another size — which
    the double refuses and real NCCL would hang on or fill with the wrong bytes."""
    results, nccl = on_nccl(2, calls(kind), mesh=LINE)
    for got in results:
        assert isinstance(got, CollectiveError) and "processes disagree" in got.what, got
    assert nccl.aborted == []


def test_a_cupy_without_nccl_is_a_backend_error_with_the_fix():
    """CuPy's ``cupy.cuda.nccl`` says ``available = False`` (and lacks NcclCommunicator) when it
    cannot load libnccl: a BackendError naming the install, never CuPy's AttributeError."""
    fix = r"Fix: pip install -e '\.\[cuda\]' \(CuPy ≥ 13\.6 and the nvidia-nccl-cu12 wheel"
    with pytest.raises(BackendError, match=r"CuPy \? cannot use it \(it did not load libnccl\).*" + fix):
        NCCLTransport(World(0, 1), cupy=FakeCupy(), nccl=SimpleNamespace(available=False))


def test_one_communication_stream_per_communicator():
    cupy = FakeCupy()
    transport = NCCLTransport(World(0, 1), cupy=cupy, nccl=FakeNccl(cupy))
    streams = len(cupy.cuda.streams)
    for _ in range(5):
        transport.exchange({0: np.ones(3, np.float32)}, {0: ((3,), np.float32)})
    assert len(cupy.cuda.streams) == streams
