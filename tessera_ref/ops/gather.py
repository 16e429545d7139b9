"""Gathers and their adjoint: ``take`` (embedding lookup, GRAPH-TAKE-1) and ``scatter_add``
(GRAPH-SCATTER-1), with the vocab-parallel sharding rule (MESH-SHARD-TAKE-1).

``take(table, ids, axis)`` copies rows (slices along ``axis``) of ``table`` bit for bit;
``scatter_add(updates, ids, size, axis)`` is its transpose: each output row is the sum, in
ascending source index, of the updates whose id names it. The spec holds the exact rules.
"""
from __future__ import annotations

import numpy as np

from ..errors import OpError, ShapeError
from ..ir import ShardLayout, TensorType
from ..numerics import accum_op
from ..numerics.arith import to_accum
from .adjoint import op
from .bind import bind
from .primitive import Attr, Cost, define
from .sharding import ShardPlan
from .typecheck import (SEED_ATTR, check_int, nbytes, normalize_axis, require_float, require_int, require_seed,
                        to_storage)

__all__ = ["take", "scatter_add"]


def _check_block(value) -> tuple:
    start, total = (check_int(v) for v in value)
    if start < 0 or total < 0:
        raise ValueError("expected (start, total) with both >= 0")
    return start, total


_AXIS = {"axis": Attr(0, check_int, "the axis of the table whose entries the ids name")}
_BLOCK = {"block": Attr(None, _check_block, "(start, total): this table is rows [start, start + n) of one "
                                            "of `total` rows (set per device by the vocab-parallel rule, "
                                            "MESH-SHARD-TAKE-1); unset: the whole table")}


def _out_of_range(name: str, ids: np.ndarray, size: int, table, location) -> OpError:
    flat = ids.reshape(-1).astype(np.int64)
    bad = flat[(flat < 0) | (flat >= size)]
    worst = int(bad.max()) if (bad >= size).any() else int(bad.min())
    return OpError(f"{name}: index {worst} is out of range for a table of {size} entries ({table}); the "
                   f"largest index is {int(flat.max())}, the least {int(flat.min())}",
                   fix=f"ids must lie in [0, {size}) (negative ids do not wrap around)", location=location)


# -- take ---------------------------------------------------------------------------------------
def _take_canonicalize(attrs, table, ids):
    return {"axis": normalize_axis("take", attrs["axis"], table)}


def _take_infer(attrs, table, ids):
    require_int("take (ids)", ids)
    axis = attrs["axis"]
    return TensorType(table.shape[:axis] + ids.shape + table.shape[axis + 1:], table.policy)


def _take_impl(call, table, ids):
    axis, n = call.attrs["axis"], table.shape[call.attrs["axis"]]
    start, total = call.attrs.get("block", (0, n))
    idx = ids.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= total):
        raise _out_of_range("take", idx, total, call.in_types[0], call.location)
    local = idx - start
    inside = (local >= 0) & (local < n)
    out = np.take(table, np.where(inside, local, 0), axis=axis)
    if not inside.all():  # rows of other devices' blocks: the identity of the pending sum (−0)
        zero = np.asarray(-0.0 if table.dtype.kind not in "iub" else 0).astype(table.dtype)
        mask = inside.reshape((1,) * axis + inside.shape + (1,) * (table.ndim - axis - 1))
        out = np.where(mask, out, zero)
    return np.ascontiguousarray(out, dtype=call.out_types[0].dtype)


def _take_cost(call) -> Cost:
    """No arithmetic: the ids read and each gathered row read and written."""
    return Cost(0, nbytes(call.in_types[1]) + 2 * nbytes(call.out_types[0]))


def _take_vjp(attrs, primals, results, cts):
    """AD-TAKE-1: the table's cotangent is ``scatter_add`` of the result's; ids get none."""
    table, ids = primals
    axis = attrs["axis"]
    return op().scatter_add(cts[0], ids, table.shape[axis], axis), None  # a stochastic policy: the rule's key


def _take_jvp(attrs, primals, tangents, results):
    """Linear in the table: the tangent taken at the same ids."""
    return (None if tangents[0] is None else bind(TAKE, tangents[0], primals[1], axis=attrs["axis"]),)


