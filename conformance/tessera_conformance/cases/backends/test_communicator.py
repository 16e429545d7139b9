"""BACKEND-COMM-1: the communicator carries out collectives on stacked local values — reduce in
rank order in the accum format, gather in rank order, broadcast, permute, send/recv — and every
collective of ``dist`` goes through it, with ``dist``'s semantics on every backend."""
import ml_dtypes
import numpy as np
import pytest

from tessera_ref import dist
from tessera_ref.errors import BackendError, CollectiveWarning
from tessera_ref.numerics import as_policy
from tessera_conformance import assert_bits, clause, communicator, eager, unsupported

from ..mesh._reference import fold
from ._reference import Spy, wide

S = dist.ShardSpec
MESH = dist.Mesh(("dp", "tp", "pp"), range(12), (2, 3, 2))


def _comm(backend):
    return communicator(backend, MESH)


def _call(backend, fn):
    try:
        return fn()
    except BackendError as exc:
        unsupported(backend, exc)


def _stacked(seed, local=(4, 5)):
    """Per-device values stacked on the mesh axes. Blocks: wide values with cancelling terms
    across the ranks. One element: 2^24 on device 0 and 1 on every other device — each 1 is lost
    added to 2^24 in rank order (a tie, to even) but not when ones are added together first."""
    if local == (1,):
        x = np.ones(MESH.shape + local, np.float32)
        x.reshape(-1)[0] = np.float32(2.0 ** 24)
        return x
    x = wide(np.random.default_rng(seed), MESH.shape + local)
    x[..., 0, 0] += np.where(np.arange(12).reshape(MESH.shape) % 2, np.float32(2.0 ** 22), np.float32(-2.0 ** 22))
    return x


def _ranks(x, axes):
    """The stacked values' ranks over ``axes``, in rank order (row-major over the mesh axes)."""
    positions = sorted(MESH.axis_index(a) for a in axes)
    moved = np.moveaxis(x, positions, list(range(len(positions))))
    return moved.reshape((-1,) + moved.shape[len(positions):]), positions


@pytest.mark.parametrize("local", [(4, 5), (1,)], ids=["block", "element"])
@pytest.mark.parametrize("axes", [("tp",), ("pp",), ("dp", "pp"), ("pp", "tp"), ("dp", "tp", "pp")],
                         ids=["tp", "pp", "dp+pp", "pp+tp", "dp+tp+pp"])
@pytest.mark.parametrize("op_", ["sum", "max", "min", "prod"])
@clause("BACKEND-COMM-1")
def test_reduce_folds_in_rank_order(backend, axes, op_, local):
    """``reduce``: each group's contributions over ``axes`` folded in ascending rank order in f32
    and stored once; size 1 along ``axes`` after."""
    x = _stacked(170, local)
    if op_ == "prod":
        x = np.float32(1) + x / np.float32(2.0 ** 23)
    got = _call(backend, lambda: _comm(backend).reduce(x, axes, op_, as_policy("f32")))
    ranks, positions = _ranks(x, axes)
    want = fold(list(ranks), op_)
    assert_bits(np.asarray(got), np.expand_dims(want, tuple(positions)))


@clause("BACKEND-COMM-1")
def test_reduce_of_bf16_rounds_once(backend):
    """bf16 storage: folded in f32, converted once."""
    x = _stacked(171).astype(ml_dtypes.bfloat16)
    got = _call(backend, lambda: _comm(backend).reduce(x, ("tp", "pp"), "sum", as_policy("bf16")))
    ranks, positions = _ranks(x, ("tp", "pp"))
    assert_bits(np.asarray(got), np.expand_dims(fold(list(ranks), storage=ml_dtypes.bfloat16), tuple(positions)))


@pytest.mark.parametrize("axis", ["dp", "tp", "pp"])
@clause("BACKEND-COMM-1")
def test_movement(backend, axis):
    """``all_gather`` joins the blocks of a dimension in rank order; ``broadcast`` is the root's
    value; ``permute`` moves rank ``s``'s value to ``d`` and zeros the others; ``send``/``recv``
    carry the values unchanged."""
    comm = _comm(backend)
    x = _stacked(172)
    i = MESH.axis_index(axis)
    p = MESH.shape[i]
    gathered = np.expand_dims(np.concatenate([np.take(x, r, axis=i) for r in range(p)], axis=MESH.ndim - 1 + 1), i)
    assert_bits(np.asarray(_call(backend, lambda: comm.all_gather(x, axis, 1))), gathered)
    assert_bits(np.asarray(_call(backend, lambda: comm.broadcast(x, axis, p - 1))), np.take(x, [p - 1], axis=i))
    pairs = [(0, p - 1)]
    want = np.zeros_like(x)
    np.moveaxis(want, i, 0)[p - 1] = np.moveaxis(x, i, 0)[0]
    assert_bits(np.asarray(_call(backend, lambda: comm.permute(x, axis, pairs))), want)
    posted = _call(backend, lambda: comm.send(x, MESH, 0))
    assert_bits(np.asarray(_call(backend, lambda: comm.recv(posted, MESH, 0))), x)


