"""The backend ``"interp-tiles"``: the kernel path of the interpreter (DESIGN §3, §13).

Every Graph IR op with a kernel family (``Primitive.kernel_family``) is lowered — Graph IR →
Schedule IR (the family's default schedule) → Tile IR — and launched in the tile interpreter
with its race, bounds, uninitialized-read and barrier checkers on; its bits must equal the
Graph IR interpreter's (LOWER-EXACT-1). Ops without a kernel family (shape ops, constants,
random numbers) run on the host by the interpreter, as a GPU backend's host steps would. An op
instance the family's template does not take (LOWER-PLAN) is a
:class:`~tessera_ref.errors.BackendError`, never a silent fallback.
"""
from __future__ import annotations

from ..backends.registry import register
from .backend import InterpBackend

__all__ = ["TileBackend"]


class TileBackend(InterpBackend):
    """Ops with a kernel family as tile kernels in the tile interpreter (module docstring)."""

    name = "interp-tiles"
    description = ("the interpreter's kernel path: ops with a kernel family lowered to Tile IR and run in the tile "
                   "interpreter with its checkers; other ops as host steps")

    def run_op(self, call, *operands) -> tuple:
        if call.primitive.kernel_family is None:
            return super().run_op(call, *operands)
        return self.run_op_as_kernel(call, operands, checks=True)


register("interp-tiles", TileBackend)