def _keep(dims, used: set) -> tuple:
    """``dims`` with every entry that reuses a mesh axis of ``used`` made whole; ``used`` grows."""
    out = []
    for axes in dims:
        axes = () if set(axes) & used else tuple(axes)
        used |= set(axes)
        out.append(axes)
    return tuple(out)


def _block_attrs(axes: tuple, total: int):
    """The per-device ``block`` attribute of a table split along its gather axis over ``axes``:
    the device's block number (row-major over ``axes``) times the local length."""
    def device_attrs(attrs, coords, mesh, local_types):
        b = 0
        for a in axes:
            b = b * mesh.axis_size(a) + coords[a]
        return {**attrs, "block": (b * local_types[0].shape[attrs["axis"]], total)}
    return device_attrs


def _take_shard(attrs, table, ids) -> ShardPlan:
    """MESH-SHARD-TAKE-1: the table's gather axis split over mesh axes ``A`` → every device gathers
    the ids in its block and the result is a pending sum over ``A`` (Megatron's vocab-parallel
    embedding); otherwise local: the result takes the table's other splits and the ids' splits."""
    axis, tl = attrs["axis"], table.layout
    if tl.partial and (tl.partial_op != "sum" or tl.dims[axis]):
        tl = tl.replace(partial=())  # a pending max, or one along with a split gather axis: carried out first
    split = tuple(tl.dims[axis])
    used = set(split) | set(tl.partial)
    lead = _keep(tl.dims[:axis], used)
    id_dims = _keep(ids.layout.dims, used)
    rest = _keep(tl.dims[axis + 1:], used)
    operands = (ShardLayout(lead + (split,) + rest, tl.partial, padded=tl.padded),
                ShardLayout(id_dims, padded=ids.layout.padded))
    result = ShardLayout(lead + id_dims + rest, tuple(tl.partial) + split)
    return ShardPlan(operands, (result,), device_attrs=_block_attrs(split, table.shape[axis]) if split else None)


TAKE = define("take", infer=_take_infer, impl=_take_impl, cost=_take_cost, spec="GRAPH-TAKE-1",
              attrs={**_AXIS, **_BLOCK}, canonicalize=_take_canonicalize, vjp=_take_vjp, jvp=_take_jvp,
              shard=_take_shard)


def take(table, ids, axis: int = 0):
    """``table`` entries along ``axis`` named by the integer ``ids`` (GRAPH-TAKE-1): the embedding
    lookup ``E[ids]``; out-of-range ids are an OpError naming the largest id and the table size."""
    return bind(TAKE, table, ids, axis=axis)


# -- scatter_add --------------------------------------------------------------------------------
_SIZE = {"size": Attr(check=check_int, doc="the length of the result's scattered axis (the table's rows)")}


def _scatter_canonicalize(attrs, updates, ids):
    if ids.rank > updates.rank:
        raise ShapeError(f"scatter_add: ids {ids} have more dimensions than the updates {updates}",
                         fix="the updates are [..., *ids.shape, ...] (what take returns)")
    return {"axis": normalize_axis("scatter_add", attrs["axis"],
                                   TensorType((1,) * (updates.rank - ids.rank + 1), updates.policy))}


def _scatter_infer(attrs, updates, ids):
    require_int("scatter_add (ids)", ids)
    require_float("scatter_add", updates)
    axis, k = attrs["axis"], ids.rank
    if tuple(updates.shape[axis:axis + k]) != tuple(ids.shape):
        raise ShapeError(f"scatter_add: updates {updates} do not have the ids' shape {list(ids.shape)} at axis {axis}",
                         fix="pass updates shaped like take(table, ids, axis)'s result")
    if attrs["size"] < 0:
        raise ShapeError(f"scatter_add: size {attrs['size']} is negative", fix="pass the table's length")
    out = TensorType(updates.shape[:axis] + (attrs["size"],) + updates.shape[axis + k:], updates.policy)
    require_seed("scatter_add", attrs, out)
    return out


