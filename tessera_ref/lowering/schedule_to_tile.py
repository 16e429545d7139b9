"""Schedule IR -> Tile IR, and the lowered program the backends run.

:func:`schedule_to_tile` lowers every ``tessera.schedule.kernel`` of a Schedule IR function
with its family's template (:mod:`.tile_matmul`, :mod:`.tile_rows`,
:mod:`.tile_elementwise`, :mod:`.tile_attention`) into one tile kernel; the kernels form one Tile IR module, each
``tessera.func`` carrying its launch as ``launch.grid`` and ``launch.lanes`` (LOWER-PLAN-1).
``tessera.graph.constant`` ops stay on the host (their values become global buffers); any
other op without a tile lowering is a :class:`~tessera_ref.errors.LoweringError`.

:class:`LoweredProgram` runs the host program: constants, then each kernel in order on
fresh output buffers, then the function's results — each kernel launched by the current
backend (BACKEND-PROGRAM-1; on ``interp``, the tile interpreter with its checkers and counters).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import context
from ..errors import LoweringError
from ..ir import Module, Operation
from ..ir import schedule as S
from ..ir.builtin import FUNC, RETURN
from ..ir.verifier import verify
from .graph_to_schedule import family_of
from .plan import KernelPlan, the_op
from .tile_attention import lower_attention
from .tile_elementwise import lower_elementwise
from .tile_matmul import lower_matmul
from .tile_rows import lower_rows

__all__ = ["schedule_to_tile", "LoweredProgram", "TEMPLATES"]

#: Kernel family -> template ``lower(kernel_op, name) -> KernelPlan``.
TEMPLATES = {"matmul": lower_matmul, "rows": lower_rows, "elementwise": lower_elementwise,
             "attention": lower_attention}

_HOST_OPS = ("tessera.graph.constant",)


@dataclass
class LoweredProgram:
    """A Schedule IR function lowered to tile kernels, and the host steps that launch them."""

    schedule: Module
    tile: Module
    func: Operation
    steps: list = field(default_factory=list)  # (op, KernelPlan | None) in program order

    def run(self, *arrays, checks: bool = False, counters: bool = True, preset: str = "H100") -> tuple:
        """Run on NumPy arrays of the function's argument types on the current backend
        (:meth:`~tessera_ref.backends.Backend.run_program`); returns ``(results, reports)`` with
        one report per kernel launch (a :class:`~tessera_ref.interp.tile.TileReport` on ``interp``)."""
        return context.backend().run_program(self, arrays, checks=checks, counters=counters, preset=preset)


def _lower_kernel(kop: Operation, name: str) -> KernelPlan:
    family = family_of(the_op(kop))
    template = TEMPLATES.get(family)
    if template is None:
        raise LoweringError(f"'{the_op(kop).name}' ({family} family) has Schedule IR but no Tile IR lowering yet",
                            location=kop.location, fix=f"tile lowerings exist for the {', '.join(TEMPLATES)} families")
    plan = template(kop, name)
    plan.func.attributes["launch.grid"] = list(plan.grid)
    plan.func.attributes["launch.lanes"] = plan.lanes
    return plan


def schedule_to_tile(schedule: Module, name: str | None = None) -> LoweredProgram:
    """Lower the Schedule IR function ``name`` (the only one by default) to tile kernels;
    ``schedule`` is verified first (a malformed kernel or an unknown op is a VerifyError)."""
    verify(schedule)
    funcs = [op for op in schedule.body if op.name == FUNC and (name is None or op.attributes["sym_name"] == name)]
    if len(funcs) != 1:
        raise LoweringError(f"the module holds {len(funcs)} functions named {name!r}", fix="pass name=")
    func = funcs[0]
    fname = func.attributes["sym_name"]
    tile = Module()
    steps = []
    for index, op in enumerate(func.regions[0].entry):
        if op.name == S.KERNEL:
            plan = _lower_kernel(op, re.sub(r"\W", "_", f"{fname}_k{index}_{op.attributes['op']}"))
            tile.body.append(plan.func)
            steps.append((op, plan))
        elif op.name in _HOST_OPS:
            steps.append((op, None))
        elif op.name != RETURN:
            raise LoweringError(f"'{op.name}' has no tile lowering: {', '.join(str(v.type) for v in op.operands)} "
                                f"-> {', '.join(str(r.type) for r in op.results)}", location=op.location,
                                fix="lowerable ops: matmul, flash_attention, softmax, layernorm_safe, rmsnorm_safe, "
                                    "sum/mean/max/min over contiguous axes, same-shape elementwise arithmetic")
    verify(tile)
    return LoweredProgram(schedule, tile, func, steps)
