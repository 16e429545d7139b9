"""Moving a tensor into another layout (MESH-REDIST-1): :func:`redistribute` runs the steps of
:func:`tessera_ref.ir.redistribute.plan` with the collectives of :mod:`.collectives`, setting
or clearing ``padded`` without moving data.
"""
from __future__ import annotations

from ..ir.redistribute import plan
from . import collectives as coll
from . import events
from .spec import resolve_layout
from .tensor import DistTensor, local_shape

__all__ = ["redistribute"]


def redistribute(x: DistTensor, layout) -> DistTensor:
    """``x`` in ``layout`` (a :class:`~tessera_ref.dist.ShardSpec` or a layout) by MESH-REDIST-1."""
    target = resolve_layout(layout, x.ndim)
    if target == x.layout:
        return x
    for a in target.split_axes + target.partial:
        x.mesh.axis_index(a)
    if target.padded and not x.layout.padded:  # even blocks are padded blocks without padding
        x = _padded_as(x, True)
    with coll.quiet():
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
    """``x`` with its layout's ``padded`` flag set: no data moves (the same value, SIM-TL-5). Dropping the flag needs every
    split to be even (a :class:`LayoutError` from :func:`local_shape` otherwise)."""
    layout = x.layout.replace(padded=padded)
    local_shape(x.shape, layout, x.mesh)
    return events.bind(DistTensor(x.type.with_layout(layout), x.mesh, x.local, x.name), events.value_id(x))
