"""The canonical collectives written once over point-to-point messages (DESIGN §14; docs/spec/
mesh.md MESH-MP-4, BACKEND-COMM-1).

A :class:`P2PCommunicator` carries out every collective of :mod:`tessera_ref.dist` on the
stacked values of this process's box of a mesh (MESH-MP-2). Whatever a collective needs from
the devices of its own box it does with array operations; what it needs from other processes
it moves with one :meth:`Transport.exchange` — a grouped set of sends and receives (MPI's
``Isend``/``Irecv``, NCCL's ``groupStart``/``send``/``recv``/``groupEnd``). Libraries' own
reductions are never used: their order is not ascending (MESH-MP-4).

**Reduction (NUM-RED-3/4).** The elements of the reduced value are cut into one chunk per
process of the group. Every process sends each chunk's contributions (one per device of its
box) to the chunk's owner; the owner lays out all contributions in ascending device order and
folds them with :func:`fold_ranks` — the accum format, rounded once — then sends its folded
chunk to every process of the group (an all-gather). Each process sends ``(p−1)/p`` of its
contributions and ``(p−1)/p`` of the result, a ring's bytes. A reduce-scatter cuts the
elements at the devices' blocks of the split dimension instead: each process receives only the
contributions to its own devices' blocks, folds them the same way and keeps them — no
all-gather, ``(p−1)/p`` of the contributions sent. Every element is folded from the same
contributions in the same order as the all-reduce's, so the bits agree. Work is done in rounds
of at most :data:`ROUND_BYTES` of contributions per process, so scratch memory stays bounded.
Exact partial sums (an :class:`~tessera_ref.numerics.ExactAccumulator`) take the same routes
with their digits as the payload (:meth:`~tessera_ref.numerics.ExactAccumulator.to_words`: the
digits in use, 4 bytes each and 8 for the signed top one, behind a 12-byte header, sent after
an 8-byte length): each process sums its box's
contributions exactly, sends each chunk (a reduce-scatter: its devices' rows) to the owner,
which merges them — exactly, so no order changes the result — and an all-reduce then gathers
the merged chunks; a reduce-scatter rounds its rows once and keeps them. They are not cut into
rounds: what a process receives is at most the size of its own partial sums.

Messages match by program order (every process issues the same exchanges in the same order),
so a program issues its cross-process collectives from one thread. Before its first message,
each collective whose group spans processes exchanges its signature with the group
(:meth:`P2PCommunicator._agree`, :mod:`tessera_ref.dist.signature`; MESH-MP-10): processes that
disagree raise a ``CollectiveError`` naming both calls, and no payload moves.

In one process there is nothing to move and every collective is the in-process fold (the
``interp`` backend's simulated communicator is this class over :data:`ONE_PROCESS`).
"""
from __future__ import annotations

import abc
import math
import threading

import numpy as np

from ..dist import signature
from ..dist.world import World, placement, transport_name, world
from ..errors import BackendError, user_location
from ..numerics import ExactAccumulator, cast
from ..numerics.arith import accum_op, to_accum
from ..numerics.reduce import extreme_last_axis
from .base import Communicator

__all__ = ["Transport", "ONE_PROCESS", "P2PCommunicator", "fold_ranks", "register_transport", "world_transport",
           "mesh_communicator", "ROUND_BYTES"]

#: The most bytes of contributions one process sends in one round of a reduction.
ROUND_BYTES = 1 << 24


def fold_ranks(values: np.ndarray, op: str, policy) -> np.ndarray:
    """Fold axis 0 of ``values`` (one entry per rank, ascending) with ``op`` in the accum
    format, then convert once into storage (NUM-RED-3; an exact sum under ``reduction="exact"``)."""
    accum = policy.accum
    if policy.reduction == "exact" and op == "sum":
        acc = ExactAccumulator(values.shape[1:], "f64" if policy.storage.name == "f64" else "f32")
        return acc.add(values, axis=0).round(policy.storage, rounding=policy.rounding, overflow=policy.overflow)
    with np.errstate(all="ignore"):
        if op in ("max", "min"):
            acc = extreme_last_axis(np.moveaxis(to_accum(values, accum), 0, -1), op)
        else:
            acc = to_accum(values[0], accum)
            for g in range(1, values.shape[0]):
                acc = accum_op("add" if op == "sum" else "mul", acc, values[g], accum=accum)
    return cast(acc, policy.storage, rounding=policy.rounding, overflow=policy.overflow)


