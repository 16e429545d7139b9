"""Attribute values: what an op's ``attributes`` dict may hold, and their exact text.

An attribute is one of these Python values (nested freely inside arrays and dicts)::

    Python value            text
    ----------------------  ------------------------------------------------------------
    bool                    true | false
    int                     decimal, optionally negative: 42, -7
    float                   repr() with a "." before any exponent: 1.5, -0.0, 1.0e+300,
                            5.0e-324; inf, -inf and NaNs as their IEEE-754 binary64 bits in
                            MLIR's hexadecimal form: 0x7FF0000000000000 : f64
    str                     "...": printable ASCII as is, except \\\\ for a backslash
                            and \\" for a quote; \\n and \\t for newline and tab; any
                            other character as \\XX per byte of its UTF-8 encoding
                            (uppercase hex). The parser also takes \\xx in lowercase
                            and any character but ", \\ and newline unescaped.
    tuple or list           [a, b, c]          (the parser builds tuples)
    dict with str keys      {a = 1, "odd key" = 2}   (keys sorted by code point; a key
                            that is not [A-Za-z_][A-Za-z0-9_$.]* is written as a string)
    Type                    its type text: tensor<4xf32>, f32, index, (f32) -> f32
    DenseAttr               dense<"0x0000803F00000040"> : tensor<2xf32>
    SymbolRef               @name, or @"any text" when name is not [A-Za-z_][A-Za-z0-9_$.]*

Floats are binary64 and round-trip bit for bit: ``repr`` of a finite float is the shortest
text that reads back to the same bits (with ``.0`` added before a bare exponent, as MLIR's
float literals need a ``.``), and NaN payloads and signs are kept in the hexadecimal form.
The text is valid MLIR (an untyped float literal is an f64 attribute). The parser also reads
``inf``, ``-inf``, ``nan`` and ``nan(0x<16 hex digits>)``, and refuses a decimal literal
outside binary64's range (one that would become inf, or 0 while its digits are not 0).

Equality of attributes is :func:`attr_key` equality: floats compare by their bits (so
``nan`` equals itself and ``-0.0`` differs from ``0.0``), lists equal tuples.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import TesseraError
from ..numerics import Format, get_format
from .errors import MAX_NESTING, IRError, too_deep
from .types import ELEMENT_KINDS, ElementKind, Type

__all__ = ["DenseAttr", "SymbolRef", "attr_key", "unsupported_attribute", "float_bits", "format_float",
           "quote_string", "CANONICAL_NAN_BITS", "BARE_NAME_RE"]

#: Bits of the NaN printed as plain ``nan``.
CANONICAL_NAN_BITS = 0x7FF8000000000000

#: A dict key or symbol name written without quotes.
BARE_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}


def float_bits(value: float) -> int:
    """The IEEE-754 binary64 bits of ``value``."""
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def format_float(value: float) -> str:
    """Exact text of a float attribute (see the module docstring)."""
    if value != value or math.isinf(value):
        return f"0x{float_bits(value):016X} : f64"
    text = repr(float(value))
    if "." not in text:  # 1e-05 -> 1.0e-05
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def quote_string(text: str) -> str:
    """``text`` as a string literal (see the module docstring)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.extend(f"\\{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    return '"' + "".join(out) + '"'


@dataclass(frozen=True)
class SymbolRef:
    """A reference to a symbol (an op with a ``sym_name`` attribute), e.g. ``@attention``."""

    name: str

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise IRError(f"a symbol reference names a symbol by a str, got {self.name!r}",
                          fix="write SymbolRef('name')")

    def __str__(self) -> str:
        return "@" + (self.name if BARE_NAME_RE.fullmatch(self.name) else quote_string(self.name))


@dataclass(frozen=True)
class DenseAttr:
    """A dense constant: a storage format (or element kind), a static shape and the exact
    element bytes.

    ``data`` holds the elements in row-major order, each element as the little-endian
    bytes of its code, ``format.dtype.itemsize`` bytes per element (one byte per element
    for sub-byte formats, holding the code in its low bits). Printed as
    ``dense<"0x...">`` (uppercase hex of ``data``) followed by ``: tensor<shape x format>``.
    """

    format: Format
    shape: tuple
    data: bytes

    def __post_init__(self):
        fmt = _element(self.format)
        shape = tuple(self.shape)
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
            raise IRError(f"a dense attribute needs a static shape of ints >= 0, got {shape}",
                          fix="give concrete sizes")
        data = bytes(self.data)
        itemsize = fmt.dtype.itemsize
        count = math.prod(shape)
        if len(data) != count * itemsize:
            raise IRError(f"dense attribute of shape {shape} and format {fmt.name} needs "
                          f"{count * itemsize} bytes, got {len(data)}",
                          fix=f"give {itemsize} byte(s) per element")
        if fmt.bits < 8 and any(b >> fmt.bits for b in data):
            raise IRError(f"dense attribute of format {fmt.name}: a byte holds a code wider than "
                          f"{fmt.bits} bits", fix="store one code per byte, in its low bits")
        object.__setattr__(self, "format", fmt)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "data", data)

    @classmethod
    def from_array(cls, array, format=None) -> "DenseAttr":
        """The constant holding ``array``; its dtype decides the format unless given."""
        array = np.asarray(array)
        fmt = _element(array.dtype if format is None else format)
        if array.dtype != fmt.dtype:
            raise IRError(f"dense attribute of format {fmt.name} needs an array of dtype "
                          f"{fmt.dtype}, got {array.dtype}",
                          fix="convert the values first (tessera_ref.numerics.cast)")
        codes = np.ascontiguousarray(array).view(f"u{fmt.dtype.itemsize}")
        return cls(fmt, array.shape, codes.astype(codes.dtype.newbyteorder("<")).tobytes())

    def to_array(self) -> np.ndarray:
        """The values as an array of ``format.dtype``."""
        codes = np.frombuffer(self.data, dtype=np.dtype(f"<u{self.format.dtype.itemsize}"))
        return codes.astype(f"=u{self.format.dtype.itemsize}").view(self.format.dtype).reshape(self.shape)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f'dense<"0x{self.data.hex().upper()}"> : tensor<{dims}{self.format.name}>'


