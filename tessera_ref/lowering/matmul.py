"""The matmul kernel family: shared-memory tiles, a multi-stage cp.async pipeline, mma.

The family of ``matmul`` (with or without ``C``; batch axes broadcast, ``transpose_a`` /
``transpose_b``). Its schedule tiles the output matrix ``M × N`` and the contraction ``K``
of :func:`matmul_dims` (the transposes applied) by (BM, BN, BK), each fitted to its
dimension (SCHED-FIT-1); default (64, 64, 32), 128 lanes, shared staging with cp.async and 2
stages. With ``shared`` the Schedule IR shows the operands staged by ``prefetch``.

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
    store D (narrower storage: via shared memory, each element rounded once; LOWER-MATMUL-3)

With ``C`` in a storage format narrower than accum, the accumulator starts from ``C``'s block
converted into accum through the same shared tile (the fragment holds accum values).

Without ``async_copy`` every copy is waited for at once (one stage). Without ``shared`` the
mma reads the global tiles directly.

Batched matmuls (LOWER-MATMUL-4) run their output matrices on a third grid axis: grid
``(M/BM, N/BN, P)`` for ``P`` = the product of the result's batch axes; every operand is
viewed as ``[P_x, rows, cols]`` (its own batch axes flattened, so the host reshapes it
without a copy) and tile ``(·, ·, p)`` reads the operand matrix that broadcasting maps to
output matrix ``p`` (a uniform index computed from ``p``). An operand whose stored
orientation (``transpose_a``/``transpose_b``: ``[.., K, M]`` or ``[.., N, K]``) is not its
staged one is copied transposing, reading the stored tile row-major (coalesced): a
transposing cp.async of one 4- or 8-byte element per piece, or for 2- and 1-byte elements a
lane copy (element ``e`` by lane ``e mod lanes``). It needs ``shared``. The mma, and so
every rounding, is the same as for untransposed operands.

Fragments (LOWER-MATMUL-5, -6; :func:`_fragments`): with ``shared``, the accumulator is
register-blocked (each lane an ``r × c`` micro-tile; A staged k-major where cp.async can put
it there) or, under a tensor-core policy, in the ``mma.sync`` accumulator layout; the
epilogue then stores it straight into ``D``. Copies into shared memory are cp.async in the
widest 16/8/4-byte pieces that fit (transposing ones element by element), else lane copies.

Cost (LOWER-COST-1, :func:`matmul_cost`): shared memory ``stages · (BM·(BK+pad) +
BK·(BN+pad)) · itemsize`` (plus the ``BM·BN`` accum tile of the epilogue when storage is
narrower than accum); HBM, per output matrix, each A row panel once per column tile and
each B column panel once per row tile — a transposed operand's stored tile is read row by
row, the same sectors; without shared staging the mma reads A by columns, a sector per
element once rows are 32 bytes apart; FLOPs ``2·M·N·K`` per output matrix, what the tile
interpreter counts for the ``mma`` (the epilogue's conversions are no FLOPs).
"""
from __future__ import annotations

import math

from ..errors import LoweringError
from ..ir import tile as T
from ..ir.fragment import blocked, mma_sync
from ..numerics import get_format, tc
from ..ops import primitive
from .family import KernelCost, KernelFamily, fit_size, kernel_seconds, register_family
from .plan import KernelPlan, broadcast_index, check_nonempty, check_policy, each_element, mma_accum, the_op

__all__ = ["FAMILY", "lower_matmul", "matmul_dims", "matmul_cost", "REGISTERS"]

#: the registers a lane the register-blocked tiles are sized for (an 8 × 8 micro-tile with its
#: operands: two 256-lane blocks an SM); recorded on the kernel as ``launch.registers``
REGISTERS = 128


def matmul_dims(op) -> tuple:
    """``(batch, M, N, K)`` of a Graph IR matmul: the result's batch axes and the matrix sizes
    with the ``transpose_a``/``transpose_b`` flags applied."""
    a, b = op.operands[0].type.shape, op.operands[1].type.shape
    M, K = (a[-1], a[-2]) if op.attributes.get("transpose_a") else (a[-2], a[-1])
    N = b[-2] if op.attributes.get("transpose_b") else b[-1]
    return tuple(op.results[0].type.shape[:-2]), M, N, K


