"""Reverse mode on Graph IR: the backward pass of recorded ops (AD-REV-1 … AD-REV-3).

Given the ops a function recorded into a trace, the values it was differentiated with
respect to (*inputs*) and a cotangent for each output, :func:`backward` appends the backward
pass to the same trace: it visits the recorded ops in reverse program order and calls each
op's ``vjp`` rule on tracers, so every derivative is itself a Graph IR op (and
differentiable again). Cotangents reaching one value from several uses are added in the
order the uses are visited (reverse program order) — a fixed order, so gradients are
bit-identical on every run (AD-DET-1). Under stochastic rounding each such sum is keyed by
:func:`sum_seed`, and the ops of each rule call by :func:`~tessera_ref.ops.adjoint.rule_keys`.

An op is *active* when an operand depends on an input through differentiable values (float
and complex tensors); only active ops whose results received a cotangent are visited. A
visited op whose rule slot is ``NOT_DIFFERENTIABLE`` passes no cotangent to its operands;
an empty slot is an :class:`~tessera_ref.errors.AutodiffError` naming the op and its line.
Each rule runs "at" its forward op's source line, so the backward ops, their errors and their
records on the simulated machine name the line whose derivative they are.
"""
from __future__ import annotations

import numpy as np

from ..errors import AutodiffError, EffectError, running_op_at
from ..ir import has_side_effects
from ..ir.types import COMPLEX64
from ..ops import NOT_DIFFERENTIABLE, fft, primitive_of
from ..ops.adjoint import derivative_seed, rule_keys, zeros
from ..ops.elementwise import add
from ..ops.shape import broadcast_to
from ..ops.typecheck import is_float
from ..ops.values import Tracer, asarray

__all__ = ["backward", "differentiable", "active_values", "zeros_of", "accumulate", "check_effects", "sum_seed",
           "check_rule_output", "call_rule"]


def differentiable(t) -> bool:
    """Values that carry derivatives: tensors of a float format, and complex<f32>."""
    return t.policy is COMPLEX64 or is_float(t)


def zeros_of(t):
    """+0 of type ``t`` (shape and policy; whole on every device)."""
    if t.policy is COMPLEX64:
        return broadcast_to(asarray(np.zeros((), np.complex64)), tuple(t.shape))
    return zeros(t.shape, t.policy)


def sum_seed(attributes: dict, position: int) -> int:
    """The seed of the stochastically rounded sum of cotangents at a use by the
    ``position``-th recorded op (``attributes``: its attributes; the outputs' sums take
    position ``len(ops)``): :func:`~tessera_ref.ops.adjoint.derivative_seed` with ``k = 0`` —
    ``RNGKey(seed).fold(0)`` for an op with a seed (never the forward op's own key), the key
    words of ``RNGKey(0xAD5EED).fold(position)`` for one without (``reshape``, …)."""
    return derivative_seed(attributes.get("seed"), position, 0)


def accumulate(a, b, seed: int):
    """``a + b`` of two cotangents of one value (complex ones part by part); ``seed`` keys
    the rounding when the policy rounds stochastically."""
    if a.type.policy is COMPLEX64:
        return fft.complex(add(fft.real(a), fft.real(b)), add(fft.imag(a), fft.imag(b)))
    return add(a, b, seed=seed) if getattr(a.type.policy, "rounding", None) == "stochastic" else add(a, b)


def check_effects(ops, transform: str) -> None:
    """An :class:`EffectError` for a recorded op with side effects (AD-EFFECT-1)."""
    for op in ops:
        if has_side_effects(op):
            raise EffectError(f"{op.name} has side effects (state or I/O) and is inside code differentiated by "
                              f"{transform}", fix="move the effect out of the differentiated function",
                              location=op.location)


def active_values(ops, inputs) -> set:
    """The ids of values that depend on ``inputs`` through differentiable values and ops
    that are not ``NOT_DIFFERENTIABLE``. An op of no primitive (an unregistered op) with an
    active operand is active: the backward pass then asks for its rule, an AutodiffError
    (AD-REV-1), instead of silently passing no gradient."""
    active = {id(v) for v in inputs}
    for op in ops:
        prim = primitive_of(op)
        if prim is not None and prim.vjp is NOT_DIFFERENTIABLE and prim.jvp is NOT_DIFFERENTIABLE:
            continue
        if any(id(v) in active for v in op.operands):
            active.update(id(r) for r in op.results if differentiable(r.type))
    return active


def rule_of(op, slot: str):
    """The ``vjp``/``jvp`` rule of ``op``'s primitive; ``None`` when the op is not
    differentiable (NOT_DIFFERENTIABLE: its results carry no derivative); an AutodiffError
    when the slot is empty."""
    prim = primitive_of(op)
    rule = getattr(prim, slot) if prim is not None else None
    if rule is NOT_DIFFERENTIABLE:
        return None
    if rule is None:
        raise AutodiffError(f"{op.name} has no {slot} rule yet, and the differentiated function uses it on a value "
                            "that depends on the differentiated inputs",
                            fix="differentiate around it (tessera_ref.ops.missing_rules() lists the gaps)",
                            location=op.location)
    return rule


