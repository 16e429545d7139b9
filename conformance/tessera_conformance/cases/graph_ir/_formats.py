"""Independent reference for number formats and conversions (NUM-FMT-1, NUM-CVT-1…5).

Nothing here imports ``tessera_ref``: the formats are typed in from the spec table and every
rounding rule is re-derived from NUM-CVT-2/3/4. Two paths, built differently:

* :func:`round_values` (vectorized): a finite f64 magnitude ``a`` is scaled by the target's
  spacing ``2^q`` (an exact power-of-two scaling), split into ``n + f`` with ``floor``, and
  stepped by the mode's rule; the code is assembled from its exponent and mantissa fields.
* :func:`round_fraction` (scalar): the same decomposition in exact rational arithmetic, for
  values that are not f64 numbers (exact sums, exact quotients).

Values are exchanged as f64 arrays (every format of at most 32 bits is exact in f64); codes
are viewed as the storage dtype (ml_dtypes for the narrow formats, one code per byte).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np

__all__ = ["FORMATS", "Fmt", "round_values", "round_fraction", "from_codes", "codes_of", "values_of",
           "canonical_nan"]


@dataclass(frozen=True)
class Fmt:
    name: str
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    kind: str          # "ieee" | "fn" (fp8_e4m3: NaN, no inf) | "finite" (fp6/fp4) | "int"
    max: float
    dtype: object

    @property
    def emin(self) -> int:
        return 1 - self.bias


FORMATS = {f.name: f for f in (
    Fmt("f64", 64, 11, 52, 1023, "ieee", (2 - 2.0 ** -52) * 2.0 ** 1023, np.dtype(np.float64)),
    Fmt("f32", 32, 8, 23, 127, "ieee", (2 - 2.0 ** -23) * 2.0 ** 127, np.dtype(np.float32)),
    Fmt("f16", 16, 5, 10, 15, "ieee", 65504.0, np.dtype(np.float16)),
    Fmt("bf16", 16, 8, 7, 127, "ieee", (2 - 2.0 ** -7) * 2.0 ** 127, np.dtype(ml_dtypes.bfloat16)),
    Fmt("fp8_e4m3", 8, 4, 3, 7, "fn", 448.0, np.dtype(ml_dtypes.float8_e4m3fn)),
    Fmt("fp8_e5m2", 8, 5, 2, 15, "ieee", 57344.0, np.dtype(ml_dtypes.float8_e5m2)),
    Fmt("fp6_e2m3", 6, 2, 3, 1, "finite", 7.5, np.dtype(ml_dtypes.float6_e2m3fn)),
    Fmt("fp6_e3m2", 6, 3, 2, 3, "finite", 28.0, np.dtype(ml_dtypes.float6_e3m2fn)),
    Fmt("fp4_e2m1", 4, 2, 1, 1, "finite", 6.0, np.dtype(ml_dtypes.float4_e2m1fn)),
    Fmt("int8", 8, 0, 0, 0, "int", 127.0, np.dtype(np.int8)),
    Fmt("int4", 4, 0, 0, 0, "int", 7.0, np.dtype(ml_dtypes.int4)),
)}

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _uint(f: Fmt):
    return _UINT[max(8, f.bits)]


def from_codes(codes, fmt: str) -> np.ndarray:
    """Raw codes (integers) as an array of ``fmt``'s storage dtype."""
    f = FORMATS[fmt]
    return np.asarray(codes).astype(_uint(f)).view(f.dtype)


def codes_of(x) -> np.ndarray:
    """The raw codes of a storage array (one unsigned integer per element)."""
    x = np.asarray(x)
    return np.ascontiguousarray(x).view(_UINT[max(8, x.dtype.itemsize * 8)]).reshape(x.shape)


