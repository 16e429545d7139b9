"""The canonical collectives over point-to-point (MESH-MP-4) without MPI: each rank a thread,
messages through queues. Every rank's result must be its box of what the one-process
communicator computes on the whole mesh — for several process counts, reductions over one and
two axes, odd chunk boundaries and bounded rounds."""
from __future__ import annotations

import queue

import numpy as np
import pytest

from _ranks import thread_ranks
from tessera_ref import dist, op
from tessera_ref.backends import p2p
from tessera_ref.backends.p2p import P2PCommunicator, Transport
from tessera_ref.dist.world import World, placement
from tessera_ref.numerics import Policy, as_policy


class Queues(Transport):
    """Rank ``rank`` of ``size`` threads; ``boxes[(src, dst)]`` carries messages in order."""

    name = "threads"

    def __init__(self, rank, size, boxes):
        super().__init__()
        self.rank, self.size, self.boxes = rank, size, boxes

    def exchange(self, outgoing, incoming):
        for d, a in outgoing.items():
            self.boxes[(self.rank, d)].put(np.array(a, copy=True))
            self.bytes_sent += a.nbytes
        got = {s: self.boxes[(s, self.rank)].get(timeout=20) for s in incoming}
        for s, (shape, dtype) in incoming.items():
            assert got[s].shape == tuple(shape) and got[s].dtype == dtype
        return got


def on_threads(size, mesh, work):
    """``work(communicator)`` on every rank at once; the results by rank."""
    boxes = {(s, d): queue.Queue() for s in range(size) for d in range(size)}
    return thread_ranks(size, lambda r: work(P2PCommunicator(mesh, Queues(r, size, boxes))))


def box(whole, comm):
    return whole[comm.place.box_slices(whole.shape[:comm.mesh.ndim])]


MESH = dist.Mesh(("dp", "tp"), range(8), (2, 4))
RNG = np.random.default_rng(5)
WHOLE = (RNG.standard_normal((2, 4, 5, 3)) * np.exp2(RNG.integers(-30, 30, (2, 4, 5, 3)))).astype(np.float32)


@pytest.mark.parametrize("size", [2, 4, 8])
@pytest.mark.parametrize("axes", [("tp",), ("dp",), ("dp", "tp")])
@pytest.mark.parametrize("op_name, policy", [("sum", "f32"), ("sum", Policy("bf16", accum="f32")), ("max", "f32"),
                                             ("prod", "f32"), ("sum", Policy("f32", reduction="exact"))])
def test_reductions_on_every_rank_are_their_box_of_the_one_process_fold(size, axes, op_name, policy):
    policy = as_policy(policy) if isinstance(policy, str) else policy
    values = np.asarray(op.cast(WHOLE, policy.storage.name))
    want = P2PCommunicator(MESH).reduce(values, axes, op_name, policy)
    if op_name == "sum" and policy == as_policy("f32"):  # independently: NumPy f32 adds, ascending ranks
        ranks = np.moveaxis(values, [MESH.axis_index(a) for a in axes], list(range(len(axes))))
        ranks = ranks.reshape((-1,) + ranks.shape[len(axes):])
        acc = ranks[0]
        for r in ranks[1:]:
            acc = (acc + r).astype(np.float32)
        np.testing.assert_array_equal(want.reshape(acc.shape).view(np.uint32), acc.view(np.uint32))
    positions = [MESH.axis_index(a) for a in axes]

    def work(comm):
        return comm.reduce(np.ascontiguousarray(box(values, comm)), axes, op_name, policy)

    for comm_rank, got in enumerate(on_threads(size, MESH, work)):
        place = placement(MESH, World(comm_rank, size))
        index = tuple(slice(None) if i in positions else slice(s, s + b)
                      for i, (s, b) in enumerate(zip(place.start, place.box)))
        np.testing.assert_array_equal(got.view(np.uint8), want[index].view(np.uint8))


def test_small_rounds_and_uneven_chunks_give_the_same_bits(monkeypatch):
    monkeypatch.setattr(p2p, "ROUND_BYTES", 40)   # rounds of a few elements; 15 elements over 4 owners
    policy = as_policy("f32")
    want = P2PCommunicator(MESH).reduce(WHOLE, ("dp", "tp"), "sum", policy)
    for got in on_threads(4, MESH, lambda comm: comm.reduce(np.ascontiguousarray(box(WHOLE, comm)),
                                                             ("dp", "tp"), "sum", policy)):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_reduction_sends_a_rings_bytes_with_one_device_per_process():
    mesh = dist.Mesh(("r",), range(4))
    values = RNG.standard_normal((4, 1000)).astype(np.float32)
    comms = []

    def work(comm):
        comms.append(comm)
        return comm.reduce(np.ascontiguousarray(box(values, comm)), ("r",), "sum", as_policy("f32"))

    on_threads(4, mesh, work)
    # reduce-scatter 3/4 of the 4000 bytes, then all-gather 3/4 of them: 2 (p-1)/p N
    assert sorted(c.transport.bytes_sent for c in comms) == [6000] * 4


