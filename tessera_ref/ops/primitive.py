"""The primitive registry (DESIGN §5): every Graph IR op defined once, with all its rules.

A :class:`Primitive` is one op of the Graph level (``"tessera.graph.<name>"``) and carries:

- ``attrs`` — the attribute schema: every attribute the op takes, its default, and a check
  of its value (an unknown or malformed attribute is an :class:`~tessera_ref.errors.OpError`);
- ``arity`` — how many operands the op takes, ``(least, most)`` (``most`` is ``None`` for
  any number); by default read off ``infer``'s positional parameters;
- ``infer(attrs, *operand_types)`` — the result type(s) from the operand types and the
  attributes, raising :class:`~tessera_ref.errors.ShapeError` /
  :class:`~tessera_ref.errors.DTypeError` naming every type involved on a mismatch;
- ``impl(call, *arrays)`` — the exact reference semantics on arrays of the operands'
  storage dtypes, returning arrays of the result types' dtypes (the spec clause ``spec``);
- ``cost(call)`` — a :class:`Cost`: FLOPs and bytes moved, for the simulator's roofline;
- ``vjp``, ``jvp``, ``shard`` — slots the autodiff and mesh issues fill;
- ``kernel_family`` — the lowering's kernel family that turns the op into Tile IR. The
  lowering lies above this package, so each family fills the slot of its primitives itself
  (``tessera_ref.lowering.family.register_family``).

:data:`NOT_DIFFERENTIABLE` in ``vjp``/``jvp`` says so explicitly; ``None`` in a slot is
"missing", which :func:`missing_rules` reports.

Defining a primitive registers its IR name with :func:`tessera_ref.ir.register_op`, with a
verify hook that re-runs ``infer`` on the op's operand types and attributes and compares the
result types — so a parsed module is checked by exactly the rules that built it. Before it
calls any rule, the hook checks the operand count against ``arity`` and that every operand
is a tensor (Graph IR ops take tensors only), so an ill-formed op is a
:class:`~tessera_ref.ir.VerifyError`, never an exception from inside a rule.
"""
from __future__ import annotations

import difflib
import inspect
import math
import os
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from ..errors import HostMemoryError, OpError, TesseraError
from ..ir.registry import close_dialect, register_op
from ..ir.types import TensorType

__all__ = ["Primitive", "Attr", "Call", "Cost", "PRIMITIVES", "GRAPH_DIALECT", "NOT_DIFFERENTIABLE",
           "RULES", "define", "primitive", "primitive_of", "missing_rules", "REQUIRED"]

#: The dialect prefix of every Graph IR op name.
GRAPH_DIALECT = "tessera.graph"

#: The rules every primitive has a slot for, in the order they are reported.
RULES = ("infer", "impl", "cost", "vjp", "jvp", "shard", "kernel_family")