def values_of(x) -> np.ndarray:
    """Exact f64 values of a storage array, decoded from the bit fields (not by a cast)."""
    x = np.asarray(x)
    name = next((n for n, f in FORMATS.items() if f.dtype == x.dtype), None)
    if name is None:
        return x.astype(np.float64)
    f = FORMATS[name]
    if name == "f64":
        return x.copy()
    c = codes_of(x).astype(np.int64) & ((1 << f.bits) - 1)
    if f.kind == "int":
        return np.where(c >= 1 << (f.bits - 1), c - (1 << f.bits), c).astype(np.float64)
    M, E = f.man_bits, f.exp_bits
    sign = (c >> (f.bits - 1)) & 1
    ef = (c >> M) & ((1 << E) - 1)
    mf = c & ((1 << M) - 1)
    sig = np.where(ef == 0, mf, mf + (1 << M)).astype(np.float64)
    mag = np.ldexp(sig, (np.where(ef == 0, 1, ef) - f.bias - M).astype(np.int32))
    top = ef == (1 << E) - 1
    if f.kind == "ieee":
        mag = np.where(top & (mf == 0), np.inf, np.where(top & (mf != 0), np.nan, mag))
    elif f.kind == "fn":
        mag = np.where(top & (mf == (1 << M) - 1), np.nan, mag)
    return np.where(sign == 1, -mag, mag)


def canonical_nan(fmt: str, negative: bool = False) -> np.ndarray:
    """NUM-CVT-4 / NUM-EW-1: the canonical quiet NaN code of an IEEE format (or e4m3's NaN)."""
    f = FORMATS[fmt]
    if f.kind == "ieee":
        code = (((1 << f.exp_bits) - 1) << f.man_bits) | (1 << (f.man_bits - 1))
    else:
        code = (1 << (f.bits - 1)) - 1
    if negative:
        code |= 1 << (f.bits - 1)
    return from_codes(np.array([code], np.uint64), fmt)[0]


def _assemble(mag: np.ndarray, sign: np.ndarray, f: Fmt) -> np.ndarray:
    """Codes of exactly representable magnitudes ``mag`` (finite, <= max) with signs."""
    M = f.man_bits
    pos = mag > 0
    m, ex = np.frexp(np.where(pos, mag, 1.0))
    e = ex.astype(np.int64) - 1
    normal = pos & (e >= f.emin)
    sub = pos & ~normal
    field_e = np.where(normal, e + f.bias, 0)
    field_m = np.where(normal, np.ldexp(mag, (M - e).astype(np.int32)) - 2.0 ** M,
                       np.where(sub, np.ldexp(mag, np.int32(M - f.emin)), 0.0))
    assert np.all(field_m == np.floor(field_m)), "magnitude not representable"
    code = (field_e.astype(np.uint64) << np.uint64(M)) | field_m.astype(np.uint64)
    return code | np.where(sign, np.uint64(1) << np.uint64(f.bits - 1), np.uint64(0))


def _overflow_code(f: Fmt, sign):
    """NUM-CVT-3's overflow value: inf (IEEE), NaN with the sign (e4m3), max (fp6/fp4)."""
    if f.kind == "ieee":
        code = ((1 << f.exp_bits) - 1) << f.man_bits
    elif f.kind == "fn":
        code = (1 << (f.bits - 1)) - 1
    else:
        return _assemble(np.full(np.shape(sign), f.max), sign, f)
    return np.uint64(code) | np.where(sign, np.uint64(1) << np.uint64(f.bits - 1), np.uint64(0))


def _finish(mag, sign, nan, inf, f: Fmt, rounding: str, overflow: str) -> np.ndarray:
    """Codes from rounded magnitudes (unbounded exponent), applying NUM-CVT-3 and NUM-CVT-4."""
    over = (mag > f.max) | inf
    if overflow == "saturate":
        use_ovf = np.zeros_like(over)
    elif rounding in ("rne", "stochastic"):
        use_ovf = over
    elif rounding == "rtz":
        use_ovf = over & inf
    elif rounding == "rup":
        use_ovf = over & (~sign | inf)
    else:  # rdown
        use_ovf = over & (sign | inf)
    if f.kind == "ieee":
        use_ovf = np.where(inf, overflow != "saturate", use_ovf)
    clamped = np.where(over, f.max, np.where(nan, 0.0, mag))
    code = np.where(use_ovf, _overflow_code(f, sign), _assemble(clamped, sign, f))
    if f.kind in ("ieee", "fn"):
        code = np.where(nan, codes_of(np.asarray(canonical_nan(f.name))).astype(np.uint64)
                        | np.where(sign, np.uint64(1) << np.uint64(f.bits - 1), np.uint64(0)), code)
    else:  # fp6 / fp4: NaN becomes the sign-only code, whatever its sign
        code = np.where(nan, np.uint64(1) << np.uint64(f.bits - 1), code)
    return code


