"""Compiled inner loops of the canonical dot product (NUM-RED-1) and of the lane fold of the
canonical axis reduction (NUM-RED-2), bit-identical to the rules.

:func:`dot_rows` runs :func:`~tessera_ref.numerics.reduce.dot_canonical`'s two common cases:

- every product exact in the accumulation format (f32 or f64): each fma is multiply-then-add
  there, the addition being the one rounding (and the fma gives the same bits);
- f32 accumulation whose products need not be exact in f32: each step is the fma.

Both run :func:`~tessera_ref.numerics.packed_gemm.gemm_packed`, the fma being the
platform's (``llvm.fma``: x86-64's ``vfmadd``, aarch64's ``fmla``, or libm's ``fmaf``) once
:func:`hardware_fma` has checked it rounds once, as IEEE 754 specifies. Where it does not,
:func:`dot_rows_fma_f32` emulates each fma exactly (about ten f64 operations per fma), and a
warning says so once.

:func:`lane_fold` is the first stage of NUM-RED-2's sum for f32 and f64 accumulation, and
:func:`bucket_rows` the first stage of NUM-RED-4's exact sum of long rows.
:func:`bf16_from_f32_rne`, :func:`f32_from_bf16`, :func:`f16_from_f32_rne` and
:func:`f32_from_f16` are conversions (NUM-CVT) in one pass each; :func:`magnitude_range` is
the data test of ``dot_canonical``'s exact-products path in one pass.

The dot kernels take C-contiguous ``out [nb, M, N]`` (read as the starting accumulators,
overwritten with the results), ``A [nb, M, K]`` and ``B [nb, K, N]``. For every output
element the k loop runs sequentially in ascending order; threads take whole output rows or
tiles (``prange``), and no element's operations depend on which thread runs them, so the
bits do not depend on the thread count. ``fastmath`` is off (no reassociation, no
contraction, subnormals kept) and nothing calls BLAS. Compiled code is cached on disk
(``cache=True``): the first call in a fresh environment compiles, later processes load it —
from a directory nobody else can write, else not at all (BACKEND-CACHE-4).
"""
from __future__ import annotations

import functools
import os
import warnings

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

from .. import cache
from .packed_gemm import gemm_packed

__all__ = ["dot_rows", "dot_rows_fma_f32", "hardware_fma", "lane_fold", "bucket_rows",
           "bf16_from_f32_rne", "f32_from_bf16", "f16_from_f32_rne", "f32_from_f16",
           "magnitude_range", "FMA_ENV"]

#: Set to ``emulate`` to use the emulated fma even where the hardware's is exact (tests).
FMA_ENV = "TESSERA_REF_FMA"


def _bitcast(src, dst, doc: str):
    """An intrinsic reinterpreting a ``src`` scalar's bits as ``dst`` (no conversion)."""
    def bitcast(typingctx, x):
        if x != src:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(dst))
        return dst(src), codegen
    bitcast.__doc__ = doc
    return intrinsic(bitcast)


_f64_bits = _bitcast(types.float64, types.int64, "The IEEE bits of an f64 as an int64.")
_bits_f64 = _bitcast(types.int64, types.float64, "The f64 whose IEEE bits are the int64 ``x``.")
_bits_f32 = _bitcast(types.uint32, types.float32, "The f32 whose IEEE bits are the uint32 ``x``.")
_f32_bits = _bitcast(types.float32, types.uint32, "The IEEE bits of an f32 as a uint32.")


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


def _f32(*bits):
    return np.array(bits, np.uint32).view(np.float32)