def scatter_rows(rows: np.ndarray, flat: np.ndarray, size: int, accum) -> np.ndarray:
    """``[size, ...]`` accum-format sums of the ``rows[j]`` with ``flat[j] == r``, each folded
    sequentially in ascending ``j`` (GRAPH-SCATTER-1); rows nobody names are +0. One vectorized
    pass per multiplicity level."""
    order = np.argsort(flat, kind="stable")  # ascending id, ascending source index within an id
    sorted_ids = flat[order]
    starts = np.searchsorted(sorted_ids, sorted_ids, side="left")
    level = np.arange(flat.size) - starts  # the j-th contribution to its row
    out = np.zeros((size,) + rows.shape[1:], dtype=to_accum(np.zeros(0, rows.dtype), accum).dtype)
    for k in range(int(level.max()) + 1 if flat.size else 0):
        pick = order[level == k]
        target, value = flat[pick], to_accum(rows[pick], accum)
        out[target] = value if k == 0 else accum_op("add", out[target], value, accum=accum).reshape(value.shape)
    return out


def _scatter_impl(call, updates, ids):
    axis, size = call.attrs["axis"], call.attrs["size"]
    idx = ids.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise _out_of_range("scatter_add", idx, size, call.out_types[0], call.location)
    moved = np.moveaxis(updates.reshape(updates.shape[:axis] + (idx.size,) + updates.shape[axis + idx.ndim:]), axis, 0)
    sums = scatter_rows(moved, idx.reshape(-1), size, call.out_types[0].policy.accum)
    return to_storage(call, np.moveaxis(sums, 0, axis))


def _scatter_cost(call) -> Cost:
    """One add per update element; updates and ids read, the result written."""
    n = int(np.prod(call.in_types[0].shape))
    return Cost(n, sum(nbytes(t) for t in call.in_types) + nbytes(call.out_types[0]))


def _scatter_vjp(attrs, primals, results, cts):
    """AD-TAKE-1: the updates' cotangent is ``take`` of the result's; ids get none."""
    return bind(TAKE, cts[0], primals[1], axis=attrs["axis"]), None


def _scatter_jvp(attrs, primals, tangents, results):
    """Linear in the updates."""
    if tangents[0] is None:
        return (None,)
    return (bind(SCATTER_ADD, tangents[0], primals[1], **attrs),)


def _scatter_shard(attrs, updates, ids) -> ShardPlan:
    """MESH-SHARD-TAKE-1: ids (and the updates' matching dimensions) split over mesh axes → each
    device scatters its own contributions and the result is a pending sum over those axes
    (the data-parallel gradient of an embedding); the updates' other splits are kept. Under
    ``reduction="exact"`` the ids and updates are gathered over their split axes instead: each
    row's sum is the canonical fold in ascending source index, which a sum of per-device folds
    would not reproduce — so the bits do not depend on the mesh."""
    axis, k, ul = attrs["axis"], ids.rank, updates.layout
    if ul.partial and ul.partial_op != "sum":
        ul = ul.replace(partial=())
    used = set(ul.partial)
    id_dims = _keep(ids.layout.dims, used)
    if getattr(updates.policy, "reduction", None) == "exact":
        id_dims = tuple(() for _ in id_dims)
    lead = _keep(ul.dims[:axis], used)
    rest = _keep(ul.dims[axis + k:], used)
    operands = (ShardLayout(lead + id_dims + rest, ul.partial, padded=ul.padded),
                ShardLayout(id_dims, padded=ids.layout.padded))
    pending = tuple(ul.partial) + tuple(a for d in id_dims for a in d)
    return ShardPlan(operands, (ShardLayout(lead + ((),) + rest, pending),))


SCATTER_ADD = define("scatter_add", infer=_scatter_infer, impl=_scatter_impl, cost=_scatter_cost,
                     spec="GRAPH-SCATTER-1", attrs={**_SIZE, **_AXIS, **SEED_ATTR},
                     canonicalize=_scatter_canonicalize, vjp=_scatter_vjp, jvp=_scatter_jvp,
                     shard=_scatter_shard)


def scatter_add(updates, ids, size: int, axis: int = 0, *, seed=None):
    """The ``[..., size, ...]`` tensor whose entry ``r`` along ``axis`` is the sum of the updates
    whose id is ``r``, added in ascending source index in the accum format and rounded once
    into storage (GRAPH-SCATTER-1); the transpose of :func:`take`."""
    return bind(SCATTER_ADD, updates, ids, size=size, axis=axis, seed=seed)
