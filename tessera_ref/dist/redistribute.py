"""Moving a tensor into another layout (MESH-REDIST-1).

The plan, applied in this order, keeps the global value and every bit of it:

1. a pending reduction over an axis the target does not keep pending is carried out — by
   ``reduce_scatter`` when the target splits a dimension over that axis right where the
   current layout's splits of that dimension end, else by ``all_reduce``;
2. in every dimension, the mesh axes past the longest common prefix of the current and the
   target split are gathered (``all_gather``, minor axis first) — except an axis that the
   target splits another dimension over next (that dimension's splits so far being the
   target's up to it): that axis moves there with one ``all_to_all`` (each device sends
   ``1/p`` of its block instead of receiving ``p − 1`` blocks);
3. the target's remaining splits are taken by each device from data it already holds (a
   local slice: no communication).

Asking for a pending reduction the tensor does not have is a
:class:`~tessera_ref.errors.LayoutError`.
"""
from __future__ import annotations

import warnings

from ..errors import CollectiveWarning, LayoutError
from ..ir import ShardLayout
from . import collectives as coll
from .spec import resolve_layout
from .tensor import DistTensor, local_shape

__all__ = ["redistribute", "plan"]


def plan(current: ShardLayout, target: ShardLayout) -> list:
    """The steps of MESH-REDIST-1 as ``(kind, axis, dim)`` tuples (``kind`` in ``all_reduce``,
    ``reduce_scatter``, ``all_gather``, ``slice``) and ``("all_to_all", axis, (split_dim,
    concat_dim))``."""
    if current.partial and target.partial and current.partial_op != target.partial_op:
        raise LayoutError(f"cannot turn a pending {current.partial_op} into a pending {target.partial_op}",
                          fix="reduce it first")
    extra = [a for a in target.partial if a not in current.partial]
    if extra:
        raise LayoutError(f"cannot redistribute {current} to {target}: it has no pending reduction over {extra}",
                          fix="a pending sum comes from an op (e.g. matmul with K split) or ShardSpec(reduce='sum')")
    steps, dims = [], [list(d) for d in current.dims]
    for a in current.partial:
        if a in target.partial:
            continue
        d = target.dim_of(a)
        if d is not None and not any(a in ax for ax in dims) and tuple(dims[d]) + (a,) == target.dims[d][:len(dims[d]) + 1]:
            steps.append(("reduce_scatter", a, d))
            dims[d].append(a)
        else:
            steps.append(("all_reduce", a, None))
    for d, (cur, tgt) in enumerate(zip(dims, target.dims)):
        common = 0
        while common < min(len(cur), len(tgt)) and cur[common] == tgt[common]:
            common += 1
        while len(cur) > common:
            a = cur.pop()
            e = target.dim_of(a)
            if e is not None and e != d and not (current.padded or target.padded) \
                    and dims[e] == list(target.dims[e][:target.dims[e].index(a)]):
                steps.append(("all_to_all", a, (e, d)))
                dims[e].append(a)
            else:
                steps.append(("all_gather", a, d))
    for d, tgt in enumerate(target.dims):
        for a in tgt[len(dims[d]):]:
            steps.append(("slice", a, d))
    return steps


def redistribute(x: DistTensor, layout) -> DistTensor:
    """``x`` in ``layout`` (a :class:`~tessera_ref.dist.ShardSpec` or a layout) by MESH-REDIST-1."""
    target = resolve_layout(layout, x.ndim)
    if target == x.layout:
        return x
    for a in target.split_axes + target.partial:
        x.mesh.axis_index(a)
    if target.padded and not x.layout.padded:  # even blocks are padded blocks without padding
        x = _padded_as(x, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CollectiveWarning)
        for kind, axis, dim in plan(x.layout, target):
            if kind == "all_reduce":
                x = coll.all_reduce(x, axis, x.layout.partial_op)
            elif kind == "reduce_scatter":
                x = coll.reduce_scatter(x, axis, dim, x.layout.partial_op)
            elif kind == "all_gather":
                x = coll.all_gather(x, axis, dim)
            elif kind == "all_to_all":
                x = coll.all_to_all(x, axis, *dim)
            else:
                x = coll.local_slice(x, axis, dim, target.padded)
    if x.layout.padded != target.padded:
        x = _padded_as(x, target.padded)
    return x


def _padded_as(x: DistTensor, padded: bool) -> DistTensor:
    """``x`` with its layout's ``padded`` flag set: no data moves. Dropping the flag needs every
    split to be even (a :class:`LayoutError` from :func:`local_shape` otherwise)."""
    layout = x.layout.replace(padded=padded)
    local_shape(x.shape, layout, x.mesh)
    return DistTensor(x.type.with_layout(layout), x.mesh, x.local, x.name)
