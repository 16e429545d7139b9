"""Parsing the IR text format back into IR (the grammar is in :mod:`tessera_ref.ir.printer`,
:mod:`tessera_ref.ir.types` and :mod:`tessera_ref.ir.attributes`).

:func:`parse_module` reads one ``"tessera.module"`` op. Beyond the grammar it checks what
the text alone decides:

- every value is defined before it is used, in its own block or an enclosing region, and
  never across an isolated op (a function, the module): names are scoped like the values;
- no name is defined twice where both definitions are visible;
- the op's type signature has one type per operand and per result, and each operand type
  is the type its value was defined with;
- format names are canonical (``fp8_e4m3``, not ``fp8``); policies and dense constants
  are well formed.

Everything else (an op's own rules, terminators) is the verifier's job. Malformed text
raises :class:`~tessera_ref.ir.errors.IRParseError` with the 1-based line and column,
the line with a caret, and a hint. Non-numeric value names (``%q``) become the values'
``name`` hints; numeric ones (``%0``) are dropped.
"""
from __future__ import annotations

import math
import re
import struct

from ..errors import TesseraError
from ..numerics import ALIASES, FORMATS, Policy
from .attributes import BARE_NAME_RE, CANONICAL_NAN_BITS, DenseAttr, SymbolRef
from .core import MODULE, Block, Module, Operation, Region
from .errors import MAX_NESTING, IRError, IRParseError, too_deep
from .registry import op_info
from .layout import ShardLayout
from .types import ELEMENT_KINDS, MAX_DIM, POLICY_FIELDS, SYMBOL_RE, FunctionType, IndexType, ScalarType, TensorType, default_policy

__all__ = ["parse_module", "parse_type", "parse_attribute"]

_SPACE = re.compile(r"\s*")
_WS_START = " \t\n\r\f\v/"  # (and "" at the end of the text)
_TOKEN = re.compile(r"\S{1,20}")
_VALUE = re.compile(r"%([0-9]+|[A-Za-z_$.][A-Za-z0-9_$.]*)")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_]")
_WORD = re.compile(r"[A-Za-z0-9_]+")
_LABEL = re.compile(r"\^[A-Za-z0-9_$.]+")
_DIGITS = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")
_TENSOR = re.compile(r"tensor<[^<>]*(?:<[^<>]*>[^<>]*)*>")
_SIMPLE_DICT = re.compile(r'\{[^{}"]*\}')
_PLAIN_STRING = re.compile(r'"([^"\\\n]*)"')
_HEX = re.compile(r"[0-9A-Fa-f]{2}")
_HEX_FLOAT = re.compile(r"0x([0-9A-Fa-f]{16})\b")
_NAN_PAYLOAD = re.compile(r"\(0x([0-9A-Fa-f]{16})\)")
_ESCAPES = {"\\": b"\\", '"': b'"', "n": b"\n", "t": b"\t"}
_INDEX = IndexType()
_FORMAT_LIST = ", ".join(FORMATS)


def parse_module(text: str, source: str = "<string>") -> Module:
    """The module written in ``text``; ``source`` names the text in error messages."""
    if not isinstance(text, str):
        raise IRError(f"parse_module reads a str, got {type(text).__name__}",
                      fix="decode the file first (Path.read_text())")
    parser = _Parser(text, source)
    parser.ws()
    if parser.pos == len(text):
        raise parser.error('empty input: expected a "tessera.module" op',
                           fix='write "tessera.module"() ({ ... }) : () -> ()')
    module = parser.op(top=True)
    parser.ws()
    if parser.pos != len(text):
        raise parser.error(f"unexpected {parser.found()} after the module",
                           fix="a module text holds one tessera.module op; put every function inside it")
    return module


def parse_type(text: str, source: str = "<string>"):
    """The type written in ``text`` (e.g. ``"tensor<[B]x64xbf16>"``)."""
    return _parse_whole(text, source, "type")


def parse_attribute(text: str, source: str = "<string>"):
    """The attribute value written in ``text`` (e.g. ``"[1, 2.5, @f]"``)."""
    return _parse_whole(text, source, "attribute")


def _parse_whole(text: str, source: str, what: str):
    if not isinstance(text, str):
        raise IRError(f"parse_{what} reads a str, got {type(text).__name__}", fix="pass the text")
    parser = _Parser(text, source)
    value = getattr(parser, what)()
    parser.ws()
    if parser.pos != len(text):
        raise parser.error(f"unexpected {parser.found()} after the {what}")
    return value


