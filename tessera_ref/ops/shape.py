"""Shape ops (GRAPH-RESHAPE-1 … GRAPH-SPLITQKV-1): ops that move values and never round.

``reshape transpose broadcast_to slice concat split split_qkv`` are primitives; ``permute``
(``transpose``), ``getitem`` (``slice`` then ``reshape``), ``expand_dims`` and ``squeeze``
(``reshape``) are user functions built on them. Every element works (numbers of any format
and policy, ``i1``, ``index``, ``complex<f32>``); a result holds the operand's element and
copies of its element codes, so the ops are exact by construction.

Graph IR tensors are dense and row-major. Attributes are stored in canonical form (the
``canonicalize`` hook): ``reshape`` has no ``-1``, ``transpose`` always has ``perm``, axes
are non-negative, and ``slice`` holds one tight ``range`` triple per axis. Symbolic
dimensions pass through an op when the rule can prove the result's sizes; otherwise the op
raises a :class:`~tessera_ref.errors.ShapeError` asking for static shapes.
"""
from __future__ import annotations

import builtins
import math
from collections import Counter

import numpy as np

from ..errors import LayoutError, OpError, ShapeError
from ..ir import TensorType
from ..ir.types import SYMBOL_RE
from .adjoint import dilate_axis, linear_jvp, pad_axis, unbroadcast, zeros_like
from .bind import bind
from .sharding import ShardPlan, replicated_rule, split_count, whole
from .primitive import Attr, Cost, define
from .typecheck import (check_int, check_int_tuple, elementwise_cost, nbytes, normalize_axis,
                        same_element)
from .values import FUNCTIONS, TensorOperators, asarray

__all__ = ["reshape", "transpose", "permute", "broadcast_to", "slice", "getitem", "concat", "split",
           "split_qkv", "expand_dims", "squeeze"]


class IndexOutOfRange(ShapeError, IndexError):
    """An integer index outside its axis; also an IndexError, so ``for row in array`` stops."""


# -- shared pieces ----------------------------------------------------------------------------
def _dims(value) -> tuple:
    """Attribute check of a shape: a tuple of ints and symbol names."""
    if isinstance(value, (int, str, np.integer)) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise TypeError("expected a tuple of ints and symbol names")
    out = []
    for d in value:
        if isinstance(d, str):
            if not SYMBOL_RE.fullmatch(d):
                raise ValueError(f"{d!r} is not a symbol name")
            out.append(d)
        else:
            out.append(check_int(d))
    return tuple(out)


def _text(shape) -> str:
    """A shape as the IR writes it: ``[B]x64`` (``[]`` for rank 0)."""
    return "x".join(f"[{d}]" if isinstance(d, str) else str(d) for d in shape) or "[]"


def _sizes(types, arrays) -> dict:
    """``{symbol: size}`` read off the operands' arrays."""
    return {d: n for t, a in zip(types, arrays) for d, n in zip(t.shape, a.shape) if isinstance(d, str)}


def _concrete(shape, sizes) -> tuple:
    return tuple(sizes[d] if isinstance(d, str) else d for d in shape)


def _moved(call) -> Cost:
    """No FLOPs; every operand read once and every result written once."""
    return elementwise_cost(call, 0)


def _type_of(x) -> TensorType:
    return x.type if isinstance(x, TensorOperators) else asarray(x).type


# -- reshape ------------------------------------------------------------------------------------
def _split_dims(shape):
    """(product of the int dims, Counter of the symbolic dims)."""
    return math.prod(d for d in shape if isinstance(d, int)), Counter(d for d in shape if isinstance(d, str))


def _reshape_error(x, shape, why):
    return ShapeError(f"reshape: cannot reshape {x} to shape ({_text(shape)}): {why}",
                      fix="the new shape must hold the same number of elements; symbolic dimensions must "
                          "appear unchanged on both sides (or trace with concrete shapes)")


def _reshape_canonicalize(attrs, x):
    shape = attrs["shape"]
    if any(isinstance(d, int) and d < -1 for d in shape) or shape.count(-1) > 1:
        raise _reshape_error(x, shape, "dimensions are sizes >= 0, symbol names, or a single -1")
    if -1 not in shape:
        return {}
    size, syms = _split_dims(x.shape)
    known, known_syms = _split_dims(tuple(d for d in shape if d != -1))
    rest = syms - known_syms
    if known_syms - syms:
        raise _reshape_error(x, shape, f"symbolic dimension(s) {sorted(known_syms - syms)} are not in the operand")
    if not rest and known and size % known == 0:
        fill = size // known
    elif sum(rest.values()) == 1 and size == known:
        fill = next(iter(rest))
    else:
        raise _reshape_error(x, shape, "the -1 dimension cannot be inferred")
    return {"shape": tuple(fill if d == -1 else d for d in shape)}


