"""Tile lowering of ``matmul``: shared-memory tiles, a multi-stage cp.async pipeline, mma.

One tile computes a ``BM × BN`` block of ``D = A·B (+ C)`` (grid ``(M/BM, N/BN)``). The
accumulator fragment starts at +0 (or the block of ``C``) and takes one ``mma`` per K tile,
K tiles in ascending order — the NUM-RED-1 order, so the bits are the Graph IR's
(LOWER-MATMUL-1). With ``shared`` the operand tiles are staged in shared memory, ``stages``
buffers per operand, each row padded by ``padding`` elements (and xor-swizzled if asked);
with ``async_copy`` the copies are cp.async with the usual software pipeline
(LOWER-MATMUL-2, hardware.md's cp.async rule)::

    for s in 0 .. stages-2:  (if s < nk) copy K tile s into buffer s; commit
    for kt in 0 .. nk-1:
        wait(stages-2)                  # K tile kt has landed ...
        barrier                         # ... is visible, and every lane is done with tile kt-1
        if kt+stages-1 < nk: copy K tile kt+stages-1 into buffer (kt+stages-1) % stages
        commit                          # (an empty group past the last tile, as CUDA code does)
        acc = mma(buffer kt % stages of A, of B, acc)
    wait(0)                             # retire the trailing empty groups
    store D (f16/bf16 storage: via shared memory, each element rounded once; LOWER-MATMUL-3)

Without ``async_copy`` every copy is waited for
at once (one stage). Without ``shared`` the mma reads the global tiles directly.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..ir import tile as T
from .plan import KernelPlan, check_policy, the_op

__all__ = ["lower_matmul"]


def _check(op):
    a, b = op.operands[0].type, op.operands[1].type
    short = "matmul"
    if op.attributes.get("transpose_a") or op.attributes.get("transpose_b") or a.rank != 2 or b.rank != 2:
        raise LoweringError(f"{short}: the tile lowering handles 2-D, untransposed operands; got {a} and {b} "
                            f"(transpose_a={op.attributes.get('transpose_a')}, "
                            f"transpose_b={op.attributes.get('transpose_b')})", location=op.location,
                            fix="materialize the transpose, or loop over the batch")
    if len(op.operands) == 3 and op.operands[2].type.shape != op.results[0].type.shape:
        raise LoweringError(f"{short}: C {op.operands[2].type} must have the result's shape "
                            f"{list(op.results[0].type.shape)} for the tile lowering", location=op.location,
                            fix="broadcast C to the result shape first")


def _epilogue(kb, acc, D, m0, n0, storage: str, accum: str, lanes: int) -> None:
    """Store the accumulator: as it is when storage is the accum format; otherwise through a
    shared-memory tile from which every lane rounds its elements once into storage."""
    BM, BN = acc.type.shape
    if storage == accum:
        kb.frag_store(kb.subview(D, [m0, n0], (BM, BN)), acc)
        return
    staged = kb.alloc((BM, BN), accum)
    kb.frag_store(staged, acc)
    kb.barrier()

    def element(i):
        e = kb.binary("add", kb.binary("mul", i, lanes), kb.lane_id())
        r, c = kb.binary("floordiv", e, BN), kb.binary("mod", e, BN)

        def store():
            v = kb.cast(kb.load(staged, [r, c]), storage)
            kb.store(D, [kb.binary("add", m0, r), kb.binary("add", n0, c)], v)
            return []
        kb.if_(kb.binary("lt", e, BM * BN), then=store)
        return []
    kb.for_(0, -(-BM * BN // lanes), 1, body=element)


def lower_matmul(kop, name: str) -> KernelPlan:
    """The tile kernel of a matmul schedule kernel (see the module docstring)."""
    op = the_op(kop)
    _check(op)
    storage, accum = check_policy(op)
    s = kop.attributes
    BM, BN, BK = s["tile"]
    (M, K), N = op.operands[0].type.shape, op.operands[1].type.shape[1]
    if M % BM or N % BN or K % BK:
        raise LoweringError(f"matmul {M}x{K} @ {K}x{N}: tile {BM}x{BN}x{BK} does not divide the shape",
                            location=op.location, fix="let fit_schedule choose the tile")
    has_c = len(op.operands) == 3
    params = [("A", T.buffer((M, K), storage)), ("B", T.buffer((K, N), storage))]
    params += [("C", T.buffer((M, N), storage))] if has_c else []
    params.append(("D", T.buffer((M, N), storage), True))
    kb = T.KernelBuilder(name, params, location=op.location)
    A, B, *Cs, D = kb.params
    m0 = kb.binary("mul", kb.tile_id(0), BM)
    n0 = kb.binary("mul", kb.tile_id(1), BN)
    acc = kb.frag_load(kb.subview(Cs[0], [m0, n0], (BM, BN))) if has_c else kb.fill((BM, BN), accum, 0.0)
    nk = K // BK

    def k_offset(kt):
        return kt * BK if isinstance(kt, int) else kb.binary("mul", kt, BK)

    def a_tile(kt):
        return kb.subview(A, [m0, k_offset(kt)], (BM, BK))

    def b_tile(kt):
        return kb.subview(B, [k_offset(kt), n0], (BK, BN))

    if not s["shared"]:
        acc, = kb.for_(0, nk, 1, init=[acc], body=lambda kt, acc: [kb.mma(a_tile(kt), b_tile(kt), acc,
                                                                            accum=accum)])
    else:
        stages = s["stages"] if s["async_copy"] else 1
        sA = kb.alloc((stages, BM, BK), storage, swizzle=s["swizzle"], pad=s["padding"])
        sB = kb.alloc((stages, BK, BN), storage, swizzle=s["swizzle"], pad=s["padding"])

        def buffers(kt):
            stage = kt % stages if isinstance(kt, int) else kb.binary("mod", kt, stages) if stages > 1 else 0
            return kb.subview(sA, [stage, 0, 0], (BM, BK)), kb.subview(sB, [stage, 0, 0], (BK, BN))

        def issue(kt):
            dst_a, dst_b = buffers(kt)
            kb.cp_async(dst_a, a_tile(kt))
            kb.cp_async(dst_b, b_tile(kt))
            return []

        for st in range(stages - 1):  # the prologue: stages-1 groups, empty past the last K tile
            if st < nk:
                issue(st)
            kb.commit()

        def body(kt, acc):
            if stages == 1:  # copy, wait, use, and let every lane finish before the next copy
                issue(kt)
                kb.commit()
                kb.wait(0)
                kb.barrier()
                acc = kb.mma(*buffers(kt), acc, accum=accum)
                kb.barrier()
                return [acc]
            kb.wait(stages - 2)  # K tile kt has landed ...
            kb.barrier()  # ... is visible, and every lane is done with tile kt-1's buffer
            nxt = kb.binary("add", kt, stages - 1)
            kb.if_(kb.binary("lt", nxt, nk), then=lambda: issue(nxt))  # refills tile kt-1's buffer
            kb.commit()
            return [kb.mma(*buffers(kt), acc, accum=accum)]
        acc, = kb.for_(0, nk, 1, init=[acc], body=body, prefetch=stages if s["async_copy"] else 0)
        if stages > 1:
            kb.wait(0)  # retire the empty groups committed past the last K tile
    _epilogue(kb, acc, D, m0, n0, storage, accum, s["lanes"])
    func = kb.finish().body.first_op
    shapes = [(M, K), (K, N)] + ([(M, N)] if has_c else [])
    return KernelPlan(func.detach(), (M // BM, N // BN), s["lanes"], shapes, [(M, N)])
