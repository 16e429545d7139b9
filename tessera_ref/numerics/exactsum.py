"""Exact sums, rounded once (NUM-RED-4).

Under ``reduction="exact"`` a sum is the exact real sum of its terms, converted once into the
result format by NUM-CVT. Because nothing is rounded before that conversion, the result is
the same for every order, tiling, split-K and mesh shape.

The exact value lives in an :class:`ExactAccumulator`: per output element, a fixed-point
integer in radix-2^32 digits (int64 storage), vectorized over outputs. Every f32 is an
integer multiple of 2^-149 below 2^128 and every f64 a multiple of 2^-1074 below 2^1024, so
the two *domains* are

=======  ==============  ======  ====================================================
domain   unit (bit 0)    digits  holds exactly
=======  ==============  ======  ====================================================
``f32``  2^-149          11      f32 and narrower values and their products when those
                                 fit (fp8/fp6/fp4/f16/int8)
``f64``  2^-1074         68      f64 values and products of any formats up to 32 bits
=======  ==============  ======  ====================================================

with 64 spare bits above the largest term for carries. Accumulators are partial sums that
can be carried and combined exactly: ``add`` (a block of terms), ``merge`` (another partial
sum — a rank's, a tile's, a K-split's) and ``round`` (the single conversion).

How terms reach the digits: a term ``k · 2^t`` (``k`` its integer significand) contributes
``k << (t mod 32)`` split into 32-bit pieces to digits ``t div 32`` and up; the pieces of a
block are summed per (output, digit) with ``np.bincount``, whose f64 sums are exact because
every piece is an integer below 2^33 and at most 2^20 pieces meet in a bin (so every partial
sum stays below 2^53, in any order). Carries are then propagated in int64. Long rows are first
summed per exponent field, again exactly, in compiled integer loops (``_bucket_terms``), and
only the bucket totals are split into digits.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .arith import ArithError, source_format
from .convert import check_modes, rounding_bits, encode, exact_source
from .formats import FINITE, FN, IEEE, Format, get_format
from .reduce import check_matmul_shapes

__all__ = ["DOMAINS", "ExactAccumulator", "exact_sum", "exact_dot", "exact_dot_accumulator"]

#: domain -> (exponent of bit 0, number of radix-2^32 digits)
DOMAINS = {"f32": (-149, 11), "f64": (-1074, 68)}
_RADIX = 32
_MASK = np.int64((1 << _RADIX) - 1)
_TERMS_PER_BIN = 1 << 20  # pieces < 2^33, so a bin's f64 sum stays below 2^53: exact
_BLOCK = 1 << 22  # terms deposited at once (bounds memory)
#: Rows at least this long are summed by exponent bucket first (see ``_bucket_terms``).
_BUCKET_ROW_MIN = {np.float32: 512, np.float64: 8192}  # measured crossovers
_PAD = 2  # zero digits below and above the magnitude when bits are extracted for rounding


class ExactAccumulator:
    """Exact running sums, one per element of ``shape`` (NUM-RED-4).

    ``domain`` (``"f32"`` or ``"f64"``, see the module docstring) fixes which values can be
    added; partial sums of the same domain and shape merge exactly. Special values are
    tracked beside the digits: any NaN term makes the sum NaN, +inf and −inf together make
    it NaN, infinities of one sign make it that infinity. An exact zero sum — the empty sum
    and a sum of −0 terms included — is +0: the sum is a real number, held in fixed point,
    which has no −0. (A nonzero sum that rounds to zero keeps its sign, NUM-CVT-2.)
    """

    def __init__(self, shape=(), domain: str = "f32"):
        if domain not in DOMAINS:
            raise ArithError(f"unknown exact-sum domain {domain!r}",
                             fix="use 'f32' (f32 and narrower terms) or 'f64'")
        self._shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(map(int, shape))
        self._domain = domain
        self._lsb, ndigits = DOMAINS[domain]
        size = math.prod(self._shape)
        # Digit-major (each digit's row is contiguous over the outputs). The window: digits
        # below ``_low`` are zero, ``_low … _top−1`` lie in [0, 2^32), digit ``_top`` is a
        # signed int64 holding the rest of the value, the digits above it are zero.
        # ``_low is None`` until something nonzero is added.
        self._digits = np.zeros((ndigits, size), dtype=np.int64)
        self._low: int | None = None
        self._top = 0
        self._nan = np.zeros(size, dtype=bool)
        self._pos_inf = np.zeros(size, dtype=bool)
        self._neg_inf = np.zeros(size, dtype=bool)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def domain(self) -> str:
        return self._domain

    def copy(self) -> "ExactAccumulator":
        new = ExactAccumulator(self._shape, self._domain)
        for name in ("_digits", "_nan", "_pos_inf", "_neg_inf"):
            setattr(new, name, getattr(self, name).copy())
        new._low, new._top = self._low, self._top
        return new

    # -- adding terms ---------------------------------------------------------------------
    def add(self, values, axis=()) -> "ExactAccumulator":
        """Add ``values`` exactly; ``axis`` (an int, a tuple, or ``None`` for all) names the
        axes of ``values`` summed into each output. With the default ``axis=()`` every element
        is one term of the output at its position (``values`` broadcasts to ``shape``).
        Returns ``self``."""
        x = np.asarray(values)
        axes = _normalize_axes(axis, x.ndim)
        if not axes:
            try:
                x = np.broadcast_to(x, self._shape)
            except ValueError:
                raise ArithError(f"values of shape {x.shape} do not broadcast to the "
                                 f"accumulator's shape {self._shape}",
                                 fix="pass axis= to sum axes of the values away") from None
        kept = tuple(n for i, n in enumerate(x.shape) if i not in axes)
        if kept != self._shape:
            raise ArithError(
                f"summing axes {axes} of values of shape {x.shape} leaves shape {kept}, but the "
                f"accumulator has shape {self._shape}",
                fix="choose axis= so that the remaining axes match the accumulator's shape",
            )
        rest = [i for i in range(x.ndim) if i not in axes]
        terms = math.prod(x.shape[i] for i in axes)
        rows = np.transpose(self._domain_values(x), rest + list(axes))
        self._add_rows(rows.reshape(self._digits.shape[1], terms))
        return self

    def add_integers(self, k, exponent: int) -> "ExactAccumulator":
        """Add the exact values ``k · 2^exponent`` elementwise (``k``: an integer array of
        magnitude below 2^63, broadcast to ``shape``) — for fixed-point partial results such
        as integer dot products. Returns ``self``."""
        k = np.broadcast_to(np.asarray(k), self._shape)
        if not np.issubdtype(k.dtype, np.integer):
            raise ArithError(f"add_integers needs an integer array, got dtype {k.dtype}",
                             fix="pass int64 significands and the power of two separately")
        t = int(exponent) - self._lsb
        top = _RADIX * (self._digits.shape[0] - 3)
        if t < 0 or t + 63 > top:
            raise ArithError(
                f"integers times 2^{exponent} do not fit the {self._domain} domain "
                f"(bits 2^{self._lsb} to 2^{self._lsb + top})",
                fix="use an ExactAccumulator with domain='f64'",
            )
        k = k.astype(np.int64).reshape(-1, 1)
        if k.size:
            self._deposit(k, np.full(k.shape, t, dtype=np.int64), 0, wide=True)
        return self

    def merge(self, other: "ExactAccumulator") -> "ExactAccumulator":
        """Add another partial sum exactly (same domain and shape). Returns ``self``."""
        if not isinstance(other, ExactAccumulator):
            raise ArithError(f"can only merge an ExactAccumulator, not {type(other).__name__}",
                             fix="wrap the values with ExactAccumulator(...).add(values)")
        if other._domain != self._domain or other._shape != self._shape:
            raise ArithError(
                f"cannot merge a {other._domain} accumulator of shape {other._shape} into a "
                f"{self._domain} accumulator of shape {self._shape}",
                fix="create every partial sum with the same shape and domain",
            )
        if other._low is not None:
            self._digits += other._digits
            low = other._low if self._low is None else min(self._low, other._low)
            top = max(self._top, other._top)
            _propagate_carries(self._digits, low, top)
            self._low, self._top = low, top
        self._nan |= other._nan
        self._pos_inf |= other._pos_inf
        self._neg_inf |= other._neg_inf
        return self

    def reshape(self, shape) -> "ExactAccumulator":
        """The same sums viewed with another shape of the same size (a copy)."""
        shape = tuple(int(n) for n in shape)
        if math.prod(shape) != math.prod(self._shape):
            raise ArithError(f"cannot reshape an accumulator of shape {self._shape} to {shape}")
        new = self.copy()
        new._shape = shape
        return new

    def sum_axes(self, axes) -> "ExactAccumulator":
        """A new accumulator holding, exactly, the sums of this one's elements over ``axes``
        (which stay, with size 1): merging the partial sums of many ranks or tiles at once."""
        axes = _normalize_axes(axes, len(self._shape))
        shape = tuple(1 if i in axes else n for i, n in enumerate(self._shape))
        out = ExactAccumulator(shape, self._domain)
        grid = (-1,) + self._shape
        # digits below the top are in [0, 2^32); the top digit is signed and below 2^63 in
        # magnitude with 64 spare bits, so int64 sums of up to 2^30 terms cannot overflow
        out._digits = self._digits.reshape(grid).sum(axis=tuple(a + 1 for a in axes)).reshape(-1, math.prod(shape))
        if self._low is not None:
            out._low, out._top = self._low, self._top
            _propagate_carries(out._digits, self._low, self._top)
        for name in ("_nan", "_pos_inf", "_neg_inf"):
            setattr(out, name, getattr(self, name).reshape(self._shape).any(axis=axes).reshape(-1))
        return out

    def take(self, indices, axis: int) -> "ExactAccumulator":
        """A new accumulator holding the sums at ``indices`` along ``axis`` (as ``np.take``)."""
        (axis,) = _normalize_axes(axis, len(self._shape))
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        shape = self._shape[:axis] + (indices.size,) + self._shape[axis + 1:]
        out = ExactAccumulator(shape, self._domain)
        rows = len(self._digits)
        out._digits = np.ascontiguousarray(np.take(self._digits.reshape((rows,) + self._shape), indices,
                                                   axis=axis + 1).reshape(rows, math.prod(shape)))
        for name in ("_nan", "_pos_inf", "_neg_inf"):
            setattr(out, name, np.take(getattr(self, name).reshape(self._shape), indices, axis=axis).reshape(-1))
        out._low, out._top = self._low, self._top
        return out

    @staticmethod
    def concatenate(parts, axis: int) -> "ExactAccumulator":
        """The accumulators ``parts`` (one domain, shapes equal but along ``axis``) joined along
        ``axis``, as ``np.concatenate``."""
        first = parts[0]
        (axis,) = _normalize_axes(axis, len(first._shape))
        shape = first._shape[:axis] + (sum(p._shape[axis] for p in parts),) + first._shape[axis + 1:]
        out = ExactAccumulator(shape, first._domain)
        size = math.prod(shape)
        used = [p for p in parts if p._low is not None]
        out._digits = np.concatenate([p._digits.reshape((len(p._digits),) + p._shape) for p in parts],
                                     axis=axis + 1).reshape(len(out._digits), size)
        for name in ("_nan", "_pos_inf", "_neg_inf"):
            setattr(out, name, np.concatenate([getattr(p, name).reshape(p._shape) for p in parts], axis=axis)
                    .reshape(-1))
        if used:  # every part's signed top digit moves up to the highest top (the value is kept)
            out._low, out._top = min(p._low for p in used), max(p._top for p in used)
            _propagate_carries(out._digits, min(p._top for p in used), out._top)
        return out

    def to_words(self) -> np.ndarray:
        """The sums as one uint32 array to move between processes: ``[low, top, special]``; the
        digits ``low … top−1`` in use (each below 2^32); the signed top digit ``top`` as two
        words (int64); then — when some sum is NaN or infinite — one flag word per element.
        ``4·(top − low + 2)`` bytes a sum. :meth:`from_words` reads it back."""
        special = bool(self._nan.any() or self._pos_inf.any() or self._neg_inf.any())
        low = 0xFFFFFFFF if self._low is None else self._low
        parts = [np.array([low, self._top, int(special)], dtype=np.uint32)]
        if self._low is not None:
            parts += [self._digits[self._low:self._top].astype(np.uint32).reshape(-1),
                      np.ascontiguousarray(self._digits[self._top]).view(np.uint32)]
        if special:
            parts.append((self._nan.astype(np.uint32) | self._pos_inf.astype(np.uint32) << 1
                          | self._neg_inf.astype(np.uint32) << 2))
        return np.concatenate(parts)

    @classmethod
    def from_words(cls, words: np.ndarray, shape, domain: str = "f32") -> "ExactAccumulator":
        """The accumulator of ``shape`` and ``domain`` that :meth:`to_words` wrote as ``words``."""
        out = cls(shape, domain)
        low, top, special = (int(w) for w in words[:3])
        size = out._digits.shape[1]
        at = 3
        if low != 0xFFFFFFFF:
            below = (top - low) * size
            out._digits[low:top] = words[at:at + below].reshape(top - low, size)
            out._digits[top] = words[at + below:at + below + 2 * size].view(np.int64)
            out._low, out._top = low, top
            at += below + 2 * size
        if special:
            flags = words[at:at + size]
            out._nan, out._pos_inf, out._neg_inf = (flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0
        return out

    def _domain_values(self, x: np.ndarray) -> np.ndarray:
        src = exact_source(x)
        if self._domain == "f64":
            return src.astype(np.float64, copy=False)
        if src.dtype == np.float32:
            return src
        with np.errstate(over="ignore", invalid="ignore"):
            narrow = src.astype(np.float32)
        if not np.all((narrow == src) | np.isnan(src)):
            raise ArithError(
                f"values of dtype {x.dtype} that are not f32 values cannot be added to an f32-domain "
                "exact accumulator",
                fix="use ExactAccumulator(shape, domain='f64') (exact_sum picks it for f64 input)",
            )
        return narrow

    def _add_rows(self, rows: np.ndarray) -> None:
        """Add ``rows[g, :]`` (values of the domain) to output ``g``, block by block."""
        G, L = rows.shape
        if L == 0 or G == 0:
            return
        lc = min(L, _TERMS_PER_BIN, max(1, _BLOCK // G))
        gc = min(G, max(1, _BLOCK // lc))
        for g0 in range(0, G, gc):
            for l0 in range(0, L, lc):
                self._add_block(rows[g0:g0 + gc, l0:l0 + lc], g0)

    def _add_block(self, block: np.ndarray, g0: int) -> None:
        g1 = g0 + len(block)
        finite = np.isfinite(block)
        if not finite.all():
            self._nan[g0:g1] |= np.isnan(block).any(axis=1)
            self._pos_inf[g0:g1] |= (block == np.inf).any(axis=1)
            self._neg_inf[g0:g1] |= (block == -np.inf).any(axis=1)
            block = np.where(finite, block, 0.0).astype(block.dtype)
        if block.shape[1] >= _BUCKET_ROW_MIN[block.dtype.type]:
            k, t = _bucket_terms(block)
            self._deposit(k, t, g0, wide=True)
        else:
            k, t = _significand_and_shift(block)
            self._deposit(k, t, g0, wide=block.dtype == np.float64)

    def _deposit(self, k: np.ndarray, t: np.ndarray, g0: int, wide: bool) -> None:
        """Add ``k[g, j] · 2^(t[g, j] + lsb)`` to output ``g0 + g`` (``|k| < 2^32`` unless
        ``wide``, then ``< 2^63``), exactly."""
        g = k.shape[0]
        d = t >> 5
        r = t & 31
        if wide:
            lo = (k & _MASK) << r        # < 2^63
            hi = (k >> 32) << r          # |.| < 2^62
            pieces = (lo & _MASK, (lo >> 32) + (hi & _MASK), hi >> 32)
        else:
            v = k << r                   # |.| < 2^63
            pieces = (v & _MASK, v >> 32)
        used = k != 0
        if not used.any():
            return
        d_lo, d_hi = int(d[used].min()), int(d[used].max())
        width = d_hi - d_lo + len(pieces)
        d = np.where(used, d, d_lo)  # zero terms add nothing; keep their bins in range
        index = ((d - d_lo) * g + np.arange(g, dtype=np.int64)[:, None]).ravel()
        sums = np.zeros(width * g, dtype=np.int64)
        for j, piece in enumerate(pieces):
            binned = np.bincount(index + j * g, weights=piece.ravel(), minlength=width * g)
            sums += binned.astype(np.int64)
        if self._low is None:
            self._low = self._top = d_lo
        old_top = self._top
        top = max(old_top, d_lo + width)  # every touched digit lies below the new top
        columns = self._digits[:, g0:g0 + g]
        columns[d_lo:d_lo + width] += sums.reshape(width, g)
        _propagate_carries(columns, min(d_lo, old_top), top)
        if top > old_top:  # the other outputs' signed digit moves up to the new top too
            _propagate_carries(self._digits, old_top, top)
        self._low, self._top = min(self._low, d_lo), top

    # -- reading the exact value ------------------------------------------------------------
    def as_fractions(self) -> np.ndarray:
        """The exact sums as an object array of :class:`fractions.Fraction` (``nan``/``±inf``
        floats for the special cases; the sign of a zero is not represented)."""
        out = np.empty(self._digits.shape[1], dtype=object)
        unit = Fraction(2) ** self._lsb
        for i, column in enumerate(self._digits.T):
            special = self._special_value(i)
            if special is not None:
                out[i] = special
            else:
                out[i] = sum(int(dig) << (_RADIX * j) for j, dig in enumerate(column)) * unit
        return out.reshape(self._shape)

    def _special_value(self, i: int):
        if self._nan[i] or (self._pos_inf[i] and self._neg_inf[i]):
            return math.nan
        if self._pos_inf[i] or self._neg_inf[i]:
            return math.inf if self._pos_inf[i] else -math.inf
        return None

    def round(self, fmt="f32", *, rounding=None, overflow=None, key=None, index=None) -> np.ndarray:
        """The exact sums converted once into ``fmt`` by NUM-CVT (NUM-RED-4).

        ``fmt`` is a signed float format or a policy (whose rounding and overflow apply unless
        given here); ``rounding``/``overflow``/``key``/``index`` are :func:`encode`'s. Ties
        and the stochastic comparison are decided on the exact value. Returns values of
        ``fmt``'s dtype with the accumulator's shape.
        """
        fmt_obj = get_format(fmt)
        if fmt_obj.special not in (IEEE, FN, FINITE):
            raise ArithError(f"an exact sum cannot be rounded into {fmt_obj.name}",
                             fix="round into a signed float format (f64, f32, f16, bf16, fp8, fp6, fp4)")
        rounding = rounding if rounding is not None else getattr(fmt, "rounding", None)
        overflow = overflow if overflow is not None else getattr(fmt, "overflow", None)
        rounding, overflow = check_modes(fmt_obj, rounding, overflow, key)
        n = self._digits.shape[1]
        if n == 0:  # no sums (e.g. a process's empty rows of a reduce-scatter)
            return np.zeros(self._shape, dtype=fmt_obj.dtype)
        rbits = (rounding_bits(key, index, self._shape).reshape(n).astype(np.uint64)
                 if rounding == "stochastic" else None)
        low = 0 if self._low is None else self._low
        window = self._digits[low:self._top + 1]
        proxy = _rounded_values(window, self._lsb + _RADIX * low, fmt_obj, rounding, rbits)
        proxy = np.where(self._pos_inf, np.inf, proxy)
        proxy = np.where(self._neg_inf, -np.inf, proxy)
        proxy = np.where(self._nan | (self._pos_inf & self._neg_inf), np.nan, proxy)
        if fmt_obj.bits <= 32:  # the stand-ins are f32 values: take encode's f32 fast paths
            proxy = proxy.astype(np.float32)
        codes = encode(proxy, fmt_obj, rounding="rne", overflow=overflow)
        return codes.view(fmt_obj.dtype).reshape(self._shape)


# ---------------------------------------------------------------------------------------
# digits

def _normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or not -ndim <= a < ndim:
            raise ArithError(f"axis {a!r} is out of range for {ndim}-dimensional values",
                             fix=f"use axes in [{-ndim}, {ndim})")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ArithError(f"axis {axis!r} names an axis twice", fix="name each axis once")
    return tuple(sorted(out))


def _significand_and_shift(x: np.ndarray):
    """``(k, t)`` int64 with ``x == k · 2^(t + lsb)``: the signed integer significand and its
    position above the domain's unit (f32: 2^-149, f64: 2^-1074). Finite values only."""
    if x.dtype == np.float32:
        bits = x.view(np.int32).astype(np.int64)
        exp_bits, man_bits = 8, 23
    else:
        bits = x.view(np.int64)
        exp_bits, man_bits = 11, 52
    exp_field = (bits >> man_bits) & ((1 << exp_bits) - 1)
    k = bits & ((1 << man_bits) - 1)
    k |= (exp_field > 0).astype(np.int64) << man_bits  # the implicit bit of normal numbers
    t = np.maximum(exp_field, 1) - 1
    return np.where(bits < 0, -k, k), t


