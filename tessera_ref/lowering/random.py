"""The random kernel family: ``rand`` and ``dropout`` (LOWER-RNG-1), on the counter-based
RNG in the kernel (Tile IR ``uniform``, TILE-RNG-1; the device header's Philox4x32-10).

The lane mapping, schedule and cost are the elementwise family's (LOWER-EW-1: lane ``t`` of
tile ``g`` handles elements ``g·lanes·v + j·lanes + t``; directives ``lanes`` and
``vectorize``). Element ``i`` (the row-major flat index of the result) computes, with
``seed`` and ``stream`` the op's attributes:

- ``rand``: ``u = uniform(i)`` — f64 when the storage is f64, else f32 (NUM-RNG-5) — cast
  once into the result policy (TILE-NUM-3);
- ``dropout`` (``rate > 0``): ``u = uniform(i)`` in f32; the element is kept iff
  ``f64(u) ≥ rate`` (exact); a kept element is ``x_i ⊘ q`` in accum with
  ``q = RN_accum(1 ⊖ rate)`` (a constant computed once on the host, as the Graph IR does), a
  dropped one ``+0``; the result cast once into storage. ``rate = 0`` copies ``x`` bit for bit.

So the bits are GRAPH-RAND-1's and GRAPH-DROPOUT-1's. Policies: the elementwise family's
(rounding ``rne`` ``rtz`` ``rup`` ``rdown``, native or saturating overflow); stochastic
rounding of the result is a LoweringError (it would draw from the key's fold 1).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import tile as T
from ..numerics.arith import round_f64_into
from ..ops import primitive
from .elementwise import FAMILY as ELEMENTWISE
from .family import KernelFamily, register_family
from .plan import KernelPlan, check_nonempty, check_policy, the_op

__all__ = ["FAMILY", "lower_random"]

#: the rounding of the results (stochastic rounding would draw from the key's fold 1)
_ROUNDING = tuple(r for r in T.CAST_ROUNDING if r != "stochastic")


def _storage(op) -> tuple:
    """``(policy, storage, accum)`` of the op's result: a LoweringError unless the family takes it."""
    check_nonempty(op)
    storage, accum = check_policy(op, rounding=_ROUNDING, overflow=("native", "saturate"))
    return op.results[0].type.policy, storage, accum


def lower_random(kop, name: str) -> KernelPlan:
    """The tile kernel of a scheduled ``rand`` or ``dropout`` (see the module docstring)."""
    op = the_op(kop)
    short = op.name.rsplit(".", 1)[-1]
    policy, storage, accum = _storage(op)
    n = math.prod(op.results[0].type.shape)
    lanes, v = kop.attributes["lanes"], kop.attributes["vectorize"]
    key = {"seed": op.attributes["seed"], "stream": op.attributes["stream"]}
    rate = op.attributes.get("rate", 0.0)
    params = ([("x", T.buffer((n,), storage))] if short == "dropout" else []) + [("y", T.buffer((n,), storage), True)]
    kb = T.KernelBuilder(name, params, location=kop.location)
    y = kb.params[-1]
    base = kb.binary("add", kb.binary("mul", kb.tile_id(0), lanes * v), kb.lane_id())

    def rounded(r, fmt):
        return r if fmt == storage and policy.overflow == "native" else kb.cast(r, policy)

    def element(idx):
        if short == "rand":
            draw = "f64" if storage == "f64" else "f32"
            kb.store(y, [idx], rounded(kb.uniform(idx, draw, **key), draw))
            return []
        x = kb.load(kb.params[0], [idx])
        if rate == 0.0:  # GRAPH-DROPOUT-1: x unchanged, bit for bit
            kb.store(y, [idx], x)
            return []
        keep = kb.binary("ge", kb.cast(kb.uniform(idx, "f32", **key), "f64"), kb.const(rate, "f64"))
        q = float(round_f64_into(np.asarray(1.0 - rate, dtype=np.float64), op.results[0].type.policy.accum))
        xa = x if storage == accum else kb.cast(x, accum)
        r = kb.select(keep, kb.binary("div", xa, kb.const(q, accum)), kb.const(0.0, accum))
        kb.store(y, [idx], rounded(r, accum))
        return []

    for j in range(v):
        idx = kb.binary("add", base, j * lanes) if j else base
        kb.if_(kb.binary("lt", idx, n), then=lambda idx=idx: element(idx))
    func = kb.finish().body.first_op
    return KernelPlan(func.detach(), (-(-n // (lanes * v)),), lanes, [(n,)] if short == "dropout" else [], [(n,)])


FAMILY = KernelFamily(
    "random", defaults=dict(ELEMENTWISE.defaults), uses=ELEMENTWISE.uses, fit=ELEMENTWISE.fit,
    template=lower_random, cost=ELEMENTWISE.cost, staged=False,
    scope="rand (f32/f64 draws) and dropout, any shape with elements")
register_family(FAMILY, [primitive("rand"), primitive("dropout")])
