"""Axis reductions: ``sum mean max min`` and ``argmax argmin`` (GRAPH-SUM-1 … GRAPH-ARGMIN-1).

``sum``/``mean``/``max``/``min`` take ``axis`` (an int, a tuple of ints, or ``None`` for
every axis) and ``keepdims``. The reduced axes, in ascending order, are flattened row-major
into one axis of length ``L`` and reduced by NUM-RED-2 in the operand policy's ``accum``
format (32 lanes, then the xor butterfly 16, 8, 4, 2, 1); the result is converted once into
the operand's storage with its policy (the result has the operand's policy).

Under ``reduction="exact"`` ``sum`` is the exact sum rounded once into storage (NUM-RED-4)
and ``mean`` the exact quotient ``S / L`` of the exact sum ``S``, rounded once into storage
(same rules: an exactly zero sum gives +0). ``max``/``min`` do not depend on the order, so
they are the same in every mode.

``argmax``/``argmin`` take one int axis or ``None`` (the row-major flattened tensor) and give
``index`` tensors: the smallest index of the extreme value, with NaN the largest value in
both and −0 < +0 (NUM-RED-2), compared in ``accum``.
"""
from __future__ import annotations

import builtins
import math
from fractions import Fraction

import numpy as np

from ..errors import ShapeError
from ..ir import ShardLayout, TensorType
from ..ir.types import INDEX
from ..numerics import ExactAccumulator, argmax_canonical, argmin_canonical, encode, exact_sum
from ..numerics.arith import source_format
from ..numerics.convert import check_modes, rounding_bits
from .adjoint import constant, in_accum, op, zeros_like
from .bind import bind
from .exact import reduce_axes
from .primitive import NOT_DIFFERENTIABLE, Attr, Cost, define
from .sharding import ShardPlan
from .typecheck import (SEED_ATTR, check_bool, check_int_tuple, nbytes, normalize_axes, numel,
                        require_float, require_seed, to_storage)

__all__ = ["sum", "mean", "max", "min", "argmax", "argmin"]

_AXIS_DOC = "the axes reduced: an int, a tuple of ints, or None for every axis"
_KEEPDIMS = {"keepdims": Attr(False, check_bool, "keep each reduced axis as a size-1 axis")}


def _reduced_shape(t: TensorType, axes: tuple, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(t.shape))
    return tuple(d for i, d in enumerate(t.shape) if i not in axes)


def _canonical_axes(name: str, single: bool):
    """``canonicalize``: the axes as a sorted tuple of non-negative ints (``argmax``: one
    axis, or ``()`` meaning the flattened tensor)."""
    def canonicalize(attrs, x):
        axis = attrs.get("axis")
        if single:
            return {"axis": () if axis is None or axis == () else normalize_axes(name, axis, x)}
        return {"axis": normalize_axes(name, axis, x)}
    return canonicalize


def _cost(call) -> Cost:
    """One operation per input element; bytes of the operand and the result."""
    return Cost(numel(call.in_types[0]), nbytes(call.in_types[0]) + nbytes(call.out_types[0]))


# ---------------------------------------------------------------------------------------
# sum, mean, max, min

def _reduce_infer(name: str):
    def infer(attrs, x):
        require_float(name, x)
        out = TensorType(_reduced_shape(x, attrs["axis"], attrs["keepdims"]), x.policy)
        require_seed(name, attrs, out)
        return out
    return infer


