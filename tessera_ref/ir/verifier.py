"""Structural verification of IR, then each registered op's own rules.

:func:`verify` checks an op and everything nested in it and raises
:class:`~tessera_ref.ir.errors.VerifyError` at the first problem, naming the op, its source
location and the types involved. The structural rules:

1. **Dominance.** An operand must be visible where it is used: a result of an earlier op
   of the same block, an argument of that block, or a value visible at the op that owns
   the enclosing region. An op's results are not visible inside its own regions. The
   regions of an isolated op (see :mod:`tessera_ref.ir.registry`) see no value from outside.
   Blocks do not branch to each other, so a value of one block is not visible in another.
2. **Use lists** agree with operands (operands are changed with ``set_operand``), and
   results, block arguments, blocks and regions point to their owners.
3. **Types.** Every result and block argument has an IR type
   (:class:`~tessera_ref.ir.types.Type`).
4. **Attributes** are attribute values (:mod:`tessera_ref.ir.attributes`) with str keys.
5. **Terminators** (ops registered with ``terminator=True``) are the last op of their block.

Then, innermost ops first, each op's registered ``verify`` hook runs.
"""
from __future__ import annotations

import difflib

from .attributes import attr_key
from .core import BlockArgument, Operation, check_nesting
from .errors import IRError, VerifyError
from .registry import OPS, op_info, unknown_in_closed_dialect
from .types import Type

__all__ = ["verify"]


def verify(op: Operation) -> None:
    """Verify ``op`` and all ops nested in it; raises :class:`VerifyError` on a problem."""
    if not isinstance(op, Operation):
        raise IRError(f"verify() takes an Operation (or Module), got {op!r}", fix="pass the module")
    check_nesting(op)
    _Verifier().op(op, set())


def _describe(value) -> str:
    if isinstance(value, BlockArgument):
        owner = value.block.parent_op
        where = f"'{owner.name}' (at {owner.where})" if owner else "a detached block"
        return f"argument #{value.index} of a block of {where}"
    op = value.op
    return f"result #{value.index} of '{op.name}' (at {op.where})"


def _attached_to(value):
    """The block holding the definition of ``value``, or None if it is not in any block."""
    return value.block if isinstance(value, BlockArgument) else value.op.parent


class _Verifier:
    def __init__(self):
        self.outer: list[tuple[str, set]] = []  # (isolated op name, values visible outside it)

    def op(self, op: Operation, visible: set) -> None:
        for index, value in enumerate(op.operands):
            if value._uses.get(op, 0) != op.operands.count(value):
                raise op.emit_error(f"operand #{index} ({value.type}) is not recorded as a use of its value",
                                    fix="change operands with op.set_operand(), not by assigning op.operands")
            if value not in visible:
                raise self.not_visible(op, index, value)
        for index, result in enumerate(op.results):
            if result.op is not op or result.index != index:
                raise op.emit_error(f"result #{index} does not point back to this op")
            if not isinstance(result.type, Type):
                raise op.emit_error(f"result #{index} has type {result.type!r}, which is not an IR type",
                                    fix="give results TensorType/ScalarType/IndexType/FunctionType types")
        try:
            for key, value in op.attributes.items():
                if type(key) is not str:
                    raise IRError(f"attribute key {key!r} is not a str", fix="use str keys")
                attr_key(value)
        except IRError as exc:
            raise op.emit_error(f"attribute {key!r}: {exc.what}", fix=exc.fix) from None
        info = op_info(op.name)
        if unknown_in_closed_dialect(op.name):
            dialect = op.name.rsplit(".", 1)[0]
            known = [n.rsplit(".", 1)[1] for n in OPS if n.startswith(dialect + ".")]
            close = difflib.get_close_matches(op.name.rsplit(".", 1)[1], known, n=3)
            raise op.emit_error(f"unknown op: {dialect} has no op '{op.name.rsplit('.', 1)[1]}'",
                                fix=f"did you mean {', '.join(close)}?" if close else
                                f"{dialect} has the ops {', '.join(sorted(known))}" if len(known) <= 30 else
                                f"the ops of {dialect} are listed by `tessera-ref ops`")
        if info.terminator and op.parent is not None and op.parent._last is not op:
            raise op.emit_error("is a terminator but is not the last op of its block",
                                fix="move it to the end of the block or erase the ops after it")
        if op.regions:
            self.regions(op, visible, info.isolated)
        if info.verify is not None:
            info.verify(op)

    def regions(self, op: Operation, visible: set, isolated: bool) -> None:
        if isolated:
            self.outer.append((op.name, visible))
            visible = set()
        for region in op.regions:
            if region.parent is not op:
                raise op.emit_error("owns a region whose parent is another op")
            for block in region.blocks:
                if block.parent is not region:
                    raise op.emit_error("has a block whose parent is another region")
                added = []
                for index, arg in enumerate(block.args):
                    if arg.block is not block or arg.index != index:
                        raise op.emit_error(f"block argument #{index} does not point back to its block")
                    if not isinstance(arg.type, Type):
                        raise op.emit_error(f"block argument #{index} has type {arg.type!r}, which is not an "
                                            "IR type", fix="build blocks with IR types")
                    visible.add(arg)
                    added.append(arg)
                nested = block._first
                while nested is not None:
                    if nested.parent is not block:
                        raise nested.emit_error("is linked into a block that is not its parent")
                    self.op(nested, visible)
                    visible.update(nested.results)
                    added.extend(nested.results)
                    nested = nested._next
                visible.difference_update(added)
        if isolated:
            self.outer.pop()

    def not_visible(self, op: Operation, index: int, value) -> VerifyError:
        what = f"operand #{index} ({value.type}) is {_describe(value)}"
        holder = _attached_to(value)
        if holder is None:
            return op.emit_error(f"{what}, which is not in the IR (its op was detached or erased)",
                                 fix="use a value that is defined in the IR, or insert its op first")
        for isolated_name, outside in reversed(self.outer):
            if value in outside:
                return op.emit_error(f"{what}, defined outside the isolated op '{isolated_name}'",
                                     fix="pass the value in as an argument")
        if holder is op.parent:
            return op.emit_error(f"{what}, which is used before its definition",
                                 fix="move the definition before the use")
        return op.emit_error(f"{what}, which is not visible here (another block, or a region that does "
                             "not enclose this op)", fix="use a value defined before the op, in this block "
                             "or an enclosing region")
