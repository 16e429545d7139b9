"""Collectives on distributed tensors (MESH-COLL-1 … MESH-COLL-8).

Each collective acts SPMD on the devices' local values, group by group along a mesh axis (the
groups of :meth:`Mesh.groups`), and is described here by what it does to the *layout*, so that
the global value a :class:`~tessera_ref.dist.DistTensor` stands for is always defined:

- :func:`all_reduce` carries out a pending reduction over the axis (``partial(axis)`` → replicated);
- :func:`reduce_scatter` carries it out and splits a dimension over the axis;
- :func:`all_gather` joins a dimension split over the axis;
- :func:`broadcast` copies the root's local value along the axis;
- :func:`all_to_all` moves the split over the axis from one dimension to another;
- :func:`permute` moves local values between ranks of the axis (pipeline stage boundaries);
- :func:`send` / :func:`recv` move a tensor from one sub-mesh to another.

**Order (NUM-RED-3).** A reduction folds the group's contributions in ascending rank order,
``((x₀ ⊕ x₁) ⊕ x₂) ⊕ …``, in the policy's accum format, and converts once into storage;
every rank receives identical bits. Under ``reduction="exact"`` the sum is exact and rounded
once (NUM-RED-4), so the result is the same for any mesh size. ``max``/``min`` are IEEE
maximum/minimum (NaN wins, −0 < +0), which no order changes.

**Misuse (MESH-COLL-8).** Reducing a tensor that has no pending reduction over the axis would,
on real hardware, add up identical (replicated) or unrelated (split) local values. Here a
replicated operand gets a :class:`~tessera_ref.errors.CollectiveWarning` and keeps its value
(reduce_scatter still scatters it); a split operand of all_reduce or a pending sum given to
all_gather is a :class:`~tessera_ref.errors.CollectiveError`, and so is moving an exact pending
sum between devices before it is reduced. Warnings name the user's line. Nothing hangs: a recv
without a matching send is an error at once, and :func:`check_pending` reports sends never received.

**Mailboxes.** A send waits for its recv in the current mailbox: that of the innermost
:func:`mailbox_scope` (each run of a traced sharded function and of a ``tessera-ref run``
script is one), else the calling thread's own. Sends never cross mailboxes, and those not
received when a scope ends are reported there.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections import defaultdict, deque

import numpy as np

from .. import context, sim
from ..context import DIFFERENTIATING, MAILBOX, QUIET_COLLECTIVES, scoped
from ..errors import _PACKAGE_DIR, CollectiveError, CollectiveWarning, EffectError, LayoutError, user_location
from ..ir import TensorType
from ..numerics import ExactAccumulator, cast
from ..numerics.arith import to_accum
from ..numerics.reduce import divide_by_count
from ..ops.collective import scatter_conflict
from . import events
from .signature import calling
from .mesh import Mesh
from .tensor import DistTensor, local_shape
from .world import placement

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "permute",
           "send", "recv", "check_pending", "mailbox_scope", "fold_partial", "gather_boxes", "local_slice",
           "scatter_blocks", "REDUCE_OPS"]

#: The reductions ``all_reduce`` accepts (``avg`` is a sum divided once by the group size).
REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


# ---------------------------------------------------------------------------------------------
# helpers

def _check(x, what: str) -> DistTensor:
    if not isinstance(x, DistTensor):
        raise CollectiveError(f"{what} takes a dist tensor (dist.tensor / dist.from_shards), got "
                              f"{type(x).__name__}", fix="create the operand with dist.tensor(..., mesh=mesh)")
    return x


def _axes(x: DistTensor, axis, what: str) -> tuple:
    axes = (axis,) if isinstance(axis, str) else tuple(axis or ())
    if not axes:
        raise CollectiveError(f"{what} needs axis=<a mesh axis>", fix=f"use one of {x.mesh.axes}")
    for a in axes:
        if a not in x.mesh.axes:
            raise CollectiveError(f"{what}: {a!r} is not an axis of {x.mesh!r} (operand {x.type})",
                                  fix=f"use one of {', '.join(map(repr, x.mesh.axes))}")
    return axes


def _warn(message: str) -> None:
    """A :class:`CollectiveWarning` attributed to the user's line (the first frame outside
    ``tessera_ref``: collectives are reached through ``bind`` and the op dispatcher); none
    inside :func:`quiet`."""
    if QUIET_COLLECTIVES.get():
        return
    level, frame = 2, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(CollectiveWarning(message), stacklevel=level)


def _require_rounded(x: DistTensor, local, what: str) -> None:
    """Exact partial sums (NUM-RED-4) are reduced where they are, never moved between devices."""
    if isinstance(local, ExactAccumulator):
        raise CollectiveError(f"{what} of {x.type}: its pending sum over {'+'.join(x.layout.partial)} is held "
                              "exactly (reduction='exact') and is not moved between devices before it is reduced",
                              fix=f"dist.all_reduce(x, axis={x.layout.partial!r}) first")


def _new(x: DistTensor, layout, local, shape=None, value: int | None = None) -> DistTensor:
    """A tensor like ``x`` with ``layout`` and ``local``; its value id is ``value`` (what a
    collective wrote) or, made without communication, ``x``'s (SIM-TL-5)."""
    ttype = TensorType(x.shape if shape is None else shape, x.policy, layout)
    if local is not None and not isinstance(local, ExactAccumulator):
        local = np.ascontiguousarray(local)
    return events.bind(DistTensor(ttype, x.mesh, local, x.name), events.value_id(x) if value is None else value)


