"""Compiled inner loops of the canonical dot product (NUM-RED-1) and of the lane fold of the
canonical axis reduction (NUM-RED-2), bit-identical to the rules.

:func:`~tessera_ref.numerics.reduce.dot_canonical` calls these for its two common cases:

- :func:`dot_rows_exact` — every product is exact in the accumulation format (f32 or f64):
  each fma is multiply-then-add there, the addition being the one rounding.
- :func:`dot_rows_fma_f32` — f32 accumulation of f32 values whose products need not be
  exact in f32: each fma is emulated as in :func:`~tessera_ref.numerics.arith.fma`.

:func:`lane_fold` is the first stage of NUM-RED-2's sum for f32 and f64 accumulation.

The dot kernels take C-contiguous ``out [nb, M, N]`` (read as the starting accumulators, overwritten
with the results), ``A [nb, M, K]`` and ``B [nb, K, N]``. For every output element the k
loop runs sequentially in ascending order; only output rows are distributed over threads
(``prange``), and no element's operations depend on which thread runs them, so the bits do
not depend on the thread count. The loop order is row ``i``, then ``k``, then ``j`` with the
``j`` loop over contiguous memory, branch-free, so LLVM vectorizes it. ``fastmath`` is off
(no reassociation, no contraction, subnormals kept) and nothing calls BLAS or libm. Compiled
code is cached on disk (``cache=True``): the first call in a fresh environment compiles,
later processes load it.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

__all__ = ["dot_rows_exact", "dot_rows_fma_f32", "lane_fold"]


@intrinsic
def _f64_bits(typingctx, x):
    """The IEEE bits of an f64 as an int64 (a bitcast, no conversion)."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


@intrinsic
def _bits_f64(typingctx, x):
    """The f64 whose IEEE bits are the int64 ``x`` (a bitcast, no conversion)."""
    if x != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@njit(cache=True, parallel=True)
def dot_rows_exact(out, A, B):
    """``out[b, i, j] = out[b, i, j] + A[b, i, k]·B[b, k, j]`` for k ascending, each product
    and sum one IEEE operation in ``out``'s dtype (f32 or f64, as are ``A`` and ``B``).

    This is the fma of NUM-RED-1 only when every product is exact in that format, which the
    caller establishes (``_products_exact`` in :mod:`~tessera_ref.numerics.reduce`).
    """
    nb, M, N = out.shape
    K = A.shape[2]
    for r in prange(nb * M):
        b, i = divmod(np.int64(r), M)  # the prange index may be unsigned
        acc = out[b, i]
        for k in range(K):
            a = A[b, i, k]
            row = B[b, k]
            for j in range(N):
                acc[j] = acc[j] + a * row[j]


@njit(cache=True, parallel=True)
def dot_rows_fma_f32(out, A, B):
    """``out[b, i, j] = fma(A[b, i, k], B[b, k, j], out[b, i, j])`` for k ascending, each
    fma the exact ``a·b + acc`` rounded once to nearest even f32 (NUM-EW-2). All three
    arrays are float32.

    As in :func:`~tessera_ref.numerics.arith.fma`: ``p = a·b`` is exact in f64; ``s + e =
    p + acc`` exactly (TwoSum, no overflow since ``|p| ≤ 2^256``); ``s`` is made ``RO53(p +
    acc)`` — one code toward zero when ``e`` and ``s`` have opposite signs, then the last bit
    set, when ``e ≠ 0`` — and rounded to nearest even f32, which equals a single rounding
    because 53 ≥ 24 + 2. A non-finite ``s`` has a NaN ``e`` and is kept, so inf and NaN
    operands give IEEE's ``a·b + acc``; an f32 overflow gives ±inf.
    """
    nb, M, N = out.shape
    K = A.shape[2]
    for r in prange(nb * M):
        b, i = divmod(np.int64(r), M)  # the prange index may be unsigned
        acc = out[b, i]
        for k in range(K):
            a = np.float64(A[b, i, k])
            row = B[b, k]
            for j in range(N):
                p = a * np.float64(row[j])
                c = np.float64(acc[j])
                s = p + c
                t = s - p
                e = (p - (s - t)) + (c - t)
                inexact = np.int64(abs(e) > 0.0)  # False for the NaN e of a non-finite s
                sb = _f64_bits(s)
                toward_zero = np.int64((sb ^ _f64_bits(e)) < 0) & inexact
                acc[j] = np.float32(_bits_f64((sb - toward_zero) | inexact))


@njit(cache=True)
def lane_fold(x, p):
    """``p[r, l] ← p[r, l] + x[r, l] + x[r, l + W] + …``, left to right, each addition one IEEE
    operation in the arrays' dtype (f32 or f64; ``x [R, L]`` and ``p [R, W]`` C-contiguous,
    ``W`` = 32 or, for ``L < 32``, at least ``L``): lane ``l`` of NUM-RED-2's warp folding its
    elements of row ``r``. One thread: a sum is memory-bound, and threads would wait on a
    busy machine."""
    R, L = x.shape
    W = p.shape[1]
    for r in range(R):
        lanes = p[r]
        row = x[r]
        for j0 in range(0, L, W):
            for lane in range(min(W, L - j0)):
                lanes[lane] = lanes[lane] + row[j0 + lane]