class Transport(abc.ABC):
    """Point-to-point messages between the processes of one program (``rank`` of ``size``).
    ``bytes_sent`` counts the payload bytes this process has sent, ``signature_bytes`` the
    bytes of collectives' signatures (MESH-MP-10), ``collectives`` the signatures exchanged so
    far (the sequence number of the last), and ``call`` is the signature of the collective being
    carried out (named by errors), or None."""

    name = ""
    rank = 0
    size = 1

    def __init__(self) -> None:
        self.bytes_sent = 0
        self.signature_bytes = 0
        self.collectives = 0
        self.call = None

    @abc.abstractmethod
    def exchange(self, outgoing: dict, incoming: dict) -> dict:
        """Send ``outgoing[r]`` (an array) to rank ``r`` and receive from every rank ``s`` of
        ``incoming`` an array of ``incoming[s] = (shape, dtype)``, all posted together (no
        order among them can deadlock); returns ``{s: array}``. Never waits forever: a peer
        that does not answer is a :class:`BackendError` naming it."""

    def exchange_sized(self, outgoing: dict, sources, dtype) -> dict:
        """:meth:`exchange` for 1-D arrays of ``dtype`` whose lengths only their senders know
        (an 8-byte length first, then the data)."""
        sizes = self.exchange({r: np.array([a.size], dtype=np.int64) for r, a in outgoing.items()},
                              {s: ((1,), np.int64) for s in sources})
        return self.exchange(outgoing, {s: ((int(n[0]),), dtype) for s, n in sizes.items()})


    def exchange_signatures(self, mine: np.ndarray, peers) -> dict:
        """:meth:`exchange` of ``mine`` (a signature's bytes) with every rank of ``peers``;
        counted in ``signature_bytes``, not ``bytes_sent``."""
        before = self.bytes_sent
        try:
            return self.exchange({r: mine for r in peers}, {r: (mine.shape, mine.dtype) for r in peers})
        finally:
            self.signature_bytes += self.bytes_sent - before
            self.bytes_sent = before


class _OneProcess(Transport):
    """The world of one process: there is nobody to send to."""

    name = "simulated"

    def exchange(self, outgoing: dict, incoming: dict) -> dict:
        if outgoing or incoming:
            raise BackendError(f"a one-process transport was asked to reach ranks {sorted({*outgoing, *incoming})}",
                               fix="run the program under tessera-ref launch or mpiexec")
        return {}


#: The transport of a program that is one process.
ONE_PROCESS = _OneProcess()

_TRANSPORTS: dict = {}   # name -> factory, filled by the transports' modules (backends.mpi, backends.cuda.nccl)
_OPEN: dict = {}         # name -> the transport this process opened
_LOCK = threading.Lock()


def register_transport(name: str, factory) -> None:
    """Make ``factory()`` (returning a :class:`Transport`) the transport ``name``; the modules
    that implement transports call this on import (they sit above this one)."""
    _TRANSPORTS[name] = factory


def world_transport(name: str = "mpi") -> Transport:
    """This process's transport ``name``, opened once per process."""
    with _LOCK:
        if name not in _OPEN:
            if name not in _TRANSPORTS:
                raise BackendError(f"no multi-process transport named {name!r}",
                                   fix=f"use one of {sorted(_TRANSPORTS)} (TESSERA_TRANSPORT)")
            _OPEN[name] = _TRANSPORTS[name]()
        return _OPEN[name]