# (a, b, c, fma(a, b, c)) as f32 bits, each worked out by hand; ``a·b + c`` rounded twice
# (multiply, then add) gives other bits in the three marked *.
_HARD_CASES = np.array([
    (0x3F800800, 0x3F800800, 0xBF801000, 0x33800000),  # * (1+2^-12)^2 - (1+2^-11) = 2^-24
    (0x3F800800, 0x3F800800, 0x00000000, 0x3F801000),  # the tie 1+2^-11+2^-24 goes to even
    (0x3F800001, 0x3F7FFFFF, 0xBF800000, 0x337FFFFE),  # * (1+2^-23)(1-2^-24) - 1
    (0x1A000000, 0x1A400000, 0x00000000, 0x00000001),  # 0.75·2^-149 rounds to 2^-149
    (0x7F000000, 0x40000000, 0xFF000000, 0x7F000000),  # * 2^128 - 2^127: no overflow inside
    (0x1A000000, 0x1A000000, 0x00000000, 0x00000000),  # 2^-150: the tie goes to +0 (even)
    (0x7F000000, 0x40000000, 0x00000000, 0x7F800000),  # 2^128 overflows to +inf
    (0x3F800000, 0x3F800000, 0xBF800000, 0x00000000),  # 1·1 - 1 = +0
    (0x80000000, 0x3F800000, 0x80000000, 0x80000000),  # -0·1 + -0 = -0
    (0x80000000, 0x3F800000, 0x00000000, 0x00000000),  # -0·1 + +0 = +0
    (0x7F800000, 0x00000000, 0x3F800000, 0x7FC00000),  # inf·0 + 1 = NaN
    (0x7F800000, 0x3F800000, 0xFF800000, 0x7FC00000),  # inf - inf = NaN
    (0x7F800000, 0x3F800000, 0x3F800000, 0x7F800000),  # inf·1 + 1 = inf
    (0x7FC00000, 0x3F800000, 0x3F800000, 0x7FC00000),  # NaN propagates
    (0x00000001, 0x3F000000, 0x00000000, 0x00000000),  # 2^-149 / 2: the tie goes to +0
    (0x00000003, 0x3F000000, 0x00000000, 0x00000002),  # 1.5·2^-149: the tie goes to 2 (even)
], dtype=np.uint32)


def _self_test() -> bool:
    """Whether ``gemm_packed``'s fused f32 path gives the hand-computed bits of
    ``_HARD_CASES`` and the emulated fma's (:func:`~tessera_ref.numerics.arith.fma`) on
    every pair of them and on adversarial random triples (products far below the addend,
    subnormal and overflowing results, signed zeros).

    Each triple is a diagonal element of a ``[T, 1] @ [1, T] + C`` product (K = 1), so every
    (a_i, b_j, C_ij) combination runs through the very vector code the kernel uses."""
    from .arith import canonical_nan, fma

    rng = np.random.default_rng(18)

    def spread(lo, hi, n=240):
        return (rng.standard_normal(n) * np.exp2(rng.integers(lo, hi, n))).astype(np.float32)
    hard = _HARD_CASES.T.copy().view(np.float32)
    a = np.concatenate([hard[0], spread(-80, 70), _f32(0, 0x80000000, 0x7F800000, 0xFF800000)])
    b = np.concatenate([hard[1], spread(-80, 70), _f32(0x80000000, 0, 0xFF800000, 0x3F800000)])
    T = a.size
    c = spread(-60, 60, T)[:, None] * (rng.random((T, T)) < 0.5).astype(np.float32)
    c[np.arange(T), np.arange(T)] = np.concatenate(
        [hard[2], spread(-149, 127), _f32(0x80000000, 0x80000000, 0x7F800000, 0x7F800000)])
    out = c[None].copy()
    gemm_packed(out, a[None, :, None], b[None, None, :], True)
    got = canonical_nan(out[0])
    diagonal = got[np.arange(len(hard[3])), np.arange(len(hard[3]))]
    return got.tobytes() == fma(a[:, None], b[None, :], c).tobytes() and \
        diagonal.tobytes() == hard[3].tobytes()


@functools.cache
def _hardware_fma_checked() -> bool:
    if _self_test():
        return True
    warnings.warn("this platform's fused multiply-add does not round once as IEEE 754 "
                  "specifies: tessera_ref emulates each f32 fma (same bits, about 10x slower)",
                  RuntimeWarning, stacklevel=3)
    return False


def hardware_fma() -> bool:
    """Whether the platform's f32 fma is exact (checked once per process, on first use,
    against hand-computed bits and the emulated fma) and not switched off by
    ``TESSERA_REF_FMA=emulate``."""
    if os.environ.get(FMA_ENV, "").lower() == "emulate":
        return False
    return _hardware_fma_checked()