def _bucket_terms(x: np.ndarray):
    """Sum the finite values of each row by exponent field, exactly; return the bucket sums
    as ``(k, t)`` terms (``|k| < 2^63``) for :meth:`ExactAccumulator._deposit`.

    Values with one exponent field ``e`` are integer multiples ``k`` of one quantum,
    2^(max(e, 1) − 1) units of the domain (the subnormal field shares field 1's); each row's
    significands are summed per field as integers, high part ``k >> 26`` and low part
    ``k mod 2^26`` separately, by the compiled :func:`~tessera_ref.numerics.kernels.bucket_rows`.
    """
    from .kernels import bucket_rows

    g = x.shape[0]
    if x.dtype == np.float32:
        sums = bucket_rows(x.view(np.int32), 8, 23)
    else:
        sums = bucket_rows(x.view(np.int64), 11, 52)
    fields = sums.shape[2]
    t0 = np.maximum(np.arange(fields, dtype=np.int64), 1) - 1
    t = np.broadcast_to(np.concatenate([t0 + 26, t0]), (g, 2 * fields))
    return sums.reshape(g, 2 * fields), t


def _propagate_carries(digits: np.ndarray, start: int, stop: int) -> None:
    """Bring digits ``start … stop−1`` into [0, 2^32) in place, one pass from low to high,
    carrying into digit ``stop`` (signed: two's complement in radix 2^32). The value does
    not change."""
    for i in range(start, stop):
        carry = digits[i] >> _RADIX
        digits[i] &= _MASK
        digits[i + 1] += carry