def _check(op, M: int, N: int) -> None:
    c = op.operands[2].type if len(op.operands) == 3 else None
    if c is not None and (c.rank < 2 or tuple(c.shape[-2:]) != (M, N)):
        raise LoweringError(f"matmul: C {c} must end in the result's matrix shape [{M}, {N}] for the tile "
                            f"lowering (its batch axes may broadcast)", location=op.location,
                            fix="broadcast C's last two axes to the result shape first")


class _Operand:
    """One global operand of the kernel: buffer ``buf`` holding ``[P_x,] rows, cols`` matrices,
    stored transposed or not, and ``batch``, the uniform index of the matrix this tile reads
    (``None`` for an unbatched kernel)."""

    def __init__(self, kb, buf, batch, transposed: bool):
        self.kb, self.buf, self.batch, self.transposed = kb, buf, batch, transposed

    def _at(self, *index) -> list:
        return ([] if self.batch is None else [self.batch]) + list(index)

    def block_element(self, r0, c0, e, cols: int) -> tuple:
        """``(index in the buffer, [row, column] in the block)`` of element ``e`` (row-major)
        of the ``· × cols`` block of the stored matrix at (``r0``, ``c0``)."""
        kb = self.kb
        r, c = kb.binary("floordiv", e, cols), kb.binary("mod", e, cols)
        return self._at(kb.binary("add", r0, r), kb.binary("add", c0, c)), [r, c]

    def view(self, r0, c0, shape):
        """The global ``shape`` box of the stored matrix at (row ``r0``, column ``c0``)."""
        return self.kb.subview(self.buf, self._at(r0, c0), shape)

    def stage(self, dst, r0, c0, shape, lanes: int, pad: int, dst_transposed: bool = False) -> None:
        """Copy the logical ``shape`` tile at (``r0``, ``c0``) into the shared view ``dst``
        (holding it as ``shape``, or ``shape[::-1]`` when ``dst_transposed``): cp.async in the
        widest pieces that fit (:func:`_piece_bytes`), transposing element by element when
        the stored and the staged orientations differ; a lane copy where cp.async cannot do it
        (pieces under 4 bytes)."""
        kb = self.kb
        stored = (shape[1], shape[0]) if self.transposed else tuple(shape)
        r0, c0 = (c0, r0) if self.transposed else (r0, c0)
        flip = self.transposed != dst_transposed
        item = dst.type.dtype.itemsize
        dst_row = dst.type.shape[-1] + pad
        nbytes = item if flip and item >= 4 else None if flip else \
            _piece_bytes(item, stored[1], self.buf.type.shape[-1], dst_row)
        if nbytes is not None:
            kb.cp_async(dst, self.view(r0, c0, stored), nbytes=nbytes, transpose=flip)
            return

        def copy(e):  # element e of the stored tile, row-major (coalesced global reads)
            index, (i, j) = self.block_element(r0, c0, e, stored[1])
            kb.store(dst, [j, i] if flip else [i, j], kb.load(self.buf, index))
        each_element(kb, stored[0] * stored[1], lanes, copy)


def _piece_bytes(item: int, cols: int, row: int, dst_row: int) -> int | None:
    """The widest cp.async piece (16, 8 or 4 bytes) that is contiguous and aligned when
    copying boxes ``cols`` elements wide, at column offsets that are multiples of ``cols``,
    from global rows of ``row`` elements into shared rows of ``dst_row`` (padded) elements:
    each of the three row lengths in bytes must be a multiple of it. None when no size fits
    (rows of 2-byte elements of odd length): cp.async copies 4, 8 or 16 bytes (hardware.md)."""
    return next((b for b in (16, 8, 4) if b >= item and not (cols * item % b or row * item % b
                                                              or dst_row * item % b)), None)


