"""A register-blocked, packed matrix product whose every output element sees NUM-RED-1's
order: ``acc = op(a_k, b_k, acc)`` for ``k = 0 … K−1``, one element at a time, never split.

The structure is a BLAS micro-kernel's without splitting K. ``B`` is packed into panels of
``NR`` columns (``Bp[b, j // NR, k, j % NR]``); ``A``'s rows are read in place (``MR`` row
streams), ragged edges of ``A`` and of the output are padded with zeros (the padding's
results are dropped). One call of :func:`_micro_tile` walks k from 0 to K−1
over one ``MR × NR`` output tile kept in vector registers: per k, ``NR/W`` vectors of
``B``'s row, and for each of the ``MR`` rows the broadcast ``a_k`` and one operation per
vector. Every lane of every vector is one output element's own chain, so the vectorization
changes no bit.

``op`` is chosen per call: the fused ``llvm.fma`` (one rounding; exact only where the
platform's fma is, which :func:`~tessera_ref.numerics.kernels.hardware_fma` checks before
it is used) or a multiply then an add (two IEEE operations: NUM-RED-1's fma only when every
product is exact). The LLVM IR is written here, not left to the loop vectorizer, so the
operations are exactly those: no fast-math flags, no contraction of the separate multiply
and add. Threads (Python threads running the compiled loop without the GIL) take whole output
tiles, so the bits do not depend on the thread count.
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .. import cache

__all__ = ["gemm_packed", "tile_shape"]

_I32, _I64 = ir.IntType(32), ir.IntType(64)


def _vector_bytes() -> int:
    """The host's widest float vector: AVX-512 (64 bytes), AVX (32) or 16 (SSE, NEON)."""
    features = llvm.get_host_cpu_features()
    return 64 if features.get("avx512f") else 32 if features.get("avx") else 16


VECTOR_BYTES = _vector_bytes()
#: Vectors per tile row and rows per tile: 16 vector accumulators with 32 vector registers
#: (AVX-512), 12 with 16 (AVX, SSE). Measured best of 4-12 rows × 1-3 vectors on AVX-512.
NV = 2
MR = 8 if VECTOR_BYTES == 64 else 6


def tile_shape(dtype) -> tuple[int, int]:
    """``(MR, NR)``: the output tile one micro-kernel call keeps in registers."""
    return MR, NV * VECTOR_BYTES // np.dtype(dtype).itemsize


def _emit_k_loop(builder, init, a_at, b_at, K, combine, pre, exit_block):
    """The k loop over one tile: phis carry the ``MR × NV`` accumulator vectors; each step
    loads ``B``'s NV vectors and each row's broadcast ``a_k`` and combines them. Returns the
    loop header (the exit's predecessor) and the accumulator phis (the values at exit)."""
    fn = builder.function
    header, body = fn.append_basic_block("tile.k"), fn.append_basic_block("tile.step")
    builder.branch(header)
    builder.position_at_end(header)
    k = builder.phi(_I64)
    k.add_incoming(_I64(0), pre)
    accs = [[builder.phi(v.type) for v in row] for row in init]
    for row, phis in zip(init, accs):
        for v, phi in zip(row, phis):
            phi.add_incoming(v, pre)
    done = builder.icmp_signed(">=", k, K)
    builder.cbranch(done, exit_block, body)
    builder.position_at_end(body)
    bvec = [b_at(k, v) for v in range(len(init[0]))]
    new = [[combine(a_at(k, r), bvec[v], acc) for v, acc in enumerate(row)]
           for r, row in enumerate(accs)]
    end = builder.block
    k.add_incoming(builder.add(k, _I64(1)), end)
    for row_phis, row_new in zip(accs, new):
        for phi, v in zip(row_phis, row_new):
            phi.add_incoming(v, end)
    builder.branch(header)
    return header, accs


@intrinsic
def _micro_tile(typingctx, c, c_off, ldc, a, a_off, lda, b, b_off, K, fused):
    """``C[r, j] = op(A[r, k], Bp[k, j], C[r, j])`` for k ascending over one ``MR × NR``
    tile: ``C`` at element ``c_off`` of ``c`` with row stride ``ldc``, ``A``'s ``MR`` rows at
    ``a_off`` of ``a`` with row stride ``lda``, the packed panel of ``B`` at ``b_off``
    (``K × NR``); ``op`` is the fma when ``fused``."""
    dt = c.dtype
    if not (dt == a.dtype == b.dtype and dt in (types.float32, types.float64)):
        return None
    width = VECTOR_BYTES // (dt.bitwidth // 8)
    nr = NV * width
    sig = types.void(c, c_off, ldc, a, a_off, lda, b, b_off, K, fused)

    def codegen(context, builder, signature, args):
        c_arr, c_off_, ldc_, a_arr, a_off_, lda_, b_arr, b_off_, K_, fused_ = args
        fty = context.get_value_type(dt)
        vty = ir.VectorType(fty, width)
        align = dt.bitwidth // 8

        def base(i, arr, off):
            data = context.make_array(signature.args[i])(context, builder, arr).data
            return builder.gep(data, [off])
        cb, ab, bb = base(0, c_arr, c_off_), base(3, a_arr, a_off_), base(6, b_arr, b_off_)
        a_rows = [builder.gep(ab, [builder.mul(lda_, _I64(r))]) for r in range(MR)]

        def vec_ptr(ptr, index):
            return builder.bitcast(builder.gep(ptr, [index]), vty.as_pointer())
        c_ptrs = [[vec_ptr(cb, builder.add(builder.mul(ldc_, _I64(r)), _I64(v * width)))
                   for v in range(NV)] for r in range(MR)]
        init = [[builder.load(p, align=align) for p in row] for row in c_ptrs]
        zeros = ir.Constant(ir.VectorType(_I32, width), [0] * width)

        def a_at(k, r):  # a_k of row r, broadcast to every lane
            x = builder.load(builder.gep(a_rows[r], [k]))
            one = builder.insert_element(ir.Constant(vty, ir.Undefined), x, _I32(0))
            return builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), zeros)

        def b_at(k, v):
            return builder.load(vec_ptr(bb, builder.add(builder.mul(k, _I64(nr)), _I64(v * width))),
                                align=align)
        suffix = f"v{width}f{dt.bitwidth}"
        fma = builder.module.declare_intrinsic(f"llvm.fma.{suffix}", (),
                                               ir.FunctionType(vty, [vty] * 3))
        fn = builder.function
        fused_block = fn.append_basic_block("tile.fma")
        plain_block = fn.append_basic_block("tile.mul_add")
        exit_block = fn.append_basic_block("tile.store")
        builder.cbranch(fused_, fused_block, plain_block)
        loops = []
        for block, combine in (
                (fused_block, lambda x, y, acc: builder.call(fma, [x, y, acc])),
                (plain_block, lambda x, y, acc: builder.fadd(acc, builder.fmul(x, y)))):
            builder.position_at_end(block)
            header, accs = _emit_k_loop(builder, init, a_at, b_at, K_, combine, block, exit_block)
            loops.append((header, accs))
        builder.position_at_end(exit_block)
        results = []
        for r in range(MR):
            for v in range(NV):
                phi = builder.phi(vty)
                for header, accs in loops:
                    phi.add_incoming(accs[r][v], header)
                results.append((phi, c_ptrs[r][v]))
        for value, ptr in results:
            builder.store(value, ptr, align=align)
        return context.get_dummy_value()
    return sig, codegen