def _bits(padded: np.ndarray, start: np.ndarray, width: int) -> np.ndarray:
    """Bits ``[start, start + width)`` (``width ≤ 54``) of each column's magnitude (uint64
    digits, digit-major), as uint64; ``start`` counts from bit 0 of ``padded``."""
    cols = np.arange(padded.shape[1])
    j = start >> 5
    r = (start & 31).astype(np.uint64)
    x0 = padded[j, cols] >> r
    x1 = padded[j + 1, cols] << (np.uint64(32) - r)
    x2 = (padded[j + 2, cols] << (np.uint64(32) - r)) << np.uint64(32)
    return (x0 | x1 | x2) & np.uint64((1 << width) - 1)


def _rounded_values(digits: np.ndarray, lsb: int, fmt: Format, rounding: str, rbits) -> np.ndarray:
    """f64 stand-ins for the sums ``N · 2^lsb`` (``digits``: canonical but for the signed
    top digit) rounded by NUM-CVT-2 into ``fmt``: the exact
    rounded value when it is at most ``fmt.max``, else ±inf (modes that overflow to the
    overflow value) or ±max (NUM-CVT-3) — values that :func:`encode` converts without
    rounding again. Zero sums give +0."""
    neg = digits[-1] < 0
    D, G = digits.shape
    padded = np.zeros((D + 2 * _PAD + 3, G), dtype=np.int64)
    mag = padded[_PAD:_PAD + D + 2]  # two digits more: the top digit may exceed 2^32
    np.copyto(mag[:D], np.where(neg, -digits, digits))
    _propagate_carries(mag, 0, D + 1)
    padded = padded.view(np.uint64)  # every digit is now in [0, 2^32)
    cols = np.arange(G)
    lowest = np.full(G, len(padded), dtype=np.int64)  # lowest and highest nonzero digit
    h = np.full(G, _PAD, dtype=np.int64)  # zero sums: any position will do
    for i in range(_PAD, _PAD + D + 2):
        nonzero = padded[i] != 0
        h[nonzero] = i
        lowest[nonzero & (lowest > i)] = i
    top_bit = _RADIX * (h - _PAD) + np.frexp(padded[h, cols].astype(np.float64))[1] - 1
    qexp = np.maximum(top_bit + lsb, fmt.emin) - fmt.man_bits
    shift = np.maximum(qexp - lsb, 0)  # the quantum's bit; at or below bit 0 nothing is lost
    base = shift + _RADIX * _PAD
    nonzero = lowest < len(padded)
    reach = int((base >> 5).max()) + 3  # a sum far below fmt's quantum reads zero digits above it
    if reach > len(padded):
        padded = np.concatenate([padded, np.zeros((reach - len(padded), G), dtype=np.uint64)])
    n = _bits(padded, base, 54)
    frac32 = _bits(padded, base - 32, 32)
    below = base - 32  # the sticky bits lie under this position
    partial = (padded[below >> 5, cols]
               & ((np.uint64(1) << (below & 31).astype(np.uint64)) - np.uint64(1))) != 0
    sticky = partial | (lowest < (below >> 5))
    half = np.uint64(1 << 31)
    if rounding == "rne":
        up = (frac32 > half) | ((frac32 == half) & (sticky | ((n & np.uint64(1)) == 1)))
    elif rounding == "rtz":
        up = np.zeros(len(n), dtype=bool)
    elif rounding in ("rup", "rdown"):
        up = ((frac32 > 0) | sticky) & (neg if rounding == "rdown" else ~neg)
    else:  # stochastic (NUM-CVT-5): u < f·2^32 with f = (frac32 + sticky·δ) / 2^32, 0 < δ < 1
        up = (rbits < frac32) | ((rbits == frac32) & sticky)
    with np.errstate(over="ignore"):
        value = np.ldexp((n + up).astype(np.float64), (lsb + shift).astype(np.int64))
    over = value > fmt.max
    overflow_value = {"rne": True, "stochastic": True, "rtz": False}.get(rounding)
    if overflow_value is None:
        overflow_value = ~neg if rounding == "rup" else neg
    value = np.where(over, np.where(overflow_value, np.inf, fmt.max), value)
    value = np.where(nonzero, value, 0.0)
    return np.where(neg, -value, value)