class P2PCommunicator(Communicator):
    """The collectives of ``mesh`` on this process's box, over ``transport`` (module docstring)."""

    def __init__(self, mesh, transport: Transport = ONE_PROCESS):
        super().__init__(mesh)
        self.transport = transport
        self.place = placement(mesh, World(transport.rank, transport.size, world().devices_per_process))
        self.name = transport.name

    # -- helpers -------------------------------------------------------------------------------
    def _expand(self, local: np.ndarray, positions) -> np.ndarray:
        """``local`` broadcast to the box's size along the mesh axes at ``positions``."""
        shape = list(local.shape)
        for i in positions:
            shape[i] = self.place.box[i]
        return np.broadcast_to(local, tuple(shape))

    def _join(self, stacked: np.ndarray, i: int) -> np.ndarray:
        """``stacked`` with the boxes of the group along mesh axis ``i`` joined in order."""
        group = self.place.group((i,))
        if len(group) == 1:
            return stacked
        me = self.transport.rank
        block = np.ascontiguousarray(stacked)
        got = self.transport.exchange({r: block for r in group if r != me},
                                      {r: (block.shape, block.dtype) for r in group if r != me})
        got[me] = block
        return np.concatenate([got[r] for r in group], axis=i)

    def _global_ranks(self, positions, group) -> np.ndarray:
        """For each (process of ``group``, device of its box) along ``positions``, in that order,
        the device's rank in the collective group (row-major over the mesh axes at ``positions``)."""
        box = [self.place.box[p] for p in positions]
        sizes = [self.mesh.shape[p] for p in positions]
        ranks = []
        for r in group:
            at = np.unravel_index(r, self.place.grid)
            for local in np.ndindex(*box):
                ranks.append(np.ravel_multi_index(tuple(at[p] * b + c for p, b, c in zip(positions, box, local)),
                                                  sizes))
        return np.array(ranks)

    def _agree(self, kind: str, group: list, stacked, axes, op: str = "", policy=None, detail: str = "") -> None:
        """Exchange this collective's signature with the other processes of ``group`` and check
        that every one agrees (MESH-MP-10); nothing to do when the group is this process. The
        user's collective (``dist.signature.calling``) names the kind and op when in force."""
        if len(group) == 1:
            return
        t = self.transport
        user = signature.user_call()
        if user is not None:
            kind, op = user[0], user[1] or op
        if isinstance(stacked, ExactAccumulator):
            fmt = f"exact partial sums of {policy}"
        else:
            fmt = str(policy) if policy is not None else np.dtype(stacked.dtype).name
        t.collectives += 1
        mine = signature.Signature(kind, op or "", fmt, tuple(int(n) for n in stacked.shape), tuple(axes),
                                   tuple(group), detail, t.collectives, user_location() or "")
        t.call = mine
        received = t.exchange_signatures(mine.encode(), [r for r in group if r != t.rank])
        signature.check(mine, t.rank, received)

    # -- the collectives -------------------------------------------------------------------------
    def reduce(self, stacked, axes: tuple, op: str, policy):
        positions = sorted(self.mesh.axis_index(a) for a in axes)
        group = self.place.group(positions)
        self._agree("all_reduce", group, stacked, [self.mesh.axes[p] for p in positions], op, policy)
        if isinstance(stacked, ExactAccumulator):
            return self._reduce_exact(stacked.sum_axes(tuple(positions)), group)
        moved = np.moveaxis(self._expand(stacked, positions), positions, list(range(len(positions))))
        count = math.prod(moved.shape[:len(positions)])
        rest = moved.shape[len(positions):]
        contributions = moved.reshape((count,) + rest)
        if len(group) == 1:
            folded = fold_ranks(contributions, op, policy)
        else:
            folded = self._reduce_across(contributions.reshape(count, -1), positions, group, op, policy)
            folded = folded.reshape(rest)
        return np.expand_dims(folded, tuple(positions))

    def _reduce_exact(self, acc: ExactAccumulator, group: list) -> ExactAccumulator:
        """Exact partial sums (this process's, ``acc``) summed over ``group``: each chunk of the
        elements merged on its owner, then the merged chunks gathered by every process — a
        ring's bytes of the sums' digits (module docstring)."""
        if len(group) == 1:
            return acc
        shape, me = acc.shape, self.transport.rank
        flat = acc.reshape((math.prod(shape),))
        bounds = np.linspace(0, flat.shape[0], len(group) + 1).astype(int)
        mine = self._merge_at_owners([flat.take(np.arange(bounds[k], bounds[k + 1]), 0) for k in range(len(group))],
                                     group)
        got = self.transport.exchange_sized({r: mine.to_words() for r in group if r != me},
                                            [r for r in group if r != me], np.uint32)
        parts = [mine if r == me else ExactAccumulator.from_words(got[r], (bounds[k + 1] - bounds[k],), acc.domain)
                 for k, r in enumerate(group)]
        return ExactAccumulator.concatenate(parts, 0).reshape(shape)

    def _merge_at_owners(self, chunks: list, group: list) -> ExactAccumulator:
        """Send ``chunks[k]`` (exact partial sums) to process ``group[k]``; returns this
        process's chunk merged with the others' (exactly: no order changes it)."""
        me = self.transport.rank
        others = [r for r in group if r != me]
        mine = chunks[group.index(me)]
        got = self.transport.exchange_sized({r: chunks[k].to_words() for k, r in enumerate(group) if r != me},
                                            others, np.uint32)
        for r in others:
            mine.merge(ExactAccumulator.from_words(got[r], mine.shape, mine.domain))
        return mine

    def _reduce_across(self, contributions: np.ndarray, positions, group: list, op: str, policy) -> np.ndarray:
        """The ascending fold of every process's ``contributions`` ([devices of the box, n]):
        a reduce-scatter to chunk owners, then an all-gather of the folded chunks."""
        me, p = self.transport.rank, len(group)
        count, n = contributions.shape
        if n == 0:
            return fold_ranks(contributions, op, policy)  # nothing to fold: the empty result's type
        order = np.argsort(self._global_ranks(positions, group), kind="stable")
        step = max(p, ROUND_BYTES // max(1, count * contributions.itemsize))
        pieces = []
        for start in range(0, n, step):
            block = contributions[:, start:start + step]
            bounds = np.linspace(0, block.shape[1], p + 1).astype(int)
            mine = group.index(me)
            lo, hi = bounds[mine], bounds[mine + 1]
            got = self.transport.exchange(
                {r: np.ascontiguousarray(block[:, bounds[q]:bounds[q + 1]]) for q, r in enumerate(group) if r != me},
                {r: ((count, hi - lo), block.dtype) for r in group if r != me})
            got[me] = block[:, lo:hi]
            everyone = np.concatenate([got[r] for r in group], axis=0)[order]
            folded = np.ascontiguousarray(fold_ranks(everyone, op, policy))
            out_dtype = folded.dtype
            chunks = self.transport.exchange(
                {r: folded for r in group if r != me},
                {r: ((bounds[q + 1] - bounds[q],), out_dtype) for q, r in enumerate(group) if r != me})
            chunks[me] = folded
            pieces.append(np.concatenate([chunks[r] for r in group]))
        return np.concatenate(pieces)

    def reduce_scatter(self, stacked, axis: str, dim: int, op: str, policy):
        """Each device's block of dimension ``dim`` folded on the process that owns the device:
        every process sends to each other process of the group its contributions to that
        process's blocks, and nothing else (module docstring)."""
        i, m = self.mesh.axis_index(axis), self.mesh.ndim
        group = self.place.group((i,))
        self._agree("reduce_scatter", group, stacked, (axis,), op, policy, f"dim={dim}")
        if isinstance(stacked, ExactAccumulator):
            return self._reduce_scatter_exact(stacked, i, dim, group, policy)
        if len(group) == 1:
            return super().reduce_scatter(stacked, axis, dim, op, policy)
        b, block = self.place.box[i], -(-stacked.shape[m + dim] // self.mesh.shape[i])
        moved = np.moveaxis(self._expand(stacked, (i,)), (i, m + dim), (0, 1))  # [box along axis, dim, rest]
        n, rest = moved.shape[1], moved.shape[2:]
        flat = moved.reshape(b, n, -1)
        # process k of the group owns rows [k·b·block, (k+1)·b·block) of dim (padding rows are not sent)
        slabs = [flat[:, min(n, k * b * block):min(n, (k + 1) * b * block)].reshape(b, -1) for k in range(len(group))]
        me = group.index(self.transport.rank)
        mine = slabs[me].shape[1]
        order = np.argsort(self._global_ranks((i,), group), kind="stable")
        step = max(1, ROUND_BYTES // max(1, b * flat.itemsize * len(group)))
        out = np.zeros(b * block * flat.shape[2], dtype=policy.storage.dtype)  # padding rows stay zero
        for start in range(0, max(s.shape[1] for s in slabs), step):
            width = max(0, min(step, mine - start))
            got = self.transport.exchange(
                {r: np.ascontiguousarray(slabs[k][:, start:start + step])
                 for k, r in enumerate(group) if k != me and start < slabs[k].shape[1]},
                {r: ((b, width), flat.dtype) for k, r in enumerate(group) if k != me and width})
            if width:
                got[group[me]] = slabs[me][:, start:start + width]
                out[start:start + width] = fold_ranks(np.concatenate([got[r] for r in group])[order], op, policy)
        return np.moveaxis(out.reshape((b, block) + rest), (0, 1), (i, m + dim))

    def _reduce_scatter_exact(self, acc: ExactAccumulator, i: int, dim: int, group: list, policy) -> np.ndarray:
        """:meth:`reduce_scatter` of exact partial sums: each process's rows of dimension ``dim``
        merged on it from every process's sums of those rows, then rounded once."""
        m, b = self.mesh.ndim, self.place.box[i]
        acc = acc.sum_axes((i,))  # the contributions of this process's devices, summed exactly
        n = acc.shape[m + dim]
        block = -(-n // self.mesh.shape[i])
        rows = [np.arange(min(n, k * b * block), min(n, (k + 1) * b * block)) for k in range(len(group))]
        mine = self._merge_at_owners([acc.take(r, m + dim) for r in rows], group)
        out = mine.round(policy.storage, rounding=policy.rounding, overflow=policy.overflow)
        pad = [(0, 0)] * out.ndim
        pad[m + dim] = (0, b * block - out.shape[m + dim])  # padding rows are zero
        pieces = np.pad(out, pad).reshape(out.shape[:m + dim] + (b, block) + out.shape[m + dim + 1:])
        return np.squeeze(np.moveaxis(pieces, m + dim, i), axis=i + 1)

    def all_gather(self, stacked, axis: str, dim: int):
        i, m = self.mesh.axis_index(axis), self.mesh.ndim
        self._agree("all_gather", self.place.group((i,)), stacked, (axis,), detail=f"dim={dim}")
        whole = self._join(stacked, i)
        moved = np.moveaxis(whole, i, m + dim - 1)  # mesh axis i now sits just before the dimension
        merged = moved.reshape(moved.shape[:m + dim - 1] + (-1,) + moved.shape[m + dim + 1:])
        return np.expand_dims(merged, i)

    def gather_boxes(self, stacked, axes: tuple):
        self._agree("gather", self.place.group([self.mesh.axis_index(a) for a in axes]), stacked, axes)
        for a in axes:
            stacked = self._join(stacked, self.mesh.axis_index(a))
        return stacked

    def broadcast(self, stacked, axis: str, root: int):
        i = self.mesh.axis_index(axis)
        group = self.place.group((i,))
        owner, at = group[root // self.place.box[i]], root % self.place.box[i]
        me = self.transport.rank
        self._agree("broadcast", group, stacked, (axis,), detail=f"root={root}")
        if stacked.shape[i] == 1:
            at = 0
        if len(group) == 1:
            return np.take(stacked, [at], axis=i)
        if me == owner:
            value = np.ascontiguousarray(np.take(stacked, [at], axis=i))
            self.transport.exchange({r: value for r in group if r != me}, {})
            return value
        shape = stacked.shape[:i] + (1,) + stacked.shape[i + 1:]
        return self.transport.exchange({}, {owner: (shape, stacked.dtype)})[owner]

    def send(self, stacked, dst, tag: int):
        return stacked  # device i of both sub-meshes belongs to one process (MESH-MP-2): nothing moves

    def recv(self, posted, src, tag: int):
        return posted

    def permute(self, stacked, axis: str, pairs: list):
        i = self.mesh.axis_index(axis)
        src = self._expand(stacked, (i,))
        out = np.zeros(src.shape, dtype=src.dtype)
        group, b = self.place.group((i,)), self.place.box[i]
        me = self.transport.rank
        self._agree("permute", group, stacked, (axis,), detail=f"pairs={sorted((int(s), int(d)) for s, d in pairs)}")

        def owner_of(rank):
            return group[rank // b]

        def ix(rank):  # where the device of rank ``rank`` along the axis sits in its owner's box
            return (slice(None),) * i + (rank % b,)

        outgoing, incoming = {}, {}
        for s, d in pairs:
            if owner_of(s) == me and owner_of(d) == me:
                out[ix(d)] = src[ix(s)]
            elif owner_of(s) == me:
                outgoing.setdefault(owner_of(d), []).append(src[ix(s)])
            elif owner_of(d) == me:
                incoming.setdefault(owner_of(s), []).append(d)
        piece = src.shape[:i] + src.shape[i + 1:]
        got = self.transport.exchange({r: np.ascontiguousarray(np.stack(v)) for r, v in outgoing.items()},
                                      {r: ((len(ds),) + piece, src.dtype) for r, ds in incoming.items()})
        for r, ds in incoming.items():
            for k, d in enumerate(ds):
                out[ix(d)] = got[r][k]
        return out


def mesh_communicator(mesh) -> P2PCommunicator:
    """The communicator of ``mesh`` for this process, for any backend whose values live on the
    host: over :data:`ONE_PROCESS` when this process owns the whole mesh, else over the world's
    transport (``TESSERA_TRANSPORT``, default ``mpi``)."""
    if placement(mesh).single:
        return P2PCommunicator(mesh)
    return P2PCommunicator(mesh, world_transport(transport_name()))
