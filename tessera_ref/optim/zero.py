"""ZeRO-1: optimizer buffers split over a data-parallel axis (OPTIM-ZERO-1)."""
from __future__ import annotations

from ..dist import DistTensor
from ..errors import OptimError
from ..ops import FUNCTIONS as op
from .tree import type_of

__all__ = ["check_zero", "zero_layout", "split_dim", "on_shards"]


def check_zero(zero, axis, where: str) -> tuple:
    """``(zero, axis)`` if ``zero`` is 0 or 1 and ``axis`` a mesh axis name (OPTIM-ERR-1)."""
    if isinstance(zero, bool) or zero not in (0, 1) or not isinstance(axis, str):
        raise OptimError(f"{where}: zero={zero!r} with dp_axis={axis!r}: zero is 0 or 1 and dp_axis a mesh axis name",
                         fix="pass zero=1 (optimizer state split over dp_axis) or zero=0")
    return zero, axis


def zero_layout(x, axis: str, where: str):
    """The layout of ``x``'s buffers under ZeRO-1: its first whole dimension that the ``axis``
    size divides split over ``axis``; ``None`` (buffers as ``x``) when none does or ``x`` is
    not distributed or already varies over ``axis``."""
    if not isinstance(x, DistTensor):
        return None
    if axis not in x.mesh.axes:
        raise OptimError(f"{where}: zero=1 splits state over dp_axis={axis!r}, which the mesh {x.mesh} does not have",
                         fix=f"pass dp_axis= one of {list(x.mesh.axes)}, or zero=0")
    layout = x.layout.replace(partial=())
    if axis in layout.split_axes:
        return None
    n = x.mesh.axis_size(axis)
    for d, (size, axes) in enumerate(zip(x.shape, layout.dims)):
        if not axes and size % n == 0:
            return layout.replace(dims=layout.dims[:d] + ((axis,),) + layout.dims[d + 1:])
    return None


def split_dim(param, buffer, axis: str):
    """The dimension a buffer splits over ``axis`` where its parameter does not, or None."""
    lp, lb = type_of(param).layout, type_of(buffer).layout
    if lp is None or lb is None:
        return None
    return next((d for d, (a, b) in enumerate(zip(lp.dims, lb.dims)) if axis in b and axis not in a), None)


def on_shards(update, p, g, axis: str, dim):
    """``update(p, g) -> (p', *buffers)`` run on the ``axis`` shards of ``p`` and ``g`` along
    ``dim`` (``g`` reduce-scattered if it is a pending sum over ``axis``, else sliced locally);
    ``p'`` all-gathered back into ``p``'s layout. ``dim`` None: ``update(p, g)`` as it is."""
    if dim is None:
        return update(p, g)
    partial = type_of(g).layout.partial if type_of(g).layout is not None else ()
    g = op.reduce_scatter(g, axis, dim) if axis in partial else op.shard_slice(g, axis, dim)
    new, *buffers = update(op.shard_slice(p, axis, dim), g)
    return (op.all_gather(new, axis), *buffers)