def _reshape_infer(attrs, x):
    shape = attrs["shape"]
    if _split_dims(shape) != _split_dims(x.shape):
        raise _reshape_error(x, shape, "the element counts differ (or cannot be proven equal)")
    return TensorType(shape, x.policy)


def _reshape_impl(call, a):
    return a.reshape(_concrete(call.out_types[0].shape, _sizes(call.in_types, (a,))))


def _reshape_shard(attrs, x):
    """MESH-SHARD-6: a split dimension keeps its split when it starts a result dimension
    (the same number of elements before both) that its blocks cut into whole blocks — the
    result dimension is a multiple of it (kept whole, or merged with the dimensions after
    it: ``[H, D] -> [H*D]`` with ``H`` split), or the number of blocks divides the result
    dimension (un-merged: ``[H*D] -> [H, D]`` with ``H*D`` split in ``p | H`` blocks). Every
    device's block is then one contiguous run of that result dimension. Other splits are
    gathered (a padded or symbolic shape: all of them). A pending reduction stays pending:
    reshape moves elements and combines none. The devices reshape their blocks to the local
    shape."""
    lay, shape, out = x.layout, x.shape, attrs["shape"]
    dims = [()] * len(out)
    if not lay.padded and all(isinstance(d, int) for d in shape + out):
        starts = {math.prod(out[:j]): j for j in range(len(out))}
        for i, axes in enumerate(lay.dims):
            j = starts.get(math.prod(shape[:i]))
            if not axes or j is None or not shape[i]:
                continue
            blocks = split_count(axes)
            if out[j] % shape[i] == 0 or (blocks is not None and out[j] % blocks == 0):
                dims[j] = axes
    kept = {axes for axes in dims if axes}
    operand = lay.replace(dims=tuple(axes if axes in kept else () for axes in lay.dims))

    def local_attrs(attrs, local_in):
        """The result shape of one device's block: each kept dimension shrinks by its split."""
        (local,) = local_in
        new = list(out)
        for i, axes in enumerate(operand.dims):
            if axes:
                j = dims.index(axes)
                new[j] = out[j] // (shape[i] // local.shape[i])
        return {**attrs, "shape": tuple(new)}
    return ShardPlan((operand,), (lay.replace(dims=tuple(dims)),), local_attrs=local_attrs)


def _reshape_vjp(attrs, primals, results, cts):
    """AD-RESHAPE-1: the cotangent reshaped back to the operand's shape."""
    return (reshape(cts[0], primals[0].shape),)


RESHAPE = define("reshape", infer=_reshape_infer, impl=_reshape_impl, cost=lambda call: Cost(0, 0),
                 spec="GRAPH-RESHAPE-1", shard=_reshape_shard, canonicalize=_reshape_canonicalize,
                 vjp=_reshape_vjp, jvp=linear_jvp("reshape"),
                 attrs={"shape": Attr(check=_dims, doc="the new shape: ints, symbol names, at most one -1")})


def reshape(x, shape):
    """``x`` with shape ``shape`` in row-major order (GRAPH-RESHAPE-1).

    ``shape`` holds sizes, symbol names and at most one ``-1`` (inferred). With symbolic
    dimensions the reshape must be provably size-preserving: the same symbols on both
    sides and the same product of the static sizes (``[B]x64 -> [B]x8x8``).
    """
    return bind(RESHAPE, x, shape=shape)


# -- transpose ------------------------------------------------------------------------------------
def _transpose_canonicalize(attrs, x):
    perm = attrs.get("perm", tuple(range(x.rank))[::-1])
    if len(perm) != x.rank:
        raise ShapeError(f"transpose: perm {list(perm)} has {len(perm)} entries for {x} (rank {x.rank})",
                         fix=f"give one axis per dimension, a permutation of 0..{x.rank - 1}")
    perm = tuple(normalize_axis("transpose", p, x) for p in perm)
    if len(set(perm)) != len(perm):
        raise ShapeError(f"transpose: perm {list(attrs['perm'])} is not a permutation of the axes of {x}",
                         fix="name every axis exactly once")
    return {"perm": perm}


