"""Effects inside differentiated code (AD-EFFECT-1).

Randomness needs nothing here: random ops are keyed by their attributes (seed, stream), so
a rule that calls the op again with the same key replays the same bits (dropout's backward
mask is its forward mask). State and I/O cannot be differentiated: while a transform traces
the function it differentiates, :func:`reject` raises an :class:`~tessera_ref.errors.EffectError`
for them (``dist.send``/``dist.recv`` call it), and the transform rejects any recorded op
whose registry entry says it has side effects (:func:`tessera_ref.ir.has_side_effects`).
"""
from __future__ import annotations

import contextlib
import contextvars

from ..errors import EffectError

__all__ = ["differentiating", "reject"]

_ACTIVE = contextvars.ContextVar("tessera_ref_differentiating", default=None)


@contextlib.contextmanager
def differentiating(transform: str):
    """Within the block, the function being traced is differentiated by ``transform``."""
    token = _ACTIVE.set(transform)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def reject(what: str, fix: str) -> None:
    """An :class:`EffectError` when ``what`` (a state or I/O effect) runs in differentiated code."""
    transform = _ACTIVE.get()
    if transform is not None:
        raise EffectError(f"{what} is a state/I-O effect inside code differentiated by {transform}: a derivative "
                          "cannot undo or replay it", fix=fix)