@pytest.mark.parametrize("kind, expect", [
    ("all_reduce", "reduce"), ("reduce_scatter", "reduce"), ("all_gather", "all_gather"),
    ("broadcast", "broadcast"), ("all_to_all", "all_gather"), ("permute", "permute"), ("sendrecv", "send"),
])
@clause("BACKEND-COMM-1")
def test_dist_collectives_go_through_the_communicator(backend, kind, expect):
    """Each collective of ``dist`` on the current backend calls its communicator (an all_to_all
    as an all_gather and a local slice), with the backend's bits."""
    g = wide(np.random.default_rng(173), (6, 6))
    c = [wide(np.random.default_rng(174 + r), (6, 6)) for r in range(3)]
    x = dist.tensor(g.shape, S(("row",), ("tp",)), MESH, data=g)
    pending = dist.from_shards([c[MESH.coords(d)["tp"]] for d in range(12)], S(None, ("tp",), reduce="sum"), MESH)
    s0, s1 = MESH.sub(pp=0), MESH.sub(pp=1)

    def sendrecv():
        with dist.mailbox_scope():
            dist.send(dist.tensor(g.shape, S(("row",), ("tp",)), s0, data=g), s1)
            return dist.recv(s0, s1)

    calls = {"all_reduce": lambda: dist.all_reduce(pending, "tp"),
             "reduce_scatter": lambda: dist.reduce_scatter(pending, "tp", dim=0),
             "all_gather": lambda: dist.all_gather(x, "tp"), "broadcast": lambda: dist.broadcast(x, "tp", 1),
             "all_to_all": lambda: dist.all_to_all(x, "tp", 1, 0), "permute": lambda: dist.permute(x, "tp", 1),
             "sendrecv": sendrecv}
    spy = Spy(backend)
    got = eager(spy, calls[kind])
    assert spy.counts[expect] >= 1 and (kind != "sendrecv" or spy.counts["recv"] == 1)
    assert_bits(got, eager(backend, calls[kind]))
    if kind in ("all_reduce", "reduce_scatter"):
        assert_bits(got, fold(c))


@clause("BACKEND-COMM-1")
def test_the_semantics_are_dists_on_every_backend(backend):
    """The warnings and errors of MESH-COLL-8 come from ``dist``, before any transport call."""
    spy = Spy(backend)
    g = np.ones((6, 6), np.float32)
    replicated = dist.tensor(g.shape, None, MESH, data=g)
    with pytest.warns(CollectiveWarning):
        got = eager(spy, lambda: dist.all_reduce(replicated, "tp"))
    assert_bits(got, g)
    assert spy.counts["reduce"] == 0


@pytest.mark.parametrize("axis", ["tp", "dp"])
@clause("BACKEND-COMM-1", "MESH-COLL-2")
def test_reduce_scatter_pads_the_last_blocks_with_zeros(backend, axis):
    """``reduce_scatter`` of a dimension ``p`` does not divide: each device keeps its block of
    ``ceil(n/p)`` rows of the rank-order fold; the rows past the end are +0 (bits 0)."""
    x = _stacked(175, (7, 3))
    got = np.asarray(_call(backend, lambda: _comm(backend).reduce_scatter(x, axis, 0, "sum", as_policy("f32"))))
    i, p = MESH.axis_index(axis), MESH.shape[MESH.axis_index(axis)]
    folded = fold(list(_ranks(x, (axis,))[0]))  # [the other mesh axes..., 7, 3]
    block = -(-7 // p)
    padded = np.concatenate([folded, np.zeros(folded.shape[:-2] + (block * p - 7, 3), np.float32)], axis=-2)
    want = np.moveaxis(padded.reshape(folded.shape[:-2] + (p, block, 3)), -3, i)
    assert_bits(got, want, f"the blocks over {axis} (padding rows +0)")