def _round_int(x, f: Fmt, rounding: str, u) -> np.ndarray:
    nan = np.isnan(x)
    xf = np.where(np.isfinite(x), x, 0.0)
    n = np.floor(xf)
    frac = xf - n
    if rounding == "rne":
        step = (frac > 0.5) | ((frac == 0.5) & (np.mod(n, 2) == 1))
    elif rounding == "rtz":
        step = (xf < 0) & (frac > 0)
    elif rounding == "rup":
        step = frac > 0
    elif rounding == "rdown":
        step = np.zeros_like(frac, bool)
    else:
        step = np.asarray(u, np.float64) < frac * 2.0 ** 32
    v = n + step
    v = np.where(np.isposinf(x), f.max, np.where(np.isneginf(x), -f.max - 1, v))
    v = np.clip(v, -f.max - 1, f.max)
    v = np.where(nan, 0, v).astype(np.int64)
    return (v & ((1 << f.bits) - 1)).astype(np.uint64)


def round_values(x, fmt: str, rounding: str = "rne", overflow: str = "native", u=None) -> np.ndarray:
    """The f64 values ``x`` (exact sources) converted into ``fmt`` (NUM-CVT-2…4); ``u``: the
    elements' 32 random bits for ``rounding="stochastic"``. Returns the storage array."""
    f = FORMATS[fmt]
    x = np.asarray(x, np.float64)
    if fmt == "f64":
        return x.copy()
    if f.kind == "int":
        return from_codes(_round_int(x, f, rounding, u), fmt)
    sign = np.signbit(x)
    nan, inf = np.isnan(x), np.isinf(x)
    a = np.where(nan | inf, 0.0, np.abs(x))
    e = np.frexp(np.where(a > 0, a, 1.0))[1].astype(np.int64) - 1
    q = np.maximum(e, f.emin) - f.man_bits
    scaled = np.ldexp(a, (-q).astype(np.int32))
    n = np.floor(scaled)
    frac = scaled - n
    if rounding == "rne":
        up = (frac > 0.5) | ((frac == 0.5) & (np.mod(n, 2) == 1))
    elif rounding == "rtz":
        up = np.zeros_like(frac, bool)
    elif rounding == "rup":
        up = (frac > 0) & ~sign
    elif rounding == "rdown":
        up = (frac > 0) & sign
    elif rounding == "stochastic":
        up = np.asarray(u, np.float64) < frac * 2.0 ** 32
    else:
        raise ValueError(rounding)
    mag = np.ldexp(n + up, q.astype(np.int32))
    return from_codes(_finish(mag, sign, nan, inf, f, rounding, overflow), fmt)


def round_fraction(v, fmt: str, rounding: str = "rne", overflow: str = "native", u=None, *,
                   negative_zero: bool = False) -> np.ndarray:
    """An exact rational ``v`` (or a float special) converted into ``fmt``; a rank-0 array."""
    f = FORMATS[fmt]
    if isinstance(v, float) and not math.isfinite(v):
        return round_values(np.array(v), fmt, rounding, overflow, u)
    v = Fraction(v)
    if v == 0:
        return round_values(np.array(-0.0 if negative_zero else 0.0), fmt, rounding, overflow, u)
    if f.kind == "int" or fmt == "f64":
        # int: the value is rounded on the integer grid; f64: not needed by the cases beyond RN
        n = math.floor(v)
        frac = v - n
        if fmt == "f64":
            assert rounding == "rne"
            return np.array(float(v))  # CPython's int/int division is correctly rounded
        step = {"rne": frac > Fraction(1, 2) or (frac == Fraction(1, 2) and n % 2 == 1),
                "rtz": v < 0 and frac > 0, "rup": frac > 0, "rdown": False,
                "stochastic": u is not None and u < frac * 2 ** 32}[rounding]
        return round_values(np.array(float(n + step)), fmt, "rtz")
    sign = v < 0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = max(e, f.emin) - f.man_bits
    scaled = a / Fraction(2) ** q
    n = math.floor(scaled)
    frac = scaled - n
    up = {"rne": frac > Fraction(1, 2) or (frac == Fraction(1, 2) and n % 2 == 1), "rtz": False,
          "rup": frac > 0 and not sign, "rdown": frac > 0 and sign,
          "stochastic": u is not None and u < frac * 2 ** 32}[rounding]
    mag = math.ldexp(n + up, q) if q < 1000 else math.inf
    code = _finish(np.array(mag), np.array(sign), np.array(False), np.array(False), f, rounding, overflow)
    return from_codes(code, fmt)

