"""Pipeline schedules: the order each stage runs its micro-batches in, and its timing (SIM-PP-1 … SIM-PP-3).

A pipeline of ``p`` devices (stages) runs ``m`` micro-batches forward (``F``) and backward
(``B``) through ``p · v`` model chunks; chunk ``k`` lives on device ``k mod p`` (``v = 1``
but for the interleaved schedule). :func:`order` lists each device's actions in the order
the schedule runs them; :func:`timing` places them given each action's duration (each action
starts when its device finished the previous one and its input arrived); :func:`bubble_fraction`
is the schedule's idle share by formula (Narayanan et al., SC'21, §2.2).
"""
from __future__ import annotations

from typing import NamedTuple

from ..errors import SimError

__all__ = ["SCHEDULES", "Action", "order", "timing", "bubble_fraction", "Placed"]

SCHEDULES = ("gpipe", "1f1b", "interleaved")


class Action(NamedTuple):
    """One step of a device: ``kind`` ``"F"`` or ``"B"`` of ``microbatch`` through model chunk ``chunk``."""

    kind: str
    microbatch: int
    chunk: int


class Placed(NamedTuple):
    """An action of device ``device`` placed in time."""

    device: int
    action: Action
    start: float
    end: float


def _check(schedule: str, p: int, m: int, v: int) -> None:
    if schedule not in SCHEDULES:
        raise SimError(f"unknown pipeline schedule {schedule!r}", fix=f"use one of {', '.join(SCHEDULES)}")
    for name, n in (("stages", p), ("microbatches", m), ("virtual stages", v)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SimError(f"pipeline {name} must be an int >= 1, got {n!r}", fix=f"pass {name} as a positive int")
    if schedule != "interleaved" and v != 1:
        raise SimError(f"the {schedule} schedule has one model chunk per stage, got virtual stages {v}",
                       fix="pass virtual stages 1, or schedule='interleaved'")
    if schedule == "interleaved" and m % p:
        raise SimError(f"the interleaved schedule needs the micro-batches ({m}) to be a multiple of the "
                       f"stages ({p})", fix=f"use {m + (-m) % p} micro-batches, or schedule='1f1b'")


def _interleaved_chunk(k: int, p: int, v: int, forward: bool) -> tuple:
    """The ``k``-th forward (or backward) of a device in the interleaved schedule:
    ``(microbatch, chunk)``; micro-batches go in groups of ``p`` through each chunk in turn."""
    group, within = divmod(k, p * v)
    chunk = within // p
    return group * p + within % p, chunk if forward else v - 1 - chunk


def order(schedule: str, p: int, m: int, v: int = 1) -> list:
    """Each device's actions in run order (SIM-PP-1): ``order(...)[d]`` is a list of :class:`Action`.

    - ``gpipe``: every forward, then every backward, micro-batches in ascending order;
    - ``1f1b`` (PipeDream-Flush): device ``d`` runs ``p − d − 1`` forwards, then alternates one
      forward and one backward, then the remaining backwards; micro-batches in ascending order;
    - ``interleaved`` (``v`` chunks per device, ``m`` a multiple of ``p``): 1F1B over the
      device's ``m·v`` chunk-steps, with ``(p − d − 1)·2 + (v − 1)·p`` warm-up forwards.
    """
    _check(schedule, p, m, v)
    out = []
    for d in range(p):
        if schedule == "gpipe":
            out.append([Action("F", j, d) for j in range(m)] + [Action("B", j, d) for j in range(m)])
            continue
        steps = m * v
        if schedule == "1f1b":
            fwd = [Action("F", j, d) for j in range(m)]
            bwd = [Action("B", j, d) for j in range(m)]
            warm = min(p - d - 1, steps)
        else:
            fwd = [Action("F", mb, c * p + d) for mb, c in (_interleaved_chunk(k, p, v, True) for k in range(steps))]
            bwd = [Action("B", mb, c * p + d) for mb, c in (_interleaved_chunk(k, p, v, False) for k in range(steps))]
            warm = min((p - d - 1) * 2 + (v - 1) * p, steps)
        actions = fwd[:warm]
        for i in range(steps - warm):
            actions += [fwd[warm + i], bwd[i]]
        out.append(actions + bwd[steps - warm:])
    return out


def _input_of(a: Action, chunks: int):
    """The action whose output ``a`` reads (``None``: the micro-batch's input or the loss)."""
    if a.kind == "F":
        return Action("F", a.microbatch, a.chunk - 1) if a.chunk else None
    return Action("B", a.microbatch, a.chunk + 1) if a.chunk < chunks - 1 else Action("F", a.microbatch, a.chunk)


def timing(actions: list, duration, transfer=lambda a: 0.0) -> list:
    """Place the per-device ``actions`` (as :func:`order` gives them) in time (SIM-PP-2): an action
    starts when its device ended its previous action and its input is there — the end of the
    action producing it plus ``transfer(producer)`` when that ran on another device.
    ``duration(device, action)`` is an action's time. Returns every :class:`Placed` action, in
    the order they were placed (ascending start, then device)."""
    p = len(actions)
    chunks = 1 + max(a.chunk for acts in actions for a in acts)
    device_of = {a: d for d, acts in enumerate(actions) for a in acts}
    done: dict = {}
    nxt = [0] * p
    free = [0.0] * p
    placed = []
    while any(nxt[d] < len(actions[d]) for d in range(p)):
        ready = []
        for d in range(p):
            if nxt[d] == len(actions[d]):
                continue
            a = actions[d][nxt[d]]
            src = _input_of(a, chunks)
            if src is not None and src not in done:
                continue
            arrive = 0.0 if src is None else done[src] + (transfer(src) if device_of[src] != d else 0.0)
            ready.append((max(free[d], arrive), d, a))
        if not ready:
            raise SimError("the pipeline schedule deadlocks: every device waits for an action not yet run",
                           fix="report this schedule as a bug")
        start, d, a = min(ready)
        end = start + duration(d, a)
        done[a], free[d] = end, end
        nxt[d] += 1
        placed.append(Placed(d, a, start, end))
    return placed


def bubble_fraction(schedule: str, p: int, m: int, v: int = 1) -> float:
    """The schedule's bubble over its ideal time, by formula (SIM-PP-3): ``(p − 1)/m`` for GPipe and
    1F1B, ``(p − 1)/(v·m)`` interleaved."""
    _check(schedule, p, m, v)
    return (p - 1) / (v * m)