@functools.lru_cache(maxsize=64)
def _named_groups(mesh: Mesh, axes: tuple) -> tuple:
    """The device groups of a collective over ``axes`` of ``mesh``, by name (sub-meshes too): one
    tuple per mesh and axes, which the simulated machine resolves once (SIM-TL-1)."""
    return tuple(tuple(mesh.devices[d] for d in g) for g in mesh.groups(axes))


def _record(kind: str, x: DistTensor, axes: tuple, nbytes: int | None = None) -> int:
    """Tell the listeners (the active simulated machine) about the collective; returns the id
    of the value it writes."""
    wrote = events.fresh_id()
    events.collective(kind, _named_groups(x.mesh, axes), x.nbytes_per_device if nbytes is None else nbytes,
                      axis="+".join(axes), reads=(events.value_id(x),), writes=(wrote,))
    return wrote


def _comm(x: DistTensor):
    """The current backend's communicator for ``x``'s mesh (the transport, DESIGN §14)."""
    return context.backend().communicator(x.mesh)


# ---------------------------------------------------------------------------------------------
# reductions (NUM-RED-3 / NUM-RED-4)

def _reduce_axes(x: DistTensor, axes: tuple, op: str):
    """The stacked local values with the pending reduction over ``axes`` carried out: the ranks
    of each group folded in ascending order in the accum format, rounded once (MESH-COLL-1)."""
    _check_rounding(x, op)
    return _comm(x).reduce(x.local, axes, op, x.policy)


def _check_rounding(x: DistTensor, op: str) -> None:
    """Collectives take no random key yet, so a policy that rounds stochastically is refused."""
    policy = x.policy
    if policy.rounding == "stochastic" and not isinstance(x.local, ExactAccumulator):
        raise CollectiveError(f"folding a pending {op} of {policy} rounds stochastically into storage, which "
                              "needs a random key, and collectives take none yet",
                              fix="reduce in a policy that rounds to nearest (cast the partial sums first), or "
                                  "keep the reduced dimension whole so that the op rounds with its own seed")


def _check_op(op: str, what: str) -> None:
    if op not in REDUCE_OPS:
        raise CollectiveError(f"{what} op={op!r} is not a reduction", fix=f"use one of {REDUCE_OPS}")


def _base_op(x: DistTensor, pending: list, op: str, what: str) -> str:
    """The fold of ``op`` (``avg`` folds a sum), which must be ``x``'s pending reduction."""
    base = "sum" if op == "avg" else op
    if x.layout.partial_op != base:
        raise CollectiveError(f"{what} op={op!r} over {pending} of {x.type}: its pending reduction is "
                              f"{x.layout.partial_op!r}", fix=f"use op={x.layout.partial_op!r}")
    return base


def _average(x: DistTensor, local, pending: tuple):
    """A folded sum divided once by the group size, correctly rounded in the accum format."""
    if isinstance(local, ExactAccumulator):
        local = local.round(x.policy.accum)
    return cast(divide_by_count(to_accum(local, x.policy.accum), x.mesh.axis_size(pending), x.policy.accum),
                x.policy.storage, rounding=x.policy.rounding)