def _transpose_shard(attrs, x):
    """MESH-SHARD-5: the splits move with their dimensions; a pending sum stays pending (linear)."""
    lay = x.layout
    return ShardPlan((lay,), (lay.replace(dims=tuple(lay.dims[p] for p in attrs["perm"])),))


def _transpose_vjp(attrs, primals, results, cts):
    """AD-TRANSPOSE-1: the cotangent transposed by the inverse permutation."""
    perm = attrs["perm"]
    return (transpose(cts[0], tuple(perm.index(i) for i in range(len(perm)))),)


TRANSPOSE = define("transpose", infer=lambda attrs, x: TensorType(tuple(x.shape[p] for p in attrs["perm"]), x.policy),
                   impl=lambda call, a: np.transpose(a, call.attrs["perm"]).copy(), cost=_moved,
                   spec="GRAPH-TRANSPOSE-1", shard=_transpose_shard, canonicalize=_transpose_canonicalize,
                   vjp=_transpose_vjp, jvp=linear_jvp("transpose"),
                   attrs={"perm": Attr(None, check_int_tuple,
                                       "result axis i is operand axis perm[i]; default: all axes reversed")})


def transpose(x, perm=None):
    """Axes permuted: result axis ``i`` is axis ``perm[i]`` of ``x`` (GRAPH-TRANSPOSE-1).

    ``perm=None`` reverses all axes (NumPy's ``.T``); negative axes count from the end.
    """
    return bind(TRANSPOSE, x, perm=perm)


def permute(x, perm):
    """``transpose(x, perm)`` (GRAPH-TRANSPOSE-1), under the name PyTorch uses."""
    return transpose(x, perm)


# -- broadcast_to ---------------------------------------------------------------------------------
def _broadcast_to_infer(attrs, x):
    shape = attrs["shape"]

    def fail(why):
        return ShapeError(f"broadcast_to: cannot broadcast {x} to shape ({_text(shape)}): {why}",
                          fix="each operand dimension must equal the target's or be 1 (aligned from the "
                              "right); a symbolic target dimension must be the operand's own")
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise fail("dimensions are sizes >= 0 or symbol names")
    if x.rank > len(shape):
        raise fail(f"the target has fewer dimensions ({len(shape)}) than the operand ({x.rank})")
    lead = len(shape) - x.rank
    for i, d in enumerate(shape):
        have = x.shape[i - lead] if i >= lead else 1
        if have != d and (have != 1 or isinstance(d, str)):
            raise fail(f"dimension {i} is {_text((have,))} in the operand and {_text((d,))} in the target")
    return TensorType(shape, x.policy)


def _broadcast_to_impl(call, a):
    return np.broadcast_to(a, _concrete(call.out_types[0].shape, _sizes(call.in_types, (a,)))).copy()


def _broadcast_to_vjp(attrs, primals, results, cts):
    """AD-BROADCASTTO-1: the cotangent summed over the broadcast axes (one ``sum``, NUM-RED-2)."""
    return (unbroadcast(cts[0], primals[0].shape),)


BROADCAST_TO = define("broadcast_to", infer=_broadcast_to_infer, impl=_broadcast_to_impl, cost=_moved,
                      vjp=_broadcast_to_vjp, jvp=linear_jvp("broadcast_to"),
                      spec="GRAPH-BROADCASTTO-1", shard=replicated_rule,
                      attrs={"shape": Attr(check=_dims, doc="the target shape (ints and symbol names)")})


def broadcast_to(x, shape):
    """``x`` repeated to ``shape`` by NumPy's broadcasting rules (GRAPH-BROADCASTTO-1)."""
    return bind(BROADCAST_TO, x, shape=shape)


# -- slice ----------------------------------------------------------------------------------------
def _tight(start: int, stop: int, step: int) -> tuple:
    """The canonical triple of ``range(start, stop, step)``: (0, 0, 1) when empty, step 1 for
    one element, else stop one step-sign past the last element."""
    r = range(start, stop, step)
    if not r:
        return (0, 0, 1)
    if len(r) == 1:
        return (r[0], r[0] + 1, 1)
    return (r[0], r[-1] + (1 if step > 0 else -1), step)


