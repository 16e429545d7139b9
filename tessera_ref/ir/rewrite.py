"""Rewrite patterns and the greedy pattern driver (MLIR's ``applyPatternsGreedily``).

A :class:`RewritePattern` looks at one op; ``match_and_rewrite(op, rewriter)`` returns
False without touching the IR when it does not apply, and otherwise changes the IR
**through the rewriter** and returns True. The :class:`PatternRewriter` is a
:class:`~tessera_ref.ir.builder.Builder` whose insertion point starts just before ``op``.

:func:`apply_patterns_greedily` runs to a fixpoint in iterations:

1. the first iteration visits every op nested in the root, in text order (pre-order);
2. at each visited op it first erases the op if it is trivially dead
   (:func:`~tessera_ref.ir.registry.is_trivially_dead`), and otherwise tries the patterns
   whose ``root`` is the op's name or ``None``, highest ``benefit`` first (ties: the order
   given), applying the first that matches;
3. ops affected by a change -- the rewritten op, ops the rewriter created (with the ops
   nested in them), users of replaced values, and the producers of the operands of erased
   ops -- are visited in the next iteration, in the order they were affected;
4. an iteration that changes nothing ends the run. If ``max_iterations`` iterations all
   changed something, :class:`~tessera_ref.ir.errors.RewriteError` reports the patterns
   that fired in the last one (usually two patterns undoing each other).
"""
from __future__ import annotations

from collections import Counter

from .builder import Builder
from .core import Operation, Value
from .errors import RewriteError
from .registry import is_trivially_dead

__all__ = ["RewritePattern", "PatternRewriter", "apply_patterns_greedily"]


class RewritePattern:
    """Base class of rewrite patterns. Subclasses set ``root`` (the op name they match, or
    ``None`` for any op), optionally ``benefit``, and implement :meth:`match_and_rewrite`."""

    root: str | None = None
    benefit: int = 1

    def match_and_rewrite(self, op: Operation, rewriter: "PatternRewriter") -> bool:
        """Rewrite ``op`` through ``rewriter`` and return True, or return False untouched."""
        raise NotImplementedError(f"{type(self).__name__} must implement match_and_rewrite")


class PatternRewriter(Builder):
    """The builder handed to patterns; it reports every change to the driver."""

    def __init__(self, affected: dict | None = None):
        super().__init__()
        self._affected = {} if affected is None else affected

    def insert(self, op: Operation) -> Operation:
        super().insert(op)
        for nested in op.walk():
            self._affected[nested] = None
        return op

    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        """Make every use of ``old`` use ``new``."""
        users = old.users
        old.replace_all_uses_with(new)
        for user in users:
            self._affected[user] = None

    def replace_op(self, op: Operation, new) -> None:
        """Replace the results of ``op`` by ``new`` (an op or values, same count and types),
        then erase ``op``."""
        values = new.results if isinstance(new, Operation) else tuple(new)
        if len(values) != len(op.results):
            raise RewriteError(f"'{op.name}' has {len(op.results)} result(s) but {len(values)} "
                               "replacement value(s) were given", fix="give one value per result")
        for old, value in zip(op.results, values):
            if not isinstance(value, Value):
                raise RewriteError(f"replacement for result #{old.index} of '{op.name}' is not a Value: "
                                   f"{value!r}", fix="pass the results of ops or block arguments")
            if value.type is not old.type and value.type != old.type:
                raise RewriteError(f"result #{old.index} of '{op.name}' has type {old.type} but its "
                                   f"replacement has type {value.type}",
                                   fix="replace a value by one of the same type")
        for old, value in zip(op.results, values):
            self.replace_all_uses_with(old, value)
        self.erase_op(op)

    def erase_op(self, op: Operation) -> None:
        """Erase ``op``, whose results must be unused."""
        for result in op.results:
            if result.has_uses:
                user = result.users[0]
                raise RewriteError(f"cannot erase '{op.name}': result #{result.index} ({result.type}) is "
                                   f"still used by '{user.name}' (at {user.where})",
                                   fix="replace the uses first (replace_op / replace_all_uses_with)")
        for nested in op.walk():
            for value in nested.operands:
                producer = value.defining_op
                if producer is not None:
                    self._affected[producer] = None
        op.erase()


def _inside(op: Operation, root: Operation) -> bool:
    """True while ``op`` is still nested in ``root`` (not erased or detached)."""
    while op is not root:
        block = op.parent
        region = block.parent if block is not None else None
        op = region.parent if region is not None else None
        if op is None:
            return False
    return True


def _erase_dead(rewriter: PatternRewriter, op: Operation, root: Operation) -> None:
    """Erase the dead ``op`` and, at once, every producer its erasure leaves dead (a dead chain
    goes in one step, however long)."""
    stack = [op]
    while stack:
        op = stack.pop()
        producers = dict.fromkeys(v.defining_op for nested in op.walk() for v in nested.operands
                                  if v.defining_op is not None)
        rewriter.erase_op(op)
        stack += [p for p in producers if _inside(p, root) and is_trivially_dead(p)]


def apply_patterns_greedily(root: Operation, patterns, *, max_iterations: int = 10) -> int:
    """Apply ``patterns`` to the ops nested in ``root`` until nothing changes.

    Returns how many pattern applications were made (dead-op erasures not counted).
    Raises :class:`RewriteError` when ``max_iterations`` is reached without a fixpoint, or
    when a pattern misuses the rewriter (the message names the pattern and the op).
    """
    patterns = list(patterns)
    for pattern in patterns:
        if not isinstance(pattern, RewritePattern):
            raise RewriteError(f"{pattern!r} is not a RewritePattern", fix="subclass RewritePattern")
    if max_iterations < 1:
        raise RewriteError(f"max_iterations must be >= 1, got {max_iterations}", fix="use the default 10")
    order = {id(p): i for i, p in enumerate(patterns)}
    ranked = sorted(patterns, key=lambda p: (-p.benefit, order[id(p)]))
    by_name: dict = {}

    def candidates(name: str) -> list:
        found = by_name.get(name)
        if found is None:
            found = by_name[name] = [p for p in ranked if p.root is None or p.root == name]
        return found

    worklist = [op for op in root.walk() if op is not root]
    applied = 0
    for _ in range(max_iterations):
        affected: dict = {}
        rewriter = PatternRewriter(affected)
        fired: Counter = Counter()
        changed = False
        for op in worklist:
            if not _inside(op, root):
                continue
            if is_trivially_dead(op):
                _erase_dead(rewriter, op, root)
                changed = True
                continue
            for pattern in candidates(op.name):
                rewriter.set_insertion_point_before(op)
                try:
                    matched = pattern.match_and_rewrite(op, rewriter)
                except RewriteError as exc:
                    raise RewriteError(f"pattern {type(pattern).__name__} on '{op.name}' (at "
                                       f"{op.where}): {exc.what}",
                                       fix=exc.fix) from None
                if matched:
                    applied += 1
                    changed = True
                    fired[type(pattern).__name__] += 1
                    affected[op] = None
                    break
        if not changed:
            return applied
        worklist = list(affected)
    last = ", ".join(f"{name} fired {n} time(s)" for name, n in fired.most_common())
    raise RewriteError(
        f"the patterns did not reach a fixpoint in {max_iterations} iterations; in the last one "
        f"{last or 'only dead ops were erased'}",
        fix="look for patterns that undo each other or return True without changing anything, "
            "or raise max_iterations")
