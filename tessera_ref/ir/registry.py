"""What the IR infrastructure knows about op names: verification hooks and traits.

An op definition (the primitive registry of :mod:`tessera_ref.ops`, the builtin ops of
:mod:`tessera_ref.ir.builtin`) registers an :class:`OpInfo` with :func:`register_op`:

- ``verify(op)``: the op's own rules, run by the verifier after the structural checks;
  it raises ``op.emit_error(...)`` (a :class:`~tessera_ref.ir.errors.VerifyError` carrying
  the op's name and source location) when the op is malformed;
- ``side_effects``: the op does something besides computing its results (I/O, a write to
  memory, a collective); DCE, CSE and the greedy driver's dead-op erasure never remove or
  merge such ops. **An op is side-effect free unless its definition says otherwise**, and
  an op with regions has the side effects of the ops nested in it;
- ``terminator``: the op ends a block (it must be the last op of its block);
- ``isolated``: the op's regions are isolated from above: ops inside use no value defined
  outside (functions, the module). SSA names are scoped per isolated op in the text.

Names that are not registered get the defaults: no hook, no side effects, not a
terminator, not isolated — except in a *closed* dialect (:func:`close_dialect`, e.g.
``tessera.graph``), whose complete op set is registered: there an unregistered name is an
unknown op, which the verifier reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .errors import IRError

__all__ = ["OpInfo", "OPS", "register_op", "op_info", "has_side_effects", "is_trivially_dead",
           "close_dialect", "unknown_in_closed_dialect"]


@dataclass(frozen=True)
class OpInfo:
    """The registered facts about one op name (see the module docstring)."""

    name: str
    verify: Callable | None = None
    side_effects: bool = False
    terminator: bool = False
    isolated: bool = False


#: Registered ops by name.
OPS: dict[str, OpInfo] = {}

_DEFAULT = OpInfo("<unregistered>")
_CLOSED: set = set()


def close_dialect(prefix: str) -> None:
    """Declare that every op of dialect ``prefix`` (``"tessera.graph"``) is registered."""
    _CLOSED.add(prefix)


def unknown_in_closed_dialect(name: str) -> bool:
    """True when ``name`` belongs to a closed dialect but is not registered."""
    return name not in OPS and name.rsplit(".", 1)[0] in _CLOSED


def register_op(name: str, *, verify: Callable | None = None, side_effects: bool = False,
                terminator: bool = False, isolated: bool = False) -> OpInfo:
    """Register the facts about op ``name``; each name is registered once."""
    if not isinstance(name, str) or "." not in name:
        raise IRError(f"op names are 'dialect.op' strings, got {name!r}",
                      fix='use a dotted name like "tessera.graph.matmul"')
    if name in OPS:
        raise IRError(f"op '{name}' is already registered", fix="define each op once")
    if verify is not None and not callable(verify):
        raise IRError(f"the verify hook of '{name}' must be callable, got {verify!r}",
                      fix="pass a function verify(op) that raises op.emit_error(...)")
    info = OpInfo(name, verify, bool(side_effects), bool(terminator), bool(isolated))
    OPS[name] = info
    return info


def op_info(name: str) -> OpInfo:
    """The registered :class:`OpInfo` of ``name``, or the defaults for an unregistered name."""
    return OPS.get(name, _DEFAULT)


def has_side_effects(op) -> bool:
    """True when ``op`` or an op nested in its regions is registered with side effects."""
    if OPS.get(op.name, _DEFAULT).side_effects:
        return True
    for region in op.regions:
        for block in region.blocks:
            for nested in block:
                if has_side_effects(nested):
                    return True
    return False


def is_trivially_dead(op) -> bool:
    """True when erasing ``op`` cannot change what the program computes or does.

    That is: no result is used, the op has no side effects (nested ops included), it is
    not a terminator, and it does not define a symbol (``sym_name``: symbols are used by
    name, not through SSA values, and are never dead code to an SSA pass).
    """
    for result in op.results:
        if result._uses:
            return False
    if OPS.get(op.name, _DEFAULT).terminator or "sym_name" in op.attributes:
        return False
    return not has_side_effects(op)
