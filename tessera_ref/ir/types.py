"""IR types: tensors, scalars, ``index`` and functions.

Types are immutable and hashable; two types are equal when they print the same. Each
type's text is computed once, when it is built (``str(t)``).

Text syntax (shared by the printer and :mod:`tessera_ref.ir.parser`)::

    type          ::= tensor-type | scalar-type | "index" | function-type
    tensor-type   ::= "tensor<" (dim "x")* element ">"
    element       ::= format ("," policy)? | "i1" | "index" | "i32" | "ui8" | "complex<f32>"
    dim           ::= decimal-integer | "[" symbol "]"
    symbol        ::= [A-Za-z_][A-Za-z0-9_]*
    scalar-type   ::= format | "scalar<" format "," policy ">"
    format        ::= a canonical format name: f64 f32 f16 bf16 fp8_e4m3 fp8_e5m2
                      fp6_e2m3 fp6_e3m2 fp4_e2m1 e8m0 int8 int4
    policy        ::= "#policy<" field ("," field)* ">"
    field         ::= "accum=" format | "rounding=" word | "overflow=" word
                    | "scaling=" word | "reduction=" word | "tc=" word
    function-type ::= "(" type-list? ")" "->" results
    results       ::= "(" type-list? ")" | type      (a lone type that is not a function type)

- A shape is written MLIR-style, dimensions joined by ``x`` with no spaces:
  ``tensor<128x64xbf16>``; rank 0 is ``tensor<f32>``. A dimension, and the product of the
  integer dimensions, is at most :data:`MAX_DIM` = 2^63 − 1 (an int64 index; GRAPH-TYPE-1).
- A symbolic dimension is its name in square brackets: ``tensor<[B]x[seq]x64xf32>``. The
  brackets keep names unambiguous whatever letters they contain (``[max_x]``, ``[f32]``).
- A policy equal to the storage format's default (``Policy(fmt)``: accum f32 for storage
  narrower than f32, ``rne``, native overflow, no scaling, canonical reduction) is not
  written. Otherwise ``#policy<...>`` lists exactly the fields that differ from that
  default, in the order accum, rounding, overflow, scaling, reduction, tc (a tensor-core
  model, NUM-TC-6: ``#policy<tc=sm80>``):
  ``tensor<128x64xfp6_e2m3, #policy<accum=f64, rounding=stochastic>>``,
  ``scalar<bf16, #policy<rounding=rtz>>``. The parser accepts the fields in any order.
- A scalar of a default policy is the bare format name (``f32``, ``fp8_e5m2``).
- Function types follow MLIR: ``(tensor<4xf32>, f32) -> tensor<4xf32>``, ``() -> ()``,
  ``(f32) -> (f32, f32)``; a function type returned alone is parenthesized:
  ``(f32) -> ((f32) -> f32)``.

Besides numbers of a format and policy, a tensor may hold an *element kind*
(:data:`BOOL` ``i1``: comparison results and masks; the integers of GRAPH-TYPE-4,
:data:`INDEX` ``index`` = int64, :data:`I32` ``i32``, :data:`UI8` ``ui8``; :data:`COMPLEX64`
``complex<f32>``: pairs of f32, for the FFT ops). Element kinds have no policy: no conversion
rounds into them implicitly.

A tensor type may carry a sharding layout (:class:`~tessera_ref.ir.layout.ShardLayout`),
written after the element: ``tensor<576x1152xf32, #shard<[dp, tp]>>``,
``tensor<64x64xbf16, #policy<rounding=rtz>, #shard<[*, *], partial(tp)>>``. ``None`` (no
``#shard``) is a single-device tensor.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..errors import TesseraError
from ..numerics import Policy, as_policy, get_format
from .errors import IRError
from .layout import ShardLayout

__all__ = ["Type", "TensorType", "MAX_DIM", "ElementKind", "element_arg", "BOOL", "INDEX", "I32", "UI8", "INT_KINDS", "COMPLEX64", "ELEMENT_KINDS", "ScalarType", "IndexType", "FunctionType", "POLICY_FIELDS",
           "SYMBOL_RE", "default_policy", "format_policy", "format_signature"]

#: Policy fields written in ``#policy<...>``, in printing order.
POLICY_FIELDS = ("accum", "rounding", "overflow", "scaling", "reduction", "tc")

#: The largest tensor dimension and element count: an index the targets hold in an int64 (GRAPH-TYPE-1).
MAX_DIM = 2 ** 63 - 1

#: A symbolic dimension name.
SYMBOL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, eq=False)
class ElementKind:
    """A non-numeric-format tensor element: its text and the NumPy dtype holding it.

    Singletons (:data:`BOOL`, :data:`INDEX`, :data:`COMPLEX64`); compare with ``is``.
    ``bits`` is the width of one element in memory accounting.
    """

    name: str
    dtype: np.dtype
    bits: int

    def __repr__(self) -> str:
        return f"ElementKind({self.name})"


    @property
    def is_int(self) -> bool:
        """True for the integer kinds (``index``, ``i32``, ``ui8``; GRAPH-TYPE-4)."""
        return self.dtype.kind in "iu"


BOOL = ElementKind("i1", np.dtype(np.bool_), 8)
INDEX = ElementKind("index", np.dtype(np.int64), 64)
I32 = ElementKind("i32", np.dtype(np.int32), 32)
UI8 = ElementKind("ui8", np.dtype(np.uint8), 8)
COMPLEX64 = ElementKind("complex<f32>", np.dtype(np.complex64), 64)
#: Element kinds by their text.
ELEMENT_KINDS = {k.name: k for k in (BOOL, INDEX, I32, UI8, COMPLEX64)}
#: The integer element kinds (GRAPH-TYPE-4); ``index`` is the int64 one.
INT_KINDS = (INDEX, I32, UI8)
#: Other names of the integer kinds (``int64`` is ``index``: one 64-bit integer element, GRAPH-TYPE-4).
_KIND_ALIASES = {"int64": INDEX, "i64": INDEX, "int32": I32, "uint8": UI8, "u8": UI8, "bool": BOOL}


class Type:
    """Base class of IR types. ``str(t)`` is the type's text."""

    __slots__ = ()

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._text})"