def check_rule_output(op, slot: str, what: str, value, like) -> None:
    """An AssertionError (a rule bug, not a user error) when the derivative ``value`` that
    ``op``'s ``slot`` rule returned for ``what`` (e.g. "operand 1") has another type than its
    primal ``like`` (layouts aside)."""
    want, got = like.type.with_layout(None), value.type.with_layout(None)
    if want != got:
        raise AssertionError(f"the {slot} rule of {op.name} returned a derivative of type {got} for {what} "
                             f"of type {want} (a rule bug)")


def call_rule(trace, op, position: int, slot: str, rule, derivatives) -> tuple:
    """``(primals, out)``: ``op``'s ``slot`` rule run at ``op``'s source line in its key scope
    (:func:`~tessera_ref.ops.adjoint.rule_keys`) on tracers of its operands and results —
    ``vjp(attrs, primals, results, cotangents)`` or ``jvp(attrs, primals, tangents, results)``,
    ``derivatives`` being the cotangents or tangents — after checking that it returned one
    derivative per operand (vjp) or result (jvp)."""
    primals = tuple(Tracer(v, trace) for v in op.operands)
    results = tuple(Tracer(r, trace) for r in op.results)
    args = (primals, results, derivatives) if slot == "vjp" else (primals, derivatives, results)
    with running_op_at(op.location), rule_keys(op.attributes, position):
        out = rule(dict(op.attributes), *args)
    want, what = (len(primals), "operands") if slot == "vjp" else (len(results), "results")
    if len(out) != want:
        raise AssertionError(f"the {slot} rule of {op.name} returned {len(out)} derivatives for {want} {what} "
                             "(a rule bug)")
    return primals, out


def backward(trace, ops, inputs, outputs, finish=None) -> list:
    """Append the backward pass of ``ops`` to ``trace``: ``outputs`` is a list of
    ``(value, cotangent)`` pairs; returns the cotangent of each input (``None``: zero).

    ``finish(input, cotangent)``, when given, is called for each input as soon as its
    cotangent is final — right after the op of least position that uses it was visited (before
    the visits when no op uses it) — and its result is returned for that input instead: the ops
    it records (a gradient's reduction over a data-parallel axis, AD-MESH-4) then sit in the
    backward pass where later visits can run while they communicate. The cotangents are the
    same whenever ``finish`` runs: nothing is added to one after its input's last use."""
    active = active_values(ops, inputs)
    cts: dict = {}
    for value, ct in outputs:
        if ct is not None and id(value) in active:
            cts[id(value)] = (ct if id(value) not in cts
                              else accumulate(cts[id(value)], ct, sum_seed({}, len(ops))))
    finished: dict = {}  # input index -> finish's result
    first_use: dict = {}  # position -> indices of the inputs whose first use it is
    if finish is not None:
        ids = {id(v): i for i, v in enumerate(inputs)}
        seen = set()
        for position, op in enumerate(ops):
            for v in op.operands:
                if id(v) in ids and id(v) not in seen:
                    seen.add(id(v))
                    first_use.setdefault(position, []).extend(i for i, u in enumerate(inputs) if u is v)
        for i, v in enumerate(inputs):
            if id(v) not in seen:
                finished[i] = finish(v, cts.get(id(v)))
    for position, op in reversed(list(enumerate(ops))):
        _visit(trace, op, position, active, cts)
        for i in first_use.get(position, ()):
            finished[i] = finish(inputs[i], cts.get(id(inputs[i])))
    if finish is not None:
        return [finished[i] for i in range(len(inputs))]
    return [cts.get(id(v)) for v in inputs]


def _visit(trace, op, position: int, active: set, cts: dict) -> None:
    """Run ``op``'s vjp rule when it is active and a result received a cotangent, adding what
    it gives each active operand to ``cts``."""
    if not any(id(r) in cts for r in op.results) or not any(id(v) in active for v in op.operands):
        return
    rule = rule_of(op, "vjp")
    if rule is None:
        return
    with running_op_at(op.location):
        given = tuple(cts.pop(id(r), None) for r in op.results)
        given = tuple(zeros_of(r.type) if c is None else c for r, c in zip(op.results, given))
        primals, out = call_rule(trace, op, position, "vjp", rule, given)
        for i, (v, p, ct) in enumerate(zip(op.operands, primals, out)):
            if ct is None or id(v) not in active:
                continue
            check_rule_output(op, "vjp", f"operand {i}", ct, p)
            cts[id(v)] = ct if id(v) not in cts else accumulate(cts[id(v)], ct, sum_seed(op.attributes, position))