def _slice_attrs(triples) -> dict:
    """The ``starts``/``stops``/``steps`` attributes of per-axis ``(start, stop, step)`` triples."""
    return {"starts": tuple(t[0] for t in triples), "stops": tuple(t[1] for t in triples),
            "steps": tuple(t[2] for t in triples)}


def _slice_canonicalize(attrs, x):
    if not len(attrs["starts"]) == len(attrs["stops"]) == len(attrs["steps"]) == x.rank:
        raise ShapeError(f"slice: starts {list(attrs['starts'])}, stops {list(attrs['stops'])} and steps "
                         f"{list(attrs['steps'])} need one entry per dimension of {x}",
                         fix="use op.slice / x[...], which fill in the axes not given")
    out = []
    for axis, (d, start, stop, step) in enumerate(zip(x.shape, attrs["starts"], attrs["stops"], attrs["steps"])):
        if isinstance(d, str) or isinstance(stop, str):
            if (start, stop, step) != (0, d, 1):
                raise ShapeError(f"slice: axis {axis} of {x} (size {_text((d,))}): a symbolic axis or stop takes "
                                 f"only the whole axis (0, {d!r}, 1), got ({start}, {stop!r}, {step})",
                                 fix="trace with concrete shapes to slice a symbolic axis")
            out.append((start, stop, step))
            continue
        r = range(start, stop, step) if step else None
        if r is None or (r and not (0 <= r[0] < d and 0 <= r[-1] < d)):
            raise IndexOutOfRange(f"slice: range({start}, {stop}, {step}) on axis {axis} of {x} is not a range "
                                  f"of indices in [0, {d})", fix="use a nonzero step and indices inside the axis")
        out.append(_tight(start, stop, step))
    return _slice_attrs(out)


def _slice_infer(attrs, x):
    shape = tuple(d if isinstance(d, str) else len(range(a, b, s))
                  for d, a, b, s in zip(x.shape, attrs["starts"], attrs["stops"], attrs["steps"]))
    return TensorType(shape, x.policy)


def _slice_impl(call, a):
    index = tuple(builtins.slice(start, None if isinstance(stop, str) or stop < 0 else stop, step)
                  for start, stop, step in zip(call.attrs["starts"], call.attrs["stops"], call.attrs["steps"]))
    return np.array(a[index])  # a copy, and a 0-d array (not a NumPy scalar) for rank 0


def _slice_vjp(attrs, primals, results, cts):
    """AD-SLICE-1: the cotangent scattered into zeros of the operand's shape, axis by axis: a
    negative step reversed (a ``slice`` with step −1), a step ``s > 1`` zero-dilated, then
    zero-padded before and after (``concat``). Exact: every element is a copy or +0."""
    x, g = primals[0], cts[0]
    if 0 in g.shape:
        return (zeros_like(x),)
    for axis, (d, start, stop, step) in enumerate(zip(x.shape, attrs["starts"], attrs["stops"], attrs["steps"])):
        if isinstance(d, str):
            continue  # a symbolic axis is always taken whole
        r = range(start, stop, step)
        if step < 0:
            g = slice(g, [None] * (axis + 1), [None] * (axis + 1), [None] * axis + [-1])
            r = r[::-1]
        g = dilate_axis(g, axis, r.step)
        g = pad_axis(g, axis, r[0], d - 1 - r[-1])
    return (g,)


def _slice_shard(attrs, x):
    """MESH-SHARD-8: a dimension the slice takes whole keeps its split (each device takes its
    whole block); a dimension it cuts is gathered first. A pending reduction stays pending
    (a slice selects elements and combines none)."""
    lay = x.layout
    whole_dims = [(a, b, s) == (0, d, 1) and not lay.padded
                  for d, a, b, s in zip(x.shape, attrs["starts"], attrs["stops"], attrs["steps"])]
    kept = lay.replace(dims=tuple(axes if keep else () for axes, keep in zip(lay.dims, whole_dims)))

    def local_attrs(attrs, local_in):
        """Each kept dimension is taken whole from the device's block."""
        stops = tuple(local_in[0].shape[d] if kept.dims[d] else stop for d, stop in enumerate(attrs["stops"]))
        return {**attrs, "stops": stops}
    return ShardPlan((kept,), (kept,), local_attrs=local_attrs if kept.split_axes else None)


