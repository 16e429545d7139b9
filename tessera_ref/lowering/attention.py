"""The attention kernel family: ``flash_attention`` as seed 003 §3.6's tile kernel.

Its schedule is the tile (Br, Bc, D): ``Br`` query rows fitted to ``Sq`` (SCHED-FIT-1),
``Bc`` the op's ``block_k`` and ``D`` the head size; default Br 64, 128 lanes, cp.async
with 2 stages. It honours ``tile``, ``lanes``, ``padding``, ``async_copy`` and ``stages``:
its operands are always staged in shared memory (``prefetch`` in the Schedule IR), never
swizzled.

One tile owns ``Br`` query rows of one batch entry (grid ``(Sq/Br, batch)``) and walks the
keys in blocks of ``Bc = block_k`` — the op's own block size, because the blocked online
softmax *is* the op's definition (GRAPH-FLASHATTENTION-1): when ``block_k`` does not divide
``Sk`` the last block holds the ``Sk mod block_k`` remaining keys, as the op's, and runs once
after the loop over the full blocks with copies, ``mma`` ops and reductions of its length. The
fragments are register micro-tiles (:func:`~tessera_ref.ir.fragment.blocked`) in column chunks
of at most :data:`_VALUES` values a lane, so a compiled kernel keeps them in registers.
Per tile (LOWER-FA-1):

1. the Q tile is copied to shared memory once (cp.async); the running max ``m`` (−inf),
   the running sum ``ℓ`` (+0) and the rescale factor ``α`` of each row live in ``[Br, 1]``
   shared buffers; the output accumulator ``acc [Br, Dv]`` (+0) is a register fragment
   carried through the key-block loop, as a GPU kernel keeps it in registers;
2. the K and V blocks are cp.async'ed into rings of ``stages`` buffers (one without
   ``async_copy``), rows padded by ``padding``, with the pipeline of :mod:`.matmul`
   (LOWER-MATMUL-2): a prologue commits blocks ``0 … stages−2``; block ``j`` waits for at
   most ``stages−2`` pending groups, passes a barrier, refills the buffers of block ``j−1``
   with block ``j+stages−1`` and commits; ``wait(0)`` after the loop retires the empty
   groups. With one stage each block is copied, waited for and made visible before use, and
   a barrier ends the block (the next block's copy overwrites buffers every lane read);
3. the lanes copy the K block transposed into a Kᵀ tile; ``S = mma(Q, Kᵀ)`` from +0
   (NUM-RED-1), stored to the shared S/P tile;
4. each warp takes rows in turn: ``s = S ⊗ scale`` (masked to −inf above the causal
   diagonal), ``m' = max(m, max_j s_j)``, ``shift = m'`` (0 when −inf),
   ``p_j = exp(s_j ⊖ shift)`` written over S, ``α = exp(m ⊖ shift)``,
   ``ℓ' = α ⊗ ℓ ⊕ Σ_j p_j`` with the row sum in the NUM-RED-2 warp order;
5. after a barrier, the fragment ``PV = mma(P, V)`` from +0 and ``acc' = α ⊗ acc ⊕ PV``
   as fragment arithmetic (``α`` loaded as a ``[Br, 1]`` fragment and broadcast): one
   rounding per operation and element, as the scalar form;
6. after the last block ``O = acc ⊘ ℓ`` (``ℓ`` broadcast likewise), stored as a fragment and
   rounded once into storage by the store (TILE-NUM-2).

Every operation and order is the Graph IR interpreter's, so the result has its bits for
every number of stages. The stages change the shared memory and when copies land, never
the HBM traffic the interpreter counts: Q read once, K and V once per Q tile, O written
once.

Cost (LOWER-COST-1): :func:`attention_cost`; :func:`naive_attention_bytes` gives the HBM
traffic of the unfused computation for comparison.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import LoweringError
from ..ir import tile as T
from ..ir.fragment import TVLayout, blocked
from ..numerics.arith import to_accum
from ..numerics.formats import get_format
from ..ops import primitive
from ..ops.exact import math_in_accum
from .family import KernelCost, KernelFamily, fit_size, kernel_seconds, register_family
from .plan import KernelPlan, check_policy, each_element, the_op
from .rows import warp_reduce

__all__ = ["FAMILY", "lower_attention", "attention_cost", "naive_attention_bytes"]


def _scale(op, D: int, accum: str) -> float:
    """The score scale in accum, as the Graph IR computes it (the attribute, or rsqrt(D))."""
    if "scale" in op.attributes:
        return float(to_accum(np.float64(op.attributes["scale"]), accum))
    return float(math_in_accum("rsqrt", np.float64(D), accum=accum))


#: the most accumulator values a lane holds in one register micro-tile (S and O are computed in
#: column chunks of at most this many values per lane, so S, O and the operands fit in registers)
_VALUES = 64


def _chunks(rows: int, cols: int, lanes: int) -> list:
    """``[(c0, width)]``: the columns of a ``rows × cols`` fragment in equal chunks, the widest
    dividing ``cols`` with at most :data:`_VALUES` values a lane."""
    width = max((d for d in range(1, cols + 1) if cols % d == 0 and rows * d <= _VALUES * lanes), default=cols)
    return [(c0, width) for c0 in range(0, cols, width)]


def _output_layout(Br: int, Dv: int, lanes: int, itemsize: int) -> TVLayout | None:
    """The layout of the ``[Br, Dv]`` accumulator: :func:`~tessera_ref.ir.fragment.blocked`,
    unless a lane's run of output columns would be narrower than 4 bytes in storage (fp8
    with 2-column blocks: every 32-byte sector would be written by two requests); then
    consecutive lanes own consecutive elements of whole rows (cyclic ownership as a layout,
    still constant register indices), so every store request is one coalesced run. None
    (cyclic) when neither fits."""
    layout = blocked(Br, Dv, lanes)
    if layout is not None and (layout.lane_shape[0] == 1 or layout.lane_stride[0] * itemsize >= 4):
        return layout
    if Dv <= lanes and lanes % Dv == 0 and Br % (lanes // Dv) == 0:
        return TVLayout((Dv, lanes // Dv), (1, Dv), (Br * Dv // lanes,), (lanes,))
    if Dv % lanes == 0:
        return TVLayout((lanes,), (1,), (Dv // lanes, Br), (lanes, Dv))
    return layout


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
    if Sk == 0 or Sq == 0:
        raise LoweringError(f"flash_attention: Sq={Sq}, Sk={Sk}: an empty query or key axis has no blocks to tile",
                            location=op.location, fix="run it at the Graph level (its rows are NaN without keys)")
    s = kop.attributes
    Br, Bc, lanes, pad = s["tile"][0], s["tile"][1], s["lanes"], s["padding"]
    W = lanes // 32
    if Bc != op.attributes["block_k"] or Sq % Br or lanes % 32 or Br % W:
        raise LoweringError(f"flash_attention: tile ({Br}, {Bc}) with {lanes} lanes does not fit Sq={Sq}, "
                            f"Sk={Sk}, block_k={op.attributes['block_k']} (Bc must be block_k, Br divide Sq; "
                            f"lanes a multiple of 32 whose warps divide Br)",
                            location=op.location, fix="let fit_schedule choose the tile")
    scale = _scale(op, D, accum)
    params = [("Q", T.buffer((batch, Sq, D), storage)), ("K", T.buffer((batch, Sk, D), storage)),
              ("V", T.buffer((batch, Sk, Dv), storage)), ("O", T.buffer((batch, Sq, Dv), storage), True)]
    kb = T.KernelBuilder(name, params, location=op.location)
    Q, K, V, O = kb.params
    lane = kb.lane_id()
    w, l = kb.binary("floordiv", lane, 32), kb.binary("mod", lane, 32)
    b, r0 = kb.tile_id(1), kb.binary("mul", kb.tile_id(0), Br)
    stages = s["stages"] if s["async_copy"] else 1
    nfull, tail = divmod(Sk, Bc)  # full key blocks, and the keys of the last, partial one (0: none)
    Bk = min(Bc, Sk)  # rows of the key buffers
    Qs = kb.alloc((Br, D), storage, pad=pad)
    Ks = kb.alloc((stages, Bk, D), storage, pad=pad)
    Vs = kb.alloc((stages, Bk, Dv), storage, pad=pad)
    Kt = kb.alloc((D, Bk), storage, pad=pad)
    Ss = kb.alloc((Br, Bk), accum, pad=pad)
    Ms, Ls, Al = (kb.alloc((Br, 1), accum) for _ in range(3))  # per-row m, ℓ, α: [Br, 1] broadcasts over Dv
    c = lambda x: kb.const(x, accum)  # noqa: E731 - an accum constant
    itemsize = get_format(storage).dtype.itemsize
    outs = [(c0, width, _output_layout(Br, width, lanes, itemsize)) for c0, width in _chunks(Br, Dv, lanes)]

    def split(e, cols):
        return kb.binary("floordiv", e, cols), kb.binary("mod", e, cols)

    def init_row(e):
        kb.store(Ms, [e, 0], c(-math.inf))
        kb.store(Ls, [e, 0], c(0.0))
    each_element(kb, Br, lanes, init_row)
    kb.cp_async(Qs, kb.subview(Q, [b, r0, 0], (Br, D)))
    kb.commit()

    def slot(blk):
        return blk % stages if isinstance(blk, int) else kb.binary("mod", blk, stages) if stages > 1 else 0

    def issue(blk, n):
        """cp.async the ``n`` keys of block ``blk`` of K and V into their buffers ``blk mod stages``."""
        t0 = blk * Bc if isinstance(blk, int) else kb.binary("mul", blk, Bc)
        kb.cp_async(kb.subview(Ks, [slot(blk), 0, 0], (n, D)), kb.subview(K, [b, t0, 0], (n, D)))
        kb.cp_async(kb.subview(Vs, [slot(blk), 0, 0], (n, Dv)), kb.subview(V, [b, t0, 0], (n, Dv)))
        return []

    for st in range(stages - 1):  # the prologue: stages-1 groups, empty past the last block
        if st < nfull or st == nfull and tail:
            issue(st, Bc if st < nfull else tail)
        kb.commit()

    def key_block(blk, acc, n):
        """Key block ``blk`` of ``n`` keys (``Bc``, or ``tail`` for the last, partial one)."""
        t0 = blk * Bc if isinstance(blk, int) else kb.binary("mul", blk, Bc)
        if stages == 1:  # copy, wait, and make the block visible
            issue(blk, n)
            kb.commit()
            kb.wait(0)
            kb.barrier()
        else:
            kb.wait(stages - 2)  # block blk (and Q) have landed ...
            kb.barrier()  # ... are visible (every lane finished block blk-1 before the last barrier)
            if not isinstance(blk, int):  # refill block blk-1's buffers (the static tail block is the last)
                nxt = kb.binary("add", blk, stages - 1)
                kb.if_(kb.binary("lt", nxt, nfull), then=lambda: issue(nxt, Bc))
                if tail:
                    kb.if_(kb.binary("eq", nxt, nfull), then=lambda: issue(nxt, tail))
            kb.commit()
        k_slot = slot(blk)

        def stage_kt(e):
            j, d = split(e, D)
            kb.store(Kt, [d, j], kb.load(Ks, [k_slot, j, d]))
        each_element(kb, n * D, lanes, stage_kt)
        kb.barrier()
        for c0, width in _chunks(Br, n, lanes):  # S = Q·Kᵀ in register micro-tiles of at most _VALUES a lane
            layout = blocked(Br, width, lanes)
            kb.frag_store(kb.subview(Ss, [0, c0], (Br, width)),
                          kb.mma(Qs, kb.subview(Kt, [0, c0], (D, width)),
                                 kb.fill((Br, width), accum, 0.0, layout=layout), accum=accum, layout=layout),
                          layout=layout)
        kb.barrier()

        def row_step(i):
            row = kb.binary("add", kb.binary("mul", i, W), w)
            lead = kb.binary("eq", l, 0)  # lane 0 of the warp owns the row's m, ℓ and α
            m_old, = kb.if_(lead, then=lambda: [kb.load(Ms, [row, 0])], else_=lambda: [c(-math.inf)])

            def score(j):
                sj = kb.binary("mul", kb.load(Ss, [row, j]), c(scale))
                if op.attributes["causal"]:
                    limit = kb.binary("add", kb.binary("add", r0, row), Sk - Sq)
                    sj = kb.select(kb.binary("le", kb.binary("add", t0, j), limit), sj, c(-math.inf))
                return sj
            m_new = warp_reduce(kb, l, n, "max", score, accum, init=m_old)  # max(m, max_j s_j), every lane
            shift = kb.select(kb.binary("eq", m_new, c(-math.inf)), c(0.0), m_new)

            def write_p(j0):
                j = kb.binary("add", j0, l)
                kb.if_(kb.binary("lt", j, n),
                       then=lambda: kb.store(Ss, [row, j], kb.unary("exp", kb.binary("sub", score(j), shift))) or [])
                return []
            kb.for_(0, n, 32, body=write_p)
            psum = warp_reduce(kb, l, n, "add", lambda j: kb.load(Ss, [row, j]), accum)

            def keep():
                alpha = kb.unary("exp", kb.binary("sub", m_old, shift))
                kb.store(Ls, [row, 0], kb.binary("add", kb.binary("mul", alpha, kb.load(Ls, [row, 0])), psum))
                kb.store(Ms, [row, 0], m_new)
                kb.store(Al, [row, 0], alpha)
                return []
            kb.if_(lead, then=keep)
            return []
        kb.for_(0, Br // W, 1, body=row_step)
        kb.barrier()  # P, α, m and ℓ are visible
        P = kb.subview(Ss, [0, 0], (Br, n))
        new = []
        for (c0, width, layout), a in zip(outs, acc):  # acc' = α ⊗ acc ⊕ P·V, chunk by chunk of columns
            pv = kb.mma(P, kb.subview(Vs, [k_slot, 0, c0], (n, width)),
                        kb.fill((Br, width), accum, 0.0, layout=layout), accum=accum, layout=layout)
            new.append(kb.binary("add", kb.binary("mul", kb.frag_load(Al), a), pv))
        if stages == 1:
            kb.barrier()  # every lane is done with the K, V and P buffers before the next block's copies
        return new
    acc = [kb.fill((Br, width), accum, 0.0, layout=layout) for _, width, layout in outs]
    if nfull:
        acc = kb.for_(0, nfull, 1, init=acc, body=lambda blk, *a: key_block(blk, a, Bc),
                      prefetch=stages if s["async_copy"] else 0)
    if tail:
        acc = key_block(nfull, acc, tail)
    if stages > 1:
        kb.wait(0)  # retire the empty groups committed past the last block
    for (c0, width, layout), a in zip(outs, acc):  # O = acc ⊘ ℓ, rounded once into storage by the store
        kb.frag_store(kb.subview(O, [b, r0, c0], (Br, width)), kb.binary("div", a, kb.frag_load(Ls)), layout=layout)
    func = kb.finish().body.first_op
    return KernelPlan(func.detach(), (Sq // Br, batch), lanes, [(batch, Sq, D), (batch, Sk, D), (batch, Sk, Dv)],
                      [(batch, Sq, Dv)])


def _fit(op, s: dict) -> dict:
    q = op.operands[0].type.shape
    return {"tile": [fit_size(q[-2], s["tile"][0]), op.attributes["block_k"], q[-1]]}  # Bc is the op's block_k


def attention_cost(Sq, Sk, D, tile, *, Dv=None, heads=1, itemsize=2, accum_itemsize=4, padding=0, stages=1,
                   async_copy=True, dtype="f16", preset="H100") -> KernelCost:
    """FlashAttention's cost with Q tiles of ``Br`` rows and K/V tiles of ``Bc`` rows.

    Shared memory: the buffers of :func:`lower_attention` — the Q tile; ``stages`` K and V
    blocks of ``min(Bc, Sk)`` rows (one with ``async_copy=False``); the Kᵀ tile; S/P in accum; per-row m, ℓ, α (the
    output accumulator and PV are register fragments, the butterflies warp shuffles). HBM: Q once,
    K and V once per Q tile, O once, whatever the number of stages. FLOPs, what the tile
    interpreter counts (TILE-COUNT-4), per head and key block (``⌈Sk/Bc⌉`` of them, the last
    partial when ``Bc`` does not divide ``Sk``): the two ``mma``
    (``2·Sq·Bc·(D + Dv)``); per score 6 lane operations (×scale in the max and again for p,
    the max fold, ⊖ shift, exp, the sum fold); per query row 324 lane operations of its warp
    (two butterflies of 5 × 32, and lane 0's ``m ⊖ shift``, ``exp``, ``α ⊗ ℓ``, ``⊕ Σp``); per accumulator element 2 (``α ⊗ acc ⊕ PV``); and at the end one
    division per output element. Loads overlap compute with ``async_copy`` and at least two
    stages."""
    Br, Bc = tile[0], min(tile[1], Sk)
    Dv = D if Dv is None else Dv
    stages = stages if async_copy else 1
    smem = (Br * (D + padding) + stages * Bc * (D + Dv + 2 * padding) + D * (Bc + padding)) * itemsize \
        + (Br * (Bc + padding) + 3 * Br) * accum_itemsize
    elems = heads * (Sq * D + (Sq // Br) * Sk * (D + Dv) + Sq * Dv)
    blocks = -(-Sk // Bc)  # the last one partial when Bc does not divide Sk
    flops = heads * (2 * Sq * Sk * (D + Dv) + 6 * Sq * Sk + Sq * blocks * (324 + 2 * Dv) + Sq * Dv)
    tiles = heads * (Sq // Br)
    return KernelCost(smem, elems * itemsize, flops, tiles,
                      kernel_seconds(flops, elems * itemsize, tiles, async_copy and stages >= 2, dtype, preset))


def naive_attention_bytes(Sq, Sk, D, tile, *, heads=1, itemsize=2) -> dict:
    """HBM bytes of unfused attention as three kernels of this lowering: ``S = Q·Kᵀ``
    (matmul, tile ``(BM, BN, ·)``), ``P = softmax(S)`` (a row kernel: three passes over S,
    one write), ``O = P·V``. Returns the bytes of each kernel and the total."""
    BM, BN = tile[0], tile[1]
    bn_o = min(BN, D)
    qk = Sq * D * (Sk // min(BN, Sk)) + D * Sk * (Sq // BM) + Sq * Sk
    sm = 3 * Sq * Sk + Sq * Sk
    pv = Sq * Sk * (D // bn_o) + Sk * D * (Sq // BM) + Sq * D
    parts = {"scores": qk, "softmax": sm, "pv": pv}
    out = {k: heads * v * itemsize for k, v in parts.items()}
    out["total"] = sum(out.values())
    return out


def _cost(op, s: dict, preset) -> KernelCost:
    q, k, v = (x.type.shape for x in op.operands)
    t = op.results[0].type
    return attention_cost(q[-2], k[-2], q[-1], s["tile"], Dv=v[-1], heads=math.prod(q[:-2]), itemsize=t.dtype.itemsize,
                          accum_itemsize=t.policy.accum.dtype.itemsize, padding=s["padding"], stages=s["stages"],
                          async_copy=s["async_copy"], dtype=t.policy.storage.name, preset=preset)


FAMILY = KernelFamily(
    "attention",
    defaults=dict(tile=[64, 64, 64], lanes=128, vectorize=1, shared=True, padding=0, swizzle="none",
                  async_copy=True, stages=2),
    uses=("tile", "lanes", "padding", "async_copy", "stages"),  # always shared, never swizzled
    fit=_fit, template=lower_attention, cost=_cost, staged=True, scope="equal batch axes")
register_family(FAMILY, [primitive("flash_attention")])