def _initial(kb, C, staged, m0, n0, shape, accum: str, lanes: int, layout):
    """The accumulator's start value: the block of ``C`` — as it is when storage is the accum
    format, otherwise converted (exactly) into accum element by element through the shared
    ``staged`` tile, since the accumulator fragment must hold accum values."""
    if staged is None:
        return kb.frag_load(C.view(m0, n0, shape), layout=layout)

    def element(e):
        index, local = C.block_element(m0, n0, e, shape[1])
        kb.store(staged, local, kb.cast(kb.load(C.buf, index), accum))
    each_element(kb, shape[0] * shape[1], lanes, element)
    kb.barrier()
    acc = kb.frag_load(staged, layout=layout)
    kb.barrier()  # every lane has its copy before the epilogue reuses the tile
    return acc


def _epilogue(kb, acc, D, staged, m0, n0, storage: str, lanes: int, layout) -> None:
    """Store the accumulator into the output operand ``D``: as it is when storage is the
    accum format or the fragment has a layout (the store rounds each element once into
    storage, TILE-NUM-2); otherwise through the shared accum tile ``staged``, from which
    every lane rounds its elements once into storage."""
    BM, BN = acc.type.shape
    if staged is None or layout is not None:
        kb.frag_store(D.view(m0, n0, (BM, BN)), acc, layout=layout)
        return
    kb.frag_store(staged, acc, layout=layout)
    kb.barrier()

    def element(e):
        index, local = D.block_element(m0, n0, e, BN)
        kb.store(D.buf, index, kb.cast(kb.load(staged, local), storage))
    each_element(kb, BM * BN, lanes, element)


def _fragments(BM: int, BN: int, lanes, shared: bool, itemsize: int, transpose_a: bool,
               tensor_core: bool = False) -> tuple:
    """``(layout, k_major)``: the accumulator's fragment layout and whether A is staged
    k-major (LOWER-MATMUL-5, -6). Without shared staging, cyclic fragments. Under a
    tensor-core policy, the ``mma.sync`` accumulator layout where the tile is whole 16 × 8
    tiles the warps share (A row-major: the instruction's A pairs run along k). Otherwise the
    register-blocked layout, A k-major where cp.async can put it there — it is stored
    ``[K, M]``, or its elements are 4 or 8 bytes (a transposing cp.async); 2- and 1-byte
    elements stored ``[M, K]`` stay row-major (16-byte copies, one element read per row and k)."""
    if not shared or not lanes:
        return None, False
    tc_layout = mma_sync(BM, BN, lanes) if tensor_core else None
    if tc_layout is not None:
        return tc_layout, False
    layout = blocked(BM, BN, lanes)
    return layout, layout is not None and (transpose_a or itemsize >= 4)


