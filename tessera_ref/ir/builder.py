"""A :class:`Builder` creates ops at an insertion point (MLIR's ``OpBuilder``).

The insertion point is a block and the op to insert before (``None``: the end of the
block). Front ends use a builder to emit ops in order; the pattern rewriter is a builder.
"""
from __future__ import annotations

from .core import Block, Operation
from .errors import IRError

__all__ = ["Builder"]


class Builder:
    """Inserts ops into ``block`` before ``before`` (or at the end when ``before`` is None)."""

    def __init__(self, block: Block | None = None, before: Operation | None = None):
        self.block = block
        self.before = before

    def set_insertion_point_to_end(self, block: Block) -> None:
        self.block, self.before = block, None

    def set_insertion_point_before(self, op: Operation) -> None:
        self._check_attached(op)
        self.block, self.before = op.parent, op

    def set_insertion_point_after(self, op: Operation) -> None:
        self._check_attached(op)
        self.block, self.before = op.parent, op._next

    def insert(self, op: Operation) -> Operation:
        """Insert ``op`` (detached) at the insertion point; returns it."""
        if self.block is None:
            raise IRError("the builder has no insertion point", fix="call set_insertion_point_*() first")
        if self.before is not None and self.before.parent is not self.block:
            raise IRError(f"the insertion point op '{self.before.name}' left its block",
                          fix="set the insertion point again")
        return self.block._link(op, self.before)

    def create(self, name: str, operands=(), result_types=(), attributes: dict | None = None,
               regions=(), location: str | None = None) -> Operation:
        """Create an op (see :meth:`Operation.create`) and insert it; returns it."""
        return self.insert(Operation(name, operands, result_types, attributes, regions, location))

    @staticmethod
    def _check_attached(op: Operation) -> None:
        if op.parent is None:
            raise IRError(f"'{op.name}' is not in a block, so it cannot anchor an insertion point",
                          fix="insert the op first")