# ---------------------------------------------------------------------------------------
# the public operations

def _domain_for(fmt: Format) -> str:
    return "f64" if fmt.name == "f64" else "f32"


def exact_sum(x, axis=None, out_fmt="f32", *, rounding=None, overflow=None, key=None,
              index=None) -> np.ndarray:
    """The exact sum of ``x`` along ``axis`` (an int, a tuple, or ``None`` for all axes),
    rounded once into ``out_fmt`` (NUM-RED-4).

    ``x`` holds values of any format (f64 terms use the f64 domain); ``out_fmt`` is a signed
    float format or a policy, and ``rounding``/``overflow``/``key``/``index`` are those of
    :func:`~tessera_ref.numerics.convert.encode`, applied to the exact sum. The result does
    not depend on the order of the terms or on how they are split (see
    :class:`ExactAccumulator` for the rules on NaN, infinities and signed zeros).
    """
    arr = np.asarray(x)
    axes = _normalize_axes(axis, arr.ndim)
    shape = tuple(n for i, n in enumerate(arr.shape) if i not in axes)
    acc = ExactAccumulator(shape, _domain_for(source_format(arr)))
    acc.add(arr, axis=axes)
    return acc.round(out_fmt, rounding=rounding, overflow=overflow, key=key, index=index)


