"""Canonical reduction orders: dot products and axis reductions (NUM-RED-1, NUM-RED-2).

The order of every floating-point operation is part of the result's definition, so that a
GPU kernel can reproduce the bits:

- :func:`dot_canonical` — for each output element ``acc = fma(a_k, b_k, acc)`` for
  ``k = 0 … K−1`` from +0 (or ``C``), in the accumulation format (NUM-RED-1).
  :func:`dot_tiled` walks M, N and K tile by tile, K ascending, and gives the same bits.
- :func:`reduce_canonical` — 32 lane partials, lane ``l`` folding ``x_l, x_{l+32}, …``, then
  a butterfly with xor offsets 16, 8, 4, 2, 1: a CUDA warp reduction (NUM-RED-2).

Dot products accumulating in f32 (any operands) or, with exact products, in f64 run as
compiled loops (:mod:`tessera_ref.numerics.kernels`); the other cases, and the axis
reductions, vectorize over independent outputs and loop, in Python, only along the reduction
axis in the defined order. Every step is an IEEE operation or an exact fma from
:mod:`tessera_ref.numerics.arith`. Nothing here calls BLAS, ``np.sum`` or ``np.dot`` on
floating-point data.
"""
from __future__ import annotations

import numpy as np

from .arith import (
    ArithError, accum_format, accum_op, canonical_nan, default_accum, round_f64_into, round_to_odd,
    source_format, to_accum, two_product, two_sum,
)
from .formats import Format

__all__ = ["REDUCE_OPS", "dot_canonical", "dot_tiled", "reduce_canonical",
           "argmax_canonical", "argmin_canonical", "extreme_last_axis", "divide_by_count"]

#: The axis reductions of NUM-RED-2.
REDUCE_OPS = ("sum", "mean", "max", "min")
LANES = 32
_TILE_ELEMS = 1 << 15  # outputs per inner-loop tile: the working set stays in cache (measured)
# Fewer fmas than this run on one thread: ~4 ms of f32 fma work, which starting a second
# thread does not repay on a busy machine (where its start can be delayed by milliseconds).
_PARALLEL_MIN_FMAS = 1 << 23
# Contiguous rows of at least this many terms fold their lanes in compiled code: NumPy's
# per-step overhead (one step per 32 terms) dominates above it (measured, benchmarks/arith_bench.py).
_COMPILED_FOLD_MIN = 256


# ---------------------------------------------------------------------------------------
# dot products (NUM-RED-1)

def _value_bits(fmt: Format) -> int:
    """Most significant bits a value of ``fmt`` can have."""
    return fmt.bits - 1 if fmt.is_int else fmt.man_bits + 1


def _lsb(fmt: Format) -> float:
    """The smallest positive spacing of ``fmt``'s values."""
    if fmt.is_int:
        return 1.0
    return fmt.min_subnormal or fmt.min_normal