def _nested(kind: str):
    """Count the nesting of ``kind`` around a parse method; deeper than MAX_NESTING is an error."""
    def wrap(method):
        def nested(self, *args):
            depth = self.depth
            depth[kind] += 1
            try:
                if depth[kind] > MAX_NESTING:
                    raise self.error(too_deep(f"{kind} are"), fix="flatten the text (the IR's nesting limit)")
                return method(self, *args)
            finally:
                depth[kind] -= 1
        nested.__doc__ = method.__doc__
        return nested
    return wrap


class _Parser:
    """Recursive descent over the raw text; ``pos`` is the current offset."""

    def __init__(self, text: str, source: str):
        self.text = text
        self.source = source
        self.pos = 0
        # Name scopes, innermost last: dicts name -> (value, offset), or the name of an
        # isolated op whose regions values from further out cannot reach.
        self.scopes: list = [{}]
        self.types: dict = {}
        self.signatures: dict = {}
        self.attr_dicts: dict = {}
        self.depth = {"regions": 0, "attributes": 0}  # current nesting (MAX_NESTING bounds both)
        self.counted = (0, 1)  # (offset, its line): ops are read in text order, so lines are counted once

    # -- diagnostics ------------------------------------------------------------------
    def line_column(self, pos: int) -> tuple[int, int]:
        """1-based line and column (in characters) of offset ``pos``."""
        return self.text.count("\n", 0, pos) + 1, pos - self.text.rfind("\n", 0, pos)

    def error(self, what: str, pos: int | None = None, fix: str | None = None) -> IRParseError:
        """A parse error at ``pos`` (default: the current offset)."""
        text = self.text
        pos = self.pos if pos is None else pos
        line, column = self.line_column(pos)
        start = pos - column + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        caret = "".join("\t" if c == "\t" else " " for c in text[start:pos]) + "^"
        return IRParseError(what, source=self.source, line=line, column=column,
                            snippet=f"{text[start:end]}\n{caret}", fix=fix)

    def found(self) -> str:
        if self.pos >= len(self.text):
            return "end of input"
        token = _TOKEN.match(self.text, self.pos)
        return repr(token.group()) if token else repr(self.text[self.pos])

    def where(self, pos: int) -> str:
        line, column = self.line_column(pos)
        return f"{line}:{column}"

    def text_location(self, pos: int) -> str:
        """``"source:line:column"`` of offset ``pos``, at or after the last one asked for (ops
        start in text order)."""
        offset, line = self.counted
        line += self.text.count("\n", offset, pos)
        self.counted = (pos, line)
        column = pos - self.text.rfind("\n", 0, pos)
        return f"{self.source}:{line}:{column}"

    # -- tokens -----------------------------------------------------------------------
    def ws(self) -> None:
        """Skip whitespace and ``//`` comments (a loop, not one repeated regex group, whose
        backtracking state would grow with the number of comment lines)."""
        text = self.text
        if text[self.pos:self.pos + 1] not in _WS_START:
            return
        pos = _SPACE.match(text, self.pos).end()
        while text.startswith("//", pos):
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else _SPACE.match(text, end).end()
        self.pos = pos

    def peek(self) -> str:
        return self.text[self.pos:self.pos + 1]

    def accept(self, literal: str) -> bool:
        text = self.text
        self.ws()
        if text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str, context: str, fix: str | None = None) -> None:
        if not self.accept(literal):
            raise self.error(f"expected '{literal}' {context}, found {self.found()}", fix=fix)

    def match(self, regex: re.Pattern, what: str, fix: str | None = None) -> re.Match:
        found = regex.match(self.text, self.pos)
        if found is None:
            raise self.error(f"expected {what}, found {self.found()}", fix=fix)
        self.pos = found.end()
        return found

    def string(self) -> str:
        text, start = self.text, self.pos
        plain = _PLAIN_STRING.match(text, start)
        if plain:
            self.pos = plain.end()
            return plain.group(1)
        if not text.startswith('"', start):
            raise self.error(f"expected a string, found {self.found()}")
        out = bytearray()
        pos = start + 1
        while True:
            if pos >= len(text) or text[pos] == "\n":
                raise self.error("unterminated string", start,
                                 fix='close the string with " on the same line (write newlines as \\n)')
            ch = text[pos]
            if ch == '"':
                break
            if ch == "\\":
                escape = text[pos + 1:pos + 2]
                if escape in _ESCAPES:
                    out += _ESCAPES[escape]
                    pos += 2
                elif _HEX.match(text, pos + 1):
                    out.append(int(text[pos + 1:pos + 3], 16))
                    pos += 3
                else:
                    raise self.error(f"unknown escape '\\{escape}' in a string", pos,
                                     fix='use \\\\, \\", \\n, \\t or \\XX (two hex digits)')
            else:
                out += ch.encode("utf-8", "surrogatepass")
                pos += 1
        try:
            value = out.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise self.error("the bytes of this string are not UTF-8", start,
                             fix="escape each byte of the UTF-8 encoding as \\XX") from None
        self.pos = pos + 1
        return value

    # -- names ------------------------------------------------------------------------
    def lookup(self, name: str, pos: int):
        isolated_by = None
        for scope in reversed(self.scopes):
            if isinstance(scope, str):
                isolated_by = isolated_by or scope
            elif name in scope:
                if isolated_by is None:
                    return scope[name][0]
                raise self.error(f"%{name} is defined outside the isolated op '{isolated_by}' "
                                 "and cannot be used inside it", pos,
                                 fix="pass the value in as an argument")
        raise self.error(f"use of undefined value %{name}", pos,
                         fix="define a value before its use, in the same block or an enclosing region")

    def define(self, name: str, value, pos: int) -> None:
        for scope in reversed(self.scopes):
            if isinstance(scope, str):
                break
            if name in scope:
                raise self.error(f"redefinition of %{name} (first defined at {self.where(scope[name][1])})",
                                 pos, fix="give each value its own name")
        self.scopes[-1][name] = (value, pos)
        if not name[0].isdigit():
            value.name = name

    # -- ops --------------------------------------------------------------------------
    def op(self, top: bool = False) -> Operation:
        text = self.text
        start = self.pos
        text_location = self.text_location(start)
        results = []
        if text.startswith("%", start):
            while True:
                self.ws()
                pos = self.pos
                results.append((self.match(_VALUE, "a value name like %0 or %x").group(1), pos))
                if not self.accept(","):
                    break
            self.expect("=", "after the result names")
            self.ws()
        name_pos = self.pos
        if not text.startswith('"', name_pos):
            raise self.error(f'expected an op (a quoted name like "test.add"), found {self.found()}',
                             fix='write ops in MLIR generic form: %0 = "dialect.op"(%a) : (type) -> type')
        name = self.string()
        if top and name != MODULE:
            raise self.error(f"the top-level op must be \"{MODULE}\", not \"{name}\"", name_pos,
                             fix=f'wrap the ops in "{MODULE}"() ({{ ... }}) : () -> ()')
        if name == MODULE and not top:
            raise self.error("a module cannot be nested in another op", name_pos,
                             fix="move its ops into the outer module")
        self.expect("(", f"to open the operand list of '{name}'")
        operands = []
        if not self.accept(")"):
            while True:
                self.ws()
                pos = self.pos
                value_name = self.match(_VALUE, "an operand (a value name like %0 or %x)").group(1)
                operands.append((self.lookup(value_name, pos), value_name, pos))
                if not self.accept(","):
                    break
            self.expect(")", f"to close the operand list of '{name}'")
        regions = []
        if self.accept("("):
            isolated = name if op_info(name).isolated else None
            while True:
                regions.append(self.region(isolated))
                if not self.accept(","):
                    break
            self.expect(")", f"to close the region list of '{name}'")
        self.ws()
        attributes = self.attr_dict() if text.startswith("{", self.pos) else {}
        self.expect(":", f"and the type signature of '{name}'",
                    fix="end every op with ': (operand types) -> result types'")
        self.ws()
        signature_pos = self.pos
        inputs, outputs = self.cached_signature()
        self.ws()
        location = self.location() if text.startswith("loc(", self.pos) else None
        if len(inputs) != len(operands):
            raise self.error(f"the signature of '{name}' lists {len(inputs)} operand type(s) but the op "
                             f"has {len(operands)} operand(s)", signature_pos,
                             fix="give one type per operand, in order")
        for index, ((value, value_name, pos), declared) in enumerate(zip(operands, inputs)):
            if value.type is not declared and value.type != declared:
                raise self.error(f"operand #{index} of '{name}' is %{value_name} of type {value.type}, "
                                 f"but the signature says {declared}", pos,
                                 fix="make the signature match the type the value was defined with")
        if len(outputs) != len(results):
            raise self.error(f"the signature of '{name}' lists {len(outputs)} result type(s) but the op "
                             f"defines {len(results)} result name(s)", signature_pos if results else start,
                             fix="name one result per result type: %a, %b = ...")
        values = [value for value, _, _ in operands]
        try:
            if top:
                if values or results or len(regions) != 1:
                    raise IRError(f'"{MODULE}" has no operands, no results and exactly one region',
                                  fix=f'write "{MODULE}"() ({{ ... }}) : () -> ()')
                op = Module(regions[0], attributes, location)
            else:
                op = Operation(name, values, outputs, attributes, regions, location)
        except IRError as exc:
            raise self.error(exc.what, name_pos, fix=exc.fix) from None
        op.text_location = text_location
        for (result_name, pos), value in zip(results, op.results):
            self.define(result_name, value, pos)
        return op

    @_nested("regions")
    def region(self, isolated: str | None) -> Region:
        self.expect("{", "to open a region")
        open_pos = self.pos - 1
        region = Region()
        if isolated is not None:
            self.scopes.append(isolated)
        labels = {}
        text = self.text
        while not self.accept("}"):
            scope: dict = {}
            self.scopes.append(scope)
            block = region.append(Block())
            if text.startswith("^", self.pos):
                label_pos = self.pos
                label = self.match(_LABEL, "a block label").group()
                if label in labels:
                    raise self.error(f"block label {label} is used twice in this region", label_pos,
                                     fix="give each block of a region its own label")
                labels[label] = label_pos
                if self.accept("("):
                    while True:
                        self.ws()
                        pos = self.pos
                        arg_name = self.match(_VALUE, "a block argument like %arg0").group(1)
                        self.expect(":", f"and the type of block argument %{arg_name}")
                        self.define(arg_name, block.add_argument(self.type()), pos)
                        if not self.accept(","):
                            break
                    self.expect(")", "to close the block argument list")
                self.expect(":", f"after block label {label}")
            elif region.blocks[0] is not block:
                raise self.error("expected a block label", fix="label every block after the first: ^bb1:")
            while True:
                self.ws()
                if self.pos >= len(text):
                    raise self.error(f"expected '}}' to close the region opened at {self.where(open_pos)}, "
                                     "found end of input", fix="add the missing '}'")
                if text[self.pos] in "^}":
                    break
                block.append(self.op())
            self.scopes.pop()
        if isolated is not None:
            self.scopes.pop()
        return region

    def location(self) -> str:
        self.pos += len("loc(")
        self.ws()
        text = self.string()
        if self.accept(":"):
            self.ws()
            text += ":" + self.match(_DIGITS, "a line number").group()
            if self.accept(":"):
                self.ws()
                column = self.match(_DIGITS, "a column number").group()
                if column != "0":  # column 0 is MLIR's "unknown column"
                    text += ":" + column
        self.expect(")", "to close the location")
        return text

    # -- types ------------------------------------------------------------------------
    def cached_signature(self) -> tuple[list, list]:
        """:meth:`signature`, memoized by the text up to the end of the line or ' loc('.

        Printed modules repeat a few signatures; parsing is context free, so text that
        parsed to exactly that end before parses the same way again.
        """
        text, start = self.text, self.pos
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        location = text.find(" loc(", start, end)
        end = end if location < 0 else location
        key = text[start:end]
        cached = self.signatures.get(key)
        if cached is not None:
            self.pos = end
            return cached
        parsed = self.signature()
        if self.pos == end:
            self.signatures[key] = parsed
        return parsed

    def signature(self) -> tuple[list, list]:
        self.expect("(", "to open a function type")
        inputs = self.type_list()
        self.expect("->", "in a function type")
        self.ws()
        if self.accept("("):
            return inputs, self.type_list()
        return inputs, [self.type()]

    def type_list(self) -> list:
        """Types up to and including the closing ')' (the '(' is consumed)."""
        types = []
        if self.accept(")"):
            return types
        while True:
            types.append(self.type())
            if not self.accept(","):
                break
        self.expect(")", "to close the type list")
        return types

    @_nested("attributes")
    def type(self):
        self.ws()
        text, start = self.text, self.pos
        if text.startswith("(", start):
            inputs, outputs = self.signature()
            return FunctionType(inputs, outputs)
        tensor = _TENSOR.match(text, start)
        if tensor is not None:
            key = tensor.group()
            cached = self.types.get(key)
            if cached is not None:
                self.pos = tensor.end()
                return cached
            parsed = self.tensor_type()
            if self.pos == tensor.end():  # no comment or line break inside: the text is the key
                self.types[key] = parsed
            return parsed
        word = self.match(_IDENT, "a type (tensor<...>, scalar<...>, index, a format or a function "
                                  "type)").group()
        if word == "index":
            return _INDEX
        if word == "scalar" and text.startswith("<", self.pos):
            self.pos += 1
            fmt = self.format_name()
            policy = self.policy(fmt)
            self.expect(">", "to close scalar<...>")
            return ScalarType(policy)
        if word == "tensor":
            self.pos = start
            return self.tensor_type()
        self.pos = start
        return ScalarType(default_policy(self.format_name()))

    def tensor_type(self) -> TensorType:
        text, start = self.text, self.pos
        self.pos += len("tensor")
        self.expect("<", "after 'tensor'")
        shape = []
        while True:
            c = self.peek()
            if c.isdigit():
                digits = self.match(_DIGITS, "a dimension").group()
                significant = digits.lstrip("0") or "0"
                if len(significant) > len(str(MAX_DIM)) or int(significant) > MAX_DIM:
                    shown = digits if len(digits) <= 40 else f"{digits[:20]}...({len(digits)} digits)"
                    raise self.error(f"dimension {shown} does not fit an int64 index (at most 2^63 - 1 = {MAX_DIM})",
                                     self.pos - len(digits), fix="use a smaller size, or a symbolic dimension [N]")
                shape.append(int(significant))
            elif c == "[":
                self.pos += 1
                shape.append(self.match(SYMBOL_RE, "a symbolic dimension name [A-Za-z_][A-Za-z0-9_]*").group())
                if not text.startswith("]", self.pos):
                    raise self.error(f"expected ']' after symbolic dimension {shape[-1]}, "
                                     f"found {self.found()}")
                self.pos += 1
            else:
                break
            if not text.startswith("x", self.pos):
                raise self.error(f"expected 'x' after dimension {shape[-1]}, found {self.found()}",
                                 fix="write shapes like 128x64xbf16 (symbolic dimensions as [B]x64xbf16)")
            self.pos += 1
        kind = next((k for k in ELEMENT_KINDS.values() if text.startswith(k.name, self.pos)), None)
        if kind is not None and not _IDENT_CHAR.match(text, self.pos + len(kind.name)):
            self.pos += len(kind.name)
            policy = kind
        else:
            policy = self.policy(self.format_name())
        layout = self.shard_layout() if self.accept(",") else None
        self.expect(">", "to close tensor<...>")
        try:
            return TensorType(shape, policy, layout)
        except IRError as exc:
            raise self.error(exc.what, start, fix=exc.fix) from None

    def shard_layout(self) -> ShardLayout:
        """``#shard<[entries], partial(axes[, op=...]), padded>`` (see :mod:`tessera_ref.ir.layout`)."""
        self.ws()
        start = self.pos
        if not self.text.startswith("#shard<", start):
            raise self.error(f"expected '#shard<...>' after the element, found {self.found()}",
                             fix="write tensor<8x8xf32, #shard<[tp, *]>>")
        self.pos += len("#shard<")
        self.expect("[", "to open the dimension entries of #shard<...>")
        dims = []
        self.ws()
        if not self.accept("]"):
            while True:
                self.ws()
                if self.accept("*"):
                    dims.append(())
                else:
                    axes = [self.match(_IDENT, "a mesh axis or '*'").group()]
                    while self.accept("+"):
                        axes.append(self.match(_IDENT, "a mesh axis after '+'").group())
                    dims.append(tuple(axes))
                self.ws()
                if self.accept("]"):
                    break
                self.expect(",", "between #shard dimension entries")
        partial, op, padded = [], "sum", False
        while self.accept(","):
            self.ws()
            word_pos = self.pos
            word = self.match(_IDENT, "'partial(...)' or 'padded'").group()
            if word == "padded" and not padded:
                padded = True
            elif word == "partial" and not partial:
                self.expect("(", "after 'partial'")
                while True:
                    self.ws()
                    name = self.match(_IDENT, "a mesh axis").group()
                    if name == "op" and self.accept("="):
                        op = self.match(_IDENT, "a reduction (max, min, prod)").group()
                    else:
                        partial.append(name)
                    self.ws()
                    if not self.accept(","):
                        break
                self.expect(")", "to close partial(...)")
            else:
                raise self.error(f"unexpected '{word}' in #shard<...>", word_pos,
                                 fix="write #shard<[tp, *], partial(dp), padded>")
        self.expect(">", "to close #shard<...>")
        try:
            return ShardLayout(tuple(dims), tuple(partial), op, padded)
        except IRError as exc:
            raise self.error(exc.what, start, fix=exc.fix) from None

    def format_name(self):
        pos = self.pos
        word = self.match(_IDENT, "an element format", fix=f"use one of {_FORMAT_LIST}").group()
        fmt = FORMATS.get(word)
        if fmt is not None:
            return fmt
        if word in ALIASES:
            raise self.error(f"'{word}' is an alias; the text format uses canonical names", pos,
                             fix=f"write {ALIASES[word]}")
        raise self.error(f"unknown format or type '{word}'", pos,
                         fix=f"use tensor<...>, scalar<...>, index, a function type or one of {_FORMAT_LIST}")

    def policy(self, fmt) -> Policy:
        """An optional ', #policy<...>' after an element format."""
        comma = self.pos
        if not self.accept(","):
            return default_policy(fmt)
        self.ws()
        pos = self.pos
        if self.text.startswith("#shard<", pos):  # no policy; the layout follows
            self.pos = comma
            return default_policy(fmt)
        if not self.text.startswith("#policy<", pos):
            raise self.error(f"expected '#policy<...>' after the element format, found {self.found()}",
                             fix="write tensor<4xfp8_e4m3, #policy<accum=f16, rounding=stochastic>>")
        self.pos += len("#policy<")
        fields: dict = {}
        while True:
            self.ws()
            key_pos = self.pos
            key = self.match(_IDENT, "a policy field").group()
            if key not in POLICY_FIELDS:
                raise self.error(f"unknown policy field '{key}'", key_pos,
                                 fix=f"use {', '.join(POLICY_FIELDS)}")
            if key in fields:
                raise self.error(f"policy field '{key}' is given twice", key_pos)
            self.expect("=", f"after policy field '{key}'")
            self.ws()
            if key == "accum":
                fields[key] = self.format_name()
            else:
                fields[key] = self.match(_WORD, f"a value for '{key}'").group()
            if not self.accept(","):
                break
        self.expect(">", "to close #policy<...>")
        try:
            return Policy(fmt, **fields)
        except TesseraError as exc:
            raise self.error(exc.what, pos, fix=exc.fix) from None

    # -- attributes -------------------------------------------------------------------
    def attr_dict(self) -> dict:
        """An attribute dict; memoized when its text has no string and no nested dict, so
        that every value in it is immutable and can be shared (the dict itself is copied)."""
        simple = _SIMPLE_DICT.match(self.text, self.pos)
        if simple is None:
            return self.parse_attr_dict()
        key = simple.group()
        cached = self.attr_dicts.get(key)
        if cached is None:
            cached = self.parse_attr_dict()
            if self.pos != simple.end():
                return cached
            self.attr_dicts[key] = cached
        self.pos = simple.end()
        return dict(cached)

    def parse_attr_dict(self) -> dict:
        self.pos += 1  # '{'
        entries: dict = {}
        if self.accept("}"):
            return entries
        while True:
            self.ws()
            key_pos = self.pos
            if self.peek() == '"':
                key = self.string()
            else:
                key = self.match(BARE_NAME_RE, "an attribute name").group()
            if key in entries:
                raise self.error(f"attribute '{key}' is given twice", key_pos)
            self.expect("=", f"after attribute name '{key}'")
            entries[key] = self.attribute()
            if not self.accept(","):
                break
        self.expect("}", "to close the attribute dictionary")
        return entries

    @_nested("attributes")
    def attribute(self):
        self.ws()
        text, start = self.text, self.pos
        c = self.peek()
        if c == '"':
            return self.string()
        if c == "[":
            self.pos += 1
            items = []
            if self.accept("]"):
                return ()
            while True:
                items.append(self.attribute())
                if not self.accept(","):
                    break
            self.expect("]", "to close the array")
            return tuple(items)
        if c == "{":
            return self.attr_dict()
        if c == "@":
            self.pos += 1
            if self.peek() == '"':
                return SymbolRef(self.string())
            return SymbolRef(self.match(BARE_NAME_RE, "a symbol name after '@'").group())
        if c == "(":
            return self.type()
        if text.startswith("0x", start):
            return self.hex_float()
        if c == "-" or c.isdigit():
            if text.startswith("-inf", start):
                self.pos += 4
                return float("-inf")
            number = self.match(_NUMBER, "a number")
            try:
                if number.group(1) is None and number.group(2) is None:
                    return int(number.group())
                value = float(number.group())
            except ValueError:
                raise self.error(f"number {number.group()[:20]}... has too many digits", start) from None
            digits = number.group()[:number.start(2) - number.start() if number.group(2) else None]
            if math.isinf(value) or (value == 0 and digits.strip("-0.")):
                raise self.error(f"float {number.group()[:30]} is outside the binary64 range (it would read as "
                                 f"{value})", start, fix="write a value between 5.0e-324 and 1.7976931348623157e+308 "
                                 "in magnitude, or inf as 0x7FF0000000000000 : f64")
            return value
        word = _IDENT.match(text, start)
        if word is None:
            raise self.error(f"expected an attribute value, found {self.found()}",
                             fix="see the attribute syntax in tessera_ref.ir.attributes")
        word = word.group()
        if word in ("true", "false"):
            self.pos += len(word)
            return word == "true"
        if word == "inf":
            self.pos += 3
            return float("inf")
        if word == "nan":
            self.pos += 3
            return self.nan()
        if word == "dense" and text.startswith("<", start + 5):
            self.pos += 6
            return self.dense(start)
        return self.type()

    def hex_float(self) -> float:
        """``0x<16 hex digits> : f64``: a float given by its binary64 bits (MLIR's form)."""
        start = self.pos
        digits = self.match(_HEX_FLOAT, "16 hex digits after 0x (the binary64 bits of a float)").group(1)
        self.expect(":", "and the float type after a hexadecimal float")
        self.ws()
        if not self.text.startswith("f64", self.pos):
            raise self.error(f"expected f64 after the hexadecimal float at column {start + 1}, found {self.found()}",
                             fix="hexadecimal floats are binary64 bits: write 0x7FF0000000000000 : f64")
        self.pos += 3
        return struct.unpack("<d", struct.pack("<Q", int(digits, 16)))[0]

    def nan(self) -> float:
        payload = _NAN_PAYLOAD.match(self.text, self.pos)
        if payload is None:
            bits = CANONICAL_NAN_BITS
        else:
            bits = int(payload.group(1), 16)
            if bits & 0x7FF0000000000000 != 0x7FF0000000000000 or not bits & 0x000FFFFFFFFFFFFF:
                raise self.error(f"0x{payload.group(1)} is not the bit pattern of a NaN", self.pos + 1,
                                 fix="a binary64 NaN has all exponent bits set and a nonzero mantissa")
            self.pos = payload.end()
        return struct.unpack("<d", struct.pack("<Q", bits))[0]

    def dense(self, start: int) -> DenseAttr:
        self.ws()
        hex_pos = self.pos
        digits = self.string()
        if not re.fullmatch(r"0x(?:[0-9A-Fa-f]{2})*", digits):
            raise self.error('expected the bytes of a dense constant as "0x" and pairs of hex digits',
                             hex_pos, fix='write dense<"0x0000803F"> : tensor<1xf32>')
        self.expect(">", "to close dense<...>")
        self.expect(":", "and the tensor type of the dense constant")
        self.ws()
        type_pos = self.pos
        ty = self.type()
        if not isinstance(ty, TensorType) or not ty.is_static or (
                ty.element_kind is None and ty.policy != default_policy(ty.format)):
            raise self.error(f"a dense constant's type is a static tensor type without a policy, got {ty}",
                             type_pos, fix="write : tensor<2x3xf32>")
        try:
            return DenseAttr(ty.format, ty.shape, bytes.fromhex(digits[2:]))
        except IRError as exc:
            raise self.error(exc.what, start, fix=exc.fix) from None
