"""Learning-rate schedules: functions of the step count built from f64 Graph IR ops
(OPTIM-SCHED-1, OPTIM-SCHED-2), so a jitted update takes the step as a tensor and is traced once."""
from __future__ import annotations

import math

import numpy as np

from ..errors import OptimError
from ..ops import FUNCTIONS as op
from ..ops import asarray
from .tree import check_number, type_of

__all__ = ["Schedule", "constant", "linear_warmup", "warmup_cosine", "as_schedule"]


def _f64(x):
    """The step as an f64 tensor (a Python int becomes a 0-d Array)."""
    if isinstance(x, (int, float, np.integer)) and not isinstance(x, bool):
        return asarray(float(x), dtype="f64")
    return x if type_of(x).policy.storage.name == "f64" else op.cast(x, "f64")


class Schedule:
    """A learning rate as a function of the step count (0 for the first update): ``schedule(step)``
    gives an f64 scalar tensor. ``describe`` says what it is."""

    def __init__(self, fn, describe: str):
        self._fn = fn
        self.describe = describe

    def __call__(self, step):
        return self._fn(_f64(step))

    def __repr__(self) -> str:
        return f"<optim schedule {self.describe}>"


def constant(value: float) -> Schedule:
    """``value`` at every step (OPTIM-SCHED-1)."""
    v = check_number("value", value, low=0.0, where="optim.constant")
    return Schedule(lambda s: asarray(v, dtype="f64"), f"constant({v!r})")


def _warmup(s, init: float, peak: float, steps: int):
    if steps == 0:
        return asarray(peak, dtype="f64")
    frac = op.div(op.minimum(s, float(steps)), float(steps))
    return op.add(op.mul(frac, peak - init), init)


def linear_warmup(peak: float, warmup_steps: int, init: float = 0.0) -> Schedule:
    """``init`` rising linearly to ``peak`` over ``warmup_steps`` steps, then ``peak`` (OPTIM-SCHED-1)."""
    where = "optim.linear_warmup"
    peak, init = check_number("peak", peak, low=0.0, where=where), check_number("init", init, low=0.0, where=where)
    steps = _step_count("warmup_steps", warmup_steps, where)
    return Schedule(lambda s: _warmup(s, init, peak, steps), f"linear_warmup({peak!r}, {steps}, init={init!r})")


def warmup_cosine(peak: float, warmup_steps: int, total_steps: int, end: float = 0.0,
                  init: float = 0.0) -> Schedule:
    """Linear warmup from ``init`` to ``peak`` over ``warmup_steps``, then a half cosine from
    ``peak`` down to ``end`` at ``total_steps`` (warmup included), then ``end`` (OPTIM-SCHED-2)."""
    where = "optim.warmup_cosine"
    peak, end = check_number("peak", peak, low=0.0, where=where), check_number("end", end, low=0.0, where=where)
    init = check_number("init", init, low=0.0, where=where)
    warm = _step_count("warmup_steps", warmup_steps, where)
    total = _step_count("total_steps", total_steps, where)
    if total <= warm:
        raise OptimError(f"{where}: total_steps={total} must exceed warmup_steps={warm} (it counts the warmup)",
                         fix=f"pass total_steps > {warm}")
    decay = float(total - warm)

    def fn(s):
        t = op.div(op.minimum(op.maximum(op.sub(s, float(warm)), 0.0), decay), decay)
        half = op.mul(op.add(op.cos(op.mul(t, math.pi)), 1.0), 0.5)
        cosine = op.add(op.mul(half, peak - end), end)
        return cosine if warm == 0 else op.where(op.less(s, float(warm)), _warmup(s, init, peak, warm), cosine)
    return Schedule(fn, f"warmup_cosine({peak!r}, {warm}, {total}, end={end!r}, init={init!r})")


def _step_count(name: str, value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise OptimError(f"{where}: {name}={value!r} is not a whole number of steps ≥ 0",
                         fix=f"pass {name} as an int ≥ 0")
    return int(value)


def as_schedule(lr, where: str) -> Schedule:
    """``lr`` as a schedule: a Schedule as it is, a number as :func:`constant`."""
    if isinstance(lr, Schedule):
        return lr
    check_number("lr", lr, low=0.0, where=where)
    return constant(lr)