SLICE = define("slice", infer=_slice_infer, impl=_slice_impl, spec="GRAPH-SLICE-1", shard=_slice_shard,
               vjp=_slice_vjp, jvp=linear_jvp("slice"),
               cost=lambda call: Cost(0, 2 * nbytes(call.out_types[0])), canonicalize=_slice_canonicalize,
               attrs={"starts": Attr(check=check_int_tuple, doc="first index per axis"),
                      "stops": Attr(check=_dims, doc="range stop per axis (the symbol for a whole symbolic axis)"),
                      "steps": Attr(check=check_int_tuple, doc="nonzero step per axis")})


def _axis_range(t: TensorType, axis: int, s: builtins.slice) -> tuple:
    """The ``range`` triple of Python slice ``s`` on ``axis`` of ``t`` (NumPy semantics)."""
    d = t.shape[axis]
    if isinstance(d, str):
        if (s.start in (None, 0) and s.stop is None and s.step in (None, 1)):
            return (0, d, 1)
        raise ShapeError(f"slice: axis {axis} of {t} has symbolic size [{d}]; only the whole axis (:) can be "
                         f"taken, got {s}", fix="trace with concrete shapes to slice a symbolic axis")
    try:
        return s.indices(d)
    except (TypeError, ValueError) as exc:
        raise OpError(f"slice: bad slice {s} for axis {axis} of {t}: {exc}",
                      fix="use int (or None) bounds and a nonzero step") from None


def slice(x, starts, stops, steps=None):  # noqa: A001 - the op's name
    """``x[starts[0]:stops[0]:steps[0], ...]`` with NumPy semantics (GRAPH-SLICE-1).

    One entry per leading axis (axes not given are taken whole); ``None`` entries are
    NumPy's defaults, negative bounds count from the end, bounds are clamped, and negative
    steps walk backwards.
    """
    t = _type_of(x)
    starts, stops = tuple(starts), tuple(stops)
    steps = (None,) * len(starts) if steps is None else tuple(steps)
    if not len(starts) == len(stops) == len(steps) or len(starts) > t.rank:
        raise ShapeError(f"slice: starts {list(starts)}, stops {list(stops)} and steps {list(steps)} must have "
                         f"the same length, at most the rank of {t}", fix="give one entry per sliced axis")
    given = [builtins.slice(*e) for e in zip(starts, stops, steps)]
    given += [builtins.slice(None)] * (t.rank - len(given))
    triples = [_axis_range(t, axis, s) for axis, s in enumerate(given)]
    return bind(SLICE, x, **_slice_attrs(triples))


def _is_int(item) -> bool:
    return isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_))


def _basic_index(t: TensorType, index):
    """(range triples per axis, the result shape) of a basic NumPy index on ``t``."""
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, builtins.slice) or _is_int(item)):
            raise OpError(f"getitem: index {item!r} of type {type(item).__name__} on {t} is advanced indexing, "
                          "which is not a shape op", fix="index with ints, slices, None and ...; for masks "
                          "use op.where; gather with one integer tensor, E[ids] or E[:, ids] (op.take)")
    if sum(item is Ellipsis for item in items) > 1:
        raise OpError(f"getitem: index {index!r} on {t} has more than one ...", fix="use a single ...")
    used = sum(item is not None and item is not Ellipsis for item in items)
    if used > t.rank:
        raise IndexOutOfRange(f"getitem: too many indices ({used}) for {t} (rank {t.rank})",
                              fix=f"index at most {t.rank} axes")
    if Ellipsis not in items:
        items = items + (Ellipsis,)
    at = items.index(Ellipsis)
    items = items[:at] + (builtins.slice(None),) * (t.rank - used) + items[at + 1:]
    triples, shape, axis = [], [], 0
    for item in items:
        if item is None:
            shape.append(1)
            continue
        if _is_int(item):
            d = t.shape[axis]
            if isinstance(d, str) or not -d <= item < d:
                raise IndexOutOfRange(f"getitem: index {item} is out of range for axis {axis} of {t}",
                                      fix=f"use an index in [-{d}, {d})" if isinstance(d, int) else
                                      "trace with concrete shapes to index a symbolic axis")
            triples.append((item % d, item % d + 1, 1))
        else:
            triples.append(_axis_range(t, axis, item))
            start, stop, step = triples[-1]
            shape.append(stop if isinstance(stop, str) else len(range(start, stop, step)))
        axis += 1
    return triples, tuple(shape)