def lower_matmul(kop, name: str) -> KernelPlan:
    """The tile kernel of a matmul schedule kernel (see the module docstring)."""
    op = the_op(kop)
    check_nonempty(op)
    batch, M, N, K = matmul_dims(op)
    _check(op, M, N)
    storage, accum = check_policy(op)
    s = kop.attributes
    BM, BN, BK = s["tile"]
    lanes = s["lanes"]
    flags = [bool(op.attributes.get(f)) for f in ("transpose_a", "transpose_b")]
    if M % BM or N % BN or K % BK:
        raise LoweringError(f"matmul {M}x{K} @ {K}x{N}: tile {BM}x{BN}x{BK} does not divide M={M}, N={N}, "
                            f"K={K}", location=op.location,
                            fix="pick tile sizes that divide them: schedule.tile((BM, BN, BK))")
    if any(flags) and not s["shared"]:
        raise LoweringError(f"matmul with transpose_a={flags[0]}, transpose_b={flags[1]}: the tile lowering "
                            f"stages a transposed operand through shared memory, and this schedule has none",
                            location=op.location, fix="schedule.use_shared_memory(True) (the matmul default)")
    mma_acc = mma_accum(op, BK)  # the policy's accum, or its tensor-core model (NUM-TC-5)
    P = math.prod(batch)
    stored = [(K, M) if flags[0] else (M, K), (N, K) if flags[1] else (K, N)] + [(M, N)] * (len(op.operands) - 1)
    batches = [tuple(v.type.shape[:-2]) for v in op.operands] + [batch]
    shapes = [(math.prod(b),) + m if batch else m for b, m in zip(batches, stored)]
    labels = ["A", "B", "C"][:len(op.operands)] + ["D"]
    params = [(label, T.buffer(shape, storage)) for label, shape in zip(labels, shapes)]
    params[-1] += (True,)
    kb = T.KernelBuilder(name, params, location=op.location)
    m0 = kb.binary("mul", kb.tile_id(0), BM)
    n0 = kb.binary("mul", kb.tile_id(1), BN)
    p = kb.tile_id(2) if batch else None
    A, B, *Cs, D = (_Operand(kb, buf, None if p is None else broadcast_index(kb, p, batch, b), t)
                    for buf, b, t in zip(kb.params, batches, flags + [False] * (len(op.operands) - 1)))
    layout, k_major = _fragments(BM, BN, lanes, s["shared"], get_format(storage).dtype.itemsize, flags[0],
                                 mma_acc.startswith(tc.PREFIX))  # unstaged: the SIMT pattern of TILE-VIS-3
    staged = kb.alloc((BM, BN), accum) if storage != accum and (layout is None or Cs) else None
    acc = _initial(kb, Cs[0], staged, m0, n0, (BM, BN), accum, lanes, layout) if Cs else \
        kb.fill((BM, BN), accum, 0.0, layout=layout)
    nk = K // BK

    def k_offset(kt):
        return kt * BK if isinstance(kt, int) else kb.binary("mul", kt, BK)

    if not s["shared"]:
        acc, = kb.for_(0, nk, 1, init=[acc], body=lambda kt, acc: [kb.mma(A.view(m0, k_offset(kt), (BM, BK)),
                                                                            B.view(k_offset(kt), n0, (BK, BN)),
                                                                            acc, accum=mma_acc, layout=layout)])
    else:
        stages = s["stages"] if s["async_copy"] else 1
        a_tile = (BK, BM) if k_major else (BM, BK)
        sA = kb.alloc((stages,) + a_tile, storage, swizzle=s["swizzle"], pad=s["padding"])
        sB = kb.alloc((stages, BK, BN), storage, swizzle=s["swizzle"], pad=s["padding"])

        def buffers(kt):
            stage = kt % stages if isinstance(kt, int) else kb.binary("mod", kt, stages) if stages > 1 else 0
            return kb.subview(sA, [stage, 0, 0], a_tile), kb.subview(sB, [stage, 0, 0], (BK, BN))

        def mma(kt, acc):
            return kb.mma(*buffers(kt), acc, accum=mma_acc, layout=layout, transpose_a=k_major)

        def issue(kt):
            dst_a, dst_b = buffers(kt)
            A.stage(dst_a, m0, k_offset(kt), (BM, BK), lanes, s["padding"], k_major)
            B.stage(dst_b, k_offset(kt), n0, (BK, BN), lanes, s["padding"])
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
                acc = mma(kt, acc)
                kb.barrier()
                return [acc]
            kb.wait(stages - 2)  # K tile kt has landed ...
            kb.barrier()  # ... is visible, and every lane is done with tile kt-1's buffer
            nxt = kb.binary("add", kt, stages - 1)
            kb.if_(kb.binary("lt", nxt, nk), then=lambda: issue(nxt))  # refills tile kt-1's buffer
            kb.commit()
            return [mma(kt, acc)]
        acc, = kb.for_(0, nk, 1, init=[acc], body=body, prefetch=stages if s["async_copy"] else 0)
        if stages > 1:
            kb.wait(0)  # retire the empty groups committed past the last K tile
    _epilogue(kb, acc, D, staged, m0, n0, storage, lanes, layout)
    func = kb.finish().body.first_op
    if layout is not None:  # a target may hold the register micro-tile to REGISTERS a lane
        func.attributes["launch.registers"] = REGISTERS
    grid = (M // BM, N // BN) + ((P,) if batch else ())
    return KernelPlan(func.detach(), grid, lanes, shapes[:-1], shapes[-1:])


def _fit(op, s: dict) -> dict:
    """SCHED-FIT-1, after the op's own ``tile_shape``, which overrides the tile directive: it
    must divide ``M``, ``N``, ``K`` and its shared memory fit the H100's per-block limit (a
    LoweringError otherwise)."""
    _, m, n, k = matmul_dims(op)
    given = op.attributes.get("tile_shape")
    if given is not None:
        if m % given[0] or n % given[1] or k % given[2]:
            raise LoweringError(f"matmul {m}x{k} @ {k}x{n}: its tile_shape {list(given)} does not divide M={m}, "
                                f"N={n}, K={k}", location=op.location,
                                fix="give a tile_shape whose sizes divide them, or none (the schedule's tile is "
                                    "then fitted to the shapes)")
        tile = [int(t) for t in given]
        cost = _cost(op, {**s, "tile": tile}, "H100")
        ok, reason = cost.fits("H100")
        if not ok:
            raise LoweringError(f"matmul {m}x{k} @ {k}x{n}: its tile_shape {tile} {reason} (H100, the largest "
                                f"per-block shared memory of the presets)", location=op.location,
                                fix="give a smaller tile_shape (or fewer pipeline stages)")
        return {"tile": tile}
    return {"tile": [fit_size(m, s["tile"][0]), fit_size(n, s["tile"][1]), fit_size(k, s["tile"][2])]}


def matmul_cost(M, N, K, tile, *, batch=1, itemsize=4, shared=True, padding=0, stages=2, async_copy=True,
                with_c=False, dtype="f32", accum_itemsize=4, preset="H100", lanes=None,
                transpose_a=False, tensor_core=False) -> KernelCost:
    """The cost of ``batch`` products ``[M, K] @ [K, N]`` (one per output matrix, however the
    operands broadcast or are transposed) with tile ``(BM, BN, BK)`` (see the module
    docstring); storage narrower than the accumulator adds the ``BM·BN`` accum tile of the
    epilogue (only to bring a narrow ``C`` in when ``lanes`` give a register-blocked tile,
    whose epilogue stores directly). A staged k-major (:func:`_fragments`, given ``lanes``,
    ``transpose_a`` and ``tensor_core``) is ``BK`` rows of ``BM + padding``."""
    BM, BN, BK = tile
    stages = stages if shared and async_copy else 1
    layout, k_major = _fragments(BM, BN, lanes, shared, itemsize, transpose_a, tensor_core)
    a_rows, a_cols = (BK, BM) if k_major else (BM, BK)
    smem = stages * (a_rows * (a_cols + padding) + BK * (BN + padding)) * itemsize if shared else 0
    smem += BM * BN * accum_itemsize if accum_itemsize != itemsize and (with_c or layout is None) else 0
    tiles = batch * (M // BM) * (N // BN)
    # staged tiles are copied row by row (coalesced); unstaged, the mma reads A a column at a time
    a_bytes = itemsize if shared else min(32, K * itemsize)
    hbm = batch * (M * K * (N // BN) * a_bytes + (K * N * (M // BM) + M * N * (2 if with_c else 1)) * itemsize)
    flops = batch * 2 * M * N * K
    overlap = shared and async_copy and stages >= 2
    return KernelCost(smem, hbm, flops, tiles, kernel_seconds(flops, hbm, tiles, overlap, dtype, preset))


def _cost(op, s: dict, preset) -> KernelCost:
    batch, M, N, K = matmul_dims(op)
    t = op.results[0].type
    return matmul_cost(M, N, K, s["tile"], batch=math.prod(batch), itemsize=t.dtype.itemsize, shared=s["shared"],
                       padding=s["padding"], stages=s["stages"], async_copy=s["async_copy"],
                       with_c=len(op.operands) == 3, dtype=t.policy.storage.name,
                       accum_itemsize=t.policy.accum.dtype.itemsize, preset=preset, lanes=s["lanes"],
                       transpose_a=bool(op.attributes.get("transpose_a")), tensor_core=t.policy.tc is not None)


FAMILY = KernelFamily(
    "matmul",
    defaults=dict(tile=[64, 64, 32], lanes=128, vectorize=1, shared=True, padding=0, swizzle="none",
                  async_copy=True, stages=2),
    uses=("tile", "lanes", "shared", "padding", "swizzle", "async_copy", "stages"),
    fit=_fit, template=lower_matmul, cost=_cost, staged=True,
    scope="batch axes broadcast, C ending in the result's matrix shape")
register_family(FAMILY, [primitive("matmul")])
