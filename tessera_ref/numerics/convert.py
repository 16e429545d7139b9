"""Bit-exact conversion between number formats (spec clauses ``NUM-CVT-*``).

One definition of rounding serves every format (:func:`_encode_exact`): the source value is
taken exactly (every f32/f16/bf16/fp8/fp6/fp4 value is exact in f64, and integers that are
not are rejected), split into ``n * 2**q`` where ``2**q`` is the target's quantum at that magnitude
(the subnormal quantum below the smallest normal) and ``n`` an integer plus a fraction, and
the integer is incremented or not by the rounding rule. Nothing here rounds twice and no
host math library is involved: only exact ``frexp``/``ldexp``/``floor`` and comparisons.

For f32 sources into formats of at most 8 bits the same results come from a 2**17-entry
table built from :func:`_encode_exact` (the top 16 bits of the f32 plus one sticky bit for
the low 16 decide the result, because those formats round at or above bit 16); the tests
check the table against the exact path.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import ConversionError
from .formats import FN, FINITE, IEEE, SCALE, Format, get_format

__all__ = ["ROUNDING_MODES", "OVERFLOW_MODES", "encode", "decode", "cast", "exact_source",
           "check_modes", "rounding_bits"]

#: NUM-CVT-2. ``rne`` ties to even; ``rtz`` toward zero; ``rup`` toward +inf; ``rdown``
#: toward -inf; ``stochastic`` away from zero with probability equal to the discarded fraction,
#: decided by the counter-based RNG (NUM-CVT-5).
ROUNDING_MODES = ("rne", "rtz", "rup", "rdown", "stochastic")
#: NUM-CVT-3. ``saturate`` clamps to the largest finite value; ``native`` is the format's own
#: overflow value: inf where it has inf, else NaN where it has NaN, else the largest value.
OVERFLOW_MODES = ("saturate", "native")

_TWO32 = float(2**32)


# ---------------------------------------------------------------------------------------
# argument handling

def check_modes(fmt: Format, rounding, overflow, key):
    """Validate and default a (rounding, overflow) pair for a conversion into ``fmt``."""
    rounding = "rne" if rounding is None else rounding
    if rounding not in ROUNDING_MODES:
        raise ConversionError(
            f"unknown rounding mode {rounding!r} for a conversion to {fmt.name}",
            fix=f"use one of {', '.join(ROUNDING_MODES)}",
        )
    overflow = "native" if overflow is None else overflow
    if overflow not in OVERFLOW_MODES:
        raise ConversionError(
            f"unknown overflow mode {overflow!r} for a conversion to {fmt.name}",
            fix="use 'saturate' (clamp to the largest finite value) or 'native' (the format's inf/NaN)",
        )
    if rounding == "stochastic" and key is None:
        raise ConversionError(
            f"stochastic rounding into {fmt.name} needs a random key",
            fix="pass key=RNGKey(seed) (or an int seed); the same key gives the same bits",
        )
    return rounding, overflow


def exact_source(x) -> np.ndarray:
    """Return ``x`` as an f32 or f64 array holding exactly the same values.

    f32 stays f32; f64 stays f64; every narrower float (f16, bf16, fp8, fp6, fp4, e8m0) widens
    exactly to f32; integers and booleans widen to f64, and an integer that f64 cannot hold
    exactly (beyond 2**53 and not a multiple of the spacing there) is rejected. Anything else
    raises :class:`ConversionError`.
    """
    arr = np.asarray(x)
    if not arr.dtype.isnative:  # big-endian data: same values in the machine's byte order
        arr = arr.astype(arr.dtype.newbyteorder("="))
    dt = arr.dtype
    if dt == np.float32 or dt == np.float64:
        return arr
    try:
        fmt = get_format(dt)
    except Exception:
        fmt = None
    if fmt is not None and fmt.is_float:
        return arr.astype(np.float32)
    if dt == np.bool_ or np.issubdtype(dt, np.integer) or (fmt is not None and fmt.is_int):
        wide = arr.astype(np.uint64 if dt.kind == "u" else np.int64)
        as_float = wide.astype(np.float64)
        limit = 2.0**64 if dt.kind == "u" else 2.0**63
        with np.errstate(invalid="ignore"):
            exact = (as_float < limit) & (as_float >= -limit) & (as_float.astype(wide.dtype) == wide)
        if not exact.all():
            bad = wide[~exact].reshape(-1)[0]
            raise ConversionError(
                f"integer input of dtype {dt} holds {bad}, which f64 cannot represent exactly",
                fix="convert such values to floating point yourself, choosing the rounding",
            )
        return as_float
    raise ConversionError(
        f"cannot convert an array of dtype {dt} to a number format exactly",
        fix="pass real numbers as float64, float32, a narrower float or an integer dtype",
    )


def rounding_bits(key, index, shape):
    """The 32 random bits per element of stochastic rounding (NUM-CVT-5)."""
    from .rng import as_key, random_bits

    if index is None:
        index = np.arange(int(np.prod(shape)), dtype=np.uint64).reshape(shape)
    else:
        index = np.broadcast_to(np.asarray(index), shape)
    return random_bits(as_key(key), index)


# ---------------------------------------------------------------------------------------
# the one exact definition

def _round_up(rounding, frac, n, toward_plus, rbits):
    """Whether to move the integer ``n`` one step in the rounding direction.

    ``toward_plus`` is the mask of elements for which "one step" means toward +inf
    (magnitudes of non-negative values; two's-complement integers always).
    """
    if rounding == "rne":
        return (frac > 0.5) | ((frac == 0.5) & (np.fmod(n, 2.0) != 0.0))
    if rounding == "rtz":
        return np.zeros(frac.shape, dtype=bool)
    if rounding == "rup":
        return (frac > 0.0) & toward_plus
    if rounding == "rdown":
        return (frac > 0.0) & ~toward_plus
    # stochastic (NUM-CVT-5): up iff bits < frac * 2**32 -- probability ceil(frac*2**32)/2**32
    return rbits.astype(np.float64) < frac * _TWO32


def _encode_exact(x: np.ndarray, fmt: Format, rounding: str, overflow: str, rbits) -> np.ndarray:
    """Encode exact f64 source values into ``fmt`` codes (uint64)."""
    if fmt.is_int:
        return _encode_int(x, fmt, rounding, rbits)
    m = fmt.man_bits
    nan = np.isnan(x)
    neg = np.signbit(x)
    a = np.abs(x)
    inf = np.isinf(a)
    af = np.where(nan | inf, 0.0, a)
    _, ex = np.frexp(af)
    qexp = np.maximum(ex.astype(np.int64) - 1, fmt.emin) - m
    s = np.ldexp(af, -qexp)
    n = np.floor(s)
    frac = s - n
    up = _round_up(rounding, frac, n, ~neg, rbits)
    v = np.ldexp(n + up, qexp)

    # Overflow (NUM-CVT-3): directed modes that moved toward zero give the largest finite
    # value, as IEEE 754 prescribes; everything else gives the overflow value of the mode.
    toward_zero = {"rtz": np.ones(x.shape, dtype=bool), "rup": neg, "rdown": ~neg}.get(rounding)
    over = v > fmt.max
    if fmt.special == SCALE:
        v = np.maximum(v, fmt.min_normal)  # no zero and no subnormals: tiny values clamp up
    special_over = over if toward_zero is None else over & ~toward_zero
    v = np.where(over, fmt.max, v)
    if overflow == "saturate" or fmt.special == FINITE:  # fp6/fp4's own overflow value is max
        special = nan
        v = np.where(inf, fmt.max, v)
    else:
        special = nan | special_over | inf

    codes = _magnitude_codes(np.where(special, 0.0, v), fmt)
    if fmt.special == IEEE:  # overflow and inf inputs become inf; NaN the canonical quiet NaN
        codes = np.where(special, np.uint64(fmt.inf_code), codes)
        codes = np.where(nan, np.uint64(fmt.nan_code), codes)
    elif fmt.special == FN:
        codes = np.where(special, np.uint64(fmt.nan_code), codes)
    elif fmt.special == SCALE:
        # NUM-CVT-6: e8m0 has no sign and no zero: NaN, zeros and negatives give NaN
        return np.where(special | neg | (a == 0.0), np.uint64(fmt.nan_code), codes)
    else:  # FINITE: NaN -> the sign-only code (-0), as ml_dtypes does (NUM-CVT-4)
        codes = np.where(nan, np.uint64(0), codes)
        neg = neg | nan
    # the sign bit always follows the source's sign (NaN's included)
    return codes | np.where(neg, np.uint64(fmt.sign_mask), np.uint64(0))


def _magnitude_codes(v: np.ndarray, fmt: Format) -> np.ndarray:
    """Codes (sign bit clear) of exactly representable non-negative finite values."""
    m = fmt.man_bits
    _, ex = np.frexp(v)
    e = ex.astype(np.int64) - 1
    sub = v < fmt.min_normal
    exp_field = np.where(sub, 0, e + fmt.bias)
    with np.errstate(over="ignore"):  # the branch np.where discards may overflow
        mant = np.where(sub, np.ldexp(v, m - fmt.emin), np.ldexp(v, m - e) - float(1 << m))
    return (exp_field.astype(np.uint64) << np.uint64(m)) | mant.astype(np.uint64)


def _encode_int(x, fmt, rounding, rbits):
    nan = np.isnan(x)
    xc = np.clip(np.where(nan, 0.0, x), fmt.min - 1.0, fmt.max + 1.0)
    n = np.floor(xc)
    frac = xc - n
    if rounding == "rtz":
        up = (frac > 0.0) & (xc < 0.0)  # toward zero is toward +inf for negatives
    else:
        up = _round_up(rounding, frac, n, np.ones(x.shape, dtype=bool), rbits)
    v = np.clip(n + up, fmt.min, fmt.max).astype(np.int64)
    return (v & ((1 << fmt.bits) - 1)).astype(np.uint64)


# ---------------------------------------------------------------------------------------
# fast paths (each checked against the exact definition by the tests)

@lru_cache(maxsize=None)
def _f32_table(fmt: Format, rounding: str, overflow: str) -> np.ndarray:
    """Codes for every (top 16 bits of an f32, any-low-bit-set) pair: 2**17 entries."""
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    reps = np.stack([hi, hi | np.uint32(1)], axis=-1).reshape(-1)
    src = reps.view(np.float32).astype(np.float64)
    return _encode_exact(src, fmt, rounding, overflow, None).astype(fmt.code_dtype)


def _encode_f32_by_table(x32: np.ndarray, fmt: Format, rounding: str, overflow: str):
    b = x32.view(np.uint32)
    idx = (b >> np.uint32(15)) & np.uint32(0x1FFFE)
    idx |= (b & np.uint32(0xFFFF)) != 0
    return _f32_table(fmt, rounding, overflow)[idx]


def _encode_f32_to_bf16(x32: np.ndarray, rounding: str, overflow: str, rbits):
    """bf16 shares f32's exponent range, so rounding is an integer add on the top 16 bits."""
    b = x32.view(np.uint32)
    neg = (b >> np.uint32(31)).astype(bool)
    mag = b & np.uint32(0x7FFFFFFF)
    hi = (mag >> np.uint32(16)).astype(np.uint16)
    lo = mag & np.uint32(0xFFFF)
    if rounding == "rne":
        up = (lo > 0x8000) | ((lo == 0x8000) & ((hi & np.uint16(1)) != 0))
    elif rounding == "rtz":
        up = None
    elif rounding == "stochastic":  # == bits < frac * 2**32 with frac = lo / 2**16
        up = (rbits >> np.uint32(16)) < lo
    else:
        up = (lo != 0) & (neg if rounding == "rdown" else ~neg)
    code = hi if up is None else hi + up.astype(np.uint16)  # a carry into the exponent is right
    nan_code = np.uint16(0x7FC0)
    if overflow == "saturate":
        code = np.minimum(code, np.uint16(0x7F7F))
    code = np.where(mag > 0x7F800000, nan_code, code)
    return code | (neg.astype(np.uint16) << np.uint16(15))


@lru_cache(maxsize=None)
def _decode_table(fmt: Format) -> np.ndarray:
    codes = np.arange(1 << fmt.bits, dtype=np.uint64)
    return _decode_exact(codes, fmt).astype(np.float32)


def _decode_exact(codes: np.ndarray, fmt: Format) -> np.ndarray:
    """Values (f64) of raw codes of any format narrower than 64 bits."""
    c = codes.astype(np.uint64)
    if fmt.is_int:
        signed = c.astype(np.int64)
        return np.where(signed >= (1 << (fmt.bits - 1)), signed - (1 << fmt.bits), signed).astype(np.float64)
    m, bias = fmt.man_bits, fmt.bias
    exp_field = ((c >> np.uint64(m)) & np.uint64((1 << fmt.exp_bits) - 1)).astype(np.int64)
    mant = (c & np.uint64((1 << m) - 1)).astype(np.float64)
    if fmt.special == SCALE:
        return np.where(fmt.is_nan_code(c), np.nan, np.ldexp(1.0, exp_field - bias))
    sub = exp_field == 0
    mag = np.where(
        sub,
        np.ldexp(mant, fmt.emin - m),
        np.ldexp(mant + float(1 << m), exp_field - bias - m),
    )
    if fmt.special == IEEE:
        mag = np.where(exp_field == (1 << fmt.exp_bits) - 1, np.where(mant == 0, np.inf, np.nan), mag)
    elif fmt.special == FN:
        mag = np.where(fmt.is_nan_code(c), np.nan, mag)
    negative = (c & np.uint64(fmt.sign_mask)) != 0
    return np.where(negative, -mag, mag)


# ---------------------------------------------------------------------------------------
# public API

def encode(x, fmt, *, rounding=None, overflow=None, key=None, index=None) -> np.ndarray:
    """Raw codes of ``x`` converted to ``fmt`` (NUM-CVT-1 … NUM-CVT-6).

    Args:
        x: array-like of real numbers; its values are taken exactly (see :func:`exact_source`).
        fmt: a format name, :class:`Format` or policy (its storage format and, unless given
            here, its rounding and overflow modes are used).
        rounding: one of :data:`ROUNDING_MODES` (default ``"rne"``).
        overflow: ``"saturate"`` or ``"native"`` (default: the format's own, ``"native"``).
        key: :class:`~tessera_ref.numerics.rng.RNGKey` or int seed; required for stochastic.
        index: global element indices (broadcast to ``x``'s shape) that key the stochastic
            rounding bits; default ``0 … x.size-1`` in C order. A shard passes its global indices.

    Returns:
        codes in the smallest unsigned dtype holding the format's width (uint8 for fp4/fp6).
    """
    fmt_obj = get_format(fmt)
    rounding = rounding if rounding is not None else getattr(fmt, "rounding", None)
    overflow = overflow if overflow is not None else getattr(fmt, "overflow", None)
    rounding, overflow = check_modes(fmt_obj, rounding, overflow, key)
    src = exact_source(x)
    exact_anyway = fmt_obj.bits == 64 or (src.dtype == np.float32 and fmt_obj.bits == 32)
    needs_bits = rounding == "stochastic" and not exact_anyway  # no bits for exact conversions
    rbits = rounding_bits(key, index, src.shape) if needs_bits else None
    with np.errstate(over="ignore", invalid="ignore"):  # overflow and NaN are defined here
        return _encode_dispatch(src, fmt_obj, rounding, overflow, rbits)


def _encode_dispatch(src, fmt, rounding, overflow, rbits):
    """Pick the fastest path that computes exactly :func:`_encode_exact`'s codes."""
    f32_source = src.dtype == np.float32
    if f32_source and rounding != "stochastic" and fmt.bits <= 8:
        return _encode_f32_by_table(src, fmt, rounding, overflow)
    if f32_source and fmt.name in ("bf16", "f16") and rounding == "rne":
        from . import kernels  # compiled: one pass, NaNs and saturation included

        codes = np.empty(src.shape, np.uint16)
        kernel = kernels.bf16_from_f32_rne if fmt.name == "bf16" else kernels.f16_from_f32_rne
        kernel(np.ascontiguousarray(src).view(np.uint32).reshape(-1), overflow == "saturate",
               codes.reshape(-1))
        return codes
    ieee_rne = rounding == "rne" and overflow == "native"
    if (f32_source and fmt.bits >= 32) or fmt.bits == 64 or (f32_source and ieee_rne and fmt.bits == 16):
        # Widening, identity, or an IEEE-754 convertFormat in round-to-nearest-even (NumPy's
        # f16 cast, ml_dtypes' bf16 cast): correctly rounded by definition, then NUM-CVT-3/4.
        codes = src.astype(fmt.dtype).view(fmt.code_dtype)  # same itemsize: any strides
        return _ieee_specials(codes, src, fmt, overflow)
    if f32_source and fmt.name == "bf16":
        return _encode_f32_to_bf16(src, rounding, overflow, rbits)
    return _encode_exact(src.astype(np.float64), fmt, rounding, overflow, rbits).astype(fmt.code_dtype)


def _ieee_specials(codes, src, fmt, overflow):
    """Apply NUM-CVT-3/4 to codes of an IEEE format: canonical NaNs, saturated infinities."""
    sign_mask = fmt.code_dtype.type(fmt.sign_mask)
    nan = np.isnan(src)
    if nan.any():
        codes = np.where(nan, fmt.code_dtype.type(fmt.nan_code) | (codes & sign_mask), codes)
    if overflow == "saturate":
        inf = (codes & ~sign_mask) == fmt.inf_code
        if inf.any():
            codes = np.where(inf, fmt.code_dtype.type(fmt.inf_code - 1) | (codes & sign_mask), codes)
    return codes


def decode(codes, fmt) -> np.ndarray:
    """Values of raw ``codes`` of ``fmt``: float32 (float64 for f64), exact (NUM-CVT-7).

    Codes must lie in ``[0, 2**bits)``; for the sub-byte formats one code per element (see
    :mod:`tessera_ref.numerics.packing` for packed bytes).
    """
    fmt = get_format(fmt)
    codes = np.asarray(codes)
    if not (np.issubdtype(codes.dtype, np.integer)):
        raise ConversionError(
            f"decode expects integer codes, got an array of dtype {codes.dtype}",
            fix="pass the raw codes (uint8/uint16/...), e.g. the result of encode()",
        )
    _check_code_range(codes, fmt)
    if fmt.is_int:  # sign-extend the low bits: exact
        shift = np.int8(8 - fmt.bits)
        return ((codes.astype(np.int8) << shift) >> shift).astype(np.float32)
    if fmt.bits <= 8:
        return _decode_table(fmt)[codes]
    if fmt.name == "f64":
        return codes.astype(np.uint64).view(np.float64)
    if fmt.name == "f32":
        return codes.astype(np.uint32).view(np.float32)
    return widen_16(codes, fmt, quiet=False)


def widen_16(codes, fmt: Format, *, quiet: bool) -> np.ndarray:
    """f32 values of f16 or bf16 ``codes`` in one compiled pass (bf16: the code is the top
    half of an f32); with ``quiet`` every NaN is the canonical quiet NaN with its sign."""
    from . import kernels

    bits = np.empty(np.shape(codes), np.uint32)
    kernel = kernels.f32_from_f16 if fmt.name == "f16" else kernels.f32_from_bf16
    kernel(np.ascontiguousarray(codes, dtype=np.uint16).reshape(-1), bits.reshape(-1), quiet)
    return bits.view(np.float32)


def _check_code_range(codes: np.ndarray, fmt: Format) -> None:
    if codes.dtype.kind == "u" and codes.dtype.itemsize * 8 <= fmt.bits:
        return  # every value of the dtype is a code
    if codes.size and (int(np.min(codes)) < 0 or int(np.max(codes)) >= (1 << fmt.bits)):
        raise ConversionError(
            f"codes out of range for {fmt.name}: they must lie in [0, {1 << fmt.bits})",
            fix="mask them with & 0x%X or unpack packed bytes first" % ((1 << fmt.bits) - 1),
        )


def cast(x, fmt, *, rounding=None, overflow=None, key=None, index=None) -> np.ndarray:
    """``x`` converted to ``fmt``, as values of the format's storage dtype.

    Same arguments and rules as :func:`encode`; the result's dtype is ``fmt.dtype``
    (``ml_dtypes.float8_e4m3fn`` for fp8_e4m3, ``ml_dtypes.float4_e2m1fn`` for fp4, ...).
    """
    fmt_obj = get_format(fmt)
    codes = encode(x, fmt, rounding=rounding, overflow=overflow, key=key, index=index)
    return codes.view(fmt_obj.dtype)
