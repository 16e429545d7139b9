"""Sharding rules: the ``shard`` slot of a primitive (MESH-SHARD-1).

A rule says, from the operands' global types (each with its
:class:`~tessera_ref.ir.ShardLayout`) and the op's attributes, in which layout each operand
must be for the op to run device by device on local blocks with the *unchanged* attributes,
and in which layout each result then is::

    rule(attrs, *in_types) -> ShardPlan(operands=(layout, ...), results=(layout, ...), stacked=...,
                                        local_attrs=None)

The mesh executor (:mod:`tessera_ref.dist.propagate`) moves each operand into its requested
layout with collectives (MESH-REDIST-1), runs ``impl`` on the local blocks and attaches the
result layouts. ``stacked=True`` says ``impl`` accepts the mesh axes as extra leading batch
axes (elementwise ops, matmul), so all devices run in one call. Attributes that speak of global sizes (a ``reshape``'s shape)
are rewritten for the devices by ``local_attrs(attrs, local_in_types) -> attrs``; attributes
that differ from device to device (the row block a vocab-parallel ``take`` owns, MESH-SHARD-TAKE-1)
by ``device_attrs(attrs, coords, mesh, local_in_types) -> attrs`` with the device's mesh
coordinates ``{axis: index}`` (``impl`` then runs once per distinct block). A rule may
instead say how the op runs as other ops: ``expand(attrs, *operands) -> results`` binds
primitives on the distributed (or traced) operands, each then sharded by its own rule — how
``cross_entropy`` over a split vocabulary all-reduces only row statistics (MESH-SHARD-CE-1).

A result is *partial* (a pending reduction, MESH-LAYOUT-1) when the op sums over a dimension
split over a mesh axis — matmul with K split, ``sum`` over a split axis. That is where
sharding changes the summation order: each device sums its block in the canonical order
and NUM-RED-3 then folds the devices' partials, which is not the single-device K order
(under ``reduction="exact"`` both are the exact sum, so the bits agree).

Rules never see values; a rule whose choice depends on how many blocks a split makes (a
``reshape`` that un-merges a split dimension) asks :func:`split_count`, which knows the mesh
of the program being traced or run. Rules are shared by families of ops:

- :func:`elementwise_rule` — results follow the operands' splits (dimension by dimension,
  after broadcasting); pending sums survive only where the op is linear in them;
- :func:`replicated_rule` — every operand whole on every device (ops whose attributes
  speak of global sizes, or whose algorithm needs the whole input: fft, cholesky, svd, ...);
- :func:`keep_whole_rule` — splits are kept except along the dimensions the op works on.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..context import PLANNING_MESH, scoped
from ..ir.layout import ShardLayout

__all__ = ["ShardPlan", "elementwise_rule", "linear_rule", "replicated_rule", "keep_whole_rule",
           "batch_rule", "whole", "planning_on", "split_count"]


def planning_on(mesh):
    """Rules called inside this ``with`` block plan for ``mesh`` (see :func:`split_count`)."""
    return scoped(PLANNING_MESH, mesh)


def split_count(axes) -> int | None:
    """Into how many blocks a dimension split over the mesh axes ``axes`` is cut on the mesh
    being planned for (the traced or running program's), or ``None`` when no mesh is known —
    rules then choose what holds on any mesh."""
    mesh = PLANNING_MESH.get()
    return None if mesh is None else mesh.axis_size(tuple(axes))


@dataclass(frozen=True)
class ShardPlan:
    """The layouts an op needs and gives (see the module docstring)."""

    operands: tuple
    results: tuple
    stacked: bool = False
    local_attrs: object = None
    device_attrs: object = None
    expand: object = None


def whole(layout: ShardLayout, dims=None) -> ShardLayout:
    """``layout`` with the given dimensions (all when ``None``; negative ones count from the end)
    made whole and no pending reduction."""
    keep = set() if dims is None else set(range(layout.rank)) - {d % layout.rank for d in dims}
    return ShardLayout(tuple(axes if d in keep else () for d, axes in enumerate(layout.dims)), padded=layout.padded)


def _aligned(types, out_rank: int) -> list:
    """For each operand, its dims aligned to the output's (right-aligned broadcasting):
    ``aligned[i][d]`` is the operand's mesh axes for output dim ``d`` (``None`` where it has no
    such dim or broadcasts a size-1 dim)."""
    out = []
    for t in types:
        offset = out_rank - t.rank
        row = [None] * out_rank
        for d in range(t.rank):
            row[offset + d] = t.layout.dims[d] if t.shape[d] != 1 else None
        out.append(row)
    return out


def _elementwise_plan(types, linear_in, n_results=1) -> ShardPlan:
    if any(getattr(t.policy, "rounding", None) == "stochastic" for t in types):
        return replicated_rule({}, *types)  # stochastic rounding is keyed by the global index
    rank = max(t.rank for t in types)
    aligned = _aligned(types, rank)
    used, out_dims = set(), []
    for d in range(rank):
        pick = next((row[d] for row in aligned if row[d] and not set(row[d]) & used), ())
        used |= set(pick)
        out_dims.append(tuple(pick))
    partials = [t.layout.partial if t.layout.partial_op == "sum" else None for t in types]
    keep_partial = ()
    if any(partials):
        first = next(p for p in partials if p)
        if linear_in == "all" and all(p == first for p in partials):
            keep_partial = first
        elif linear_in == "one" and sum(bool(p) for p in partials) == 1:
            keep_partial = first
        elif linear_in == "first" and partials[0] and not any(partials[1:]):
            keep_partial = first
    padded = any(t.layout.padded for t in types)  # blocks of a padded operand stay padded
    operands = []
    for t in types:
        offset = rank - t.rank
        dims = tuple(out_dims[offset + d] if t.shape[d] != 1 else () for d in range(t.rank))
        keep = keep_partial if t.layout.partial == keep_partial and t.layout.partial_op == "sum" else ()
        operands.append(ShardLayout(dims, keep, padded=padded))
    result = ShardLayout(tuple(out_dims), keep_partial, padded=padded)
    return ShardPlan(tuple(operands), (result,) * n_results, stacked=True)


def elementwise_rule(attrs, *types) -> ShardPlan:
    """Elementwise ops that are not linear (mul of two pending sums, exp, comparisons, ...):
    results split like the operands; every pending reduction is carried out first."""
    return _elementwise_plan(types, linear_in=None)


def linear_rule(kind: str):
    """Elementwise ops linear in their pending sums: ``kind="all"`` (add, sub, neg: a sum of
    partials is partial), ``"one"`` (mul: partial · whole is partial) or ``"first"`` (div:
    partial / whole is partial).
    A pending sum combined with a whole value by add would add it once per rank, so that is
    reduced first — never silently (DESIGN §7)."""
    def rule(attrs, *types) -> ShardPlan:
        return _elementwise_plan(types, linear_in=kind)
    return rule


def replicated_rule(attrs, *types) -> ShardPlan:
    """Every operand whole on every device; results replicated. Also the rule of ops whose
    values are keyed by the global element index (dropout, stochastic rounding)."""
    return ShardPlan(tuple(whole(t.layout) for t in types), None)


def keep_whole_rule(axes_of):
    """Ops that work along some dimensions of their first operand (``axes_of(attrs, type)``
    gives them) and map the others through: those dimensions are made whole, the others keep
    their split; other operands (weights, biases) are made whole. Results take the first
    operand's layout."""
    def rule(attrs, x, *rest) -> ShardPlan:
        lay = whole(x.layout, axes_of(attrs, x))
        return ShardPlan((lay,) + tuple(whole(t.layout) for t in rest), (lay,))
    return rule


def batch_rule(ndims: int):
    """Ops on the last ``ndims`` dimensions of every operand (attention): those dimensions whole;
    the leading (batch, head) dimensions all take the first operand's splits."""
    def rule(attrs, *types) -> ShardPlan:
        first = types[0]
        lead = tuple(first.layout.dims[:first.rank - ndims])
        operands = tuple(ShardLayout(lead[len(lead) - (t.rank - ndims):] + ((),) * ndims, padded=first.layout.padded)
                         if t.rank >= ndims else whole(t.layout) for t in types)
        return ShardPlan(operands, (operands[0],))
    return rule
