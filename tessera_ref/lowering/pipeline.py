"""The lowering pipeline in one call, and the IR views ``inspect_ir`` shows."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import context
from ..errors import LoweringError
from ..frontend.kernel import Kernel
from ..ir import schedule as S
from ..ir.levels import LEVELS
from ..ops.execute import call_of, evaluate
from .graph_to_schedule import graph_to_schedule
from .schedule_to_tile import LoweredProgram, schedule_to_tile

__all__ = ["lower", "inspect", "inspect_graph", "run_schedule", "register_target", "LEVELS", "TARGETS"]


#: Renderers of Tile IR as text, by IR level (``"target"``). The renderers live in backends,
#: above the lowering, so they register themselves here (:func:`register_target`).
TARGETS: dict[str, Callable] = {}


def register_target(level: str, render: Callable) -> None:
    """Make ``render(tile_module) -> str`` the text of IR level ``level`` of lowered programs
    (:func:`inspect`) and of ``@kernel`` objects (``Kernel.inspect_ir``)."""
    TARGETS[level] = render
    Kernel._ir_views[level] = lambda kernel: render(kernel.module)


def lower(graph, directives: dict | None = None, *, per_op: dict | None = None, host: bool = False) -> LoweredProgram:
    """Graph IR module (or func) -> Schedule IR -> tile kernels (see :mod:`tessera_ref.lowering`);
    ``host``: ops without a tile lowering stay as host steps (:func:`schedule_to_tile`)."""
    return schedule_to_tile(graph_to_schedule(graph, directives, per_op=per_op), host=host)


def run_schedule(schedule, *arrays) -> list:
    """Execute a Schedule IR module's function with the Graph IR semantics (SCHED-IR-2) on the
    current backend, through the one execution loop: a kernel runs the Graph IR ops of its
    region on its operands, ``prefetch`` is the identity. Returns the function's results
    (storage-dtype arrays)."""
    backend = context.backend()

    def step(op, values):
        if op.name == S.PREFETCH:
            return values
        if op.name == S.KERNEL:
            inner = op.regions[0].entry
            return evaluate(inner, dict(zip(inner.args, values)), step)
        return backend.run_op(call_of(op), *values)

    entry = schedule.body.first_op.regions[0].entry
    return evaluate(entry, dict(zip(entry.args, (np.asarray(a) for a in arrays))), step)


def inspect(program: LoweredProgram, level: str) -> str:
    """The text of ``program`` at ``level``: Schedule IR, Tile IR, or a registered target's
    text (``"target"``: the CUDA C of :mod:`tessera_ref.backends.cuda`)."""
    if level == "schedule":
        return str(program.schedule)
    if level == "tile":
        return str(program.tile)
    if level in TARGETS:
        return TARGETS[level](program.tile)
    raise LoweringError(f"inspect_ir: unknown IR level {level!r}", fix=f"use 'graph' or one of {', '.join(LEVELS)}")


def inspect_graph(graph, level: str, directives: dict | None = None) -> str:
    """The text of a Graph IR module at ``level`` — what ``@jit``'s ``inspect_ir`` shows.

    ``"schedule"`` is :func:`graph_to_schedule` alone, so ops without a tile lowering appear
    as the Graph IR ops they are; ``"tile"`` and ``"target"`` lower every op, and an op
    without a tile lowering is a :class:`~tessera_ref.errors.LoweringError` naming it and
    its source line.
    """
    if level not in LEVELS:
        raise LoweringError(f"inspect_ir: unknown IR level {level!r}", fix=f"use 'graph' or one of {', '.join(LEVELS)}")
    if level == "schedule":
        return str(graph_to_schedule(graph, directives))
    return inspect(lower(graph, directives), level)