def _gather_index(index):
    """``(axis, ids)`` when ``index`` is one integer tensor or array after full slices, else None."""
    items = index if isinstance(index, tuple) else (index,)
    if not items or any(not (isinstance(i, builtins.slice) and i == builtins.slice(None)) for i in items[:-1]):
        return None
    ids = items[-1]
    if isinstance(ids, TensorOperators):
        element = ids.type.policy
        return (len(items) - 1, ids) if getattr(element, "is_int", False) else None
    if isinstance(ids, (list, np.ndarray)) and np.asarray(ids).dtype.kind in "iu" and np.asarray(ids).ndim:
        return len(items) - 1, np.asarray(ids)
    return None


def getitem(x, index):
    """``x[index]`` for basic indexing — ints, slices, ``None`` and ``...`` — with NumPy
    semantics (GRAPH-SLICE-1): one ``slice`` (skipped when it takes everything) then one
    ``reshape`` (skipped when the shape is unchanged). One integer tensor after full slices,
    ``E[ids]`` or ``E[:, ids]``, is ``op.take`` along that axis (GRAPH-TAKE-1); other array
    indices raise OpError."""
    gather = _gather_index(index)
    if gather is not None:
        return FUNCTIONS.take(x, gather[1], axis=gather[0])
    t = _type_of(x)
    triples, shape = _basic_index(t, index)
    out = x if isinstance(x, TensorOperators) else asarray(x)  # an Array, a Tracer or a DistTensor
    if any(not isinstance(d, str) and range(*r) != range(d) for d, r in zip(t.shape, triples)):
        out = bind(SLICE, out, **_slice_attrs(triples))
    return out if out.shape == shape else reshape(out, shape)


# -- concat -----------------------------------------------------------------------------------------
def _concat_canonicalize(attrs, *xs):
    if not xs:
        raise OpError("concat needs at least one operand", fix="pass a non-empty list of tensors")
    return {"axis": normalize_axis("concat", attrs["axis"], xs[0])}


def _concat_infer(attrs, *xs):
    axis, element = attrs["axis"], same_element("concat", *xs)
    names = ", ".join(map(str, xs))
    if len({x.rank for x in xs}) > 1:
        raise ShapeError(f"concat: operands have different ranks ({names})", fix="reshape them to one rank")
    for i in range(xs[0].rank):
        dims = [x.shape[i] for x in xs]
        if i != axis and len(set(dims)) > 1:
            raise ShapeError(f"concat along axis {axis}: dimension {i} differs ({names})",
                             fix="all dimensions but the concatenated one must be equal")
        if i == axis and not all(isinstance(d, int) for d in dims):
            raise ShapeError(f"concat along axis {axis}: the concatenated dimension must be static ({names})",
                             fix="trace with concrete shapes")
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return TensorType(tuple(shape), element)


def _concat_vjp(attrs, primals, results, cts):
    """AD-CONCAT-1: the cotangent split into the operands' extents along the axis."""
    axis = attrs["axis"]
    return tuple(split(cts[0], [x.shape[axis] for x in primals], axis=axis))


def _concat_shard(attrs, *xs):
    """MESH-SHARD-9: the dimensions other than ``axis`` keep the first operand's splits (every
    operand moved to them), so each device joins its blocks; ``axis`` is made whole and
    pending reductions are carried out first. Padded operands are gathered whole."""
    if any(x.layout.padded for x in xs):
        return replicated_rule(attrs, *xs)
    lay = whole(xs[0].layout, (attrs["axis"],))
    return ShardPlan((lay,) * len(xs), (lay,))


CONCAT = define("concat", infer=_concat_infer, impl=lambda call, *arrays: np.concatenate(arrays, call.attrs["axis"]),
                cost=_moved, spec="GRAPH-CONCAT-1", shard=_concat_shard, canonicalize=_concat_canonicalize,
                vjp=_concat_vjp, jvp=linear_jvp("concat"), arity=(1, None),
                attrs={"axis": Attr(0, check_int, "the axis to join along")})


def concat(xs, axis=0):
    """The tensors ``xs`` joined along ``axis``, in order (GRAPH-CONCAT-1)."""
    return bind(CONCAT, *xs, axis=axis)


