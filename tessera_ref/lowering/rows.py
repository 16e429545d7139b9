"""The row kernel family: axis reductions, softmax, layernorm_safe, rmsnorm_safe.

The family of ``sum``/``mean``/``max``/``min`` over contiguous axes, ``softmax``,
``layernorm_safe`` and ``rmsnorm_safe``: one warp (32 lanes) per row. Its schedule is the
tile (rows per tile,), fitted to the number of rows (the product of the axes the op does not
work along, SCHED-FIT-1), with ``lanes = 32 × rows per tile``; default 4 rows per tile. It
honours the ``tile`` directive only.

The input is viewed as ``[O, L, I]`` (the reduced or normalized axes, contiguous, in the
middle) and every one of the ``O·I`` rows is handled by one warp of 32 lanes; a tile holds
``R`` warps (``lanes = 32·R``, tile ``(R,)``). Each reduction is NUM-RED-2 written as a tile
program (LOWER-ROWS-1):

1. lane ``l`` folds ``x_l, x_{l+32}, …`` into a partial that starts at the identity
   (−0 for sums, −inf for max, +inf for min) — a uniform loop over ``j0 = 0, 32, …`` in
   which lane ``l`` takes element ``j0 + l`` when it exists (a lane-varying ``if``);
2. five butterfly steps, offsets 16, 8, 4, 2, 1: every lane reads the partial of lane
   ``l xor offset`` with a warp shuffle (``shfl_xor``, TILE-WARP-1: registers, no shared
   memory, no barrier) and combines ``p ⊕ q``. After the last step every lane holds the
   result (each pair computes the same commutative sum). This is NUM-RED-2's
   ``__shfl_xor_sync`` reduction from −0 literally.

So every rounding happens in the order the Graph IR interpreter uses, and the results are
bit-identical (LOWER-EXACT-1). ``mean`` divides the sum by the exact length ``L`` (a
correctly rounded IEEE division: ``L`` is exact in the accum format). The elementwise
steps are single IEEE operations in accum; ``exp`` and ``rsqrt`` are the Tile IR ``unary``
functions, which follow the NUM-MATH algorithms as the Graph IR does.

The loads are scalar (one element per lane and access; a warp's 32 loads of a row with
``I = 1`` are one coalesced 128-byte request for f32).

Cost (LOWER-COST-1): no shared memory (the butterfly is in registers); HBM the
input once per pass (reductions 1, layernorm 3, rmsnorm 2, softmax 3), a sector per element
when the row's elements are 32 bytes apart or more, the weight and bias once per input
element, and the result — a reduction stores each result from one lane (a sector each); a
nominal 5 FLOPs per input element.
"""
from __future__ import annotations

import math

from ..errors import LoweringError
from ..ir import tile as T
from ..numerics import get_format
from ..ops import primitive
from .family import KernelCost, KernelFamily, fit_size, kernel_seconds, register_family
from .plan import KernelPlan, check_nonempty, check_policy, the_op

__all__ = ["FAMILY", "lower_rows", "row_view", "warp_reduce"]

_IDENTITY = {"add": -0.0, "max": -math.inf, "min": math.inf}
_COMBINE = {"sum": "add", "mean": "add", "max": "max", "min": "min"}
_BUTTERFLY = (16, 8, 4, 2, 1)
#: The passes over the input of each op of the family (the cost model's HBM reads).
_PASSES = {"sum": 1, "mean": 1, "max": 1, "min": 1, "softmax": 3, "layernorm_safe": 3, "rmsnorm_safe": 2}


def row_view(op) -> tuple:
    """``(O, L, I)``: the input of a row-family op as outer × row length × inner."""
    shape = op.operands[0].type.shape
    axes = op.attributes["axis"]
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    if not axes:  # a reduction over no axes: every element is a row of length 1
        return math.prod(shape), 1, 1
    if list(axes) != list(range(axes[0], axes[-1] + 1)):
        raise LoweringError(f"{op.name.rsplit('.', 1)[-1]} over axes {list(axes)} of {op.operands[0].type}: the "
                            f"tile lowering reduces contiguous axes only", location=op.location,
                            fix="transpose the reduced axes next to each other first")
    return math.prod(shape[:axes[0]]), math.prod(shape[axes[0]:axes[-1] + 1]), math.prod(shape[axes[-1] + 1:])