def gather_boxes(x: DistTensor, local) -> np.ndarray:
    """``local`` (stacked values of ``x``'s layout with no pending reduction) over the whole
    mesh: the boxes of the other processes' devices gathered along the split axes, by the
    communicator (MESH-MP-3); ``local`` itself in one process."""
    if placement(x.mesh).single:
        return local
    return _comm(x).gather_boxes(local, tuple(a for a in x.mesh.axes if a in x.layout.split_axes))


def fold_partial(x: DistTensor) -> np.ndarray:
    """The stacked local values of ``x`` with its whole pending reduction carried out (NUM-RED-3/4)."""
    out = _reduce_axes(x, x.layout.partial, x.layout.partial_op)
    if isinstance(out, ExactAccumulator):
        pol = x.policy
        out = out.round(pol.storage, rounding=pol.rounding, overflow=pol.overflow)
    return out


def all_reduce(x, axis, op: str = "sum") -> DistTensor:
    """``dist.all_reduce(X, axis="dp", op="sum")``: carry out ``X``'s pending reduction over ``axis``
    (MESH-COLL-1). Every rank of each group gets identical bits (NUM-RED-3/4); ``avg`` divides
    the sum once by the group size, correctly rounded in the accum format."""
    x = _check(x, "all_reduce")
    axes = _axes(x, axis, "all_reduce")
    _check_op(op, "all_reduce")
    lay = x.layout
    pending = [a for a in axes if a in lay.partial]
    for a in axes:
        if a in lay.split_axes:
            raise CollectiveError(
                f"all_reduce over {a!r} of {x.type}: the tensor is split over {a!r} (dimension "
                f"{lay.dim_of(a)}), so the ranks hold different blocks, not contributions to one sum",
                fix=f"all_gather(x, axis={a!r}) to assemble it, or reduce a partial sum")
    if not pending:
        _warn((
            f"all_reduce over {'+'.join(axes)} of {x.type}: the tensor is not a pending partial sum over "
            f"that axis (it is replicated there), so it is returned unchanged — a GPU all_reduce would "
            f"multiply it by {x.mesh.axis_size(axes)}. Mark per-device contributions with "
            f"ShardSpec(..., reduce='sum') or produce them with a sharded op"))
        return x
    base = _base_op(x, pending, op, "all_reduce")
    wrote = _record("all_reduce", x, tuple(pending))
    if x.local is None:
        local = None
    else:
        with calling("all_reduce", op):   # avg folds a sum: the signature names avg (MESH-MP-10)
            local = _reduce_axes(x, tuple(pending), base)
        rest = tuple(a for a in lay.partial if a not in pending)
        if isinstance(local, ExactAccumulator) and not rest:
            local = local.round(x.policy.storage, rounding=x.policy.rounding, overflow=x.policy.overflow)
        if op == "avg":
            local = _average(x, local, tuple(pending))
    return _new(x, lay.replace(partial=tuple(a for a in lay.partial if a not in pending)), local, value=wrote)


# ---------------------------------------------------------------------------------------------
# splitting and joining dimensions