# -- split --------------------------------------------------------------------------------------------
def _split_infer(attrs, x):
    axis, sizes = attrs["axis"], attrs["sizes"]
    d = x.shape[axis]
    if isinstance(d, str) or not sizes or any(s < 0 for s in sizes) or sum(sizes) != d:
        raise ShapeError(f"split: sizes {list(sizes)} do not split axis {axis} of {x} (size {_text((d,))})",
                         fix="give one or more sizes >= 0 that add up to the (static) axis size")
    return tuple(TensorType(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.policy) for s in sizes)


def _split_impl(call, a):
    parts = np.split(a, np.cumsum(call.attrs["sizes"])[:-1], axis=call.attrs["axis"])
    return tuple(p.copy() for p in parts)


def _split_vjp(attrs, primals, results, cts):
    """AD-SPLIT-1: the parts' cotangents concatenated along the axis."""
    return (concat(list(cts), axis=attrs["axis"]),)


def _split_shard(attrs, x):
    """MESH-SHARD-9: ``axis`` made whole; the other dimensions keep their splits, and every
    part takes them; a pending reduction stays pending (the parts move elements)."""
    lay = x.layout.replace(dims=whole(x.layout, (attrs["axis"],)).dims)
    return ShardPlan((lay,), (lay,) * len(attrs["sizes"]))


SPLIT = define("split", infer=_split_infer, impl=_split_impl, cost=_moved, spec="GRAPH-SPLIT-1",
               shard=_split_shard,
               vjp=_split_vjp, jvp=linear_jvp("split"),
               canonicalize=lambda attrs, x: {"axis": normalize_axis("split", attrs["axis"], x)},
               attrs={"sizes": Attr(check=check_int_tuple, doc="the size of each part along the axis"),
                      "axis": Attr(0, check_int, "the axis to split")})


