"""Schedule IR -> Tile IR, and the lowered program the backends run.

:func:`schedule_to_tile` lowers every ``tessera.schedule.kernel`` of a Schedule IR function
with its kernel family's template (``KernelFamily.template``, :mod:`.family`) into one tile
kernel; the kernels form one Tile IR module, each ``tessera.func`` carrying its launch as
``launch.grid`` and ``launch.lanes`` (LOWER-PLAN-1). ``tessera.graph.constant`` ops stay on
the host (their values become global buffers); any other op without a tile lowering is a
:class:`~tessera_ref.errors.LoweringError`.

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
from .family import describe_families, family_of
from .plan import KernelPlan, the_op

__all__ = ["schedule_to_tile", "LoweredProgram"]

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
    ops = S.body_ops(kop)
    family = family_of(ops[0]) if ops else None
    if family is None or not family.fuses:  # one Graph IR op per kernel
        op = the_op(kop)
        family = family_of(op)
    if family is None:
        raise LoweringError(f"'{op.name}' has Schedule IR but no kernel family, so no Tile IR lowering",
                            location=kop.location, fix=f"tile lowerings exist for {describe_families()}")
    plan = family.template(kop, name)
    plan.func.attributes["launch.grid"] = list(plan.grid)
    plan.func.attributes["launch.lanes"] = plan.lanes
    return plan


def schedule_to_tile(schedule: Module, name: str | None = None, *, host: bool = False) -> LoweredProgram:
    """Lower the Schedule IR function ``name`` (the only one by default) to tile kernels;
    ``schedule`` is verified first (a malformed kernel or an unknown op is a VerifyError).
    ``host=True`` keeps every op without a tile lowering — and every scheduled kernel its
    family's template refuses — as a host step (the runtime decides what becomes of it,
    RUNTIME-HOST-1) instead of refusing it."""
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
            try:
                plan = _lower_kernel(op, re.sub(r"\W", "_", f"{fname}_k{index}_{op.attributes['op']}"))
            except LoweringError:
                if not host:
                    raise
                steps.append((op, None))  # its template refuses this instance: a host step
                continue
            tile.body.append(plan.func)
            steps.append((op, plan))
        elif op.name in _HOST_OPS or host and op.name != RETURN:
            steps.append((op, None))
        elif op.name != RETURN:
            raise LoweringError(f"'{op.name}' has no tile lowering: {', '.join(str(v.type) for v in op.operands)} "
                                f"-> {', '.join(str(r.type) for r in op.results)}", location=op.location,
                                fix=f"lowerable ops: {describe_families()}")
    verify(tile)
    return LoweredProgram(schedule, tile, func, steps)
