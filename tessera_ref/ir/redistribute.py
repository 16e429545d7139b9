"""The plan that moves a tensor from one layout into another (MESH-REDIST-1): a pure function
of the two :class:`~tessera_ref.ir.layout.ShardLayout` values, which
:func:`tessera_ref.dist.redistribute` executes and ``to_layout`` records as collective ops.

The plan, applied in this order, keeps the global value and every bit of it:

1. a pending reduction over an axis the target does not keep pending is carried out — by
   ``reduce_scatter`` when the target splits a dimension over that axis right where the
   current layout's splits of that dimension end, else by ``all_reduce``;
2. in every dimension, the mesh axes past the longest common prefix of the current and the
   target split are gathered (``all_gather``, minor axis first) — except an axis that the
   target splits another dimension over next (that dimension's splits so far being the
   target's up to it, and neither layout padded): that axis moves there with one
   ``all_to_all`` (each device sends ``1/p`` of its block instead of receiving ``p − 1`` blocks);
3. the target's remaining splits are taken by each device from data it already holds (a
   local slice: no communication).

Asking for a pending reduction the tensor does not have, or turning one reduction op into
another, is a :class:`~tessera_ref.errors.LayoutError`.
"""
from __future__ import annotations

from ..errors import LayoutError
from .layout import ShardLayout

__all__ = ["plan"]


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
