"""The elementwise kernel family: same-shape ``add`` ``sub`` ``mul`` ``div`` ``maximum``
``minimum`` ``neg`` ``abs``, vectorized.

Its schedule is the tile (lanes × vectorize,), from the ``lanes`` and ``vectorize``
directives (the only ones it honours); default 128 lanes, vectorize 1.

The operands and the result are viewed as flat vectors of ``n`` elements (a 0-d operand, a
scalar such as the ``2.0`` of ``x * 2.0``, as a vector of one element every lane reads). A tile of
``lanes`` lanes covers ``lanes · vectorize`` consecutive elements; lane ``t`` of tile ``g``
handles elements ``g·lanes·v + j·lanes + t`` for ``j = 0 … v−1`` (LOWER-EW-1). Each of the
``v`` accesses is coalesced (consecutive lanes, consecutive elements): Tile IR has no vector
types, so ``schedule.vectorize(v)`` is lowered as ``v`` elements per lane — the CUDA
emitter's concern is the 16-byte instruction. Each element is loaded, converted into accum,
combined by one IEEE operation, rounded once into storage and stored: the Graph IR's bits.

Cost (LOWER-COST-1): no shared memory; HBM every operand element read (one per result
element) and every result element written; a nominal 1 FLOP per result element.
"""
from __future__ import annotations

import math

from ..errors import LoweringError
from ..ir import tile as T
from ..ops import primitive
from .family import KernelCost, KernelFamily, kernel_seconds, register_family
from .plan import KernelPlan, check_nonempty, check_policy, the_op

__all__ = ["FAMILY", "lower_elementwise"]

_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "max", "minimum": "min"}
_UNARY = {"neg": "neg", "abs": "abs"}


def lower_elementwise(kop, name: str) -> KernelPlan:
    """The tile kernel of an elementwise schedule kernel (see the module docstring)."""
    op = the_op(kop)
    check_nonempty(op)
    short = op.name.rsplit(".", 1)[-1]
    storage, accum = check_policy(op)
    out = op.results[0].type
    if any(v.type.shape not in (out.shape, ()) for v in op.operands) or out.rank == 0:
        raise LoweringError(f"{short}: the tile lowering takes operands of the result's shape "
                            f"{list(out.shape)} (rank >= 1) or 0-d scalars, got "
                            f"{', '.join(str(v.type) for v in op.operands)}",
                            location=op.location, fix="broadcast_to the operands first")
    n = math.prod(out.shape)
    lanes, v = kop.attributes["lanes"], kop.attributes["vectorize"]
    names = ["a", "b"][:len(op.operands)]
    sizes = [1 if v.type.rank == 0 else n for v in op.operands]  # a 0-d scalar is a buffer of one element
    params = [(p, T.buffer((m,), storage)) for p, m in zip(names, sizes)] + [("y", T.buffer((n,), storage), True)]
    kb = T.KernelBuilder(name, params, location=op.location)
    *ins, y = kb.params
    base = kb.binary("add", kb.binary("mul", kb.tile_id(0), lanes * v), kb.lane_id())

    def element(idx):
        vals = [kb.load(b, [idx if m == n else 0]) for b, m in zip(ins, sizes)]
        if storage != accum:
            vals = [kb.cast(x, accum) for x in vals]
        r = kb.binary(_BINARY[short], *vals) if short in _BINARY else kb.unary(_UNARY[short], vals[0])
        kb.store(y, [idx], r if storage == accum else kb.cast(r, storage))
        return []

    for j in range(v):
        idx = kb.binary("add", base, j * lanes) if j else base
        kb.if_(kb.binary("lt", idx, n), then=lambda idx=idx: element(idx))
    func = kb.finish().body.first_op
    return KernelPlan(func.detach(), (-(-n // (lanes * v)),), lanes, [(m,) for m in sizes], [(n,)])


def _fit(op, s: dict) -> dict:
    return {"tile": [s["lanes"] * s["vectorize"]]}


def _cost(op, s: dict, preset) -> KernelCost:
    t = op.results[0].type
    n_out = math.prod(t.shape)
    elems = len(op.operands) * n_out + n_out
    tiles = -(-n_out // (s["lanes"] * s["vectorize"]))
    return KernelCost(0, elems * t.dtype.itemsize, n_out, tiles,
                      kernel_seconds(n_out, elems * t.dtype.itemsize, tiles, False, t.policy.storage.name, preset))


FAMILY = KernelFamily(
    "elementwise",
    defaults=dict(tile=[128], lanes=128, vectorize=1, shared=False, padding=0, swizzle="none",
                  async_copy=False, stages=1),
    uses=("lanes", "vectorize"), fit=_fit, template=lower_elementwise, cost=_cost, staged=False,
    scope="operands of the result's shape or 0-d")
register_family(FAMILY, [primitive(name) for name in (*_BINARY, *_UNARY)])