def dot_rows(out: np.ndarray, A: np.ndarray, B: np.ndarray, *, exact_products: bool,
             hardware: bool | None = None, threads: int = 1, a_of=None, b_of=None) -> None:
    """``out[b, i, j] = fma(A[a_of[b], i, k], B[b_of[b], k, j], out[b, i, j])`` for k
    ascending, in place (NUM-RED-1; arrays as in the module docstring, all f32 or all f64;
    ``a_of``/``b_of``: int64 batch maps, default ``0 … nb−1``, letting batches share an
    operand).

    ``exact_products`` says every product is exact in ``out``'s format (the caller
    establishes it); f64 accumulation needs it. ``hardware`` chooses the platform's fma
    (default: where :func:`hardware_fma` says it is exact); ``False`` runs the emulation
    (f32 with inexact products) or multiply-then-add (exact products). ``threads`` is the
    number of threads for the packed kernel (over output tiles: the same bits); the
    emulation uses numba's current thread count (over rows)."""
    use_fma = hardware_fma() if hardware is None else hardware
    if exact_products or use_fma:
        gemm_packed(out, A, B, use_fma and out.dtype == np.float32, threads, a_of, b_of)
    else:  # its threads: numba's current count
        dot_rows_fma_f32(out, A if a_of is None else A[a_of], B if b_of is None else B[b_of])


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


@njit(cache=True, inline="always")
def _bucket_add(acc, b, man_bits, special, split, low):
    """Add the term with IEEE bits ``b`` to ``acc [2, fields]`` (see :func:`bucket_rows`)."""
    field = (b >> man_bits) & special
    k = (b & ((np.int64(1) << man_bits) - 1)) | (np.int64(field > 0) << man_bits)
    sign = b >> 63  # 0 or -1
    k = (k ^ sign) - sign
    if split:
        acc[0, field] += k >> 26
    acc[1, field] += k & low


@njit(cache=True)
def bucket_rows(bits, exp_bits, man_bits):
    """Exact per-row sums of the finite values whose IEEE bits are ``bits [G, L]`` (int32
    for f32, int64 for f64; ``exp_bits``/``man_bits`` the format's fields; ``L ≤ 2^30``),
    grouped by exponent field: ``out[g, h, e]`` is the integer sum of the signed
    significands ``k`` (the implicit bit included) of row ``g``'s values with field ``e``, a
    value being ``k · 2^(max(e, 1) − 1)`` units. f32 (``|k| < 2^24``) sums ``k`` itself into
    ``h = 1``; f64 sums ``k >> 26`` into ``h = 0`` and ``k mod 2^26`` into ``h = 1``, so no
    sum reaches 2^63. Infinities and NaNs (field all ones) are left out. Four consecutive
    terms go to four bucket sets (terms of one binade need not wait on each other); integer
    sums are exact in any order, so that changes no bit."""
    G, L = bits.shape
    fields = 1 << exp_bits
    special = fields - 1
    split = man_bits > 32
    low = np.int64((1 << 26) - 1) if split else np.int64(-1)  # -1: every bit
    out = np.zeros((G, 2, fields), np.int64)
    a0, a1 = np.zeros((2, fields), np.int64), np.zeros((2, fields), np.int64)
    a2, a3 = np.zeros((2, fields), np.int64), np.zeros((2, fields), np.int64)
    for g in range(G):
        for acc in (a0, a1, a2, a3):
            acc[...] = 0
        row = bits[g]
        whole = L - L % 4
        for j in range(0, whole, 4):
            _bucket_add(a0, np.int64(row[j]), man_bits, special, split, low)
            _bucket_add(a1, np.int64(row[j + 1]), man_bits, special, split, low)
            _bucket_add(a2, np.int64(row[j + 2]), man_bits, special, split, low)
            _bucket_add(a3, np.int64(row[j + 3]), man_bits, special, split, low)
        for j in range(whole, L):
            _bucket_add(a0, np.int64(row[j]), man_bits, special, split, low)
        for h in range(2):
            for e in range(special):  # the last field (inf, NaN) is dropped
                out[g, h, e] = a0[h, e] + a1[h, e] + a2[h, e] + a3[h, e]
    return out


@njit(cache=True)
def bf16_from_f32_rne(bits, saturate, out):
    """``out`` (uint16) ← the bf16 codes of the f32 values whose bits are ``bits`` (uint32,
    1-D; outputs are allocated by NumPy, whose allocator reuses pages), rounded to nearest
    even: the top 16 bits plus one when the low 16 bits are above half, or exactly half with
    an odd top (a carry into the exponent is right; it makes the largest values ±inf). A
    NaN gives the canonical NaN with its sign; ``saturate`` turns ±inf into ±max (NUM-CVT-3/4)."""
    for i in range(bits.size):
        u = bits[i]
        sign = (u >> 16) & 0x8000
        mag = u & 0x7FFFFFFF
        code = (mag + 0x7FFF + ((mag >> 16) & 1)) >> 16
        if saturate:
            code = min(code, 0x7F7F)
        if mag > 0x7F800000:
            code = 0x7FC0
        out[i] = code | sign