def warp_reduce(kb: T.KernelBuilder, l, length: int, fn: str, element, accum: str, init=None):
    """NUM-RED-2 over ``element(j)``, ``j < length``, by the warp of lane ``l`` (its lane
    number in the warp), with ⊕ = ``fn`` (add, max, min) in ``accum``: the lane folds from
    ``init`` (default the identity), then the butterfly of warp shuffles (see the module
    docstring). Every lane of the warp gets the result; all 32 lanes must call it together
    (no lane-varying ``if`` around it)."""
    def fold(j0, p):
        j = kb.binary("add", j0, l)
        return kb.if_(kb.binary("lt", j, length), then=lambda: [kb.binary(fn, p, element(j))], else_=lambda: [p])
    start = kb.const(_IDENTITY[fn], accum) if init is None else init
    p, = kb.for_(0, length, 32, init=[start], body=fold)
    for off in _BUTTERFLY:
        p = kb.binary(fn, p, kb.shfl_xor(p, off))
    return p


class _Warps:
    """The lane bookkeeping of one warp per row, and NUM-RED-2 as tile code."""

    def __init__(self, kb: T.KernelBuilder, R: int, I: int, L: int, storage: str, accum: str):
        self.kb, self.L, self.storage, self.accum = kb, L, storage, accum
        lane = kb.lane_id()
        self.w, self.l = kb.binary("floordiv", lane, 32), kb.binary("mod", lane, 32)
        row = kb.binary("add", kb.binary("mul", kb.tile_id(0), R), self.w)
        self.o, self.i = kb.binary("floordiv", row, I), kb.binary("mod", row, I)

    def load(self, buf, j):
        """``buf[o, j, i]`` converted into accum (exact)."""
        v = self.kb.load(buf, [self.o, j, self.i])
        return v if self.storage == self.accum else self.kb.cast(v, self.accum)

    def store(self, buf, index, value) -> None:
        """``value`` rounded once into storage and stored at ``index``."""
        if self.storage != self.accum:
            value = self.kb.cast(value, self.storage)
        self.kb.store(buf, index, value)

    def const(self, value: float):
        return self.kb.const(value, self.accum)

    def reduce(self, fn: str, element) -> object:
        """NUM-RED-2 with ⊕ = ``fn`` of ``element(j)`` (an accum value built for index j)."""
        return warp_reduce(self.kb, self.l, self.L, fn, element, self.accum)

    def each(self, body) -> None:
        """``body(j)`` for every element ``j`` of the row this lane owns (j = l, l+32, …)."""
        kb = self.kb

        def step(j0):
            j = kb.binary("add", j0, self.l)
            kb.if_(kb.binary("lt", j, self.L), then=lambda: body(j) or [])
            return []
        kb.for_(0, self.L, 32, body=step)


def _reduction(W: _Warps, name: str, x, y) -> None:
    r = W.reduce(_COMBINE[name], lambda j: W.load(x, j))
    if name == "mean":
        r = W.kb.binary("div", r, W.const(float(W.L)))
    W.kb.if_(W.kb.binary("eq", W.l, 0), then=lambda: W.store(y, [W.o, W.i], r) or [])


def _softmax(W: _Warps, x, y) -> None:
    kb = W.kb
    m = W.reduce("max", lambda j: W.load(x, j))
    exp = lambda j: kb.unary("exp", kb.binary("sub", W.load(x, j), m))  # noqa: E731
    s = W.reduce("add", exp)
    W.each(lambda j: W.store(y, [W.o, j, W.i], kb.binary("div", exp(j), s)))