def _fixed_point(fmt: Format) -> tuple[int, int]:
    """``(u, m)``: every value of ``fmt`` is an integer of magnitude at most ``m`` times 2^u."""
    if fmt.is_int:
        return 0, 1 << (fmt.bits - 1)
    unit = fmt.emin - fmt.man_bits
    return unit, int(math.ldexp(fmt.max, -unit))


def exact_dot(a, b, *, c=None, out_fmt="f32", rounding=None, overflow=None, key=None,
              index=None) -> np.ndarray:
    """Batched ``a @ b`` (+ ``C``) computed exactly and rounded once into ``out_fmt``
    (NUM-RED-4): ``[..., M, K] @ [..., K, N]`` as in
    :func:`~tessera_ref.numerics.reduce.dot_canonical`. See :func:`exact_dot_accumulator`."""
    acc = exact_dot_accumulator(a, b, c=c)
    return acc.round(out_fmt, rounding=rounding, overflow=overflow, key=key, index=index)


def exact_dot_accumulator(a, b, *, c=None) -> "ExactAccumulator":
    """The exact value of batched ``a @ b`` (+ ``C``), unrounded: a partial sum that can be
    merged with others (a K split across devices) before the single rounding.

    Operands may have any format of at most 32 bits: their products are exact in f64.
    fp8_e4m3, fp6, fp4 and int8/int4 operands are small integers times a power of two, so
    their dot products are computed as an int64 matrix product (exact: no overflow is
    possible below the checked bound, so the order of integer additions cannot matter) and
    added as fixed point; other formats add their exact products term by term. NaN and
    infinite operands give IEEE's products, summed by the rules of :class:`ExactAccumulator`.
    The domain is f32 when every product and ``C`` lie on the f32 grid, else f64.
    """
    a, b = np.asarray(a), np.asarray(b)
    out_shape = check_matmul_shapes(a, b, c)
    fa, fb = source_format(a), source_format(b)
    for f, name in ((fa, "a"), (fb, "b")):
        if f.bits > 32:
            raise ArithError(f"exact_dot operand {name} is {f.name}: products of 64-bit values "
                             "are not exact in f64",
                             fix="pass operands of at most 32 bits (f32, bf16, f16, fp8, …)")
    va, vb = exact_source(a).astype(np.float64), exact_source(b).astype(np.float64)
    (ua, ma), (ub, mb) = _fixed_point(fa), _fixed_point(fb)
    K = a.shape[-1]
    use_ints = (ma * mb * max(K, 1) < 2 ** 62 and ua + ub >= DOMAINS["f32"][0]
                and np.isfinite(va).all() and np.isfinite(vb).all())
    fits_f32 = (use_ints or _fits_f32_grid(fa, fb)) and (c is None or source_format(c).bits <= 32)
    acc = ExactAccumulator(out_shape, "f32" if fits_f32 else "f64")
    if c is not None:
        acc.add(np.broadcast_to(np.asarray(c), out_shape))
    if use_ints:
        ia = np.ldexp(va, -ua).astype(np.int64)
        ib = np.ldexp(vb, -ub).astype(np.int64)
        acc.add_integers(np.matmul(ia, ib), ua + ub)
    else:
        step = max(1, _BLOCK // max(1, math.prod(out_shape)))
        for k0 in range(0, K, step):
            with np.errstate(invalid="ignore"):
                p = va[..., :, k0:k0 + step, None] * vb[..., None, k0:k0 + step, :]
            acc.add(p.astype(np.float32) if fits_f32 else p, axis=-2)
    return acc


def _fits_f32_grid(fa: Format, fb: Format) -> bool:
    """Whether every product of an ``fa`` and an ``fb`` value is an f32 value."""
    def bits(f):
        return f.bits - 1 if f.is_int else f.man_bits + 1

    def unit(f):
        return 1.0 if f.is_int else (f.min_subnormal or f.min_normal)
    return (bits(fa) + bits(fb) <= 24 and unit(fa) * unit(fb) >= 2.0 ** -149
            and fa.max * fb.max < 2.0 ** 128)