def _round_rational(q: np.ndarray, fmt, rounding: str, overflow: str, key) -> np.ndarray:
    """Exact rationals ``q`` (Fractions, or nan/±inf floats) converted once into ``fmt`` by
    NUM-CVT-2/3: the rounded magnitude ``(n + up)·2^e`` is an f64 (at most 54 bits) that the
    final ``encode`` converts without rounding again; magnitudes beyond ``fmt.max`` become ±inf
    (the overflow value) or ±max by NUM-CVT-3. Exact zeros give +0."""
    rbits = rounding_bits(key, None, q.shape).reshape(-1) if rounding == "stochastic" else None
    out = np.empty(q.size)
    for i, v in enumerate(q.reshape(-1)):
        if not isinstance(v, Fraction):
            out[i] = v
            continue
        if v == 0:
            out[i] = 0.0
            continue
        neg, a = v < 0, abs(v)
        top = a.numerator.bit_length() - a.denominator.bit_length()
        top -= (a < Fraction(2) ** top)  # floor(log2 |v|)
        e = builtins.max(top, fmt.emin) - fmt.man_bits  # this module's max is the op
        scaled = a / Fraction(2) ** e
        n, f = divmod(scaled.numerator, scaled.denominator)
        den = scaled.denominator
        if rounding == "rne":
            up = 2 * f > den or (2 * f == den and n % 2 == 1)
        elif rounding == "stochastic":
            up = int(rbits[i]) * den < f * 2 ** 32
        else:
            up = f > 0 and {"rtz": False, "rup": not neg, "rdown": neg}[rounding]
        mag = float((n + up) * Fraction(2) ** e) if (n + up) * Fraction(2) ** e <= fmt.max else None
        if mag is None:  # NUM-CVT-3 for the rounding mode; encode applies overflow="saturate"
            to_overflow = rounding in ("rne", "stochastic") or rounding == ("rdown" if neg else "rup")
            mag = np.inf if to_overflow else fmt.max
        out[i] = -mag if neg else mag
    codes = encode(out.reshape(q.shape), fmt, rounding="rne", overflow=overflow)
    return codes.view(fmt.dtype)


def _exact_mean(x: np.ndarray, axes: tuple, policy, key) -> np.ndarray:
    """NUM-RED-4's exact sum ``S`` over ``axes``, then ``S / L`` rounded once into storage."""
    shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    acc = ExactAccumulator(shape, "f64" if source_format(x).name == "f64" else "f32")
    acc.add(x, axis=axes)
    length = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    sums = np.asarray(acc.as_fractions(), dtype=object).reshape(-1)
    q = np.empty(sums.shape, dtype=object)
    for i, s in enumerate(sums):  # nan/±inf floats stay; the mean of nothing is NaN
        q[i] = (s / length if length else np.nan) if isinstance(s, Fraction) else s
    q = q.reshape(shape)
    rounding, overflow = check_modes(policy.storage, policy.rounding, policy.overflow, key)
    return _round_rational(q, policy.storage, rounding, overflow, key)


def _reduce_impl(name: str):
    def impl(call, x):
        axes, out = call.attrs["axis"], call.out_types[0]
        policy = out.policy
        if policy.reduction == "exact" and name in ("sum", "mean"):
            key = call.attrs.get("seed") if policy.rounding == "stochastic" else None
            if name == "sum":
                r = exact_sum(x, axis=axes, out_fmt=policy, key=key)
            else:
                r = _exact_mean(x, axes, policy, key)
            return np.asarray(r).reshape(out.shape)
        r = reduce_axes(x, axes, name, accum=policy.accum)
        return np.asarray(to_storage(call, r.reshape(out.shape)))
    return impl


def _reduce_shard(name: str):
    """MESH-SHARD-3: ``sum``/``max``/``min`` over a split dimension reduce each block locally and
    leave a pending reduction over its mesh axes (a pending sum stays pending under ``sum``);
    ``mean``, ``argmax``, ``argmin`` need the reduced dimensions whole, and so does any reduction
    of a padded split dimension (the padding would enter it)."""
    def rule(attrs, x):
        axes, keep = attrs["axis"], attrs.get("keepdims", False)
        if not axes and name in ("argmax", "argmin"):  # () means the flattened tensor
            axes = tuple(range(x.rank))
        lay = x.layout
        pending = name in ("sum", "max", "min")
        keep_partial = lay.partial if (name == "sum" and lay.partial_op == "sum") else ()
        # padding would enter a reduction of a padded split dimension: such dimensions are made whole
        local = pending and not (lay.padded and any(lay.dims[d] for d in axes))
        operand = ShardLayout(lay.dims if local else tuple(() if d in axes else a for d, a in enumerate(lay.dims)),
                              keep_partial, padded=lay.padded)
        new = tuple(a for d in axes for a in operand.dims[d]) if pending else ()
        dims = tuple(() if d in axes else a for d, a in enumerate(operand.dims) if keep or d not in axes)
        op = name if new else "sum"
        return ShardPlan((operand,), (ShardLayout(dims, keep_partial + new, op if (keep_partial + new) else "sum",
                                                  padded=lay.padded),))
    return rule