def _normalize(W: _Warps, x, y, params, center: bool, eps: float) -> None:
    kb = W.kb
    n = W.const(float(W.L))
    mean = kb.binary("div", W.reduce("add", lambda j: W.load(x, j)), n) if center else None
    c = (lambda j: kb.binary("sub", W.load(x, j), mean)) if center else (lambda j: W.load(x, j))  # noqa: E731
    ms = kb.binary("div", W.reduce("add", lambda j: kb.binary("mul", c(j), c(j))), n)
    r = kb.unary("rsqrt", kb.binary("add", ms, W.const(eps)))

    def out(j):
        v = kb.binary("mul", c(j), r)
        for step, p in zip(("mul", "add"), params):
            w = kb.load(p, [j])
            v = kb.binary(step, v, w if W.storage == W.accum else kb.cast(w, W.accum))
        W.store(y, [W.o, j, W.i], v)
    W.each(out)


def lower_rows(kop, name: str) -> KernelPlan:
    """The tile kernel of a row-family schedule kernel (see the module docstring)."""
    op = the_op(kop)
    check_nonempty(op)
    short = op.name.rsplit(".", 1)[-1]
    storage, accum = check_policy(op)
    O, L, I = row_view(op)
    R, lanes = kop.attributes["tile"][0], kop.attributes["lanes"]
    if lanes != 32 * R or (O * I) % R:
        raise LoweringError(f"{short}: a row kernel needs lanes = 32 x rows per tile and a row count "
                            f"({O * I}) divisible by the rows per tile ({R}); schedule has lanes={lanes}",
                            location=op.location, fix="let fit_schedule choose the tile")
    reduces = short in _COMBINE
    out_shape = (O, I) if reduces else (O, L, I)
    params = [("x", T.buffer((O, L, I), storage))]
    params += [(label, T.buffer((L,), storage)) for label in ("weight", "bias")[:len(op.operands) - 1]]
    params.append(("y", T.buffer(out_shape, storage), True))
    kb = T.KernelBuilder(name, params, location=op.location)
    W = _Warps(kb, R, I, L, storage, accum)
    x, *extra, y = kb.params
    if reduces:
        _reduction(W, short, x, y)
    elif short == "softmax":
        _softmax(W, x, y)
    else:
        eps = float(get_format(accum).dtype.type(op.attributes["eps"]))
        _normalize(W, x, y, extra, short == "layernorm_safe", eps)
    func = kb.finish().body.first_op
    return KernelPlan(func.detach(), ((O * I) // R,), lanes,
                      [(O, L, I)] + [(L,)] * len(extra), [out_shape])


def _rows(op) -> int:
    """How many independent rows a row-family op reduces or normalizes: the product of the
    sizes of the axes it does not work along (an empty reduced axis still leaves these rows,
    each reduced to the identity)."""
    shape = op.operands[0].type.shape
    axes = op.attributes["axis"]
    axes = {a % len(shape) for a in ((axes,) if isinstance(axes, int) else axes)}
    total = 1
    for i, d in enumerate(shape):
        if i not in axes:
            total *= d
    return total


def _fit(op, s: dict) -> dict:
    rows = fit_size(_rows(op), s["tile"][0])
    return {"tile": [rows], "lanes": 32 * rows}


def _cost(op, s: dict, preset) -> KernelCost:
    t = op.results[0].type
    itemsize, short = t.dtype.itemsize, s["op"]
    n_in, n_out = math.prod(op.operands[0].type.shape), math.prod(t.shape)
    R = s["tile"][0]
    O, _, I = row_view(op)
    along = min(32, I * itemsize)  # bytes per element read along a row (lanes I elements apart)
    hbm = (_PASSES[short] * along + (len(op.operands) - 1) * itemsize) * n_in \
        + n_out * (32 if short in _COMBINE else along)  # a reduction's result: one lane stores a sector
    tiles = O * I // R
    return KernelCost(0, hbm, 5 * n_in, tiles,
                      kernel_seconds(5 * n_in, hbm, tiles, False, t.policy.storage.name, preset))


FAMILY = KernelFamily(
    "rows",
    defaults=dict(tile=[4], lanes=128, vectorize=1, shared=False, padding=0, swizzle="none",
                  async_copy=False, stages=1),
    uses=("tile",), fit=_fit, template=lower_rows, cost=_cost, staged=False, scope="over contiguous axes")
register_family(FAMILY, [primitive(name) for name in _PASSES])
