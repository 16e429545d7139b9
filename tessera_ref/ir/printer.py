"""The IR text format (MLIR generic syntax) and its printer.

Grammar (types in :mod:`tessera_ref.ir.types`, attributes in
:mod:`tessera_ref.ir.attributes`)::

    op         ::= (value ("," value)* "=")? string "(" (value ("," value)*)? ")"
                   regions? attr-dict? ":" function-type location?
    value      ::= "%" ([0-9]+ | [A-Za-z_$.][A-Za-z0-9_$.]*)
    regions    ::= "(" region ("," region)* ")"
    region     ::= "{" block* "}"
    block      ::= label? op*          (only the entry block may omit its label)
    label      ::= "^" [A-Za-z0-9_$.]+ ("(" value ":" type ("," value ":" type)* ")")? ":"
    attr-dict  ::= "{" (key "=" attribute ("," key "=" attribute)*)? "}"
    key        ::= [A-Za-z_][A-Za-z0-9_$.]* | string
    location   ::= "loc(" string (":" [0-9]+ (":" [0-9]+)?)? ")"

For example::

    %0 = "tessera.graph.matmul"(%a, %b) {tile_shape = [128, 128, 64]}
         : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16> loc("model.py":12:0)

(one line in the text; broken here to fit).

The function type after ``:`` lists the operand types and the result types. Whitespace
separates tokens freely and ``//`` starts a comment to the end of the line; the printer
writes one canonical text, so print -> parse -> print is byte-identical:

- one op per line, indented two spaces per level of region nesting, no trailing newline;
- a region prints ``{``, a newline, its blocks and ``}`` at the indentation of its op;
  block labels sit at that indentation too, the block's ops two spaces deeper; labels are
  ``^bb0``, ``^bb1``, ... per region; the entry block's label is left out when the block has
  no arguments and at least one op;
- attributes are sorted by key; an empty attribute dict is left out;
- a location ``"file:line"`` (ending in ``:`` and digits) prints as ``loc("file":line:0)``
  (MLIR's file-line-column form; column 0 is "unknown"), any other location string as
  ``loc("text")``; an op without a location prints none. The parser reads a nonzero column
  back into the location (``"file:line:col"``);
- SSA names: a value whose ``name`` hint matches ``[A-Za-z_$.][A-Za-z0-9_$.]*`` prints as
  ``%hint``, or ``%hint_1``, ``%hint_2``, ... when that name is already taken; every other
  value gets the next number (``%0``, ``%1``, ... in text order). Names are unique within
  an isolated op (a function, the module) and numbering restarts in each. The parser keeps
  non-numeric names as hints, so printing again gives the same names.
"""
from __future__ import annotations

import re

from .attributes import BARE_NAME_RE, DenseAttr, SymbolRef, format_float, quote_string, unsupported_attribute
from .core import Operation, check_nesting
from .errors import MAX_NESTING, IRError, too_deep
from .registry import op_info
from .types import Type, format_signature

__all__ = ["print_op", "format_attribute", "format_location", "HINT_RE"]

#: A value name hint the printer uses as is.
HINT_RE = re.compile(r"[A-Za-z_$.][A-Za-z0-9_$.]*")

_LOCATION_RE = re.compile(r"(.*):([0-9]+)", re.DOTALL)


def print_op(op: Operation) -> str:
    """The text of ``op`` (and everything nested in it)."""
    check_nesting(op)
    printer = _Printer()
    printer.op(op, "")
    text = "".join(printer.out)
    return text[:-1]


def format_attribute(value, _depth: int = 0) -> str:
    """The text of an attribute value (see :mod:`tessera_ref.ir.attributes`)."""
    if _depth >= MAX_NESTING:
        raise IRError(too_deep("attribute arrays and dicts are"), fix="store flatter attributes")
    kind = type(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is str:
        return quote_string(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join([format_attribute(v, _depth + 1) for v in value]) + "]"
    if isinstance(value, dict):
        return "{" + _format_entries(value, _depth + 1) + "}"
    if isinstance(value, (Type, DenseAttr, SymbolRef)):
        return str(value)
    raise unsupported_attribute(value)


def _format_entries(attributes: dict, _depth: int = 0) -> str:
    for key in attributes:
        if type(key) is not str:
            raise IRError(f"attribute keys are str, got {key!r}", fix="use str keys")
    return ", ".join([
        f"{key if BARE_NAME_RE.fullmatch(key) else quote_string(key)} = {format_attribute(attributes[key], _depth)}"
        for key in sorted(attributes)
    ])


def format_location(location: str) -> str:
    """``loc("file":line:0)`` for ``"file:line"``, else ``loc("text")``."""
    match = _LOCATION_RE.fullmatch(location)
    if match:
        return f"loc({quote_string(match.group(1))}:{match.group(2)}:0)"
    return f"loc({quote_string(location)})"


class _Printer:
    """Prints ops into ``out``; assigns SSA names per isolated scope."""

    def __init__(self):
        self.out: list[str] = []
        self.names: dict = {}
        self.taken: set = set()
        self.suffix: dict = {}
        self.counter = 0

    def name(self, value) -> str:
        name = self.names.get(value)
        return self.define(value) if name is None else name

    def define(self, value) -> str:
        hint = value.name
        if type(hint) is str and HINT_RE.fullmatch(hint):
            name = hint
            if name in self.taken:
                k = self.suffix.get(hint, 0)
                while name in self.taken:
                    k += 1
                    name = f"{hint}_{k}"
                self.suffix[hint] = k
        else:
            name = str(self.counter)
            self.counter += 1
        self.taken.add(name)
        self.names[value] = name
        return name

    def op(self, op: Operation, indent: str) -> None:
        out = self.out
        operands = "(" + ", ".join(["%" + self.name(v) for v in op.operands]) + ")"
        out.append(indent)
        if op.results:
            out.append(", ".join(["%" + self.define(r) for r in op.results]))
            out.append(" = ")
        out.append(quote_string(op.name))
        out.append(operands)
        if op.regions:
            isolated = op_info(op.name).isolated
            if isolated:
                saved = self.taken, self.suffix, self.counter
                self.taken, self.suffix, self.counter = set(), {}, 0
            out.append(" (")
            for i, region in enumerate(op.regions):
                if i:
                    out.append(", ")
                self.region(region, indent)
            out.append(")")
            if isolated:
                self.taken, self.suffix, self.counter = saved
        if op.attributes:
            try:
                out.append(" {" + _format_entries(op.attributes) + "}")
            except IRError as exc:
                raise IRError(f"cannot print '{op.name}' (at {op.where}): "
                              f"{exc.what}", fix=exc.fix) from None
        out.append(" : ")
        out.append(format_signature([v.type for v in op.operands], [r.type for r in op.results]))
        if op.location is not None:
            out.append(" " + format_location(op.location))
        out.append("\n")

    def region(self, region, indent: str) -> None:
        out = self.out
        out.append("{\n")
        inner = indent + "  "
        for i, block in enumerate(region.blocks):
            args = [f"%{self.define(a)}: {a.type}" for a in block.args]
            if i or args or block._first is None:
                out.append(f"{indent}^bb{i}({', '.join(args)}):\n" if args else f"{indent}^bb{i}:\n")
            for op in block:
                self.op(op, inner)
        out.append(indent + "}")
