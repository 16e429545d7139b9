"""What every Tile lowering template returns, and the checks they share.

A template turns one ``tessera.schedule.kernel`` into one tile kernel (a ``tessera.func``
of Tile IR) plus its launch: the grid, the lanes per tile, and how the host views each
operand and result as the kernel's global buffers (LOWER-PLAN-1: a contiguous array
reshaped, never copied or reordered).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LoweringError
from ..ir import Operation
from ..ir import schedule as S
from ..ir import tile as T
from ..numerics import tc

__all__ = ["KernelPlan", "the_op", "check_policy", "mma_accum", "check_nonempty", "each_element",
           "SUPPORTED_STORAGE"]

#: Storage formats the tile lowering handles (the tile interpreter's formats).
SUPPORTED_STORAGE = ("f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "f64")


@dataclass
class KernelPlan:
    """One lowered kernel: its Tile IR func and launch (see the module docstring)."""

    func: Operation
    grid: tuple
    lanes: int
    in_shapes: list
    out_shapes: list


def the_op(kop: Operation) -> Operation:
    """The single Graph IR op a kernel schedules (the lowering fuses nothing yet)."""
    ops = S.body_ops(kop)
    if len(ops) != 1:
        raise LoweringError(f"a scheduled kernel with {len(ops)} ops cannot be lowered yet", location=kop.location,
                            fix="schedule one Graph IR op per kernel")
    return ops[0]


def check_policy(op: Operation, *types, rounding: tuple = ("rne",), overflow: tuple = ("native",)) -> tuple:
    """``(storage, accum)`` format names of ``op``'s policy; a LoweringError unless every
    tensor has the same plain policy (round to nearest even — or one of ``rounding`` —,
    native overflow — or one of ``overflow`` —, canonical reduction, no scaling) with a
    storage the tile interpreter runs."""
    types = types or tuple(v.type for v in op.operands) + tuple(r.type for r in op.results)
    policy = types[0].policy
    short = op.name.rsplit(".", 1)[-1]
    for t in types:
        if t.policy != policy:
            raise LoweringError(f"{short}: operands of different policies ({', '.join(map(str, types))})",
                                location=op.location, fix="cast the operands to one policy first")
    if not hasattr(policy, "storage"):  # an element kind (i1, the integers of GRAPH-TYPE-4)
        raise LoweringError(f"{short}: the tile lowering has no kernel for {policy.name} tensors yet ({types[0]})",
                            location=op.location, fix="run this op in the Graph IR interpreter")
    storage, accum = policy.storage.name, policy.accum.name
    if storage not in SUPPORTED_STORAGE or accum not in ("f32", "f64") or policy.rounding not in rounding \
            or policy.reduction != "canonical" or policy.scaling != "none" \
            or policy.overflow not in overflow:
        modes = "rounding to nearest even" if rounding == ("rne",) else f"rounding {'/'.join(rounding)}"
        over = "native overflow" if overflow == ("native",) else f"{'/'.join(overflow)} overflow"
        raise LoweringError(f"{short}: the tile lowering handles {'/'.join(SUPPORTED_STORAGE)} storage with f32 or "
                            f"f64 accumulation, {modes}, the canonical reduction, no "
                            f"scaling and {over}; got {types[0]}", location=op.location,
                            fix="run this op in the Graph IR interpreter, or change its policy")
    return storage, accum


def mma_accum(op: Operation, bk: int) -> str:
    """The ``accum`` of ``op``'s mma ops: its policy's accum format, or its tensor-core model
    (``"tc:sm80"``, NUM-TC-5) when the K tile ``bk`` holds whole instructions of that model —
    the instructions (and their blocks) then start at the same k in the kernel as in the Graph IR."""
    policy = op.operands[0].type.policy
    if policy.tc is None:
        return policy.accum.name
    model = tc.model(policy.tc)
    n = model.block(policy.storage).instruction_k
    if bk % n:
        short = op.name.rsplit(".", 1)[-1]
        raise LoweringError(f"{short}: the K tile {bk} splits the k = {n} instructions of {model.name} "
                            f"({policy.storage.name} inputs)", location=op.location,
                            fix=f"pick a K tile that is a multiple of {n}: schedule.tile((BM, BN, {max(n, bk - bk % n)}))")
    return model.name


def check_nonempty(op: Operation) -> None:
    """A LoweringError when a result of ``op`` has no elements: a launch needs at least one
    tile. (Empty reduced axes are fine: the reduction of nothing is its identity.)"""
    empty = [str(r.type) for r in op.results if 0 in r.type.shape]
    if empty:
        short = op.name.rsplit(".", 1)[-1]
        raise LoweringError(f"{short}: the result {', '.join(empty)} has no elements, and a tile kernel launches "
                            f"at least one tile", location=op.location,
                            fix="leave out the op for empty tensors, or run it in the Graph IR interpreter")


def each_element(kb: T.KernelBuilder, n: int, lanes: int, body) -> None:
    """Emit ``body(e)`` for every ``e < n``, element ``e`` handled by lane ``e mod lanes``:
    ``⌈n / lanes⌉`` rounds, round ``i`` covering ``i·lanes … i·lanes + lanes − 1`` (the
    last round masked by a lane-varying ``if``). Consecutive lanes take consecutive
    elements, so row-major accesses through ``e`` are coalesced."""
    def step(i):
        e = kb.binary("add", kb.binary("mul", i, lanes), kb.lane_id())
        kb.if_(kb.binary("lt", e, n), then=lambda: body(e) or [])
        return []
    kb.for_(0, -(-n // lanes), 1, body=step)