@njit(cache=True)
def _pack(B, Bp):
    """Fill the packed panels ``Bp`` of ``B`` (zero-initialised: the padding stays zero)."""
    nb, K, N = B.shape
    nr = Bp.shape[3]
    full = N // nr
    for b in range(nb):
        for k in range(K):
            row = B[b, k]
            for jt in range(full):
                panel = Bp[b, jt, k]
                for c in range(nr):
                    panel[c] = row[jt * nr + c]
            for j in range(full * nr, N):
                Bp[b, full, k, j - full * nr] = row[j]


@njit(cache=True, nogil=True)
def _tiles(Cp, A, Bp, a_of, b_of, fused, first, stop):
    """Tiles ``first … stop−1`` in the order batch, column panel, row panel (``B``'s panel
    stays in cache while ``A``'s rows stream past it); output batch ``b`` reads ``A[a_of[b]]``
    and ``Bp[b_of[b]]``."""
    nt, K, nr = Bp.shape[1], Bp.shape[2], Bp.shape[3]
    mt = A.shape[1] // MR
    ldc = Cp.shape[2]
    for t in range(first, stop):
        b, rest = divmod(t, nt * mt)
        jt, it = divmod(rest, mt)
        _micro_tile(Cp, (b * mt + it) * MR * ldc + jt * nr, ldc,
                    A, (a_of[b] * mt + it) * MR * K, K, Bp, (b_of[b] * nt + jt) * K * nr, K, fused)


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="tessera-gemm")


def gemm_packed(out, A, B, fused: bool, threads: int = 1, a_of=None, b_of=None) -> None:
    """``out[b, i, j] = op(A[a_of[b], i, k], B[b_of[b], k, j], out[b, i, j])`` for k
    ascending, ``op`` the fma when ``fused`` else multiply-then-add, each rounded in
    ``out``'s dtype (f32 or f64, as are ``A`` and ``B``; C-contiguous ``out [nb, M, N]``,
    ``A [na, M, K]``, ``B [nbb, K, N]``). ``a_of``/``b_of`` (int64 ``[nb]``, default
    ``0 … nb−1``) let batches share an operand, which is then packed once. ``threads > 1``
    splits the tiles into that many contiguous ranges run at once (the compiled loop releases
    the GIL); the bits are the same."""
    (nb, M, N), K = out.shape, A.shape[2]
    every = np.arange(nb, dtype=np.int64)
    # one compiled specialization: the same argument types on every call
    a_of, b_of = (every if x is None else np.array(x, dtype=np.int64) for x in (a_of, b_of))
    fused = bool(fused)
    mr, nr = tile_shape(out.dtype)
    mt, nt = -(-M // mr), -(-N // nr)
    # NumPy allocates (its allocator reuses pages; numba's would fault them in every call)
    Bp = np.zeros((B.shape[0], nt, K, nr), out.dtype)
    _pack(B, Bp)
    if mt * mr != M:  # ragged rows: A gets zero rows up to whole row panels
        A = np.concatenate([A, np.zeros((A.shape[0], mt * mr - M, K), A.dtype)], axis=1)
    padded = (mt * mr, nt * nr) != (M, N)
    if padded:  # ragged edges: tiles run on a zero-padded copy
        Cp = np.zeros((nb, mt * mr, nt * nr), out.dtype)
        Cp[:, :M, :N] = out
    else:
        Cp = out
    count = nb * mt * nt
    if threads > 1 and count > 1:
        bounds = np.linspace(0, count, min(threads, count) + 1).astype(np.int64)
        jobs = [_pool(threads).submit(_tiles, Cp, A, Bp, a_of, b_of, fused, int(lo), int(hi))
                for lo, hi in zip(bounds[:-1], bounds[1:])]
        for job in jobs:
            job.result()
    else:
        _tiles(Cp, A, Bp, a_of, b_of, fused, 0, count)
    if padded:
        out[...] = Cp[:, :M, :N]


cache.numba_guard(_pack, _tiles)  # BACKEND-CACHE-4
