"""An independent reference for the formats and conversions (NUM-FMT-1, NUM-CVT-1 … NUM-CVT-6)
and for single IEEE operations (NUM-EW-1, NUM-EW-2), in exact rational arithmetic.

Nothing here imports ``tessera_ref``. The formats are typed in from the spec table; a code's
value is read off its bit fields; a conversion takes the exact source value as a ratio of
integers (a float's ``as_integer_ratio()``, or a :class:`fractions.Fraction`), splits it as
``(n + rem/den)·2^q`` on the target's grid and steps ``n`` by the rule of the rounding mode,
exactly as NUM-CVT-2 words it. Operations (``add``, ``mul``,
``div``, ``sqrt``, ``fma``) form the exact real result and round it once with the same code.
Values are plain Python floats (every value of every format here is exact in f64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import ml_dtypes
import numpy as np

__all__ = ["Spec", "SPECS", "NARROW", "ROUNDINGS", "OVERFLOWS", "decode",
           "all_values", "round_code", "round_codes", "round_value", "code_of", "codes_to_array", "array_codes",
           "add", "sub", "mul", "div", "sqrt", "fma", "canonical_nan", "boundary_values", "f32"]

ROUNDINGS = ("rne", "rtz", "rup", "rdown")
OVERFLOWS = ("native", "saturate")
TWO32 = 1 << 32
_HALF = Fraction(1, 2)


@dataclass(frozen=True)
class Spec:
    """One row of the table of NUM-FMT-1 (the limits typed in, not derived)."""

    name: str
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    kind: str            # "ieee", "fn" (e4m3: NaN = S.1111.111), "finite" (fp6/fp4), "scale", "int"
    max: Fraction        # largest finite value
    min_normal: Fraction | None
    min_subnormal: Fraction | None
    dtype: object        # the NumPy / ml_dtypes storage dtype (NUM-FMT-3)

    @property
    def emin(self) -> int:
        return _EMIN[self.name]

    @property
    def sign_bit(self) -> int:
        return 1 << (self.bits - 1) if self.kind not in ("scale", "int") else 0

    @property
    def code_dtype(self):
        return {64: np.uint64, 32: np.uint32, 16: np.uint16}.get(self.bits, np.uint8)


def _p2(e: int) -> Fraction:
    return Fraction(2) ** e


SPECS = {s.name: s for s in (
    Spec("f64", 64, 11, 52, 1023, "ieee", (2 - _p2(-52)) * _p2(1023), _p2(-1022), _p2(-1074), np.float64),
    Spec("f32", 32, 8, 23, 127, "ieee", (2 - _p2(-23)) * _p2(127), _p2(-126), _p2(-149), np.float32),
    Spec("f16", 16, 5, 10, 15, "ieee", Fraction(65504), _p2(-14), _p2(-24), np.float16),
    Spec("bf16", 16, 8, 7, 127, "ieee", (2 - _p2(-7)) * _p2(127), _p2(-126), _p2(-133), ml_dtypes.bfloat16),
    Spec("fp8_e4m3", 8, 4, 3, 7, "fn", Fraction(448), _p2(-6), _p2(-9), ml_dtypes.float8_e4m3fn),
    Spec("fp8_e5m2", 8, 5, 2, 15, "ieee", Fraction(57344), _p2(-14), _p2(-16), ml_dtypes.float8_e5m2),
    Spec("fp6_e2m3", 6, 2, 3, 1, "finite", Fraction(15, 2), Fraction(1), _p2(-3), ml_dtypes.float6_e2m3fn),
    Spec("fp6_e3m2", 6, 3, 2, 3, "finite", Fraction(28), _p2(-2), _p2(-4), ml_dtypes.float6_e3m2fn),
    Spec("fp4_e2m1", 4, 2, 1, 1, "finite", Fraction(6), Fraction(1), _HALF, ml_dtypes.float4_e2m1fn),
    Spec("e8m0", 8, 8, 0, 127, "scale", _p2(127), _p2(-127), None, ml_dtypes.float8_e8m0fnu),
    Spec("int8", 8, 0, 0, 0, "int", Fraction(127), None, None, np.int8),
    Spec("int4", 4, 0, 0, 0, "int", Fraction(7), None, None, ml_dtypes.int4),
)}

_EMIN = {n: s.min_normal.numerator.bit_length() - s.min_normal.denominator.bit_length()
         for n, s in SPECS.items() if s.min_normal is not None}

#: The formats of at most 16 bits (every code can be enumerated).
NARROW = ("f16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "e8m0", "int8", "int4")


# ---------------------------------------------------------------------------------------------
# decoding (NUM-FMT-1, NUM-CVT-7)

def decode(code: int, s: Spec) -> float:
    """The value of one code, read off its bit fields (a Python float: exact)."""
    if not 0 <= code < (1 << s.bits):
        raise ValueError(f"code {code} outside [0, 2^{s.bits})")
    if s.kind == "int":
        return float(code - (1 << s.bits) if code >> (s.bits - 1) else code)
    if s.kind == "scale":
        return math.nan if code == 0xFF else math.ldexp(1.0, code - s.bias)
    neg = code >> (s.bits - 1)
    e = (code >> s.man_bits) & ((1 << s.exp_bits) - 1)
    m = code & ((1 << s.man_bits) - 1)
    top = (1 << s.exp_bits) - 1
    if s.kind == "ieee" and e == top:
        mag = math.inf if m == 0 else math.nan
    elif s.kind == "fn" and e == top and m == (1 << s.man_bits) - 1:
        mag = math.nan
    elif e == 0:
        mag = math.ldexp(m, 1 - s.bias - s.man_bits)
    else:
        mag = math.ldexp((1 << s.man_bits) + m, e - s.bias - s.man_bits)
    return -mag if neg else mag


@lru_cache(maxsize=None)
def all_values(name: str) -> tuple:
    """The value of every code of a format of at most 16 bits, by code."""
    s = SPECS[name]
    return tuple(decode(c, s) for c in range(1 << s.bits))


# ---------------------------------------------------------------------------------------------
# encoding and rounding (NUM-CVT-2 … NUM-CVT-6)

def _floor_log2(a: Fraction) -> int:
    n, d = a.numerator, a.denominator
    e = n.bit_length() - d.bit_length()
    below = n < (d << e) if e >= 0 else (n << -e) < d
    return e - 1 if below else e


def _field_code(r: int, q: int, s: Spec) -> int:
    """The code (sign clear) of the representable magnitude ``r·2^q``, ``r > 0``."""
    m = s.man_bits
    if q == s.emin - m and r < (1 << m):
        return r  # subnormal: exponent field 0
    while r >= (1 << (m + 1)):
        assert r % 2 == 0, "not representable"
        r //= 2
        q += 1
    while r < (1 << m):
        r *= 2
        q -= 1
    field = q + m + s.bias
    assert 1 <= field and r - (1 << m) < (1 << m)
    return (field << m) | (r - (1 << m))


@lru_cache(maxsize=None)
def _specials(name: str) -> dict:
    s = SPECS[name]
    out = {}
    if s.kind in ("ieee", "fn", "finite"):
        a = s.max
        e = _floor_log2(a)
        q = max(e, s.emin) - s.man_bits
        out["max"] = _field_code(int(a / _p2(q)), q, s)
    top = ((1 << s.exp_bits) - 1) << s.man_bits
    if s.kind == "ieee":
        out["overflow"] = top  # inf
        out["nan"] = top | (1 << (s.man_bits - 1))  # canonical quiet NaN
    elif s.kind == "fn":
        out["overflow"] = out["nan"] = top | ((1 << s.man_bits) - 1)  # S.1111.111
    elif s.kind == "finite":
        out["overflow"] = out["max"]
    return out


def _is_nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _negative(x) -> bool:
    return math.copysign(1.0, x) < 0 if isinstance(x, float) else x < 0


def round_code(x, name: str, rounding: str = "rne", overflow: str = "native", u=None) -> int:
    """The code of ``x`` (a Python float, or an exact Fraction) converted into ``name``."""
    return round_codes(x, name, ((rounding, overflow),), u)[0]


def round_codes(x, name: str, modes, u=None) -> list:
    """The codes of ``x`` converted into ``name`` under each ``(rounding, overflow)`` of
    ``modes`` (the exact split of NUM-CVT-2 is done once)."""
    s = SPECS[name]
    if s.kind == "int":
        return [_round_int(x, s, r, u) for r, _ in modes]
    if s.kind == "scale":
        return [_round_e8m0(x, s, r, o, u) for r, o in modes]
    sp = _specials(name)
    if _is_nan(x):  # NUM-CVT-4
        nan = s.sign_bit if s.kind == "finite" else sp["nan"] | (s.sign_bit if _negative(x) else 0)
        return [nan] * len(modes)  # fp6/fp4: −0 whatever the NaN's sign
    neg = _negative(x)
    sign = s.sign_bit if neg else 0
    if isinstance(x, float) and math.isinf(x):  # NUM-CVT-3, infinite sources
        return [sign | (sp["max"] if o == "saturate" else sp["overflow"]) for _, o in modes]
    num, den = x.as_integer_ratio()  # exact: den is a power of two
    num = abs(num)
    if num == 0:
        return [sign] * len(modes)
    # |x| = (n + f)·2^q on the target's grid, f = rem/den exactly (NUM-CVT-2)
    e = num.bit_length() - den.bit_length()
    if (num << max(-e, 0)) < (den << max(e, 0)):
        e -= 1  # now 2^e <= |x| < 2^(e+1)
    m, emin = s.man_bits, _EMIN[name]
    q = max(e, emin) - m
    num, den = (num, den << q) if q >= 0 else (num << -q, den)
    n, rem = divmod(num, den)
    max_num, max_den = _MAX_RATIO[name]
    out = []
    for rounding, overflow in modes:
        up = _step_up(rounding, n, rem, den, neg, u)
        r = n + up
        if r == 0:
            out.append(sign)  # underflow to zero keeps the sign
        elif ((r << q) * max_den if q >= 0 else r * max_den) > (max_num if q >= 0 else max_num << -q):
            # NUM-CVT-3: the rounded magnitude r·2^q exceeds max
            toward_zero = rounding == "rtz" or (rounding == "rup" and neg) or (rounding == "rdown" and not neg)
            native_max = s.kind == "finite" or toward_zero
            out.append(sign | (sp["max"] if overflow == "saturate" or native_max else sp["overflow"]))
        elif q == emin - m and r < (1 << m):
            out.append(sign | r)  # subnormal: exponent field 0
        elif r == 1 << (m + 1):  # the step carried into the next binade
            out.append(sign | ((q + 1 + m + s.bias) << m))
        else:
            out.append(sign | ((q + m + s.bias) << m) | (r - (1 << m)))
    return out


_MAX_RATIO = {n: s.max.as_integer_ratio() for n, s in SPECS.items()}


def _step_up(rounding: str, n: int, rem: int, den: int, negative: bool, u) -> bool:
    """NUM-CVT-2's table for ``x = (n + rem/den)`` on a grid of spacing 1 (n the magnitude
    below, or for integer formats the value below)."""
    if rounding == "rne":
        return 2 * rem > den or (2 * rem == den and n % 2 == 1)
    if rounding == "rtz":
        return False
    if rounding == "rup":
        return rem > 0 and not negative
    if rounding == "rdown":
        return rem > 0 and negative
    if rounding == "stochastic":
        if u is None:
            raise ValueError("stochastic rounding needs the element's 32 random bits")
        return u * den < rem * TWO32
    raise ValueError(rounding)


def _round_int(x, s: Spec, rounding: str, u) -> int:
    lo, hi = -(1 << (s.bits - 1)), (1 << (s.bits - 1)) - 1
    if _is_nan(x):
        v = 0
    elif isinstance(x, float) and math.isinf(x):
        v = hi if x > 0 else lo
    else:
        num, den = x.as_integer_ratio()
        n, rem = divmod(num, den)  # x = n + rem/den, n = floor(x)
        if rounding == "rtz":
            up = rem > 0 and num < 0  # toward zero is toward +inf for negatives
        else:  # rne, rup and stochastic step toward +inf; rdown never
            up = _step_up(rounding, n, rem, den, False, u)
        v = min(max(n + up, lo), hi)  # integer formats always saturate
    return v & ((1 << s.bits) - 1)


def _round_e8m0(x, s: Spec, rounding: str, overflow: str, u) -> int:
    nan_code, max_code = 0xFF, 0xFE
    if _is_nan(x) or x == 0 or _negative(x):
        return nan_code  # NUM-CVT-6: no sign, no zero
    if isinstance(x, float) and math.isinf(x):
        return max_code if overflow == "saturate" else nan_code
    num, den = x.as_integer_ratio()
    e = num.bit_length() - den.bit_length()
    if (num << max(-e, 0)) < (den << max(e, 0)):
        e -= 1  # 2^e <= x < 2^(e+1)
    if e < -127:
        return 0  # below 2^-127: 2^-127 in every mode
    num, den = (num, den << e) if e >= 0 else (num << -e, den)  # x / 2^e = 1 + rem/den
    n, rem = divmod(num, den)
    e += _step_up(rounding, n, rem, den, False, u)  # n = 1: odd, so an rne tie goes up
    if e > 127:
        if overflow == "saturate" or rounding in ("rtz", "rdown"):
            return max_code
        return nan_code
    return e + s.bias


def code_of(value: float, name: str) -> int:
    """The code of a value the format holds exactly (NaN: the canonical one)."""
    return round_code(value, name, "rtz")


def round_value(x, name: str, rounding: str = "rne", overflow: str = "native", u=None) -> float:
    """``x`` rounded into ``name``, as a Python float."""
    return decode(round_code(x, name, rounding, overflow, u), SPECS[name])


def canonical_nan(name: str) -> int:
    return _specials(name)["nan"]


def codes_to_array(codes, name: str) -> np.ndarray:
    """Codes as an array of the format's storage dtype (sub-byte codes in the low bits)."""
    s = SPECS[name]
    return np.asarray(codes, dtype=np.uint64).astype(s.code_dtype).view(s.dtype)


