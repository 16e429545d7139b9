"""The error hierarchy.

Every mistake a user can make raises a :class:`TesseraError` subclass whose message says
what is wrong (the types, shapes, values or axes involved), where in the *user's* code it
happened (``file:line``, the first stack frame outside ``tessera_ref``) and how to fix it.
"""
from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_location() -> str | None:
    """``"file:line"`` of the innermost stack frame that is not code of ``tessera_ref``.

    A frame belongs to the package when its file lies in the package directory or, for code
    generated at run time (dataclass ``__init__`` and the like), when its module is ours.
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        module = frame.f_globals.get("__name__", "")
        ours = os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep) or (
            filename.startswith("<") and (module == "tessera_ref" or module.startswith("tessera_ref."))
        )
        if not ours:
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class TesseraError(Exception):
    """Base class of every error raised for a user mistake.

    ``TesseraError(what, fix=...)`` renders as ``"<what> [at file:line]. Fix: <fix>"``; the
    location is captured when the error is created, from the first frame outside the
    package, unless ``location`` is passed explicitly.
    """

    def __init__(self, what: str, *, fix: str | None = None, location: str | None = None):
        self.what = what
        self.fix = fix
        self.location = location if location is not None else user_location()
        super().__init__(self._render())

    def _render(self) -> str:
        text = self.what
        if self.location:
            text += f" [at {self.location}]"
        if self.fix:
            text += f". Fix: {self.fix}"
        return text


class FormatError(TesseraError, ValueError):
    """An unknown number format, or an operation the format does not support."""


class ConversionError(TesseraError, ValueError):
    """A bad argument to a conversion: rounding mode, overflow mode, key, input dtype."""


class PolicyError(TesseraError, ValueError):
    """A malformed numerics policy or tensor annotation."""


class ScalingError(TesseraError, ValueError):
    """A bad block-scaling request (block size, axis, shape, format)."""


class RNGError(TesseraError, ValueError):
    """A bad random-number request (key, index, distribution parameter)."""


class ArithError(TesseraError, ValueError):
    """A bad argument to an arithmetic operation: op name, operand count, shapes, formats."""


class ShapeError(TesseraError, ValueError):
    """Operand shapes that do not fit an op (the message names every shape involved)."""


class DTypeError(TesseraError, TypeError):
    """Operand formats, policies or element kinds that do not fit an op (both types named)."""


class OpError(TesseraError, ValueError):
    """An unknown op, an unknown attribute, or an attribute value an op does not accept."""


class TraceError(TesseraError, RuntimeError):
    """A traced function used a traced value where a concrete one is needed, or let one escape."""
