"""Independent references for the number-format conversions (NUM-FMT-*, NUM-CVT-*).

Nothing here imports ``tessera_ref``: the formats are re-described below from the spec table
(docs/spec/numerics.md, ../shared/reference/formats.md) and every rule is re-derived, so that
a test comparing the library with these functions can fail.

Two references, built differently on purpose:

(a) the *value-set* reference (:func:`ref_encode`, vectorized): enumerate every code of the
    format, decode it with the bit-field formula of :func:`decode_codes`, sort the finite
    non-negative values, and bracket each input magnitude with ``np.searchsorted`` (lower =
    largest representable <= |x|, upper = the next one; one extra "sentinel" above max stands
    for the next value of the format with an unbounded exponent range, which is what
    NUM-CVT-2 rounds to before NUM-CVT-3 handles overflow). f32 and f64 targets have too many
    codes to enumerate, so their brackets come from the hardware's own f64->f32 conversion and
    ``np.nextafter`` instead (same rounding logic afterwards).

(b) the *Fraction* reference (:func:`fraction_encode`, scalar, slow): the spec's
    ``|x| = (n + f) * 2**q`` decomposition done in exact rational arithmetic, codes assembled
    from exponent and mantissa fields. Used on a few thousand samples to cross-check (a).

Stochastic rounding takes the element's 32 random bits ``u`` as an argument (the tests get
them from ``tessera_ref.numerics.rng.random_bits``): round away from zero (toward +inf for the
integer formats) iff ``u < f * 2**32``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

__all__ = [
    "Spec", "SPECS", "FORMAT_NAMES", "ROUNDINGS", "OVERFLOWS",
    "decode_codes", "value_table", "ref_encode", "ref_decode", "fraction_encode",
    "fraction_decode", "neighbours", "round_f32",
]

ROUNDINGS = ("rne", "rtz", "rup", "rdown", "stochastic")
OVERFLOWS = ("native", "saturate")


@dataclass(frozen=True)
class Spec:
    """One format as the spec table states it (the numbers are typed in, not derived)."""

    name: str
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    kind: str          # "ieee" | "fn" (e4m3) | "finite" (fp6/fp4) | "scale" (e8m0) | "int"
    max: float         # largest finite value, from the spec table
    min_normal: float | None
    min_subnormal: float | None
    dtype_name: str    # numpy / ml_dtypes dtype name holding the values

    @property
    def signed_float(self) -> bool:
        return self.kind in ("ieee", "fn", "finite")

    @property
    def sign_mask(self) -> int:
        return 1 << (self.bits - 1) if self.signed_float else 0

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal (e8m0: of its smallest value)."""
        return -127 if self.kind == "scale" else 1 - self.bias


def _f(num, den=1):
    return float(Fraction(num, den))


SPECS: dict[str, Spec] = {s.name: s for s in (
    Spec("f64", 64, 11, 52, 1023, "ieee", 1.7976931348623157e308, 2.0 ** -1022, 2.0 ** -1074, "float64"),
    Spec("f32", 32, 8, 23, 127, "ieee", 3.4028234663852886e38, 2.0 ** -126, 2.0 ** -149, "float32"),
    Spec("f16", 16, 5, 10, 15, "ieee", 65504.0, 2.0 ** -14, 2.0 ** -24, "float16"),
    Spec("bf16", 16, 8, 7, 127, "ieee", 3.3895313892515355e38, 2.0 ** -126, 2.0 ** -133, "bfloat16"),
    Spec("fp8_e4m3", 8, 4, 3, 7, "fn", 448.0, 2.0 ** -6, 2.0 ** -9, "float8_e4m3fn"),
    Spec("fp8_e5m2", 8, 5, 2, 15, "ieee", 57344.0, 2.0 ** -14, 2.0 ** -16, "float8_e5m2"),
    Spec("fp6_e2m3", 6, 2, 3, 1, "finite", 7.5, 1.0, 2.0 ** -3, "float6_e2m3fn"),
    Spec("fp6_e3m2", 6, 3, 2, 3, "finite", 28.0, 2.0 ** -2, 2.0 ** -4, "float6_e3m2fn"),
    Spec("fp4_e2m1", 4, 2, 1, 1, "finite", 6.0, 1.0, 0.5, "float4_e2m1fn"),
    Spec("e8m0", 8, 8, 0, 127, "scale", 2.0 ** 127, 2.0 ** -127, None, "float8_e8m0fnu"),
    Spec("int8", 8, 0, 0, 0, "int", 127.0, None, None, "int8"),
    Spec("int4", 4, 0, 0, 0, "int", 7.0, None, None, "int4"),
)}
FORMAT_NAMES = tuple(SPECS)


