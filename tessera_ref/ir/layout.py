"""The sharding layout of a tensor type: ``#shard<...>`` (MESH-LAYOUT-1).

A :class:`ShardLayout` says how a tensor's global value is spread over the devices of a
mesh — it names mesh *axes*, not devices, so one layout fits every mesh with those axes:

- ``dims[d]`` — the mesh axes that split tensor dimension ``d``, major first (``()``: the
  dimension is whole on every device). Splitting dim ``d`` of size ``n`` over axes
  ``(a, b)`` of sizes ``(p_a, p_b)`` gives each device a block of ``n / (p_a·p_b)`` rows; the
  device at coordinates ``(c_a, c_b)`` holds block ``c_a·p_b + c_b``.
- ``partial`` — mesh axes over which the tensor is a *pending reduction*: the global value is
  the ``partial_op`` (``sum``, ``max``, ``min``, ``prod``) of the devices' values along those
  axes, in ascending rank order (NUM-RED-3). A tensor is replicated over every axis it
  neither splits nor has pending.
- ``padded`` — blocks are ``ceil(n / p)`` long and the last ones are padded at the end;
  without it a split dimension must divide evenly.

Text (inside a tensor type, after the element)::

    layout   ::= "#shard<" "[" (entry ("," entry)*)? "]" ("," partial)? ("," "padded")? ">"
    entry    ::= "*" | axis ("+" axis)*
    partial  ::= "partial(" axis ("," axis)* (", op=" ("max" | "min" | "prod"))? ")"

e.g. ``tensor<1024x1024xbf16, #shard<[*, *], partial(tp)>>``,
``tensor<576x1152xf32, #shard<[dp, tp]>>``, ``tensor<8xf32, #shard<[dp+tp]>>``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import re

from .errors import IRError

__all__ = ["ShardLayout", "PARTIAL_OPS"]

_AXIS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: The reductions a pending partial value can carry.
PARTIAL_OPS = ("sum", "max", "min", "prod")


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """How a tensor is split over mesh axes (see the module docstring). Immutable, hashable."""

    dims: tuple
    partial: tuple = ()
    partial_op: str = "sum"
    padded: bool = False
    _text: str = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        dims = tuple(tuple(d) if isinstance(d, (tuple, list)) else ((d,) if d else ()) for d in self.dims)
        partial = tuple(self.partial) if isinstance(self.partial, (tuple, list)) else (self.partial,)
        seen = []
        for axis in [a for d in dims for a in d] + list(partial):
            if not isinstance(axis, str) or not _AXIS_RE.fullmatch(axis):
                raise IRError(f"a mesh axis name must be an identifier, got {axis!r}",
                              fix="name axes like 'dp', 'tp', 'pp'")
            if axis in seen:
                raise IRError(f"mesh axis {axis!r} is used twice in one layout (dims {dims}, partial {partial})",
                              fix="split a tensor over each mesh axis at most once, or keep it pending")
            seen.append(axis)
        if self.partial_op not in PARTIAL_OPS:
            raise IRError(f"unknown partial reduction {self.partial_op!r}", fix=f"use one of {PARTIAL_OPS}")
        if not partial:  # nothing pending: no reduction op (the text has none to print)
            object.__setattr__(self, "partial_op", "sum")
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "partial", partial)
        object.__setattr__(self, "padded", bool(self.padded))
        entries = ", ".join("+".join(d) if d else "*" for d in dims)
        text = f"#shard<[{entries}]"
        if partial:
            op = "" if self.partial_op == "sum" else f", op={self.partial_op}"
            text += f", partial({', '.join(partial)}{op})"
        if self.padded:
            text += ", padded"
        object.__setattr__(self, "_text", text + ">")

    def __str__(self) -> str:
        return self._text

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def split_axes(self) -> tuple:
        """Every mesh axis that splits some dimension, in dimension order."""
        return tuple(a for d in self.dims for a in d)

    @property
    def varying_axes(self) -> frozenset:
        """The mesh axes along which devices hold different values (split or pending)."""
        return frozenset(self.split_axes) | frozenset(self.partial)

    def dim_of(self, axis: str):
        """The tensor dimension split over ``axis``, or ``None``."""
        return next((d for d, axes in enumerate(self.dims) if axis in axes), None)

    def replace(self, **changes) -> "ShardLayout":
        """A copy with some fields changed."""
        fields = dict(dims=self.dims, partial=self.partial, partial_op=self.partial_op, padded=self.padded)
        fields.update(changes)
        if not fields["partial"]:
            fields["partial_op"] = "sum"
        return ShardLayout(**fields)

    @staticmethod
    def replicated(rank: int) -> "ShardLayout":
        """The layout of a tensor held whole on every device."""
        return ShardLayout(((),) * rank)