def array_codes(a, name: str) -> np.ndarray:
    """The codes held by an array of the format's storage dtype."""
    s = SPECS[name]
    a = np.ascontiguousarray(a)
    assert a.dtype == np.dtype(s.dtype), f"dtype {a.dtype}, expected {np.dtype(s.dtype)}"
    return a.view(s.code_dtype)


def f32(x) -> float:
    """``x`` rounded to f32 (rne) as a Python float."""
    return round_value(x, "f32")


# ---------------------------------------------------------------------------------------------
# one IEEE operation, rounded once (NUM-EW-1, NUM-EW-2); NaN results are the canonical +NaN

_NAN = math.nan


def _finish(exact: Fraction, name: str, zero_negative: bool, rounding="rne") -> float:
    if exact == 0:
        return -0.0 if zero_negative else 0.0
    return round_value(exact, name, rounding)


def add(a: float, b: float, name: str = "f32") -> float:
    if math.isnan(a) or math.isnan(b):
        return _NAN
    if math.isinf(a) or math.isinf(b):
        if math.isinf(a) and math.isinf(b) and (a > 0) != (b > 0):
            return _NAN
        return a if math.isinf(a) else b
    neg_zero = _negative(a) and _negative(b)  # exact zero: −0 only for (−0) + (−0)
    return _finish(Fraction(a) + Fraction(b), name, neg_zero)


