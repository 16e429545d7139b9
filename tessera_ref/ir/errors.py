"""Errors of the IR infrastructure.

- :class:`IRError`: malformed IR built through the API (a bad type, a value used by an op
  that is erased, an attribute the text format cannot hold).
- :class:`IRParseError`: malformed IR text; carries ``line``, ``column`` and a caret snippet.
- :class:`VerifyError`: IR that breaks a structural rule or an op's own rule; carries the
  op's name and its source location (``file:line`` of the user code that created it).
- :class:`RewriteError`: a rewrite pattern misbehaved (replaced a value by one of another
  type, erased an op that is still used) or the greedy driver did not reach a fixpoint.
"""
from __future__ import annotations

from ..errors import TesseraError

__all__ = ["IRError", "IRParseError", "VerifyError", "RewriteError", "MAX_NESTING", "too_deep"]

#: The deepest nesting the IR takes, of regions inside ops and of arrays, dicts and function
#: types inside attributes: the parser, the printer, the verifier and ``clone`` refuse deeper
#: IR with the same limit (their recursion then stays far from Python's stack limit).
MAX_NESTING = 100


def too_deep(what: str) -> str:
    """The message for IR nested deeper than :data:`MAX_NESTING` (``what``: regions, attributes)."""
    return f"{what} nested more than {MAX_NESTING} levels deep (the IR's nesting limit)"


class IRError(TesseraError):
    """Malformed IR, or a misuse of the IR API."""


class IRParseError(IRError, ValueError):
    """Malformed IR text.

    Renders compiler-style: ``source:line:column: error: <what>``, the offending line with a
    caret under the column, then the fix. ``line`` and ``column`` are 1-based; the column
    counts characters.
    """

    def __init__(self, what: str, *, source: str, line: int, column: int, snippet: str,
                 fix: str | None = None):
        self.source = source
        self.line = line
        self.column = column
        self.snippet = snippet
        super().__init__(what, fix=fix, location=f"{source}:{line}:{column}")

    def _render(self) -> str:
        text = f"{self.location}: error: {self.what}\n{self.snippet}"
        if self.fix:
            text += f"\nFix: {self.fix}"
        return text


class VerifyError(IRError):
    """IR that violates a structural rule or an op's verification rule.

    ``op_name`` is the offending op's name and ``detail`` the rule it breaks; the location
    is that op's source location, else its position in the text it was parsed from
    (``Operation.where``; ``"unknown location"`` when the op carries neither).
    """

    def __init__(self, what: str, *, op_name: str, location: str | None, fix: str | None = None):
        self.op_name = op_name
        self.detail = what
        super().__init__(f"'{op_name}' op: {what}", fix=fix, location=location or "unknown location")


class RewriteError(IRError):
    """A rewrite pattern broke an invariant, or the greedy driver did not converge."""