def _element(spec) -> "Format | ElementKind":
    """The format or element kind named by ``spec`` (a format, kind, name or dtype)."""
    if isinstance(spec, ElementKind):
        return spec
    if isinstance(spec, str) and spec in ELEMENT_KINDS:
        return ELEMENT_KINDS[spec]
    if not isinstance(spec, (str, Format)):
        dtype = np.dtype(spec)
        for kind in ELEMENT_KINDS.values():
            if kind.dtype == dtype:
                return kind
    try:
        return get_format(spec)
    except TesseraError as exc:
        raise IRError(f"dense attribute: {exc.what}", fix=exc.fix) from None


def unsupported_attribute(value) -> IRError:
    """The error for a Python value that is not an attribute value."""
    kind = type(value)
    return IRError(f"{value!r} (a {kind.__module__}.{kind.__qualname__}) is not an attribute value",
                   fix="use bool, int, float, str, tuple/list, dict, a Type, DenseAttr or SymbolRef "
                       "(convert NumPy scalars with int() or float())")


def attr_key(value, _depth: int = 0):
    """A hashable key such that two attributes are equal iff their keys are equal.

    Raises :class:`~tessera_ref.ir.errors.IRError` for a value that is not an attribute, or
    arrays and dicts nested more than :data:`~tessera_ref.ir.errors.MAX_NESTING` deep.
    """
    if _depth >= MAX_NESTING:
        raise IRError(too_deep("attribute arrays and dicts are"), fix="store flatter attributes")
    kind = type(value)
    if kind is bool or kind is int or kind is str:
        return (kind.__name__, value)
    if isinstance(value, float):
        return ("float", float_bits(value))
    if isinstance(value, (tuple, list)):
        return ("array", tuple(attr_key(v, _depth + 1) for v in value))
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise IRError(f"a dict attribute needs str keys, got {k!r}", fix="use str keys")
        return ("dict", tuple(sorted((k, attr_key(v, _depth + 1)) for k, v in value.items())))
    if isinstance(value, (Type, DenseAttr, SymbolRef)):
        return value
    raise unsupported_attribute(value)