@njit(cache=True)
def f32_from_bf16(codes, out, quiet):
    """``out`` (uint32, 1-D) ← the f32 bits of bf16 ``codes`` (uint16): the code in the top
    half; with ``quiet``, a NaN becomes the canonical quiet NaN with its sign (NUM-CVT-4)."""
    for i in range(codes.size):
        h = np.uint32(codes[i])
        bits = h << np.uint32(16)
        if quiet and (h & 0x7FFF) > 0x7F80:
            bits = np.uint32(0x7FC00000) | (bits & np.uint32(0x80000000))
        out[i] = bits


@njit(cache=True)
def f16_from_f32_rne(bits, saturate, out):
    """``out`` (uint16) ← the f16 codes of the f32 values whose bits are ``bits`` (uint32,
    1-D), rounded to nearest even. From 2^-14 up, the exponent is rebiased (127 → 15) and the
    low 13 bits rounded off by an integer add whose carry is right (at most 65520 rounds to
    ±inf); below, ``|x| + 0.5`` in f32 rounds ``|x|`` to a multiple of 2^-24 (the spacing of
    f32 at 0.5, f16's subnormal quantum), whose count is the code. NaN gives the canonical
    NaN with its sign; ``saturate`` turns ±inf into ±max (NUM-CVT-3/4)."""
    for i in range(bits.size):
        u = bits[i]
        sign = (u >> 16) & 0x8000
        mag = u & 0x7FFFFFFF
        if mag >= 0x38800000:  # 2^-14
            code = min((mag - 0x38000000 + 0xFFF + ((mag >> 13) & 1)) >> 13, 0x7C00)
        else:
            code = _f32_bits(_bits_f32(np.uint32(mag)) + np.float32(0.5)) - 0x3F000000
        if saturate:
            code = min(code, 0x7BFF)
        if mag > 0x7F800000:
            code = 0x7E00
        out[i] = code | sign


@njit(cache=True)
def f32_from_f16(codes, out, quiet):
    """``out`` (uint32, 1-D) ← the f32 bits of f16 ``codes`` (uint16), exactly: normal
    numbers rebiased (15 → 127), subnormals as ``m · 2^-24`` (exact in f32), infinities and
    NaNs with their significand bits kept (a signalling NaN stays NaN, NUM-CVT-7) or, with
    ``quiet``, a NaN as the canonical quiet NaN with its sign (NUM-CVT-4)."""
    for i in range(codes.size):
        h = np.uint32(codes[i])
        field = (h >> 10) & 0x1F
        if field == 0x1F:
            if quiet and (h & 0x3FF) != 0:
                bits = np.uint32(0x7FC00000)
            else:
                bits = np.uint32(0x7F800000) | ((h & 0x3FF) << 13)
        elif field == 0:
            bits = _f32_bits(np.float32(h & 0x3FF) * np.float32(2.0 ** -24))
        else:
            bits = ((h & 0x7FFF) << 13) + np.uint32(0x38000000)
        out[i] = bits | ((h & 0x8000) << 16)


@njit(cache=True)
def magnitude_range(bits, inf_bits):
    """``(min, max)`` of the magnitudes' bits (the sign cleared) over the finite nonzero
    values whose IEEE bits are the 1-D signed ``bits`` (int32 for f32, int64 for f64),
    ``inf_bits`` being +inf's pattern; ``(inf_bits, 0)`` when there are none. Positive
    floats order as their bit patterns do, so integer min/max (which vectorize) find the
    float range."""
    mask = inf_bits | (inf_bits - 1)
    lo, hi = inf_bits, inf_bits - inf_bits
    for i in range(bits.size):  # (an index loop: LLVM vectorizes it, not the iterator)
        m = bits[i] & mask
        finite_nonzero = (m > 0) & (m < inf_bits)
        lo = min(lo, m if finite_nonzero else inf_bits)
        hi = max(hi, m if finite_nonzero else 0)
    return lo, hi


cache.numba_guard(dot_rows_fma_f32, lane_fold, _bucket_add, bucket_rows, bf16_from_f32_rne, f32_from_bf16, f16_from_f32_rne,
            f32_from_f16, magnitude_range)  # BACKEND-CACHE-4
