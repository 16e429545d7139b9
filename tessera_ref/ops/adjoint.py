"""Building blocks of the derivative rules in the registry (the ``vjp``/``jvp`` slots).

The rules are written with ``op.*`` functions only, so a backward pass is Graph IR like any
other program; these helpers are small compositions of primitives the rules share:
zeros and scalar constants of a value's policy, summing a broadcast cotangent back to its
operand's shape, zero-padding and zero-dilating an axis (the transposes of ``slice`` with
steps), and the jvp of a linear op (the op applied to the tangents). Rules reach the ops
through :func:`op`, which keys the stochastic rounding of a rule's ops with the call's seed.

Values are :class:`~tessera_ref.ops.values.Array` (eager), :class:`~tessera_ref.ops.values.Tracer`
(traced) or DistTensor — anything with a ``type``; constants made here are Arrays, which a
trace records as ``constant`` ops.
"""
from __future__ import annotations

import functools
import importlib

import numpy as np

from .bind import bind
from .primitive import PRIMITIVES, primitive
from .typecheck import SEED_ATTR
from .values import asarray

__all__ = ["op", "constant", "eye", "mT", "zeros", "zeros_like", "unbroadcast", "pad_axis", "dilate_axis",
           "linear_jvp", "materialize", "seed_of", "along", "sum_terms", "cast_to"]


def op(attrs=None):
    """The ``tessera_ref.op`` functions as the rules of a call with ``attrs`` use them: an op
    that rounds with a ``seed`` (SEED_ATTR's: stochastic rounding into storage, never the key
    of a random op), applied to an operand whose policy rounds stochastically, is given the
    call's ``seed`` (key 0 when the call has none, e.g. a shape op), so every rule runs on the
    stochastic-rounding policies its op accepts; other calls are left as they are (no seed
    attribute in the IR of deterministic policies). The module is imported late: the op
    families import this module."""
    return _Seeded(importlib.import_module("tessera_ref.op"), (attrs or {}).get("seed", 0))


def _stochastic(x) -> bool:
    return getattr(getattr(getattr(x, "type", None), "policy", None), "rounding", None) == "stochastic"


class _Seeded:
    """``tessera_ref.op`` giving stochastic-rounding ops a seed (see :func:`op`)."""

    def __init__(self, module, seed: int):
        self._module, self._seed = module, seed

    def __getattr__(self, name: str):
        fn = getattr(self._module, name)
        prim = PRIMITIVES.get(name)
        if prim is None or prim.attrs.get("seed") is not SEED_ATTR["seed"]:
            return fn

        @functools.wraps(fn)
        def seeded(*args, **kwargs):
            if "seed" not in kwargs and any(_stochastic(a) for a in args):
                kwargs["seed"] = self._seed
            return fn(*args, **kwargs)
        return seeded


def constant(value, policy):
    """An Array holding ``value`` (a number or array of f64 values) converted into ``policy``'s
    storage (exact for the zeros, ones, halves and small integers the rules use; under a
    stochastic policy an inexact value such as ``eps`` rounds with key 0)."""
    seed = 0 if getattr(policy, "rounding", None) == "stochastic" else None
    return asarray(np.asarray(value, dtype=np.float64), policy=policy, seed=seed)


def cast_to(x, policy):
    """``x`` cast into ``policy`` (as it is when it has that policy already); a stochastic
    target rounds with key 0."""
    if x.type.policy == policy:
        return x
    return op().cast(x, policy, seed=0 if getattr(policy, "rounding", None) == "stochastic" else None)


def eye(n: int, policy):
    """The identity matrix ``[n, n]`` as a constant of ``policy``."""
    return constant(np.eye(n), policy)


def mT(x):
    """``x`` with its last two axes swapped (a ``transpose``)."""
    rank = len(x.shape)
    return op().transpose(x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


def zeros(shape: tuple, policy):
    """+0 of ``shape`` and ``policy``: a scalar constant broadcast (one small constant in IR)."""
    return op().broadcast_to(constant(0.0, policy), tuple(shape))


def zeros_like(x):
    """+0 with ``x``'s shape and policy."""
    return zeros(x.shape, x.type.policy)


def materialize(tangent, primal):
    """A tangent that may be ``None`` (zero) as a value: zeros of the primal's type."""
    return zeros_like(primal) if tangent is None else tangent


def seed_of(attrs) -> dict:
    """``{"seed": …}`` when the call has one (stochastic rounding of the rule's ops), else ``{}``."""
    return {"seed": attrs["seed"]} if "seed" in attrs else {}


def sum_terms(terms, attrs) -> tuple:
    """``(t₀ ⊕ t₁ ⊕ …,)`` of the terms that are not ``None``, added left to right with the
    call's seed — the one result tangent of a jvp with a term per operand; ``(None,)`` when
    every term is absent."""
    present = [t for t in terms if t is not None]
    if not present:
        return (None,)
    out = present[0]
    for t in present[1:]:
        out = op(attrs).add(out, t)
    return (out,)


def unbroadcast(ct, shape: tuple, attrs=None):
    """``ct`` summed over the axes that broadcasting added or stretched, reshaped to ``shape``:
    the transpose of NumPy broadcasting ``shape -> ct.shape`` (NUM-RED-2 order per sum; the
    call's ``seed`` from ``attrs`` keys a stochastic rounding)."""
    shape = tuple(shape)
    if tuple(ct.shape) == shape:
        return ct
    lead = len(ct.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and ct.shape[lead + i] != 1)
    out = op(attrs).sum(ct, axis=axes) if axes else ct
    return out if tuple(out.shape) == shape else op().reshape(out, shape)


def along(v, axis: int, rank: int):
    """A vector ``[L]`` reshaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return op().reshape(v, (v.shape[0],) + (1,) * (rank - 1 - axis))


def pad_axis(x, axis: int, before: int, after: int):
    """``x`` with ``before`` and ``after`` zeros added along ``axis`` (a ``concat``)."""
    if before == 0 and after == 0:
        return x
    policy = x.type.policy
    parts = [zeros(x.shape[:axis] + (n,) + x.shape[axis + 1:], policy) if n else None for n in (before, after)]
    return op().concat([p for p in (parts[0], x, parts[1]) if p is not None], axis=axis)


def dilate_axis(x, axis: int, step: int):
    """``x`` with ``step − 1`` zeros between consecutive elements along ``axis`` (length
    ``(n − 1)·step + 1``): element ``j`` lands at ``j·step``. A reshape to ``[..., n, 1, ...]``,
    a concat with zeros ``[..., n, step − 1, ...]``, a reshape and a slice."""
    n = x.shape[axis]
    if step == 1 or n == 0:
        return x
    o = op()
    column = o.reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
    filler = zeros(x.shape[:axis + 1] + (step - 1,) + x.shape[axis + 1:], x.type.policy)
    flat = o.reshape(o.concat([column, filler], axis=axis + 1), x.shape[:axis] + (n * step,) + x.shape[axis + 1:])
    stops = list(flat.shape)
    stops[axis] = (n - 1) * step + 1
    return o.slice(flat, [0] * len(stops), stops)


def linear_jvp(name: str):
    """The jvp of the primitive ``name`` when it is linear in all its operands: the op itself
    on the tangents, with the call's attributes (``None`` tangents taken as zeros; all ``None``:
    every result tangent ``None``)."""
    def jvp(attrs, primals, tangents, results):
        if all(t is None for t in tangents):
            return (None,) * len(results)
        out = bind(primitive(name), *(materialize(t, p) for t, p in zip(tangents, primals)), **attrs)
        return out if isinstance(out, tuple) else (out,)
    return jvp