def _count(x, axes: tuple) -> int:
    """The number of elements one reduction over ``axes`` combines."""
    return math.prod(x.shape[a] for a in axes)


def _spread(g, x, axes: tuple, keepdims: bool):
    """A reduction's cotangent ``g`` broadcast back over the reduced ``axes`` of ``x``."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return op().broadcast_to(g if keepdims else op().reshape(g, kept), x.shape)


def _extreme_mask(x, axes: tuple, name: str):
    """An ``i1`` mask of ``x``'s shape, true at the element a ``max``/``min`` over ``axes``
    takes its gradient from: the first extreme in the row-major order of the reduced axes —
    the element ``argmax``/``argmin`` of those axes flattened names (NaN first, −0 < +0)."""
    o = op()
    rest = tuple(i for i in range(x.ndim) if i not in axes)
    moved, length = o.transpose(x, rest + axes), _count(x, axes)
    flat = o.reshape(moved, tuple(x.shape[i] for i in rest) + (length,))
    pick = (o.argmax if name == "max" else o.argmin)(flat, axis=-1, keepdims=True)
    hot = o.equal(pick, np.arange(length, dtype=np.int64))
    back = o.reshape(hot, moved.shape)
    return o.transpose(back, tuple(int(i) for i in np.argsort(rest + axes)))


def _reduce_vjp(name: str):
    """AD-SUM-1 … AD-MIN-1: ``sum`` spreads the cotangent over the reduced axes; ``mean``
    divides it by the count ``L`` in the accumulation format (one division there, one
    conversion into storage: the forward's ``⊘ L``) and spreads it; ``max``/``min`` send it
    whole to one element, the one of :func:`_extreme_mask`, and +0 to the others (all +0
    over an empty axis: nothing is picked)."""
    def vjp(attrs, primals, results, cts):
        x, axes, keep = primals[0], attrs["axis"], attrs["keepdims"]
        g = cts[0]
        if name == "mean":
            length = float(_count(x, axes))
            g = in_accum(lambda policy, g: op().div(g, constant(length, policy)), g)
        elif name in ("max", "min") and _count(x, axes) == 0:
            return (zeros_like(x),)
        g = _spread(g, x, axes, keep)
        if name in ("max", "min"):
            g = op().where(_extreme_mask(x, axes, name), g, constant(0.0, x.type.policy))
        return (g,)
    return vjp


def _reduce_jvp(name: str):
    """The tangent reduced like the operand; ``max``/``min``: the tangent of the chosen element
    (zero over an empty axis)."""
    def jvp(attrs, primals, tangents, results):
        t = tangents[0]
        if t is None:
            return (None,)
        x, axes, keep = primals[0], attrs["axis"], attrs["keepdims"]
        if name in ("max", "min"):
            if _count(x, axes) == 0:
                return (None,)
            picked = op().where(_extreme_mask(x, axes, name), t, constant(0.0, x.type.policy))
            return (op(attrs).sum(picked, axis=axes, keepdims=keep),)
        return (getattr(op(attrs), name)(t, axis=axes, keepdims=keep),)
    return jvp


def _define_reduce(name: str):
    return define(name, infer=_reduce_infer(name), impl=_reduce_impl(name), cost=_cost, shard=_reduce_shard(name),
                  spec=f"GRAPH-{name.upper()}-1", canonicalize=_canonical_axes(name, False),
                  vjp=_reduce_vjp(name), jvp=_reduce_jvp(name),
                  attrs={"axis": Attr(None, check_int_tuple, _AXIS_DOC), **_KEEPDIMS, **SEED_ATTR})


SUM, MEAN, MAX, MIN = (_define_reduce(n) for n in ("sum", "mean", "max", "min"))


def sum(x, axis=None, keepdims=False, *, seed=None):  # noqa: A001 - the op's name
    """Sum over ``axis`` (GRAPH-SUM-1): NUM-RED-2's lane order in accum, rounded once into
    storage; exact then rounded once under ``reduction="exact"``. An empty sum is −0 (+0 exact)."""
    return bind(SUM, x, axis=axis, keepdims=keepdims, seed=seed)


def mean(x, axis=None, keepdims=False, *, seed=None):
    """Mean over ``axis`` (GRAPH-MEAN-1): the NUM-RED-2 sum divided once by the exact count
    ``L`` in accum, then rounded into storage; the mean of nothing is NaN."""
    return bind(MEAN, x, axis=axis, keepdims=keepdims, seed=seed)


def max(x, axis=None, keepdims=False, *, seed=None):  # noqa: A001 - the op's name
    """Maximum over ``axis`` (GRAPH-MAX-1): IEEE 754-2019 ``maximum`` (NaN wins, −0 < +0);
    the maximum of nothing is −inf."""
    return bind(MAX, x, axis=axis, keepdims=keepdims, seed=seed)


def min(x, axis=None, keepdims=False, *, seed=None):  # noqa: A001 - the op's name
    """Minimum over ``axis`` (GRAPH-MIN-1): IEEE 754-2019 ``minimum`` (NaN wins, −0 < +0);
    the minimum of nothing is +inf."""
    return bind(MIN, x, axis=axis, keepdims=keepdims, seed=seed)


# ---------------------------------------------------------------------------------------
# argmax, argmin

def _arg_infer(name: str):
    def infer(attrs, x):
        require_float(name, x)
        axes = attrs["axis"] or tuple(range(x.rank))
        if any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"{name} of an empty axis: {x}, axis {attrs['axis'] or 'None'}",
                             fix="reduce a non-empty axis")
        if not attrs["axis"]:
            return TensorType((1,) * x.rank if attrs["keepdims"] else (), INDEX)
        return TensorType(_reduced_shape(x, attrs["axis"], attrs["keepdims"]), INDEX)
    return infer


def _arg_impl(name: str):
    fn = argmax_canonical if name == "argmax" else argmin_canonical

    def impl(call, x):
        axis, accum = call.attrs["axis"], call.in_types[0].policy.accum
        r = fn(x.reshape(-1), 0, accum=accum) if not axis else fn(x, axis[0], accum=accum)
        return np.asarray(r, dtype=np.int64).reshape(call.out_types[0].shape)
    return impl


def _check_axis(value):
    if value == ():
        return ()
    axes = check_int_tuple(value)
    if len(axes) != 1:
        raise ValueError("expected one int axis (or None for the flattened tensor)")
    return axes


def _define_arg(name: str):
    return define(name, infer=_arg_infer(name), impl=_arg_impl(name), cost=_cost, shard=_reduce_shard(name),
                  spec=f"GRAPH-{name.upper()}-1", canonicalize=_canonical_axes(name, True),
                  vjp=NOT_DIFFERENTIABLE, jvp=NOT_DIFFERENTIABLE,
                  attrs={"axis": Attr(None, _check_axis, "one int axis, or None for the row-major "
                                                         "flattened tensor"), **_KEEPDIMS})


ARGMAX, ARGMIN = _define_arg("argmax"), _define_arg("argmin")


def argmax(x, axis=None, keepdims=False):
    """Index of the maximum along ``axis`` (GRAPH-ARGMAX-1): the first of equal maxima,
    the first NaN if any, −0 < +0; ``axis=None`` indexes the row-major flattened tensor."""
    return bind(ARGMAX, x, axis=axis, keepdims=keepdims)


def argmin(x, axis=None, keepdims=False):
    """Index of the minimum along ``axis`` (GRAPH-ARGMIN-1): the first of equal minima,
    the first NaN if any, −0 < +0; ``axis=None`` indexes the row-major flattened tensor."""
    return bind(ARGMIN, x, axis=axis, keepdims=keepdims)