def _code_dtype(spec: Spec):
    return {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[max(8, spec.bits)]


def nan_code(spec: Spec) -> int | None:
    """Canonical (positive) NaN code per NUM-CVT-4."""
    if spec.kind == "ieee":
        return (((1 << spec.exp_bits) - 1) << spec.man_bits) | (1 << (spec.man_bits - 1))
    if spec.kind == "fn":
        return (1 << (spec.bits - 1)) - 1          # S.1111.111
    if spec.kind == "scale":
        return 0xFF
    return None


def inf_code(spec: Spec) -> int | None:
    if spec.kind == "ieee":
        return ((1 << spec.exp_bits) - 1) << spec.man_bits
    return None


# ---------------------------------------------------------------------------------------
# decoding by the bit-field formula

def decode_codes(codes, name: str) -> np.ndarray:
    """Exact f64 values of raw codes, straight from the bit fields (NaN where NaN)."""
    spec = SPECS[name]
    c = np.asarray(codes).astype(np.uint64)
    if spec.name == "f64":
        return c.view(np.float64).copy()
    if spec.kind == "int":
        v = c.astype(np.int64)
        return np.where(v >= (1 << (spec.bits - 1)), v - (1 << spec.bits), v).astype(np.float64)
    if spec.kind == "scale":
        e = c.astype(np.int64)
        return np.where(e == 255, np.nan, np.ldexp(1.0, (e - 127).astype(np.int32)))
    M, E = spec.man_bits, spec.exp_bits
    sign = (c >> np.uint64(spec.bits - 1)) & np.uint64(1)
    ef = ((c >> np.uint64(M)) & np.uint64((1 << E) - 1)).astype(np.int64)
    mf = (c & np.uint64((1 << M) - 1)).astype(np.int64)
    # value = m * 2**(1-bias-M) for ef == 0, (2**M + m) * 2**(ef-bias-M) otherwise
    sig = np.where(ef == 0, mf, mf + (1 << M)).astype(np.float64)
    ex = np.where(ef == 0, 1, ef) - spec.bias - M
    mag = np.ldexp(sig, ex.astype(np.int32))
    top = ef == (1 << E) - 1
    if spec.kind == "ieee":
        mag = np.where(top & (mf == 0), np.inf, mag)
        mag = np.where(top & (mf != 0), np.nan, mag)
    elif spec.kind == "fn":
        mag = np.where(top & (mf == (1 << M) - 1), np.nan, mag)
    return np.where(sign == 1, -mag, mag)


@lru_cache(maxsize=None)
def value_table(name: str):
    """(magnitudes, their codes, lower-is-odd flags, sentinel) for a <=16-bit float format.

    ``magnitudes`` are the sorted finite non-negative values (exact f64), ``codes`` the
    sign-clear codes holding them. ``odd[i]`` says whether ``magnitudes[i]``'s integer
    significand is odd (ties go away from an odd lower neighbour): the code's mantissa LSB,
    and always odd for e8m0 (significand 1). ``sentinel`` is the next value above max with an
    unbounded exponent range (max + the quantum of max's binade).
    """
    spec = SPECS[name]
    assert spec.bits <= 16 and spec.kind != "int"
    codes = np.arange(1 << spec.bits, dtype=np.uint64)
    vals = decode_codes(codes, name)
    keep = np.isfinite(vals) & ~np.signbit(vals)
    vals, codes = vals[keep], codes[keep]
    order = np.argsort(vals, kind="stable")
    vals, codes = vals[order], codes[order]
    assert np.all(np.diff(vals) > 0), "duplicate magnitudes"
    vmax = vals[-1]
    assert vmax == spec.max, (name, vmax, spec.max)
    quantum_top = math.ldexp(1.0, math.frexp(vmax)[1] - 1 - spec.man_bits)
    sentinel = vmax + quantum_top
    odd = np.ones(vals.shape, bool) if spec.kind == "scale" else (codes & np.uint64(1)) == 1
    return vals, codes, odd, sentinel


def neighbours(a: np.ndarray, name: str):
    """Bracket finite magnitudes ``a >= 0``: (lo, lo_code, lo_odd, hi, hi_code, beyond).

    ``lo`` = largest representable magnitude <= a, ``hi`` = the next magnitude above ``lo``
    (the sentinel above max), ``beyond`` = ``a >= sentinel`` (certain overflow).
    """
    spec = SPECS[name]
    a = np.asarray(a, dtype=np.float64)
    if spec.bits <= 16:
        vals, codes, odd, sentinel = value_table(name)
        vals_ext = np.append(vals, sentinel)
        codes_ext = np.append(codes, np.uint64(0))
        beyond = a >= sentinel
        i = np.searchsorted(vals, np.where(beyond, 0.0, a), side="right") - 1
        return vals[i], codes[i], odd[i], vals_ext[i + 1], codes_ext[i + 1], beyond
    if spec.name == "f32":
        sentinel = 2.0 ** 128
        beyond = a >= sentinel
        af = np.where(beyond, 0.0, a)
        with np.errstate(over="ignore"):
            y = af.astype(np.float32)          # the hardware's rne conversion (may give inf)
        y = np.where(y.astype(np.float64) > af, np.nextafter(y, np.float32(0)), y)
        lo = y
        with np.errstate(over="ignore"):
            hi = np.nextafter(lo, np.float32(np.inf))
        lo_code = lo.view(np.uint32).astype(np.uint64)
        hi_code = hi.view(np.uint32).astype(np.uint64)
        hi64 = np.where(np.isinf(hi), sentinel, hi.astype(np.float64))
        return lo.astype(np.float64), lo_code, (lo_code & np.uint64(1)) == 1, hi64, hi_code, beyond
    assert spec.name == "f64"
    lo = a.copy()
    hi = np.nextafter(lo, np.inf)
    lo_code = lo.view(np.uint64)
    return lo, lo_code, (lo_code & np.uint64(1)) == 1, hi, hi.view(np.uint64), np.zeros(a.shape, bool)


# ---------------------------------------------------------------------------------------
# (a) the value-set reference

def _up_magnitude(rounding, frac, lo_odd, neg, u):
    """Whether the magnitude moves from the lower to the upper neighbour (NUM-CVT-2)."""
    if rounding == "rne":
        return (frac > 0.5) | ((frac == 0.5) & lo_odd)
    if rounding == "rtz":
        return np.zeros(frac.shape, bool)
    if rounding == "rup":
        return (frac > 0) & ~neg
    if rounding == "rdown":
        return (frac > 0) & neg
    if rounding == "stochastic":
        assert u is not None, "stochastic needs the random bits u"
        return np.asarray(u).astype(np.float64) < frac * 4294967296.0
    raise ValueError(rounding)


def _overflow_to_max(rounding, overflow, neg):
    """On overflow: True where the result is +-max, False where the format's overflow value."""
    if overflow == "saturate" or rounding == "rtz":
        return np.ones(neg.shape, bool)
    if rounding == "rup":
        return neg.copy()
    if rounding == "rdown":
        return ~neg
    return np.zeros(neg.shape, bool)


def ref_encode(x, name: str, rounding: str = "rne", overflow: str = "native", u=None) -> np.ndarray:
    """Codes (uint64) of the exact f64 values ``x`` converted to ``name`` per the spec."""
    spec = SPECS[name]
    with np.errstate(invalid="ignore"):  # signalling NaNs widen quietly
        x = np.asarray(x).astype(np.float64)
    if rounding == "stochastic":
        u = np.broadcast_to(np.asarray(u), x.shape)
    if spec.kind == "int":
        return _ref_int(x, spec, rounding, u)
    if spec.kind == "scale":
        return _ref_e8m0(x, spec, rounding, overflow, u)
    nan = np.isnan(x)
    neg = np.signbit(x)
    a = np.abs(x)
    inf = np.isinf(a)
    af = np.where(nan | inf, 0.0, a)
    lo, lo_code, lo_odd, hi, hi_code, beyond = neighbours(af, name)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        frac = np.where(beyond, 0.0, (af - lo) / (hi - lo))
    assert np.all((frac >= 0) & (frac < 1))
    up = _up_magnitude(rounding, frac, lo_odd, neg, u)
    mag_code = np.where(up, hi_code, lo_code)
    mag_val = np.where(up, hi, lo)
    over = beyond | (mag_val > spec.max)

    max_code = _max_code(spec)
    if spec.kind == "ieee":
        ovf_code = inf_code(spec)
    elif spec.kind == "fn":
        ovf_code = nan_code(spec)
    else:  # finite: no specials, the overflow value is max
        ovf_code = max_code
    to_max = _overflow_to_max(rounding, overflow, neg)
    codes = np.where(over, np.where(to_max, np.uint64(max_code), np.uint64(ovf_code)), mag_code)
    inf_val = max_code if overflow == "saturate" else ovf_code
    codes = np.where(inf, np.uint64(inf_val), codes)
    codes = codes | np.where(neg, np.uint64(spec.sign_mask), np.uint64(0))
    if spec.kind in ("ieee", "fn"):
        codes = np.where(nan, np.uint64(nan_code(spec)) | np.where(neg, np.uint64(spec.sign_mask), np.uint64(0)), codes)
    else:  # fp6 / fp4: NaN -> the sign-only code, whatever the NaN's sign
        codes = np.where(nan, np.uint64(spec.sign_mask), codes)
    return codes


def _max_code(spec: Spec) -> int:
    if spec.bits <= 16:
        vals, codes, _, _ = value_table(spec.name)
        return int(codes[-1])
    if spec.name == "f32":
        return 0x7F7FFFFF
    return 0x7FEFFFFFFFFFFFFF


def _ref_e8m0(x, spec, rounding, overflow, u):
    vals, codes, odd, sentinel = value_table(spec.name)
    nan = np.isnan(x)
    bad = nan | (x <= 0)                     # NaN, +-0, negatives, -inf -> NaN (0xFF)
    inf = np.isposinf(x)
    tiny = (x > 0) & (x < 2.0 ** -127)
    a = np.where(bad | inf | tiny, 1.0, x)
    lo, lo_code, lo_odd, hi, hi_code, beyond = neighbours(a, spec.name)
    with np.errstate(over="ignore", invalid="ignore"):
        frac = np.where(beyond, 0.0, (a - lo) / (hi - lo))
    neg = np.zeros(x.shape, bool)
    up = _up_magnitude(rounding, frac, lo_odd, neg, u)
    over = beyond | (np.where(up, hi, lo) > spec.max)
    to_max = _overflow_to_max(rounding, overflow, neg)
    codes = np.where(up, hi_code, lo_code)
    codes = np.where(over, np.where(to_max, np.uint64(254), np.uint64(255)), codes)
    codes = np.where(inf, np.uint64(254 if overflow == "saturate" else 255), codes)
    codes = np.where(tiny, np.uint64(0), codes)
    return np.where(bad, np.uint64(255), codes)


def _ref_int(x, spec, rounding, u):
    lo_lim, hi_lim = -(1 << (spec.bits - 1)), (1 << (spec.bits - 1)) - 1
    grid = np.arange(lo_lim - 1, hi_lim + 2, dtype=np.float64)   # one sentinel each side
    nan = np.isnan(x)
    xc = np.clip(np.where(nan, 0.0, x), grid[0], grid[-1])
    i = np.clip(np.searchsorted(grid, xc, side="right") - 1, 0, len(grid) - 2)
    lo, hi = grid[i], grid[i + 1]
    frac = xc - lo                                  # exact: |x| is small here
    lo_odd = np.fmod(lo, 2) != 0
    if rounding == "rne":
        up = (frac > 0.5) | ((frac == 0.5) & lo_odd)
    elif rounding == "rtz":
        up = (frac > 0) & (xc < 0)
    elif rounding == "rup":
        up = frac > 0
    elif rounding == "rdown":
        up = np.zeros(x.shape, bool)
    else:
        up = np.asarray(u).astype(np.float64) < frac * 4294967296.0
    v = np.clip(np.where(up, hi, lo), lo_lim, hi_lim)
    v = np.where(nan, 0.0, v).astype(np.int64)
    return (v & ((1 << spec.bits) - 1)).astype(np.uint64)


def ref_decode(codes, name: str) -> np.ndarray:
    """Alias of :func:`decode_codes` (f64 values)."""
    return decode_codes(codes, name)


# ---------------------------------------------------------------------------------------
# (b) the Fraction reference (scalar, exact rational arithmetic)

def _floor_log2(q: Fraction) -> int:
    """floor(log2(q)) for a positive rational, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    # 2**e <= q < 2**(e+1) may be off by one: fix it
    if Fraction(2) ** e > q:
        e -= 1
    elif Fraction(2) ** (e + 1) <= q:
        e += 1
    assert Fraction(2) ** e <= q < Fraction(2) ** (e + 1)
    return e


def _max_fraction(spec: Spec) -> Fraction:
    return Fraction(spec.max)


def _magnitude_code(v: Fraction, spec: Spec) -> int:
    """Code (sign clear) of an exactly representable magnitude ``v`` by the field layout."""
    M = spec.man_bits
    if v == 0:
        return 0
    e = _floor_log2(v)
    if spec.kind == "scale":
        assert v == Fraction(2) ** e
        return e + spec.bias
    if e < spec.emin:                       # subnormal: exponent field 0
        m = v / Fraction(2) ** (spec.emin - M)
        assert m.denominator == 1 and 0 < m < (1 << M)
        return int(m)
    m = v / Fraction(2) ** (e - M) - (1 << M)
    assert m.denominator == 1 and 0 <= m < (1 << M)
    return ((e + spec.bias) << M) | int(m)


def fraction_encode(x, name: str, rounding: str = "rne", overflow: str = "native", u: int | None = None) -> int:
    """The code of one value ``x`` (a Python float/int, or Fraction) per the spec, exactly."""
    spec = SPECS[name]
    if isinstance(x, Fraction):
        is_nan = is_inf = False
        neg = x < 0
    else:
        x = float(x)
        is_nan, is_inf = math.isnan(x), math.isinf(x)
        neg = math.copysign(1.0, x) < 0
    smask = spec.sign_mask if neg else 0

    if spec.kind == "int":
        lo_lim, hi_lim = -(1 << (spec.bits - 1)), (1 << (spec.bits - 1)) - 1
        if is_nan:
            return 0
        if is_inf:
            v = lo_lim if neg else hi_lim
        else:
            X = Fraction(x)
            n = math.floor(X)
            f = X - n
            if rounding == "rne":
                up = f > Fraction(1, 2) or (f == Fraction(1, 2) and n % 2 == 1)
            elif rounding == "rtz":
                up = f > 0 and X < 0
            elif rounding == "rup":
                up = f > 0
            elif rounding == "rdown":
                up = False
            else:
                up = Fraction(u, 1 << 32) < f
            v = min(max(n + int(up), lo_lim), hi_lim)
        return v & ((1 << spec.bits) - 1)

    if spec.kind == "scale":
        if is_nan or neg or x == 0:
            return 0xFF
        if is_inf:
            return 254 if overflow == "saturate" else 0xFF
        if Fraction(x) < Fraction(2) ** -127:
            return 0

    if is_nan:
        if spec.kind in ("ieee", "fn"):
            return nan_code(spec) | smask
        return spec.sign_mask             # fp6/fp4: the sign-only code
    max_code = _magnitude_code(_max_fraction(spec), spec)
    if spec.kind == "ieee":
        ovf = inf_code(spec)
    elif spec.kind in ("fn", "scale"):
        ovf = nan_code(spec)
    else:
        ovf = max_code
    if is_inf:
        return (max_code if overflow == "saturate" else ovf) | smask

    A = abs(Fraction(x))
    if A == 0:
        return smask
    M = spec.man_bits
    e = _floor_log2(A)
    q = Fraction(2) ** (max(e, spec.emin) - M)
    S = A / q
    n = math.floor(S)
    f = S - n
    if rounding == "rne":
        up = f > Fraction(1, 2) or (f == Fraction(1, 2) and n % 2 == 1)
    elif rounding == "rtz":
        up = False
    elif rounding == "rup":
        up = f > 0 and not neg
    elif rounding == "rdown":
        up = f > 0 and neg
    elif rounding == "stochastic":
        up = Fraction(u, 1 << 32) < f
    else:
        raise ValueError(rounding)
    V = (n + int(up)) * q
    if V > _max_fraction(spec):
        if overflow == "saturate" or rounding == "rtz":
            to_max = True
        elif rounding == "rup":
            to_max = neg
        elif rounding == "rdown":
            to_max = not neg
        else:
            to_max = False
        return (max_code if to_max else ovf) | smask
    return _magnitude_code(V, spec) | smask


def fraction_decode(code: int, name: str):
    """Exact value of a code as a Fraction, or the string "nan" / float +-inf."""
    spec = SPECS[name]
    if spec.kind == "int":
        return Fraction(code - (1 << spec.bits) if code >= (1 << (spec.bits - 1)) else code)
    if spec.kind == "scale":
        return "nan" if code == 255 else Fraction(2) ** (code - 127)
    M, E = spec.man_bits, spec.exp_bits
    s = code >> (spec.bits - 1)
    ef = (code >> M) & ((1 << E) - 1)
    m = code & ((1 << M) - 1)
    if spec.kind == "ieee" and ef == (1 << E) - 1:
        return "nan" if m else (-math.inf if s else math.inf)
    if spec.kind == "fn" and ef == (1 << E) - 1 and m == (1 << M) - 1:
        return "nan"
    if ef == 0:
        v = m * Fraction(2) ** (1 - spec.bias - M)
    else:
        v = ((1 << M) + m) * Fraction(2) ** (ef - spec.bias - M)
    return -v if s else v


def round_f32(q: Fraction) -> np.float32:
    """The rational ``q`` rounded once to nearest even f32 (normal and subnormal range; the
    callers stay below the overflow threshold). The reference for exact f32 dot products."""
    if q == 0:
        return np.float32(0.0)
    e = math.floor(math.log2(abs(q)))
    while Fraction(2) ** e > abs(q):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(q):
        e += 1
    spacing = Fraction(2) ** (max(e, -126) - 23)
    whole, frac = divmod(q / spacing, 1)
    if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and whole % 2):
        whole += 1
    return np.float32(float(whole * spacing))