@lru_cache(maxsize=None)
def default_policy(storage) -> Policy:
    """``Policy(storage)``, the policy a bare format name means (cached per format)."""
    return as_policy(storage)


@lru_cache(maxsize=1024)
def format_policy(policy: Policy) -> str:
    """``""`` for the default policy of its storage format, else ``", #policy<...>"``."""
    default = default_policy(policy.storage)
    fields = []
    for name in POLICY_FIELDS:
        value = getattr(policy, name)
        if value != getattr(default, name):
            fields.append(f"{name}={getattr(value, 'name', value)}")
    return f", #policy<{', '.join(fields)}>" if fields else ""


def format_signature(inputs, results) -> str:
    """MLIR function-type text for input and result types (see the module docstring)."""
    text = "(" + ", ".join([t._text for t in inputs]) + ") -> "
    if len(results) == 1 and not isinstance(results[0], FunctionType):
        return text + results[0]._text
    return text + "(" + ", ".join([t._text for t in results]) + ")"


def _policy_arg(policy, what: str) -> Policy:
    if isinstance(policy, Policy):
        return policy
    try:
        return default_policy(get_format(policy))
    except TesseraError as exc:
        raise IRError(f"{what}: {exc.what}", fix=exc.fix) from None


def element_arg(element, what: str = "a tensor element"):
    """A tensor element: an :class:`ElementKind` (or its text) or a policy (see :func:`_policy_arg`)."""
    if isinstance(element, ElementKind):
        return element
    if isinstance(element, str) and element in ELEMENT_KINDS:
        return ELEMENT_KINDS[element]
    if isinstance(element, str) and element.strip().lower() in _KIND_ALIASES:
        return _KIND_ALIASES[element.strip().lower()]
    if isinstance(element, np.dtype) or (isinstance(element, type) and issubclass(element, np.generic)):
        dtype = np.dtype(element)
        for kind in ELEMENT_KINDS.values():
            if kind.dtype == dtype:
                return kind
    return _policy_arg(element, what)