def sub(a: float, b: float, name: str = "f32") -> float:
    return add(a, -b, name)


def mul(a: float, b: float, name: str = "f32") -> float:
    if math.isnan(a) or math.isnan(b):
        return _NAN
    neg = _negative(a) != _negative(b)
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return _NAN
        return -math.inf if neg else math.inf
    return _finish(Fraction(a) * Fraction(b), name, neg)


def div(a: float, b: float, name: str = "f32") -> float:
    if math.isnan(a) or math.isnan(b) or (a == 0 and b == 0) or (math.isinf(a) and math.isinf(b)):
        return _NAN
    neg = _negative(a) != _negative(b)
    if math.isinf(a) or b == 0:
        return -math.inf if neg else math.inf
    if math.isinf(b):
        return -0.0 if neg else 0.0
    return _finish(Fraction(a) / Fraction(b), name, neg)


def sqrt(a: float, name: str = "f32") -> float:
    if math.isnan(a) or (a < 0):
        return _NAN
    if a == 0 or math.isinf(a):
        return a
    x = Fraction(a)
    assert x.denominator & (x.denominator - 1) == 0, "a dyadic operand (a float)"
    k = 0
    while True:  # x·4^k an integer with at least 2·(M+3) bits
        scaled = x * Fraction(4) ** k
        if scaled.denominator == 1 and scaled.numerator.bit_length() >= 2 * (SPECS[name].man_bits + 4):
            break
        k += 1
    n = scaled.numerator
    r = math.isqrt(n)
    root = Fraction(r, 1 << k) if r * r == n else Fraction(2 * r + 1, 1 << (k + 1))  # sticky
    return round_value(root, name)