@pytest.mark.parametrize("size", [2, 4])
def test_movement_is_the_one_process_movement(size):
    one = P2PCommunicator(MESH)
    whole = np.arange(2 * 4 * 6, dtype=np.float32).reshape(2, 4, 6)
    cases = {
        "all_gather": (lambda c, x: c.all_gather(x, "tp", 0), one.all_gather(whole, "tp", 0), (1,)),
        "broadcast": (lambda c, x: c.broadcast(x, "tp", 3), one.broadcast(whole, "tp", 3), (1,)),
        "permute": (lambda c, x: c.permute(x, "tp", [(0, 3), (3, 1), (2, 2)]),
                    one.permute(whole, "tp", [(0, 3), (3, 1), (2, 2)]), ()),
        "gather_boxes": (lambda c, x: c.gather_boxes(x, ("dp", "tp")), whole, (0, 1)),
    }
    for name, (fn, want, whole_axes) in cases.items():
        results = on_threads(size, MESH, lambda comm: fn(comm, np.ascontiguousarray(box(whole, comm))))
        for r, got in enumerate(results):
            place = placement(MESH, World(r, size))
            index = tuple(slice(None) if i in whole_axes else slice(s, s + b)
                          for i, (s, b) in enumerate(zip(place.start, place.box)))
            np.testing.assert_array_equal(got, want[index], err_msg=name)


def _ascending_f32(ranks: np.ndarray) -> np.ndarray:
    """Axis 0 folded ((x0 + x1) + x2) + … with NumPy's f32 adds (independent of the code under test)."""
    acc = ranks[0]
    for r in ranks[1:]:
        acc = (acc + r).astype(np.float32)
    return acc


@pytest.mark.parametrize("size", [2, 4, 8])
@pytest.mark.parametrize("axis, dim", [("tp", 0), ("tp", 1), ("dp", 0), ("dp", 1)])
@pytest.mark.parametrize("op_name, policy", [("sum", "f32"), ("sum", Policy("bf16", accum="f32")), ("max", "f32"),
                                             ("min", Policy("bf16", accum="f32")), ("prod", "f32"),
                                             ("sum", Policy("f32", reduction="exact"))])
def test_reduce_scatter_on_every_rank_is_its_box_of_the_one_process_result(size, axis, dim, op_name, policy):
    """5 rows over tp=4 pad to blocks of 2; 3 columns over dp=2 pad to blocks of 2."""
    policy = as_policy(policy) if isinstance(policy, str) else policy
    values = np.asarray(op.cast(WHOLE, policy.storage.name))
    i = MESH.axis_index(axis)
    want = P2PCommunicator(MESH).reduce_scatter(values, axis, dim, op_name, policy)
    if op_name == "sum" and policy == as_policy("f32"):  # independently: the ascending fold, zero-padded blocks
        p = MESH.shape[i]
        folded = np.expand_dims(_ascending_f32(np.moveaxis(values, i, 0)), i)
        n = folded.shape[2 + dim]
        block = -(-n // p)
        pad = [(0, 0)] * folded.ndim
        pad[2 + dim] = (0, block * p - n)
        blocks = np.split(np.pad(folded, pad), p, axis=2 + dim)
        np.testing.assert_array_equal(np.ascontiguousarray(want).view(np.uint32),
                                      np.concatenate(blocks, axis=i).view(np.uint32))

    def work(comm):
        return comm.reduce_scatter(np.ascontiguousarray(box(values, comm)), axis, dim, op_name, policy)

    for comm_rank, got in enumerate(on_threads(size, MESH, work)):
        place = placement(MESH, World(comm_rank, size))
        index = tuple(slice(s, s + b) for s, b in zip(place.start, place.box))
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8),
                                      np.ascontiguousarray(want[index]).view(np.uint8))


def test_reduce_scatter_in_small_rounds_gives_the_same_bits(monkeypatch):
    monkeypatch.setattr(p2p, "ROUND_BYTES", 24)   # rounds of a few elements per owner
    policy = as_policy("f32")
    want = P2PCommunicator(MESH).reduce_scatter(WHOLE, "tp", 1, "sum", policy)
    for r, got in enumerate(on_threads(4, MESH, lambda comm: comm.reduce_scatter(
            np.ascontiguousarray(box(WHOLE, comm)), "tp", 1, "sum", policy))):
        place = placement(MESH, World(r, 4))
        index = tuple(slice(s, s + b) for s, b in zip(place.start, place.box))
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint32),
                                      np.ascontiguousarray(want[index]).view(np.uint32))


def test_reduce_scatter_of_order_sensitive_sums_is_the_ascending_fold():
    """Per element: 1 then three 2^-24 (ascending: 1; pairwise: 1 + 2^-23), and the like."""
    mesh = dist.Mesh(("r",), range(4))
    t = np.float32(2.0 ** -24)
    values = np.array([[1.0, -1.0, t, t], [t, -t, 1.0, t], [t, -t, t, t], [t, -t, t, 1.0]], np.float32)
    results = on_threads(4, mesh, lambda comm: comm.reduce_scatter(
        np.ascontiguousarray(box(values, comm)), "r", 0, "sum", as_policy("f32")))
    assert [f"{g.view(np.uint32).item():08x}" for g in results] == ["3f800000", "bf800000", "3f800000", "3f800002"]


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("dtype, storage", [("f32", np.float32), ("bf16", None)])
def test_a_reduce_scatter_sends_a_rings_bytes_with_one_device_per_process(size, dtype, storage):
    mesh = dist.Mesh(("r",), range(size))
    values = np.asarray(op.cast(RNG.standard_normal((size, 1200)).astype(np.float32), dtype))
    n_bytes = values[0].nbytes   # N: one device's whole contribution
    comms = []

    def work(comm):
        comms.append(comm)
        return comm.reduce_scatter(np.ascontiguousarray(box(values, comm)), "r", 0, "sum", as_policy(dtype))

    on_threads(size, mesh, work)
    assert sorted(c.transport.bytes_sent for c in comms) == [(size - 1) * n_bytes // size] * size  # (p-1)/p N