class _Marker:
    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: The value of ``vjp``/``jvp`` for an op that has no derivative (say so, don't leave it empty).
NOT_DIFFERENTIABLE = _Marker("NOT_DIFFERENTIABLE")
#: The default of an attribute that must be given.
REQUIRED = _Marker("REQUIRED")


class Cost(NamedTuple):
    """What an op costs: floating-point operations and bytes read plus written (packed sizes)."""

    flops: int
    bytes: int


@dataclass(frozen=True)
class Attr:
    """One attribute of a primitive: its default (or :data:`REQUIRED`), a check and a description.

    ``check(value)`` returns the canonical attribute value (e.g. a list turned into a tuple
    of ints) or raises :class:`~tessera_ref.errors.OpError`; ``None`` accepts any attribute
    value. A default of ``None`` means the attribute is optional and left out of the IR
    when not given.
    """

    default: object = REQUIRED
    check: Callable | None = None
    doc: str = ""


@dataclass(frozen=True)
class Call:
    """One application of a primitive, as ``impl`` and ``cost`` see it."""

    primitive: "Primitive"
    attrs: dict
    in_types: tuple
    out_types: tuple
    location: str | None = None


close_dialect(GRAPH_DIALECT)

#: Registered primitives by short name (``"matmul"``).
PRIMITIVES: dict[str, "Primitive"] = {}
_BY_IR_NAME: dict[str, "Primitive"] = {}


@dataclass(eq=False)
class Primitive:
    """One Graph IR op and its rules (see the module docstring)."""

    name: str
    infer: Callable
    impl: Callable
    cost: Callable
    spec: str
    attrs: dict = field(default_factory=dict)
    vjp: object = None
    jvp: object = None
    shard: object = None
    kernel_family: object = None  # set by the lowering's register_family (ops cannot import lowering)
    canonicalize: Callable | None = None
    layout_aware: bool = False
    arity: tuple = (0, None)

    @property
    def ir_name(self) -> str:
        return f"{GRAPH_DIALECT}.{self.name}"

    def __repr__(self) -> str:
        return f"Primitive({self.ir_name})"

    # -- attributes ---------------------------------------------------------------------
    def check_attrs(self, given: dict) -> dict:
        """The full attribute dict for ``given``: defaults filled in, values checked and
        made canonical; optional attributes left unset are absent."""
        unknown = [k for k in given if k not in self.attrs]
        if unknown:
            known = ", ".join(self.attrs) or "none"
            close = difflib.get_close_matches(unknown[0], list(self.attrs), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise OpError(f"{self.name} got unknown attribute(s) {', '.join(map(repr, unknown))}",
                          fix=f"{hint}{self.name} takes: {known}")
        out = {}
        for key, spec in self.attrs.items():
            value = given.get(key, spec.default)
            if value is REQUIRED:
                raise OpError(f"{self.name} needs the attribute {key!r} ({spec.doc})",
                              fix=f"pass {key}=...")
            if value is None:
                continue
            if spec.check is not None:
                try:
                    value = spec.check(value)
                except TesseraError:
                    raise
                except (TypeError, ValueError) as exc:
                    raise OpError(f"{self.name}: bad value {value!r} for attribute {key!r}: {exc}",
                                  fix=spec.doc or None) from None
            out[key] = value
        return out

    # -- types ----------------------------------------------------------------------------
    def infer_types(self, attrs: dict, in_types, location: str | None = None) -> tuple:
        """``infer`` as a tuple of result types; errors carry ``location`` when given."""
        try:
            if self.canonicalize is not None:
                attrs.update(self.canonicalize(attrs, *in_types))
            out = self.infer(attrs, *in_types)
        except TesseraError as exc:
            if location is not None:
                exc.location = location
                exc.args = (exc._render(),)
            raise
        return out if isinstance(out, tuple) else (out,)

    def run(self, call: Call, *arrays) -> tuple:
        """``impl`` on ``arrays`` as a tuple of results, each checked against its type's dtype
        and static shape (an impl bug, not a user error, trips this). Results too large for the
        host are refused first (:func:`check_host_memory`)."""
        check_host_memory(self.name, call.out_types, call.location)
        out = self.impl(call, *arrays)
        out = out if isinstance(out, tuple) else (out,)
        for value, ty in zip(out, call.out_types):
            if not isinstance(value, np.ndarray):
                raise AssertionError(f"{self.name}.impl returned a {type(value).__name__}, not an ndarray")
            if value.dtype != ty.dtype or (ty.is_static and value.shape != ty.shape):
                raise AssertionError(f"{self.name}.impl returned {value.dtype}{list(value.shape)} "
                                     f"for result type {ty}")
        return out

    def missing(self) -> list[str]:
        """The rule slots still empty (``None``)."""
        return [rule for rule in RULES if getattr(self, rule) is None]


def _host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX host: no limit known
        return None


#: The host's physical memory in bytes (None where the platform does not say).
HOST_MEMORY = _host_memory()


def check_host_memory(name: str, out_types, location: str | None) -> None:
    """Refuse computing results of ``out_types`` whose bytes exceed a quarter of the host's
    memory (the exact kernels hold operands in wider formats: several times the result) with
    a :class:`~tessera_ref.errors.HostMemoryError`, before anything is allocated."""
    if HOST_MEMORY is None:
        return
    need = sum(math.prod(t.shape) * t.dtype.itemsize for t in out_types if t.is_static)
    if need > HOST_MEMORY // 4:
        gib = 2 ** 30
        raise HostMemoryError(
            f"{name} would compute {', '.join(map(str, out_types))}: {need / gib:.1f} GiB of results, more than "
            f"the {HOST_MEMORY / 4 / gib:.1f} GiB this host can compute with (a quarter of its "
            f"{HOST_MEMORY / gib:.1f} GiB: the exact kernels work in wider formats)",
            fix="use a smaller shape, or abstract tensors (dist.tensor without data) for types, bytes and "
                "costs without values", location=location)


def _arity_of(infer: Callable) -> tuple:
    """``(least, most)`` operands of an ``infer(attrs, ...)``; ``most`` is None for ``*types``."""
    params = list(inspect.signature(infer).parameters.values())[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    least = sum(p.default is p.empty for p in positional)
    variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
    return least, None if variadic else len(positional)


def _check_operands(prim: Primitive, op) -> None:
    least, most = prim.arity
    n = len(op.operands)
    if n < least or (most is not None and n > most):
        wanted = (f"{least}" if least == most else f"{least} to {most}" if most is not None
                  else f"at least {least}")
        raise op.emit_error(f"takes {wanted} operand(s), has {n}",
                            fix=f"build it with tessera_ref.op.{prim.name}(...)")
    for index, value in enumerate(op.operands):
        if not isinstance(value.type, TensorType):
            raise op.emit_error(f"operand #{index} is a {value.type}, but Graph IR ops take tensors",
                                fix="pass a tensor (a 0-d tensor<f32> for a single number)")


def _verify_hook(prim: Primitive):
    def verify(op) -> None:
        _check_operands(prim, op)
        try:
            attrs = prim.check_attrs(dict(op.attributes))
            in_types = tuple(v.type if prim.layout_aware else v.type.with_layout(None) for v in op.operands)
            expected = prim.infer_types(attrs, in_types, op.location)
        except TesseraError as exc:
            raise op.emit_error(exc.what, exc.fix) from None
        if attrs != op.attributes:
            raise op.emit_error(f"attributes {op.attributes} are not in canonical form; expected {attrs}",
                                fix="build ops through tessera_ref.op or write canonical attributes")
        for index, result in enumerate(op.results):
            if not isinstance(result.type, TensorType):
                raise op.emit_error(f"result #{index} is a {result.type}, but Graph IR ops give tensors "
                                    f"(the inferred: {', '.join(map(str, expected))})",
                                    fix="declare the result as a tensor (a 0-d tensor<f32> for a single number)")
        actual = tuple(r.type if prim.layout_aware else r.type.with_layout(None) for r in op.results)
        if actual != expected:
            raise op.emit_error(
                f"result types ({', '.join(map(str, actual))}) differ from the inferred "
                f"({', '.join(map(str, expected))}) for operands ({', '.join(map(str, in_types))})")
    return verify


def define(name: str, *, infer: Callable, impl: Callable, cost: Callable, spec: str,
           attrs: dict | None = None, vjp=None, jvp=None, shard=None,
           canonicalize: Callable | None = None, layout_aware: bool = False,
           arity: tuple | None = None) -> Primitive:
    """Define and register the primitive ``name`` (once); see the module docstring."""
    if name in PRIMITIVES:
        raise OpError(f"primitive {name!r} is already defined", fix="define each op once")
    for key, value in (attrs or {}).items():
        if not isinstance(value, Attr):
            raise OpError(f"attribute {key!r} of {name!r} must be declared with Attr(...)")
    prim = Primitive(name, infer, impl, cost, spec, dict(attrs or {}), vjp, jvp, shard,
                     canonicalize=canonicalize, layout_aware=layout_aware,
                     arity=_arity_of(infer) if arity is None else arity)
    register_op(prim.ir_name, verify=_verify_hook(prim))
    PRIMITIVES[name] = prim
    _BY_IR_NAME[prim.ir_name] = prim
    return prim


def primitive(name: str) -> Primitive:
    """The primitive called ``name`` (short ``"matmul"`` or IR ``"tessera.graph.matmul"``)."""
    prim = PRIMITIVES.get(name) or _BY_IR_NAME.get(name)
    if prim is None:
        close = difflib.get_close_matches(name.rsplit(".", 1)[-1], list(PRIMITIVES), n=3)
        raise OpError(f"unknown op {name!r}",
                      fix=f"did you mean {', '.join(close)}?" if close else "see tessera_ref.ops.PRIMITIVES")
    return prim


def primitive_of(op) -> Primitive | None:
    """The primitive of an IR op, or ``None`` when the op is not a Graph IR primitive."""
    return _BY_IR_NAME.get(op.name)


def missing_rules() -> dict[str, list[str]]:
    """``{op name: [empty rule slots]}`` for every registered primitive with a gap."""
    return {name: gaps for name, prim in sorted(PRIMITIVES.items()) if (gaps := prim.missing())}