def _products_exact(fa: Format, fb: Format, accum: Format, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether every product ``a_k·b_k`` is exactly representable in ``accum``.

    Then ``fma(a, b, acc) = RN(a·b + acc) = RN(fl(a·b) + acc)``: multiply-then-add is the
    fused operation (NUM-RED-1). The significands must fit (``bits_a + bits_b ≤ p``); the
    magnitudes must fit either for every value of the formats (``lsb_a·lsb_b`` on the accum
    grid and ``max_a·max_b ≤ max``: f16, fp8, fp6, fp4 and int8/int4 into f32) or for the
    actual data (finite nonzero magnitudes with ``min_a·min_b ≥`` accum's smallest normal
    and ``max_a·max_b ≤`` its max). bf16 shows why the data test is needed: its products
    span [2^-266, 2^256] and need not be exact in f32. Infinite operands are fine either way:
    ``inf·b + c`` is what fma gives too.
    """
    if _value_bits(fa) + _value_bits(fb) > accum.man_bits + 1:
        return False
    if _lsb(fa) * _lsb(fb) >= accum.min_subnormal and fa.max * fb.max <= accum.max:
        return True
    from .kernels import magnitude_range  # one compiled pass per operand

    ranges = []
    for v in (a, b):
        idt = np.int32 if v.dtype == np.float32 else np.int64
        inf = int(np.array(np.inf, v.dtype).view(idt))
        lo, hi = magnitude_range(np.ravel(v).view(idt), inf)
        if hi == 0:
            return True  # every product is zero, infinite or NaN: exact or IEEE-special
        ranges.append(np.array([lo, hi], idt).view(v.dtype).astype(np.float64))
    (amin, amax), (bmin, bmax) = ranges
    return amin * bmin >= accum.min_normal and amax * bmax <= accum.max


def _effective_format(fmt: Format, accum: Format) -> Format:
    """The format whose values an operand holds once converted into ``accum``."""
    fits = (_value_bits(fmt) <= accum.man_bits + 1 and _lsb(fmt) >= accum.min_subnormal
            and fmt.max <= accum.max)
    return fmt if fits else accum


def check_matmul_shapes(a: np.ndarray, b: np.ndarray, c=None) -> tuple[int, ...]:
    """The output shape of a batched ``[..., M, K] @ [..., K, N]`` (+ ``C``); raises
    :class:`ArithError` naming the shapes when they do not fit."""
    if a.ndim < 2 or b.ndim < 2:
        raise ArithError(
            f"a dot product needs a of shape [..., M, K] and b of shape [..., K, N], got "
            f"{a.shape} and {b.shape}",
            fix="give vectors a row or column axis: a[None, :] or b[:, None]",
        )
    if a.shape[-1] != b.shape[-2]:
        raise ArithError(
            f"contraction sizes differ: a {a.shape} has K={a.shape[-1]}, b {b.shape} has "
            f"K={b.shape[-2]}",
            fix="the last axis of a and the second-to-last axis of b must have the same length",
        )
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ArithError(f"batch shapes {a.shape[:-2]} and {b.shape[:-2]} do not broadcast",
                         fix="make the leading (batch) axes equal or size 1") from None
    out_shape = batch + (a.shape[-2], b.shape[-1])
    if c is not None:
        try:
            np.broadcast_shapes(np.shape(c), out_shape)
        except ValueError:
            raise ArithError(f"C of shape {np.shape(c)} does not broadcast to the output "
                             f"shape {out_shape}", fix="pass C with the shape of a @ b") from None
    return out_shape


def dot_canonical(a, b, *, accum=None, c=None) -> np.ndarray:
    """Batched ``a @ b`` in the canonical order (NUM-RED-1), exactly.

    ``a`` is ``[..., M, K]``, ``b`` is ``[..., K, N]`` (batch axes broadcast). For every output
    element ``acc₀ = +0`` (or ``C``) and ``acc_{k+1} = fma(a_k, b_k, acc_k)`` for k ascending,
    each fma rounded once in ``accum`` (default: f32, or f64 when an operand is f64).
    Operands and ``C`` are converted into ``accum`` first (NUM-EW-1). Returns ``acc_K`` as
    values of ``accum.dtype``, shape ``[..., M, N]``; converting into storage is the caller's
    single rounding.

    When every product is exact in ``accum`` (see ``_products_exact``: f16/fp8/fp6/fp4
    operands with f32 accumulation, f32 operands with f64 accumulation) the fma *is*
    multiply-then-add and that is what runs; otherwise each step is the exact fma of
    :func:`~tessera_ref.numerics.arith.fma`.
    """
    a, b = np.asarray(a), np.asarray(b)
    out_shape = check_matmul_shapes(a, b, c)
    fa, fb = source_format(a), source_format(b)
    acc_fmt = accum_format(accum if accum is not None else default_accum(fa, fb))
    A, B = to_accum(a, acc_fmt), to_accum(b, acc_fmt)
    exact = _products_exact(_effective_format(fa, acc_fmt), _effective_format(fb, acc_fmt),
                            acc_fmt, A, B)
    out = np.empty(out_shape, dtype=acc_fmt.dtype)
    out[...] = +0.0 if c is None else to_accum(c, acc_fmt)
    return canonical_nan(_accumulate(out, A, B, acc_fmt, exact))


def _accumulate(acc: np.ndarray, A: np.ndarray, B: np.ndarray, accum: Format, exact: bool):
    """``acc = fma(A[..., k], B[..., k, :], acc)`` for k ascending; returns the new ``acc``.

    ``acc`` has the full output shape ``[..., M, N]``; ``A``, ``B`` hold ``accum`` values and
    broadcast to it; ``exact`` says every product is exact in ``accum``. f32 accumulation,
    and f64 accumulation of exact products, run compiled (``_accumulate_compiled``). The
    rest runs here in NumPy over output tiles (independent, so the tiling changes no bit, as
    :func:`dot_tiled` shows) small enough to stay in cache.
    """
    if accum.name == "f32" or (exact and accum.name == "f64"):
        return _accumulate_compiled(acc, A, B, exact)
    acc = acc.copy()
    batch = int(np.prod(acc.shape[:-2], dtype=np.int64))
    M, N = acc.shape[-2:]
    tn = max(1, min(N, _TILE_ELEMS // max(1, batch)))
    tm = max(1, min(M, _TILE_ELEMS // max(1, batch * tn)))
    with np.errstate(all="ignore"):  # IEEE inf/NaN results are the defined answers
        for m0 in range(0, M, tm):
            for n0 in range(0, N, tn):
                tile = acc[..., m0:m0 + tm, n0:n0 + tn]
                At, Bt = A[..., m0:m0 + tm, :], B[..., :, n0:n0 + tn]
                if accum.name == "f64":  # f64 operands whose products need the emulated f64 fma
                    for k in range(At.shape[-1]):
                        tile[...] = accum_op("fma", At[..., :, k, None], Bt[..., None, k, :], tile,
                                             accum=accum)
                else:
                    tile[...] = _accumulate_via_f64(tile, At.astype(np.float64),
                                                    Bt.astype(np.float64), accum, exact)
    return acc


def _accumulate_compiled(acc: np.ndarray, A: np.ndarray, B: np.ndarray, exact: bool):
    """:func:`_accumulate` for f32 accumulation, and for f64 accumulation of exact products,
    by the compiled kernels (:mod:`~tessera_ref.numerics.kernels`); the batch axes are
    flattened, each operand keeps only its own batches (a broadcast operand is read, and
    packed, once) and is made contiguous (copied only when it is not). A call of fewer than
    ``_PARALLEL_MIN_FMAS`` fmas in all runs on one thread (same bits, less wait)."""
    import numba  # loaded on the first dot product, not with the package

    from .kernels import dot_rows

    batch, (M, N), K = acc.shape[:-2], acc.shape[-2:], A.shape[-1]
    nb = int(np.prod(batch, dtype=np.int64))

    def operand(x):
        """``x``'s own batches, contiguous and writable (the kernels only read them; one
        compiled variant), and the index of the one each output batch reads."""
        own = x.shape[:-2]
        count = int(np.prod(own, dtype=np.int64))
        data = np.ascontiguousarray(x.reshape((count,) + x.shape[-2:]), dtype=acc.dtype)
        index = np.broadcast_to(np.arange(count, dtype=np.int64).reshape(own), batch)
        data = data if data.flags.writeable else data.copy()
        return data, np.ascontiguousarray(index).reshape(-1)
    out = np.array(acc, order="C")
    threads = numba.get_num_threads()
    parallel = nb * M * N * K >= _PARALLEL_MIN_FMAS and threads > 1
    if not parallel:
        numba.set_num_threads(1)  # this Python thread only; restored below
    try:
        (A1, a_of), (B1, b_of) = operand(A), operand(B)
        dot_rows(out.reshape((nb, M, N)), A1, B1, exact_products=exact,
                 threads=threads if parallel else 1, a_of=a_of, b_of=b_of)
    finally:
        numba.set_num_threads(threads)
    return out


def _accumulate_via_f64(acc, A64, B64, accum: Format, exact: bool):
    """f16/bf16 accumulation computed in f64. With exact products each step is the f64 sum
    of two ``accum`` values rounded into ``accum`` (innocuous, p = 53 ≥ 2q + 2); otherwise
    ``RO53(a·b + acc)`` rounded into ``accum`` (the fma of :mod:`~tessera_ref.numerics.arith`).
    The buffers are allocated once."""
    shape = acc.shape
    acc64 = acc.astype(np.float64)
    prod, s, t1, t2 = (np.empty(shape) for _ in range(4))
    flag, scratch = np.empty(shape, dtype=bool), np.empty(shape, dtype=np.int64)
    for k in range(A64.shape[-1]):
        np.multiply(A64[..., :, k, None], B64[..., None, k, :], out=prod)
        if exact:
            np.add(prod, acc64, out=s)
        else:
            two_sum(prod, acc64, out=s, t1=t1, t2=t2)
            round_to_odd(s, t2, flag=flag, scratch=scratch)
        acc = round_f64_into(s, accum)
        np.copyto(acc64, acc)
    return acc


def dot_tiled(a, b, *, accum=None, c=None, tile_m: int = 64, tile_n: int = 64, tile_k: int = 64):
    """:func:`dot_canonical` computed tile by tile, as a tiled GPU kernel walks it.

    Each ``tile_m × tile_n`` output tile starts from +0 (or its part of ``C``) and
    accumulates the K tiles in ascending order, each as ``dot_canonical(a_tile, b_tile,
    c=acc)``. Every output element therefore sees the same fma sequence as untiled, and the
    bits are identical (NUM-RED-1); the tests check it for ragged tile sizes.
    """
    for name, t in (("tile_m", tile_m), ("tile_n", tile_n), ("tile_k", tile_k)):
        if not isinstance(t, (int, np.integer)) or t < 1:
            raise ArithError(f"{name}={t!r} is not a positive tile size", fix=f"pass {name} >= 1")
    a, b = np.asarray(a), np.asarray(b)
    out_shape = check_matmul_shapes(a, b, c)
    acc_fmt = accum_format(accum if accum is not None else default_accum(source_format(a),
                                                                          source_format(b)))
    out = np.empty(out_shape, dtype=acc_fmt.dtype)
    out[...] = +0.0 if c is None else to_accum(c, acc_fmt)
    M, K = a.shape[-2:]
    N = b.shape[-1]
    for m0 in range(0, M, tile_m):
        for n0 in range(0, N, tile_n):
            acc = out[..., m0:m0 + tile_m, n0:n0 + tile_n]
            for k0 in range(0, K, tile_k):
                acc = dot_canonical(a[..., m0:m0 + tile_m, k0:k0 + tile_k],
                                    b[..., k0:k0 + tile_k, n0:n0 + tile_n], accum=acc_fmt, c=acc)
            out[..., m0:m0 + tile_m, n0:n0 + tile_n] = acc
    return out


# ---------------------------------------------------------------------------------------
# axis reductions (NUM-RED-2)

def _carrier(accum: Format):
    """The dtype holding ``accum`` values here: f32/f64 themselves, f16/bf16 exactly in f64."""
    return np.float32 if accum.name == "f32" else np.float64


def extreme_last_axis(x: np.ndarray, op: str) -> np.ndarray:
    """NUM-RED-2's max/min along the last axis of ``x`` (carrier values).

    The ⊕ is IEEE 754-2019 ``maximum``/``minimum``: NaN if an operand is NaN, −0 < +0. That is
    the largest (smallest) element in a total order with NaN on top, so ⊕ is associative and
    commutative and every order — the lane folds and butterfly included — gives the same
    value. NumPy's reduction (NaN-propagating) finds it up to the sign of a zero, fixed here.
    """
    if x.shape[-1] == 0:
        return np.full(x.shape[:-1], -np.inf if op == "max" else np.inf, dtype=x.dtype)
    m = np.max(x, axis=-1) if op == "max" else np.min(x, axis=-1)
    zero = m == 0
    if zero.any():
        wanted_sign = op == "min"  # max: +0 if there is one; min: −0 if there is one
        present = ((x == 0) & (np.signbit(x) == wanted_sign)).any(axis=-1)
        m = np.where(zero, np.where(present == wanted_sign, -0.0, 0.0).astype(x.dtype), m)
    return m


def _lane_sum(x: np.ndarray, accum: Format) -> np.ndarray:
    """The warp reduction of NUM-RED-2 along the last axis of ``x`` (accum values), summing."""
    carrier = _carrier(accum)
    if accum.name in ("f32", "f64"):
        def comb(p, q):  # in place: p is always a fresh partial
            return np.add(p, q, out=p)
    else:
        def comb(p, q):  # one IEEE addition in f16/bf16: f64 sum rounded once (innocuous)
            return round_f64_into(p + q, accum).astype(np.float64)
    x = x.astype(carrier, copy=False)
    L = x.shape[-1]
    # Only lanes that receive a term are stored: the others hold −0, and p ⊕ −0 = p exactly
    # (+0 included, under round to nearest), so butterfly steps with offset ≥ width leave
    # lane 0 unchanged.
    width = LANES if L >= LANES else 1 << max(L - 1, 0).bit_length()
    p = np.full(x.shape[:-1] + (width,), -0.0, dtype=carrier)
    with np.errstate(all="ignore"):
        if accum.name in ("f32", "f64") and L >= _COMPILED_FOLD_MIN and x.flags.c_contiguous:
            from .kernels import lane_fold  # the same additions, compiled
            lane_fold(x.reshape(-1, L), p.reshape(-1, width))
        else:
            full = L - L % LANES
            for j in range(0, full, LANES):  # lane l folds x_l, x_{l+32}, ... left to right
                p = comb(p, x[..., j:j + LANES])
            if full < L:
                p[..., :L - full] = comb(p[..., :L - full], x[..., full:])
        while width > 1:  # the butterfly (offsets 16, 8, 4, 2, 1), lanes 0 … offset−1 only:
            width //= 2   # lane 0's result depends on no others, and ⊕ commutes
            p = comb(p[..., :width], p[..., width:2 * width])
    return p[..., 0]


def divide_by_count(s: np.ndarray, n: int, accum: Format) -> np.ndarray:
    """``s / n`` with the exact count ``n``, rounded once into ``accum``.

    f64: IEEE division (``n < 2^53`` is exact). Narrower: the f64 quotient ``q`` is made
    ``RO53(s/n)`` — the sign of the exact remainder ``s − q·n`` (Dekker's exact product,
    ``s − ph`` exact by Sterbenz, the last subtraction sign-preserving) says on which side
    of ``q`` the quotient lies — and then rounded into ``accum`` (p = 53 ≥ q + 2). The plain
    f64 quotient would do for f32 while ``n < 2^28`` (``|s/n − midpoint| ≥ 2^(e−25)/n``), but
    not beyond; the tests build such counts.
    """
    with np.errstate(all="ignore"):
        if accum.name == "f64":
            return s / float(n)
        s64 = np.atleast_1d(s).astype(np.float64)
        q = s64 / float(n)
        ph, pl = two_product(q, np.full_like(q, float(n)))
        remainder = (s64 - ph) - pl
        return round_f64_into(round_to_odd(q, remainder), accum).reshape(np.shape(s))


def _prepare_axis(x, axis, accum):
    arr = np.asarray(x)
    if not isinstance(axis, (int, np.integer)):
        raise ArithError(f"canonical reductions take one axis (an int), got {axis!r}",
                         fix="reduce one axis at a time, innermost order first")
    if not -arr.ndim <= axis < max(arr.ndim, 1):
        raise ArithError(f"axis {axis} is out of range for an array of shape {arr.shape}",
                         fix=f"use an axis in [{-arr.ndim}, {arr.ndim})")
    acc_fmt = accum_format(accum if accum is not None else default_accum(source_format(arr)))
    return np.moveaxis(to_accum(np.atleast_1d(arr), acc_fmt), axis, -1), acc_fmt


def reduce_canonical(x, axis: int = -1, op: str = "sum", *, accum=None) -> np.ndarray:
    """Reduce ``x`` along ``axis`` in the canonical warp order (NUM-RED-2).

    ``op`` is ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``; values are converted into
    ``accum`` (default: f32, or f64 for f64 input) and every ⊕ is one IEEE operation there.
    Lane ``l`` of 32 folds ``x_l, x_{l+32}, …`` left to right starting from the identity
    (−0 for sums, −inf for max, +inf for min), then for offsets 16, 8, 4, 2, 1 every lane
    combines with lane ``l xor offset``; the result is lane 0.

    - The sum of an empty axis is −0 (all lanes hold the identity; −0 + −0 = −0), exactly
      what a warp reduction initialised with −0.0f returns.
    - ``max``/``min`` are IEEE 754-2019 ``maximum``/``minimum``: NaN propagates and −0 < +0.
      Being associative, they give the same value in every order (see :func:`extreme_last_axis`).
    - ``mean`` is the sum divided once by the exact length L, correctly rounded in
      ``accum``; the mean of an empty axis is NaN.

    Returns values of ``accum.dtype`` with the reduced axis removed (NaNs canonical).
    """
    if op not in REDUCE_OPS:
        raise ArithError(f"unknown reduction {op!r}", fix=f"use one of {', '.join(REDUCE_OPS)}")
    xs, acc_fmt = _prepare_axis(x, axis, accum)
    if op in ("max", "min"):
        r = extreme_last_axis(xs.astype(_carrier(acc_fmt)), op)
    else:
        r = _lane_sum(xs, acc_fmt)
    if op == "mean":
        r = divide_by_count(r, xs.shape[-1], acc_fmt)
    return canonical_nan(np.asarray(r).astype(acc_fmt.dtype))


def _arg_extreme(x, axis, accum, op) -> np.ndarray:
    xs, acc_fmt = _prepare_axis(x, axis, accum)
    if xs.shape[-1] == 0:
        raise ArithError(f"arg{op} of an empty axis (shape {np.shape(x)}, axis {axis})",
                         fix="reduce a non-empty axis")
    v = xs.astype(_carrier(acc_fmt))
    m = extreme_last_axis(v, op)[..., None]
    hit = (np.isnan(v) & np.isnan(m)) | ((v == m) & (np.signbit(v) == np.signbit(m)))
    return np.argmax(hit, axis=-1)


def argmax_canonical(x, axis: int = -1, *, accum=None) -> np.ndarray:
    """Index of the maximum along ``axis`` (NUM-RED-2's max, in ``accum``).

    Ties go to the smallest index; NaN counts as the largest value (the first NaN wins) and
    −0 < +0. This is the lane/butterfly reduction of (value, index) pairs under that total
    order; a maximum in a total order is associative and commutative, so the lane order and
    the butterfly give the same index as any other order. Returns int64 indices.
    """
    return _arg_extreme(x, axis, accum, "max")


def argmin_canonical(x, axis: int = -1, *, accum=None) -> np.ndarray:
    """Index of the minimum along ``axis``; the rules of :func:`argmax_canonical` mirrored
    (smallest index among ties, the first NaN wins, −0 < +0)."""
    return _arg_extreme(x, axis, accum, "min")