def fma(a: float, b: float, c: float, name: str = "f32") -> float:
    """``a·b + c`` exactly, rounded once (NUM-EW-2)."""
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return _NAN
    pneg = _negative(a) != _negative(b)
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return _NAN
        p = -math.inf if pneg else math.inf
        if math.isinf(c) and (c > 0) != (p > 0):
            return _NAN
        return p
    if math.isinf(c):
        return c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    product_is_neg_zero = (a == 0 or b == 0) and pneg
    return _finish(exact, name, product_is_neg_zero and _negative(c))


# ---------------------------------------------------------------------------------------------
# TestFloat-style inputs: every value of a format, the midpoints between neighbours, and the
# nearest f32 / f64 values on either side of each midpoint

@lru_cache(maxsize=None)
def boundary_values(name: str, source: str = "f64") -> tuple:
    """Every finite value of ``name`` (both signs), every midpoint between consecutive
    values, the midpoint beyond ``max`` (toward the next value of the unbounded exponent
    range) and the values of ``source`` (``"f32"`` or ``"f64"``) on either side of each; plus
    ±0, ±inf, NaN and values far beyond the range. (Values and midpoints of a format of at
    most 16 bits are exact in f64, so f64 arithmetic forms them exactly.)"""
    s = SPECS[name]
    dt = np.float32 if source == "f32" else np.float64
    if s.kind == "int":
        mags = np.arange(0, (1 << (s.bits - 1)) + 1, dtype=np.float64)
    else:
        v = np.array(all_values(name), np.float64)
        mags = np.unique(np.abs(v[np.isfinite(v)]))
    grid = np.append(mags, mags[-1] + (mags[-1] - mags[-2]))
    points = np.concatenate([grid, (grid[:-1] + grid[1:]) / 2])
    if s.kind == "scale":  # below the smallest power of two
        points = np.concatenate([points, mags[:1] * [0.5, 0.25, 0.75]])
    with np.errstate(over="ignore"):
        points = points[points.astype(dt).astype(np.float64) == points].astype(dt)
        near = np.concatenate([points, np.nextafter(points, dt(0)), np.nextafter(points, dt(np.inf))])
    big = 3.0e38 if source == "f32" else 1.0e300
    near = np.concatenate([near.astype(np.float64), [0.0, grid[-1] * 4, big]])
    near = np.unique(near[np.isfinite(near) & (near >= 0)])
    with np.errstate(over="ignore"):
        near = near[near.astype(dt).astype(np.float64) == near]
    values = [-float(v) for v in near[::-1]] + [float(v) for v in near]
    return tuple(values) + (math.inf, -math.inf, math.nan, -math.nan)