def scatter_blocks(mesh: Mesh, local, axis: str, dim: int) -> np.ndarray:
    """Stacked values (size 1 along ``axis``) cut along dimension ``dim`` into one block of
    ``ceil(n/p)`` per device of ``axis``, the last ones zero-padded; each process keeps the
    blocks of its own devices (MESH-MP-2)."""
    p, i, m = mesh.axis_size(axis), mesh.axis_index(axis), mesh.ndim
    src = local
    old_l = src.shape[m + dim]
    block = -(-old_l // p)
    if block * p != old_l:  # padding: the block grows to p equal pieces
        pad = [(0, 0)] * src.ndim
        pad[m + dim] = (0, block * p - old_l)
        src = np.pad(src, pad)
    pieces = src.reshape(src.shape[:m + dim] + (p, block) + src.shape[m + dim + 1:])
    pieces = np.squeeze(np.moveaxis(pieces, m + dim, i), axis=i + 1)  # the replicated (size 1) axis was at i + 1
    place = placement(mesh)
    if not place.single:
        pieces = pieces[(slice(None),) * i + (slice(place.start[i], place.start[i] + place.box[i]),)]
    return pieces


def _scatter_dim(x: DistTensor, local, axis: str, dim: int, layout):
    """Split dimension ``dim`` of stacked values (replicated over ``axis``) over ``axis``."""
    new_layout = layout.replace(dims=tuple(axes + (axis,) if d == dim else axes
                                           for d, axes in enumerate(layout.dims)))
    local_shape(x.shape, new_layout, x.mesh)  # a LayoutError for a split it does not allow
    if local is None:
        return new_layout, None
    _require_rounded(x, local, f"splitting dimension {dim} over {axis!r}")
    return new_layout, scatter_blocks(x.mesh, local, axis, dim)


def _gather_dim(x: DistTensor, local, axis: str, dim: int):
    """Join dimension ``dim`` (split over ``axis``, its minor-most axis) of stacked values."""
    mesh, lay = x.mesh, x.layout
    new_layout = lay.replace(dims=tuple(tuple(a for a in axes if a != axis) if d == dim else axes
                                        for d, axes in enumerate(lay.dims)))
    if local is None:
        return new_layout, None
    _require_rounded(x, local, f"all_gather over {axis!r}")
    m = mesh.ndim
    merged = _comm(x).all_gather(local, axis, dim)
    if not new_layout.dims[dim] and merged.shape[m + dim] != x.shape[dim]:  # whole again: drop padding
        merged = np.take(merged, np.arange(x.shape[dim]), axis=m + dim)
    return new_layout, merged


def _default_scatter_dim(x: DistTensor, axis: str) -> int:
    return next((d for d, axes in enumerate(x.layout.dims) if not axes), 0)


def _check_dim(x: DistTensor, dim, what: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -x.ndim <= dim < x.ndim:
        raise CollectiveError(f"{what}: dim={dim!r} is not a dimension of {x.type}",
                              fix=f"use 0..{x.ndim - 1}")
    return int(dim) % x.ndim


def reduce_scatter(x, axis, dim=None, op: str = "sum") -> DistTensor:
    """``dist.collective.reduce_scatter(C_partial, axis="tp")``: carry out the pending reduction
    over ``axis`` and split dimension ``dim`` over it (MESH-COLL-2). ``dim`` defaults to the
    first whole dimension; a tensor already split over ``axis`` is returned unchanged, and a
    ``dim`` other than its split one is an error (MESH-COLL-8). The reduced values are those of
    :func:`all_reduce` (NUM-RED-3), so the two agree bit for bit."""
    x = _check(x, "reduce_scatter")
    (axis,) = _axes(x, axis, "reduce_scatter")
    _check_op(op, "reduce_scatter")
    dim = None if dim is None else _check_dim(x, dim, "reduce_scatter")
    lay = x.layout
    if axis in lay.split_axes:
        conflict = None if dim is None else scatter_conflict(x.type, axis, dim)
        if conflict is not None:
            raise CollectiveError(conflict[0], fix=conflict[1])
        _warn((
            f"reduce_scatter over {axis!r} of {x.type}: the tensor is not a partial sum — it is already "
            f"split over {axis!r} along dimension {lay.dim_of(axis)} — so it is returned unchanged"))
        return x
    dim = _default_scatter_dim(x, axis) if dim is None else dim
    if len(lay.partial) > 1:  # an exact sum still pending over other axes is not split (NUM-RED-4)
        _require_rounded(x, x.local, f"splitting dimension {dim} over {axis!r}")
    if axis in lay.partial:
        return _reduce_scatter_blocks(x, axis, dim, op)
    _warn((
        f"reduce_scatter over {axis!r} of {x.type}: the tensor is not a pending partial sum over "
        f"{axis!r} (it is replicated there), so nothing is reduced; it is only split along "
        f"dimension {dim}"))
    wrote = _record("reduce_scatter", x, (axis,))
    new_layout, local = _scatter_dim(x, x.local, axis, dim, lay)
    return _new(x, new_layout, local, value=wrote)


def _reduce_scatter_blocks(x: DistTensor, axis: str, dim: int, op: str) -> DistTensor:
    """The pending reduction over ``axis`` folded by the communicator only into the block of
    dimension ``dim`` each device keeps (a ring's bytes across processes, MESH-MP-4); the bits
    of :func:`all_reduce` followed by the split."""
    base = _base_op(x, [axis], op, "reduce_scatter")
    lay = x.layout
    new_layout, _ = _scatter_dim(x, None, axis, dim, lay.replace(partial=tuple(a for a in lay.partial if a != axis)))
    if x.local is not None:
        _check_rounding(x, base)
    wrote = _record("reduce_scatter", x, (axis,))
    with calling("reduce_scatter", op):
        local = None if x.local is None else _comm(x).reduce_scatter(x.local, axis, dim, base, x.policy)
    if op == "avg" and local is not None:
        local = _average(x, local, (axis,))
    return _new(x, new_layout, local, value=wrote)


def local_slice(x, axis: str, dim: int, padded: bool = False) -> DistTensor:
    """Split dimension ``dim`` of ``x`` (replicated over ``axis``) over ``axis``, each device
    keeping its block of data it already holds: no communication (MESH-REDIST-1 step 3)."""
    lay = x.layout.replace(padded=x.layout.padded or padded)
    new_layout, local = _scatter_dim(x, x.local, axis, dim, lay)
    return _new(x, new_layout, local)


def quiet():
    """A block whose collectives raise no :class:`CollectiveWarning` (dist's own steps), in
    this thread/context only."""
    return scoped(QUIET_COLLECTIVES, True)


def all_gather(x, axis, dim=None) -> DistTensor:
    """``all_gather(y_local, axis="tp")``: join the dimension split over ``axis`` (MESH-COLL-3);
    every rank then holds it whole (with respect to ``axis``)."""
    x = _check(x, "all_gather")
    (axis,) = _axes(x, axis, "all_gather")
    lay = x.layout
    if axis in lay.partial:
        raise CollectiveError(f"all_gather over {axis!r} of {x.type}: the tensor is a pending partial sum "
                              f"over {axis!r}; gathering would collect the contributions, not the value",
                              fix=f"all_reduce(x, axis={axis!r}) or reduce_scatter first")
    split_dim = lay.dim_of(axis)
    if split_dim is None:
        _warn((f"all_gather over {axis!r} of {x.type}: nothing is split over "
                                        f"{axis!r}; the tensor is returned unchanged"))
        return x
    if dim is not None and _check_dim(x, dim, "all_gather") != split_dim:
        raise CollectiveError(f"all_gather over {axis!r} along dim {dim}: {x.type} is split over {axis!r} "
                              f"along dimension {split_dim}", fix=f"pass dim={split_dim} or leave dim out")
    if lay.dims[split_dim][-1] != axis:
        raise LayoutError(f"all_gather over {axis!r} of {x.type}: dimension {split_dim} is split over "
                          f"{'+'.join(lay.dims[split_dim])} and {axis!r} is not the minor axis, so the "
                          f"gathered blocks would not be contiguous",
                          fix=f"gather {lay.dims[split_dim][-1]!r} first")
    wrote = _record("all_gather", x, (axis,), x.nbytes_per_device * x.mesh.axis_size(axis))
    new_layout, local = _gather_dim(x, x.local, axis, split_dim)
    return _new(x, new_layout, local, value=wrote)


def broadcast(x, axis, root: int = 0) -> DistTensor:
    """Copy rank ``root``'s local value to every rank along ``axis`` (MESH-COLL-4). A tensor
    replicated over ``axis`` is unchanged; a split one becomes the root's block (its global
    shape shrinks accordingly); a pending reduction over ``axis`` becomes the root's contribution."""
    x = _check(x, "broadcast")
    (axis,) = _axes(x, axis, "broadcast")
    p = x.mesh.axis_size(axis)
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < p:
        raise CollectiveError(f"broadcast root={root!r} is not a rank of axis {axis!r} (0..{p - 1})",
                              fix=f"pick a root between 0 and {p - 1}, the ranks of axis {axis!r}")
    lay = x.layout
    if axis not in lay.varying_axes:
        return x
    wrote = _record("broadcast", x, (axis,))
    _require_rounded(x, x.local, f"broadcast over {axis!r}")
    local = None if x.local is None else _comm(x).broadcast(x.local, axis, root)
    if axis in lay.partial:
        return _new(x, lay.replace(partial=tuple(a for a in lay.partial if a != axis)), local, value=wrote)
    d = lay.dim_of(axis)
    if lay.dims[d] != (axis,):
        raise LayoutError(f"broadcast over {axis!r}: dimension {d} of {x.type} is split over several axes",
                          fix="gather the other axes first")
    shape = tuple(x.local_shape[d] if k == d else n for k, n in enumerate(x.shape))
    new_layout = lay.replace(dims=tuple(() if k == d else a for k, a in enumerate(lay.dims)))
    return _new(x, new_layout, local, shape, value=wrote)


def all_to_all(x, axis, split_dim: int, concat_dim: int) -> DistTensor:
    """Each rank splits its block along ``split_dim`` into one piece per rank of ``axis``, sends
    piece ``j`` to rank ``j`` and concatenates what it receives along ``concat_dim``
    (MESH-COLL-5): a tensor split over ``axis`` along ``concat_dim`` comes out split along
    ``split_dim``; its global value is unchanged."""
    x = _check(x, "all_to_all")
    (axis,) = _axes(x, axis, "all_to_all")
    split_dim, concat_dim = _check_dim(x, split_dim, "all_to_all"), _check_dim(x, concat_dim, "all_to_all")
    lay = x.layout
    if lay.dim_of(axis) != concat_dim:
        raise CollectiveError(f"all_to_all over {axis!r}: {x.type} is not split over {axis!r} along "
                              f"concat_dim={concat_dim}", fix="concat_dim is the dimension currently split over the axis")
    if split_dim == concat_dim:
        return x
    wrote = _record("all_to_all", x, (axis,))
    with sim.paused(), calling("all_to_all"):
        gathered = all_gather(x, axis)
        new_layout, local = _scatter_dim(gathered, gathered.local, axis, split_dim, gathered.layout)
    return _new(x, new_layout, local, value=wrote)


# ---------------------------------------------------------------------------------------------
# point to point

def permute(x, axis, perm) -> DistTensor:
    """Move local values along ``axis``: ``perm`` is a list of ``(src, dst)`` rank pairs, a dict
    ``{src: dst}``, or an int shift (rank ``r`` sends to ``(r + shift) mod p``) (MESH-COLL-6).
    A rank that receives nothing gets zeros (as a GPU's buffer would be left unwritten, here
    defined). The layout is kept; the global value is the permuted blocks."""
    x = _check(x, "permute")
    (axis,) = _axes(x, axis, "permute")
    p = x.mesh.axis_size(axis)
    if isinstance(perm, (int, np.integer)) and not isinstance(perm, bool):
        pairs = [(r, (r + int(perm)) % p) for r in range(p)]
    else:
        pairs = list(perm.items()) if isinstance(perm, dict) else [tuple(q) for q in perm]
    srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
    for r in srcs + dsts:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < p:
            raise CollectiveError(f"permute over {axis!r}: rank {r!r} is outside 0..{p - 1}")
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise CollectiveError(f"permute over {axis!r}: pairs {pairs} send from or to one rank twice",
                              fix="each rank sends at most once and receives at most once")
    if x.layout.partial and axis in x.layout.partial:
        raise CollectiveError(f"permute over {axis!r} of a pending reduction over {axis!r} ({x.type})",
                              fix="all_reduce first")
    wrote = _record("permute", x, (axis,))
    if x.local is None:
        return _new(x, x.layout, None, value=wrote)
    _require_rounded(x, x.local, f"permute over {axis!r}")
    out = _comm(x).permute(x.local, axis, pairs)
    lay = x.layout
    if axis not in lay.varying_axes:
        # values now vary along the axis: record that as a split of a new leading view is not
        # possible, so permuting replicated data is only allowed when every rank gets its own value
        if sorted(dsts) != list(range(p)):
            raise CollectiveError(f"permute over {axis!r} of a tensor replicated over {axis!r} leaves some "
                                  "ranks without a value", fix="use a full permutation, or split the tensor first")
        return x
    return _new(x, lay, out, value=wrote)


class _Mailbox:
    """Sent tensors waiting for their :func:`recv`, first in, first out per (source sub-mesh,
    destination sub-mesh, tag), each with what the transport posted (``Communicator.send``) and
    the line of its send."""

    def __init__(self) -> None:
        self.queues: dict = defaultdict(deque)

    def pending(self) -> list:
        """``"<count> from <src>.. to <dst>.. (tag <t>) sent at <lines>"`` per pair with sends waiting."""
        return [f"{len(q)} from {k[0][2][0]}.. to {k[1][2][0]}.. (tag {k[2]}) sent at "
                + ", ".join(dict.fromkeys(line or "?" for _, _, line, _ in q)) for k, q in self.queues.items() if q]

    def check(self) -> None:
        """A :class:`CollectiveError` naming the sends never received (which are then forgotten)."""
        pending = self.pending()
        self.queues.clear()
        if pending:
            raise CollectiveError(f"unmatched sends: {'; '.join(pending)}",
                                  fix="every dist.send needs a dist.recv on the destination (same tag), "
                                      "in the same dist.mailbox_scope")


def _mailbox() -> _Mailbox:
    """The mailbox of the innermost :func:`mailbox_scope`; outside every scope the thread's own,
    made at its first use (``context.MAILBOX``)."""
    box = MAILBOX.get()
    if box is None:
        box = _Mailbox()
        MAILBOX.set(box)
    return box


@contextlib.contextmanager
def mailbox_scope():
    """Sends and receives inside the ``with`` block use a mailbox of their own: a send is
    received only in the block, and one never received is a :class:`CollectiveError` when the
    block ends (unless the block raised) (MESH-COLL-7)."""
    box = _Mailbox()
    with scoped(MAILBOX, box):
        yield
    box.check()


def _mesh_key(m: Mesh) -> tuple:
    return (m.axes, m.shape, m.devices)


def _reject_in_autodiff(what: str) -> None:
    """Sends and receives are I/O: an EffectError inside differentiated code (AD-EFFECT-1)."""
    transform = DIFFERENTIATING.get()
    if transform is not None:
        raise EffectError(f"{what} is a state/I-O effect inside code differentiated by {transform}: a derivative "
                          "cannot undo or replay it",
                          fix="send/recv outside the differentiated function (e.g. between pipeline stages, "
                              "differentiating each stage separately)")


def send(x, dst: Mesh, *, tag: int = 0) -> None:
    """Send ``x`` (on its sub-mesh, e.g. ``mesh.sub(pp=0)``) to the sub-mesh ``dst`` of the same
    shape: device ``i`` of the source sends its local value to device ``i`` of ``dst``
    (MESH-COLL-7). The matching :func:`recv` delivers it."""
    _reject_in_autodiff("dist.send")
    x = _check(x, "send")
    if not isinstance(dst, Mesh):
        raise CollectiveError(f"send needs dst=a dist.Mesh (a sub-mesh such as mesh.sub(pp=1)), got {dst!r}")
    if (dst.axes, dst.shape) != (x.mesh.axes, x.mesh.shape):
        raise CollectiveError(f"send from {x.mesh!r} to {dst!r}: the sub-meshes differ in shape, so the ranks "
                              "cannot be paired", fix="send between sub-meshes of one shape, e.g. stages of a pipeline")
    if set(dst.devices) & set(x.mesh.devices):
        raise CollectiveError(f"send from {x.mesh!r} to {dst!r}: the sub-meshes share devices",
                              fix="send between disjoint sub-meshes")
    wrote = events.fresh_id()
    events.transfer(list(x.mesh.devices), list(dst.devices), x.nbytes_per_device, reads=(events.value_id(x),),
                    writes=(wrote,))
    posted = _comm(x).send(x.local, dst, tag)
    _mailbox().queues[(_mesh_key(x.mesh), _mesh_key(dst), tag)].append((x, posted, user_location(), wrote))


def recv(src: Mesh, dst: Mesh, *, tag: int = 0) -> DistTensor:
    """Receive on ``dst`` what ``src`` sent with :func:`send` (first in, first out per tag). With
    no matching send this is a :class:`CollectiveError` (on a GPU it would hang)."""
    _reject_in_autodiff("dist.recv")
    for m, name in ((src, "src"), (dst, "dst")):
        if not isinstance(m, Mesh):
            raise CollectiveError(f"recv needs {name}=a dist.Mesh, got {m!r}")
    mailbox = _mailbox()
    queue = mailbox.queues.get((_mesh_key(src), _mesh_key(dst), tag))
    if not queue:
        waiting = "; ".join(mailbox.pending())
        raise CollectiveError(f"recv on {dst!r} from {src!r} (tag {tag}) has no matching send — on a GPU this "
                              f"recv would wait forever" + (f"; pending sends: {waiting}" if waiting else ""),
                              fix="call dist.send(x, dst) on the source sub-mesh first (same tag, same thread "
                                  "and dist.mailbox_scope)")
    x, posted, _, wrote = queue.popleft()
    return events.bind(DistTensor(x.type, dst, context.backend().communicator(dst).recv(posted, src, tag), x.name),
                       wrote)


def check_pending() -> None:
    """Raise a :class:`CollectiveError` if a tensor sent in the current mailbox (the innermost
    :func:`mailbox_scope`'s, else the thread's) was never received; such sends are forgotten."""
    box = MAILBOX.get()
    if box is not None:
        box.check()
