"""Shared pieces of the primitives' ``infer`` and ``cost`` rules.

Shapes may hold symbolic dimensions (names). Broadcasting follows NumPy, right-aligned:
two dimensions fit when they are equal (the same int or the same name) or one of them is
the int 1. A name against an int other than 1 does not fit: the IR cannot prove they agree.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, OpError, ShapeError
from ..ir import TensorType
from ..ir.types import BOOL, COMPLEX64, INDEX, ElementKind
from ..numerics import cast, packed_nbytes
from .primitive import Attr, Cost

__all__ = ["broadcast_shapes", "broadcast_types", "same_element", "require_float", "require_kind",
           "require_int", "normalize_axis", "normalize_axes", "nbytes", "numel", "static_shape", "elementwise_cost",
           "is_float", "check_int", "check_bool", "check_int_tuple", "check_str_choice", "BOOL", "INDEX",
           "COMPLEX64", "SEED_ATTR", "require_seed", "to_storage"]


def _types(types) -> str:
    return ", ".join(str(t) for t in types)


def broadcast_shapes(name: str, *types: TensorType) -> tuple:
    """The broadcast shape of ``types`` (see the module docstring) or a ShapeError naming them."""
    rank = max(t.rank for t in types)
    out = []
    for i in range(rank):
        dims = {t.shape[t.rank - rank + i] for t in types if t.rank - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"{name}: operand shapes do not broadcast ({_types(types)}): dimension "
                             f"{i - rank} is {' vs '.join(map(str, sorted(dims, key=str)))}",
                             fix="make the shapes equal, or give one of them size 1 in that dimension "
                                 "(op.reshape / op.broadcast_to)")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def same_element(name: str, *types: TensorType):
    """The common policy (or element kind) of ``types``; a DTypeError naming them if they differ."""
    first = types[0].policy
    for t in types[1:]:
        if t.policy != first:
            raise DTypeError(f"{name}: operands have different element types ({_types(types)})",
                             fix="convert one operand first, e.g. op.cast(x, 'f32'), so both have the "
                                 "same format and policy")
    return first


def broadcast_types(name: str, *types: TensorType) -> TensorType:
    """The result type of an elementwise op: broadcast shape, the operands' common element."""
    return TensorType(broadcast_shapes(name, *types), same_element(name, *types))


def is_float(t: TensorType) -> bool:
    """True for tensors of a floating-point format (not int8/int4, not an element kind)."""
    return not isinstance(t.policy, ElementKind) and t.format.is_float and t.format.name != "e8m0"


def require_float(name: str, *types: TensorType) -> None:
    """A DTypeError unless every type holds numbers of a floating-point format."""
    for t in types:
        if not is_float(t):
            raise DTypeError(f"{name} needs floating-point operands, got {t}",
                             fix="cast it first, e.g. op.cast(x, 'f32')")


def require_kind(name: str, t: TensorType, kind: ElementKind) -> None:
    """A DTypeError unless ``t`` holds elements of ``kind``."""
    if t.policy is not kind:
        raise DTypeError(f"{name} needs a tensor of {kind.name}, got {t}",
                         fix=f"pass a {kind.name} tensor")


def require_int(name: str, t: TensorType) -> None:
    """A DTypeError unless ``t`` holds an integer kind (``index``, ``i32``, ``ui8``; GRAPH-TYPE-4)."""
    if not (isinstance(t.policy, ElementKind) and t.policy.is_int):
        raise DTypeError(f"{name} needs an integer tensor (index, i32 or ui8), got {t}",
                         fix="pass integer data (np.int32/np.int64), or convert with op.cast(x, 'i32')")


def normalize_axis(name: str, axis: int, t: TensorType) -> int:
    """``axis`` in ``[0, rank)`` (negative axes count from the end) or a ShapeError."""
    if not -t.rank <= axis < t.rank:
        raise ShapeError(f"{name}: axis {axis} is out of range for {t} (rank {t.rank})",
                         fix=f"use an axis in [{-t.rank}, {t.rank - 1}]" if t.rank else "a 0-d tensor has no axes")
    return axis % t.rank


def normalize_axes(name: str, axes, t: TensorType) -> tuple:
    """Distinct axes in ascending order; ``None`` means all axes."""
    if axes is None:
        return tuple(range(t.rank))
    out = sorted(normalize_axis(name, a, t) for a in (axes if isinstance(axes, tuple) else (axes,)))
    if len(set(out)) != len(out):
        raise ShapeError(f"{name}: axis {axes} names an axis twice", fix="list each axis once")
    return tuple(out)


def static_shape(name: str, t: TensorType) -> tuple:
    """``t.shape`` when it is all ints, else an OpError (costs and values need sizes)."""
    if not t.is_static:
        raise OpError(f"{name}: {t} has symbolic dimensions; this needs concrete sizes",
                      fix="trace with concrete shapes (call the function with arrays)")
    return t.shape


def numel(t: TensorType) -> int:
    """The number of elements of a static tensor type."""
    return math.prod(static_shape("numel", t))


def nbytes(t: TensorType) -> int:
    """Bytes of a static tensor type in memory: packed sizes for the sub-byte formats."""
    n = numel(t)
    if isinstance(t.policy, ElementKind):
        return n * t.policy.dtype.itemsize
    return packed_nbytes(n, t.format)


def elementwise_cost(call, flops_per_element: int = 1) -> Cost:
    """FLOPs = ``flops_per_element`` per output element; bytes = all operands and results."""
    out = sum(numel(t) for t in call.out_types)
    moved = sum(nbytes(t) for t in call.in_types) + sum(nbytes(t) for t in call.out_types)
    return Cost(flops_per_element * out, moved)


# -- attribute checks (for Attr(check=...)) --------------------------------------------------
def check_int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
        raise TypeError("expected an int")
    return int(value)


def check_bool(value) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected True or False")
    return value


def check_int_tuple(value) -> tuple:
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return (int(value),)
    if not isinstance(value, (tuple, list)):
        raise TypeError("expected a tuple of ints")
    return tuple(check_int(v) for v in value)


def check_str_choice(*choices: str):
    def check(value) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(map(repr, choices))}")
        return value
    return check


# -- conversion of results into storage ------------------------------------------------------
#: The attribute every op that rounds into a stochastic-rounding policy takes.
SEED_ATTR = {"seed": Attr(None, check_int, "the RNG seed of stochastic rounding into the result's "
                                           "storage (required when its policy rounds stochastically)")}


def require_seed(name: str, attrs: dict, t: TensorType) -> None:
    """An OpError when ``t``'s policy rounds stochastically and ``attrs`` has no ``seed``."""
    if not isinstance(t.policy, ElementKind) and t.policy.rounding == "stochastic" and "seed" not in attrs:
        raise OpError(f"{name}: the result {t} rounds stochastically, which needs a key",
                      fix=f"pass seed=<int> to {name}; element i uses the Philox stream of "
                          "(seed, i) (NUM-CVT-5)")


def to_storage(call, values, t: TensorType | None = None):
    """Accum-format ``values`` converted once into the storage of result type ``t`` (the
    first result by default) with its policy's rounding and overflow (NUM-CVT); stochastic
    rounding uses key ``seed`` and the row-major output index."""
    t = call.out_types[0] if t is None else t
    policy = t.policy
    key = call.attrs.get("seed") if policy.rounding == "stochastic" else None
    return np.asarray(cast(values, policy.storage, rounding=policy.rounding, overflow=policy.overflow, key=key))
