"""Forward mode on Graph IR: the tangent pass of recorded ops (AD-FWD-1).

:func:`tangents` visits the recorded ops in program order and calls each active op's ``jvp``
rule on tracers; the tangent ops are appended to the same trace after the forward ops. A
tangent may be ``None`` (zero): rules handle it, and an op whose operands all have zero
tangents is not visited. ``NOT_DIFFERENTIABLE`` gives its results no tangent; an empty slot
is an :class:`~tessera_ref.errors.AutodiffError` naming the op and its line.
"""
from __future__ import annotations

from ..ops.values import Tracer
from .reverse import call_rule, check_rule_output, differentiable, rule_of

__all__ = ["tangents"]


def tangents(trace, ops, inputs, input_tangents, outputs) -> list:
    """Append the tangent pass of ``ops`` to ``trace`` for ``input_tangents`` of ``inputs``;
    returns the tangent of each value in ``outputs`` (``None``: zero)."""
    tan = {id(v): t for v, t in zip(inputs, input_tangents) if t is not None}
    for position, op in enumerate(ops):
        given = tuple(tan.get(id(v)) for v in op.operands)
        if all(t is None for t in given):
            continue
        rule = rule_of(op, "jvp")
        if rule is None:
            continue
        _, out = call_rule(trace, op, position, "jvp", rule, given)
        for i, (r, t) in enumerate(zip(op.results, out)):
            if t is None or not differentiable(r.type):
                continue
            check_rule_output(op, "jvp", f"result {i}", t, Tracer(r, trace))
            tan[id(r)] = t
    return [tan.get(id(v)) for v in outputs]
