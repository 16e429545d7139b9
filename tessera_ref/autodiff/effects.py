"""Effects inside differentiated code (AD-EFFECT-1).

Randomness needs nothing here: random ops are keyed by their attributes (seed, stream), so
a rule that calls the op again with the same key replays the same bits (dropout's backward
mask is its forward mask). State and I/O cannot be differentiated: while a transform traces
the function it differentiates (:func:`differentiating`, which sets
``tessera_ref.context.DIFFERENTIATING``), ``dist.send``/``dist.recv`` raise an
:class:`~tessera_ref.errors.EffectError`, and the transform rejects any recorded op whose
registry entry says it has side effects (:func:`tessera_ref.ir.has_side_effects`).
"""
from __future__ import annotations

from ..context import DIFFERENTIATING, scoped

__all__ = ["differentiating"]


def differentiating(transform: str):
    """Within the ``with`` block, the function being traced is differentiated by ``transform``."""
    return scoped(DIFFERENTIATING, transform)