def split(x, sections, axis=0):
    """``x`` cut along ``axis`` into consecutive parts, returned as a tuple (GRAPH-SPLIT-1).

    ``sections`` is an int ``n`` (``n`` equal parts; ``n`` must divide the axis) or a list
    of part *sizes* (as ``torch.split``; not NumPy's split indices).
    """
    if _is_int(sections):
        t = _type_of(x)
        d = t.shape[normalize_axis("split", axis, t)]
        if sections <= 0 or isinstance(d, str) or d % sections:
            raise ShapeError(f"split: {sections} equal parts do not divide axis {axis} of {t}",
                             fix="pick a count that divides the axis size, or pass a list of sizes")
        sections = (d // sections,) * sections
    out = bind(SPLIT, x, sizes=sections, axis=axis)
    return out if isinstance(out, tuple) else (out,)


# -- split_qkv ------------------------------------------------------------------------------------------
def _split_qkv_infer(attrs, x):
    heads, groups = attrs["heads"], attrs["groups"]
    last = x.shape[-1] if x.rank >= 2 else None
    if groups <= 0 or heads % groups:
        raise ShapeError(f"split_qkv: heads={heads} is not a multiple of groups={groups}",
                         fix="pass groups dividing heads (groups=1: the plain [3, heads, D] layout)")
    if heads <= 0 or not isinstance(last, int) or last % (3 * heads):
        raise ShapeError(f"split_qkv: {x} is not [..., S, 3*E] with a static last dimension divisible by "
                         f"3*heads = {3 * heads}", fix="pass the fused qkv projection [..., S, 3*E] with E a "
                         "multiple of heads")
    shape = x.shape[:-2] + (heads, x.shape[-2], last // (3 * heads))
    return (TensorType(shape, x.policy),) * 3


def _split_qkv_impl(call, a):
    heads, groups = call.attrs["heads"], call.attrs["groups"]
    r = a.reshape(a.shape[:-1] + (groups, 3, heads // groups, a.shape[-1] // (3 * heads)))  # [..., S, G, 3, H/G, D]
    r = np.moveaxis(r, -3, 0)                                                             # [3, ..., S, G, H/G, D]
    r = np.swapaxes(r.reshape(r.shape[:-3] + (heads, r.shape[-1])), -3, -2)              # [3, ..., H, S, D]
    return tuple(r[i].copy() for i in range(3))


def _split_qkv_shard(attrs, x):
    """MESH-SHARD-7: with the last dimension split (not padded) over axes that divide ``groups``,
    each device holds whole groups — q, k and v of ``heads/groups`` heads each — and splits them
    with ``heads`` and ``groups`` divided by the split: the results are split over the heads
    dimension, with no communication. Otherwise the last dimension is gathered first. The
    other dimensions keep their splits; a pending reduction stays pending (the op moves elements)."""
    lay = x.layout
    last = lay.dims[-1]
    keep_last = bool(last) and not lay.padded and attrs["groups"] > 1
    operand = lay.replace(dims=lay.dims[:-1] + ((last if keep_last else ()),))
    result = lay.replace(dims=lay.dims[:-2] + ((last if keep_last else ()), lay.dims[-2], ()))

    def local_attrs(attrs, local_in):
        """``heads`` and ``groups`` of one device's block of groups."""
        n = x.shape[-1] // local_in[0].shape[-1]
        if attrs["groups"] % n:
            raise LayoutError(f"split_qkv: the last dimension of {x} is split {n} ways, which does not "
                              f"divide groups={attrs['groups']}, so the devices' blocks cut through a group",
                              fix=f"use a multiple of {n} for groups (and heads), or gather the operand first")
        return {**attrs, "heads": attrs["heads"] // n, "groups": attrs["groups"] // n}
    return ShardPlan((operand,), (result,) * 3, local_attrs=local_attrs if keep_last else None)


def _split_qkv_vjp(attrs, primals, results, cts):
    """AD-SPLITQKV-1: the inverse layout — each of q̄, k̄, v̄ ``[..., H, S, D]`` reshaped to
    ``[..., G, 1, H/G, S, D]``, the three concatenated on the size-1 axis, moved to
    ``[..., S, G, 3, H/G, D]`` and reshaped to ``[..., S, 3E]``."""
    x, (heads, groups) = primals[0], (attrs["heads"], attrs["groups"])
    q = cts[0]
    batch, (s, d) = q.shape[:-3], q.shape[-2:]
    parts = [reshape(c, batch + (groups, 1, heads // groups, s, d)) for c in cts]
    n = len(batch)
    stacked = transpose(concat(parts, axis=n + 1), tuple(range(n)) + (n + 3, n, n + 1, n + 2, n + 4))
    return (reshape(stacked, x.shape),)


SPLIT_QKV = define("split_qkv", infer=_split_qkv_infer, impl=_split_qkv_impl, cost=_moved,
                   vjp=_split_qkv_vjp, jvp=linear_jvp("split_qkv"),
                   spec="GRAPH-SPLITQKV-1", shard=_split_qkv_shard,
                   attrs={"heads": Attr(check=check_int, doc="the number of heads"),
                          "groups": Attr(1, check_int, doc="the last axis is [groups, 3, heads/groups, D]")})


def split_qkv(x, heads, groups=1):
    """``q, k, v`` of a fused projection ``x`` of shape ``[..., S, 3*E]`` (GRAPH-SPLITQKV-1).

    The last axis is laid out ``[groups, 3, heads/groups, D]`` (``D = E / heads``): each group
    holds the q block, then the k block, then the v block of its ``heads/groups`` heads. With
    ``groups=1`` that is q's block, then k's, then v's; ``groups`` equal to the tensor-parallel
    degree is the layout whose column split keeps every head's q, k and v on one device.
    Each result is ``[..., heads, S, D]``; head ``g·heads/groups + h`` is head ``h`` of group ``g``.
    """
    return bind(SPLIT_QKV, x, heads=heads, groups=groups)


# -- helpers on reshape -----------------------------------------------------------------------------------
def expand_dims(x, axis):
    """``x`` with a new axis of size 1 at ``axis`` (a ``reshape``, GRAPH-RESHAPE-1)."""
    t = _type_of(x)
    at = normalize_axis("expand_dims", axis, TensorType((1,) * (t.rank + 1), t.policy))
    return reshape(x, t.shape[:at] + (1,) + t.shape[at:])


def squeeze(x, axis=None):
    """``x`` without its size-1 axes (``axis``: only those; a ``reshape``, GRAPH-RESHAPE-1)."""
    t = _type_of(x)
    axes = [a for a, d in enumerate(t.shape) if d == 1] if axis is None else \
        [normalize_axis("squeeze", a, t) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    for a in axes:
        if t.shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} of {t} has size {_text((t.shape[a],))}, not 1",
                             fix="squeeze only axes of size 1")
    return reshape(x, tuple(d for a, d in enumerate(t.shape) if a not in axes))
