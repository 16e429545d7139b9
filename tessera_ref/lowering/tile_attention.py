"""Tile lowering of ``flash_attention``: seed 003 §3.6's schedule as a tile kernel.

One tile owns ``Br`` query rows of one batch entry (grid ``(Sq/Br, batch)``) and walks the
keys in blocks of ``Bc = block_k`` — the op's own block size, because the blocked online
softmax *is* the op's definition (GRAPH-FLASHATTENTION-1). Per tile (LOWER-FA-1):

1. the Q tile is copied to shared memory once (cp.async); the output accumulator
   ``acc [Br, Dv]``, the running max ``m`` (−inf) and the running sum ``ℓ`` (+0) live in
   shared memory;
2. for each key block: Kᵀ is staged in shared memory by the lanes (a transposing copy,
   rows padded by ``padding``), V by cp.async; ``S = mma(Q, Kᵀ)`` from +0 (NUM-RED-1);
3. each warp takes rows in turn: ``s = S ⊗ scale`` (masked to −inf above the causal
   diagonal), ``m' = max(m, max_j s_j)``, ``shift = m'`` (0 when −inf),
   ``p_j = exp(s_j ⊖ shift)`` written over S, ``α = exp(m ⊖ shift)``,
   ``ℓ' = α ⊗ ℓ ⊕ Σ_j p_j`` with the row sum in the NUM-RED-2 warp order;
4. ``PV = mma(P, V)`` from +0; every element ``acc' = α ⊗ acc ⊕ PV``;
5. after the last block ``O = acc ⊘ ℓ`` rounded once into storage.

Every operation and order is the Graph IR interpreter's, so the result has its bits. The
kernel stages one key block at a time: ``stages`` and ``async_copy`` change the cost model's
overlap (:mod:`.cost`), not this kernel, and do not change the HBM traffic the interpreter
counts: Q read once, K and V once per Q tile, O written once.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import LoweringError
from ..ir import tile as T
from ..numerics.arith import to_accum
from ..ops.exact import math_in_accum
from .plan import KernelPlan, check_policy, the_op
from .tile_rows import warp_reduce

__all__ = ["lower_attention"]


def _scale(op, D: int, accum: str) -> float:
    """The score scale in accum, as the Graph IR computes it (the attribute, or rsqrt(D))."""
    if "scale" in op.attributes:
        return float(to_accum(np.float64(op.attributes["scale"]), accum))
    return float(math_in_accum("rsqrt", np.float64(D), accum=accum))


def _each(kb, n: int, lanes: int, body) -> None:
    """``body(e)`` for every ``e < n``, element ``e`` by lane ``e mod lanes``."""
    def step(i):
        e = kb.binary("add", kb.binary("mul", i, lanes), kb.lane_id())
        kb.if_(kb.binary("lt", e, n), then=lambda: body(e) or [])
        return []
    kb.for_(0, -(-n // lanes), 1, body=step)


def lower_attention(kop, name: str) -> KernelPlan:
    """The tile kernel of a flash_attention schedule kernel (see the module docstring)."""
    op = the_op(kop)
    storage, accum = check_policy(op)
    q, k, v = (x.type for x in op.operands)
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise LoweringError(f"flash_attention: q {q}, k {k}, v {v} must share their batch axes for the tile "
                            f"lowering", location=op.location, fix="broadcast the batch axes first")
    batch = math.prod(q.shape[:-2])
    (Sq, D), Sk, Dv = q.shape[-2:], k.shape[-2], v.shape[-1]
    s = kop.attributes
    Br, Bc, lanes, pad = s["tile"][0], s["tile"][1], s["lanes"], s["padding"]
    W = lanes // 32
    if Bc != op.attributes["block_k"] or Sk % Bc or Sq % Br or lanes % 32 or Br % W:
        raise LoweringError(f"flash_attention: tile ({Br}, {Bc}) with {lanes} lanes does not fit Sq={Sq}, "
                            f"Sk={Sk}, block_k={op.attributes['block_k']} (Bc must be block_k and divide Sk, "
                            f"Br divide Sq; lanes a multiple of 32 whose warps divide Br)",
                            location=op.location, fix="let fit_schedule choose the tile")
    scale = _scale(op, D, accum)
    params = [("Q", T.buffer((batch, Sq, D), storage)), ("K", T.buffer((batch, Sk, D), storage)),
              ("V", T.buffer((batch, Sk, Dv), storage)), ("O", T.buffer((batch, Sq, Dv), storage), True)]
    kb = T.KernelBuilder(name, params, location=op.location)
    Q, K, V, O = kb.params
    lane = kb.lane_id()
    w, l = kb.binary("floordiv", lane, 32), kb.binary("mod", lane, 32)
    b, r0 = kb.tile_id(1), kb.binary("mul", kb.tile_id(0), Br)
    Qs = kb.alloc((Br, D), storage, pad=pad)
    Kt = kb.alloc((D, Bc), storage, pad=pad)
    Vs = kb.alloc((Bc, Dv), storage, pad=pad)
    Ss, PVs, Acc = (kb.alloc(shape, accum, pad=pad) for shape in ((Br, Bc), (Br, Dv), (Br, Dv)))
    Ms, Ls, Al = kb.alloc((Br,), accum), kb.alloc((Br,), accum), kb.alloc((Br,), accum)
    scratch = kb.alloc((W, 32), accum)
    c = lambda x: kb.const(x, accum)  # noqa: E731 - an accum constant

    def split(e, cols):
        return kb.binary("floordiv", e, cols), kb.binary("mod", e, cols)

    _each(kb, Br * Dv, lanes, lambda e: kb.store(Acc, list(split(e, Dv)), c(0.0)))
    def init_row(e):
        kb.store(Ms, [e], c(-math.inf))
        kb.store(Ls, [e], c(0.0))
    _each(kb, Br, lanes, init_row)
    kb.cp_async(Qs, kb.subview(Q, [b, r0, 0], (Br, D)))
    kb.commit()

    def key_block(blk):
        t0 = kb.binary("mul", blk, Bc)

        def stage_kt(e):
            j, d = split(e, D)
            kb.store(Kt, [d, j], kb.load(K, [b, kb.binary("add", t0, j), d]))
        _each(kb, Bc * D, lanes, stage_kt)
        kb.cp_async(Vs, kb.subview(V, [b, t0, 0], (Bc, Dv)))
        kb.commit()
        kb.wait(0)
        kb.barrier()
        kb.frag_store(Ss, kb.mma(Qs, Kt, kb.fill((Br, Bc), accum, 0.0), accum=accum))
        kb.barrier()

        def row_step(i):
            row = kb.binary("add", kb.binary("mul", i, W), w)
            m_old, ell_old = kb.load(Ms, [row]), kb.load(Ls, [row])

            def score(j):
                sj = kb.binary("mul", kb.load(Ss, [row, j]), c(scale))
                if op.attributes["causal"]:
                    limit = kb.binary("add", kb.binary("add", r0, row), Sk - Sq)
                    sj = kb.select(kb.binary("le", kb.binary("add", t0, j), limit), sj, c(-math.inf))
                return sj
            m_new = kb.binary("max", m_old, warp_reduce(kb, scratch, w, l, Bc, "max", score, accum))
            shift = kb.select(kb.binary("eq", m_new, c(-math.inf)), c(0.0), m_new)

            def write_p(j0):
                j = kb.binary("add", j0, l)
                kb.if_(kb.binary("lt", j, Bc),
                       then=lambda: kb.store(Ss, [row, j], kb.unary("exp", kb.binary("sub", score(j), shift))) or [])
                return []
            kb.for_(0, Bc, 32, body=write_p)
            psum = warp_reduce(kb, scratch, w, l, Bc, "add", lambda j: kb.load(Ss, [row, j]), accum)
            alpha = kb.unary("exp", kb.binary("sub", m_old, shift))
            ell = kb.binary("add", kb.binary("mul", alpha, ell_old), psum)

            def keep():
                kb.store(Ms, [row], m_new)
                kb.store(Ls, [row], ell)
                kb.store(Al, [row], alpha)
                return []
            kb.if_(kb.binary("eq", l, 0), then=keep)
            return []
        kb.for_(0, Br // W, 1, body=row_step)
        kb.barrier()
        kb.frag_store(PVs, kb.mma(Ss, Vs, kb.fill((Br, Dv), accum, 0.0), accum=accum))
        kb.barrier()

        def update(e):
            r, d = split(e, Dv)
            kb.store(Acc, [r, d], kb.binary("add", kb.binary("mul", kb.load(Al, [r]), kb.load(Acc, [r, d])),
                                            kb.load(PVs, [r, d])))
        _each(kb, Br * Dv, lanes, update)
        kb.barrier()
        return []
    kb.for_(0, Sk // Bc, 1, body=key_block)

    def finish(e):
        r, d = split(e, Dv)
        out = kb.binary("div", kb.load(Acc, [r, d]), kb.load(Ls, [r]))
        kb.store(O, [b, kb.binary("add", r0, r), d], out if storage == accum else kb.cast(out, storage))
    _each(kb, Br * Dv, lanes, finish)
    func = kb.finish().body.first_op
    return KernelPlan(func.detach(), (Sq // Br, batch), lanes, [(batch, Sq, D), (batch, Sk, D), (batch, Sk, Dv)],
                      [(batch, Sq, Dv)])
