"""Building blocks of the derivative rules in the registry (the ``vjp``/``jvp`` slots).

The rules are written with ``op.*`` functions only, so a backward pass is Graph IR like any
other program; these helpers are small compositions of primitives the rules share:
zeros and scalar constants of a value's policy, summing a broadcast cotangent back to its
operand's shape, zero-padding and zero-dilating an axis (the transposes of ``slice`` with
steps), the jvp of a linear op (the op applied to the tangents), and computing in a policy's
accumulation format (:func:`in_accum`). Rules reach the ops through :func:`op` (and
:func:`seed_of`), which give each stochastically rounding op a rule emits a key of its own,
derived from the call's seed (:func:`derivative_seed`, :func:`rule_keys`).

Values are :class:`~tessera_ref.ops.values.Array` (eager), :class:`~tessera_ref.ops.values.Tracer`
(traced) or DistTensor — anything with a ``type``; constants made here are Arrays, which a
trace records as ``constant`` ops.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping

import numpy as np

from ..context import RULE_KEYS, scoped
from ..numerics import Policy
from ..numerics.rng import RNGKey
from .bind import bind
from .primitive import PRIMITIVES, primitive
from .typecheck import SEED_ATTR
from .values import FUNCTIONS, asarray

__all__ = ["op", "rule_keys", "derivative_seed", "accum_policy", "in_accum", "constant", "eye", "mT", "zeros", "zeros_like", "unbroadcast", "pad_axis", "dilate_axis",
           "linear_jvp", "materialize", "seed_of", "along", "sum_terms", "cast_to"]


#: The root of the keys of derivative ops at an op without a ``seed`` (AD-REV-2).
UNSEEDED_ROOT = 0xAD5EED


def derivative_seed(seed, position: int, k: int) -> int:
    """AD-REV-2: the 64-bit stochastic-rounding seed ``k0 + 2³²·k1`` of the key words
    ``(k0, k1)`` of the ``k``-th rounding op of the derivative at the ``position``-th recorded
    op, whose ``seed`` attribute is ``seed`` (``None``: it has none). ``k = 0`` is the sum of the
    cotangents at the op's use (reverse mode), ``k ≥ 1`` the ``k``-th op its rule emits. Keys:
    ``RNGKey(seed).fold(k)`` for an op with a seed; for one without,
    ``RNGKey(UNSEEDED_ROOT).fold(position)`` (``k = 0``) and its ``.fold(k)`` (``k ≥ 1``). So no
    derivative op reuses the random bits of the forward op (keyed by ``seed`` itself) or of
    another derivative op of that call."""
    if seed is not None:
        key = RNGKey(seed).fold(k)
    else:
        key = RNGKey(UNSEEDED_ROOT).fold(position)
        key = key.fold(k) if k else key
    k0, k1 = key.words
    return int(k0) | int(k1) << 32


class _Keys:
    """The counter of one rule invocation: the seeds its rounding ops take in turn."""

    def __init__(self, seed, position: int):
        self.seed, self.position, self.count = seed, position, 0

    def next(self) -> int:
        self.count += 1
        return derivative_seed(self.seed, self.position, self.count)


@contextlib.contextmanager
def rule_keys(attributes, position: int):
    """Run a rule of the ``position``-th recorded op (attributes ``attributes``) inside this
    scope: every op the rule emits through :func:`op` that rounds stochastically gets the
    next seed of :func:`derivative_seed` (k = 1, 2, … in emission order — fixed by the rule's
    code, so deterministic). The reverse and forward passes open one scope per rule call."""
    with scoped(RULE_KEYS, _Keys(attributes.get("seed"), position)):
        yield


def op(attrs=None):
    """The ``tessera_ref.op`` functions as a rule uses them: an op that rounds with a ``seed``
    (SEED_ATTR's: stochastic rounding into storage, never the key of a random op), applied to
    an operand whose policy rounds stochastically, is given the next seed of the current
    :func:`rule_keys` scope (every rule runs on the stochastic-rounding policies its op
    accepts, and no two of its ops share random bits); other calls are left as they are (no
    seed attribute in the IR of deterministic policies). Outside a scope — a rule applied by
    hand — the keys count from the call's ``seed`` in ``attrs`` (position 0), per ``op(...)``
    object."""
    keys = RULE_KEYS.get() or _Keys((attrs or {}).get("seed"), 0)
    return _Seeded(FUNCTIONS, keys)


def _stochastic(x) -> bool:
    return getattr(getattr(getattr(x, "type", None), "policy", None), "rounding", None) == "stochastic"


class _Seeded:
    """``tessera_ref.op`` giving stochastic-rounding ops a seed (see :func:`op`)."""

    def __init__(self, functions, keys: _Keys):
        self._functions, self._keys = functions, keys

    def seed_for(self, policy) -> dict:
        """The ``seed`` keyword of a conversion into ``policy``: the next seed when it rounds
        stochastically, else ``None`` (no seed attribute: the conversion does not round so)."""
        return {"seed": self._keys.next() if getattr(policy, "rounding", None) == "stochastic" else None}

    def __getattr__(self, name: str):
        fn = getattr(self._functions, name)
        prim = PRIMITIVES.get(name)
        if prim is None or prim.attrs.get("seed") is not SEED_ATTR["seed"]:
            return fn

        @functools.wraps(fn)
        def seeded(*args, **kwargs):
            if "seed" not in kwargs and any(_stochastic(a) for a in args):
                kwargs["seed"] = self._keys.next()
            return fn(*args, **kwargs)
        return seeded


def constant(value, policy):
    """An Array holding ``value`` (a number or array of f64 values) converted into ``policy``'s
    storage (exact for the zeros, ones, halves and small integers the rules use; under a
    stochastic policy an inexact value, such as a factor of AD-MATH-1, rounds with key 0).
    Scalars that the forward rounds into the accumulation format are made in
    :func:`accum_policy` instead (:func:`in_accum`)."""
    seed = 0 if getattr(policy, "rounding", None) == "stochastic" else None
    return asarray(np.asarray(value, dtype=np.float64), policy=policy, seed=seed)


def cast_to(x, policy):
    """``x`` cast into ``policy`` (as it is when it has that policy already); a stochastic
    target rounds with the scope's next seed (:func:`op`)."""
    if x.type.policy == policy:
        return x
    o = op()
    return o.cast(x, policy, **o.seed_for(policy))


def accum_policy(policy):
    """The policy of ``policy``'s accumulation format — storage and accum both that format,
    round to nearest even, IEEE overflow, ``policy``'s reduction mode: the format an op of
    ``policy`` computes in (NUM-EW-1). Equal to ``policy`` for the default f32 and f64 policies."""
    return Policy(policy.accum, accum=policy.accum, reduction=policy.reduction)


def in_accum(fn, *xs):
    """``fn`` applied in the accumulation format of ``xs[0]``'s policy, its results converted
    once into that policy. The operands (``None`` entries pass) are cast into
    :func:`accum_policy` ``A`` (exact, unless the storage is wider than accum);
    ``fn(A, *operands)`` computes with ops there, making its scalars in ``A`` (RNE from the f64
    value, as an op's float attributes are rounded); each result (a value or a tuple; ``None``
    entries pass) is cast back — one conversion with the policy's rounding and overflow, a
    stochastic one keyed by the scope's next seed (:func:`op`). So a derivative rounds into
    storage where the op's forward does, once. When the policy is its own accumulation policy
    (f32, f64) ``fn`` runs on ``xs`` unchanged; so it does on ``complex<f32>`` and on a block- or
    tensor-scaled policy
    (``scaling`` not ``"none"``), into which ``cast`` does not convert (GRAPH-CAST-1) — there
    every op of ``fn`` rounds into storage and its scalars are rounded into storage."""
    policy = xs[0].type.policy
    if not isinstance(policy, Policy) or policy.scaling != "none":  # complex<f32>, or scaled
        return fn(policy, *xs)
    wide = accum_policy(policy)
    out = fn(wide, *(None if x is None else cast_to(x, wide) for x in xs))
    if wide == policy:
        return out
    back = tuple(None if y is None else cast_to(y, policy) for y in (out if isinstance(out, tuple) else (out,)))
    return back if isinstance(out, tuple) else back[0]


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


class _NextSeed(Mapping):
    """The mapping ``{"seed": s}`` whose ``s`` is the next seed of its key counter each time it
    is read — each ``**`` unpacking into an op call reads it once."""

    def __init__(self, keys: _Keys):
        self._keys = keys

    def __getitem__(self, name):
        if name != "seed":
            raise KeyError(name)
        return self._keys.next()

    def __iter__(self):
        return iter(("seed",))

    def __len__(self) -> int:
        return 1


def seed_of(attrs) -> Mapping:
    """The ``seed`` keyword of a rule's rounding ops when the call has a seed, else ``{}``:
    unpacked into an op call (``**seed_of(attrs)``), it gives that op the next seed of the
    current :func:`rule_keys` scope, so a rule that unpacks it for each op gives every op a key
    of its own (AD-REV-2), never the call's. Outside a scope the keys count from the call's
    seed (position 0), per ``seed_of`` result."""
    if "seed" not in attrs:
        return {}
    return _NextSeed(RULE_KEYS.get() or _Keys(attrs["seed"], 0))


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