@dataclass(frozen=True, slots=True, repr=False)
class TensorType(Type):
    """A tensor: shape (ints and symbol names) x element (numerics policy or element kind) x layout.

    ``policy`` may be given as a :class:`~tessera_ref.numerics.Policy`, a format or a
    format name (stored as a policy), or as an :class:`ElementKind` (or its text, or its
    NumPy dtype) for boolean, index and complex tensors.
    """

    shape: tuple
    policy: Policy
    layout: object = None
    _text: str = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        shape = tuple(self.shape)
        for dim in shape:
            if isinstance(dim, bool) or not isinstance(dim, (int, str)):
                raise IRError(f"a tensor dimension must be an int or a symbol name, got {dim!r}",
                              fix="write sizes as ints and symbolic sizes as names, e.g. ('B', 64)")
            if isinstance(dim, int) and dim < 0:
                raise IRError(f"a tensor dimension cannot be negative ({dim})", fix="use a size >= 0")
            if isinstance(dim, int) and dim > MAX_DIM:
                raise IRError(f"a tensor dimension of {dim} does not fit an int64 index (at most 2^63 - 1 = {MAX_DIM})",
                              fix="use a smaller size, or a symbolic dimension")
            if isinstance(dim, str) and not SYMBOL_RE.fullmatch(dim):
                raise IRError(f"symbolic dimension {dim!r} is not a name [A-Za-z_][A-Za-z0-9_]*",
                              fix="use ASCII names like 'B', 'seq', 'd_model'")
        if math.prod(d for d in shape if isinstance(d, int)) > MAX_DIM:
            raise IRError(f"a tensor of shape {shape} has more than 2^63 - 1 elements, which no int64 index reaches",
                          fix="use smaller sizes, or symbolic dimensions")
        policy = element_arg(self.policy, "the element of a tensor type")
        layout = self.layout
        if layout is not None:
            if not isinstance(layout, ShardLayout):
                raise IRError(f"a tensor layout is a ShardLayout, got {layout!r}",
                              fix="build it with tessera_ref.ir.ShardLayout or dist.ShardSpec")
            if layout.rank != len(shape):
                raise IRError(f"layout {layout} has {layout.rank} dimension entries for a rank-{len(shape)} tensor",
                              fix="give one entry ('*' or mesh axes) per tensor dimension")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "policy", policy)
        dims = "".join(f"[{d}]x" if isinstance(d, str) else f"{d}x" for d in shape)
        element = policy.name if isinstance(policy, ElementKind) else policy.storage.name + format_policy(policy)
        if layout is not None:
            element += f", {layout._text}"
        object.__setattr__(self, "_text", f"tensor<{dims}{element}>")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def format(self):
        """The storage format (``policy.storage``), or the element kind itself."""
        policy = self.policy
        return policy if isinstance(policy, ElementKind) else policy.storage

    @property
    def element_kind(self) -> "ElementKind | None":
        """The element kind, or ``None`` for a tensor of numbers of a format and policy."""
        return self.policy if isinstance(self.policy, ElementKind) else None

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype holding this tensor's values (the storage format's dtype)."""
        return self.format.dtype

    @property
    def is_static(self) -> bool:
        """True when every dimension is an int."""
        return all(isinstance(d, int) for d in self.shape)

    def with_layout(self, layout: "ShardLayout | None") -> "TensorType":
        """This type with another layout (``None``: the single-device type)."""
        return self if layout == self.layout else TensorType(self.shape, self.policy, layout)


@dataclass(frozen=True, slots=True, repr=False)
class ScalarType(Type):
    """A scalar of a numerics policy (given as a policy, a format or a format name)."""

    policy: Policy
    _text: str = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        policy = _policy_arg(self.policy, "the policy of a scalar type")
        object.__setattr__(self, "policy", policy)
        extra = format_policy(policy)
        text = f"scalar<{policy.storage.name}{extra}>" if extra else policy.storage.name
        object.__setattr__(self, "_text", text)

    @property
    def format(self):
        """The storage format (``policy.storage``)."""
        return self.policy.storage


@dataclass(frozen=True, slots=True, repr=False)
class IndexType(Type):
    """An integer index (loop counters, sizes, coordinates): ``index``."""

    _text: str = field(default="index", init=False, compare=False, repr=False)


@dataclass(frozen=True, slots=True, repr=False)
class FunctionType(Type):
    """The type of a function: input types and result types."""

    inputs: tuple
    results: tuple
    _text: str = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        inputs, results = tuple(self.inputs), tuple(self.results)
        for t in inputs + results:
            if not isinstance(t, Type):
                raise IRError(f"a function type holds types, got {t!r}",
                              fix="build the types with TensorType, ScalarType, IndexType, FunctionType")
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "results", results)
        object.__setattr__(self, "_text", format_signature(inputs, results))
