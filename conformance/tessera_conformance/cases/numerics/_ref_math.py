"""The NUM-MATH algorithms transcribed from the spec, one Python-float operation at a time.

Python floats are IEEE-754 binary64 and CPython evaluates ``+ - * /`` one correctly rounded
operation at a time (nothing is contracted), ``math.sqrt`` is correctly rounded and
``math.frexp``/``math.floor`` are exact: so a literal transcription of each clause gives the
bits the clause defines. Nothing here imports ``tessera_ref`` or calls a host ``exp``/``log``.
The erf coefficients are fdlibm's (s_erf.c), typed in from their IEEE bit patterns; π/2 for
the exact argument reduction comes from Machin's formula in integers.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

__all__ = ["horner", "rint", "log", "exp", "sincos_turns", "log_factorial", "sin", "cos", "expm1",
           "tanh", "erf", "erfc", "sigmoid", "silu", "rsqrt", "pow_", "gelu", "gelu_tanh", "FUNCTIONS"]

H = float.fromhex
NAN, INF = math.nan, math.inf


def _w(hi: int, lo: int) -> float:
    """The double with the given high and low 32-bit words."""
    return struct.unpack(">d", struct.pack(">II", hi, lo))[0]


def horner(z: float, coeffs) -> float:
    """NUM-MATH-1: ``p = c_n``, then ``p = (p ⊗ z) ⊕ c_j`` for ``j = n−1 … 0``."""
    p = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        p = p * z + c
    return p


def rint(v: float) -> float:
    """Round to integral, ties to even, keeping the sign of a zero result."""
    return math.copysign(float(round(v)), v)


def _pow2(k: int) -> float:
    return math.ldexp(1.0, k)


# -- NUM-MATH-2 log -------------------------------------------------------------------------------
LN2_HI, LN2_LO = H("0x1.62e42fee00000p-1"), H("0x1.a39ef35793c76p-33")
LG = tuple(map(H, ("0x1.5555555555593p-1", "0x1.999999997fa04p-2", "0x1.2492494229359p-2",
                   "0x1.c71c51d8e78afp-3", "0x1.7466496cb03dep-3", "0x1.39a09d078c69fp-3",
                   "0x1.2f112df3e5244p-3")))


def log(x: float) -> float:
    if math.isnan(x) or x < 0:
        return NAN
    if x == 0:
        return -INF
    if math.isinf(x):
        return INF
    m, e = math.frexp(x)
    if m < H("0x1.6a09e667f3bcdp-1"):
        m, e = 2.0 * m, e - 1
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    R = z * horner(z, LG)
    hfsq = (0.5 * f) * f
    k = float(e)
    return (k * LN2_HI) - ((hfsq - ((s * (hfsq + R)) + (k * LN2_LO))) - f)


# -- NUM-MATH-3 exp -------------------------------------------------------------------------------
INV_LN2 = H("0x1.71547652b82fep+0")
EXP_OVER, EXP_UNDER = H("0x1.62e42fefa39efp+9"), H("-0x1.74910d52d3051p+9")
P = tuple(map(H, ("0x1.555555555553ep-3", "-0x1.6c16c16bebd93p-9", "0x1.1566aaf25de2cp-14",
                  "-0x1.bbd41c5d26bf1p-20", "0x1.6376972bea4d0p-25")))


def _scale(y: float, k: float) -> float:
    k1 = math.floor(k / 2)
    k2 = int(k) - k1
    return (y * _pow2(k1)) * _pow2(k2)


def exp(x: float) -> float:
    if math.isnan(x):
        return NAN
    if x > EXP_OVER:
        return INF
    if x < EXP_UNDER:
        return 0.0
    k = rint(x * INV_LN2)
    hi = x - (k * LN2_HI)
    lo = k * LN2_LO
    r = hi - lo
    z = r * r
    c = r - (z * horner(z, P))
    y = 1.0 - ((lo - ((r * c) / (2.0 - c))) - hi)
    return _scale(y, k)


# -- NUM-MATH-4 sincos_turns ------------------------------------------------------------------------
S = tuple(map(H, ("0x1.921fb54442d18p+0", "-0x1.4abbce625be53p-1", "0x1.466bc6775aae2p-4",
                  "-0x1.32d2cce62bd86p-8", "0x1.50783487ee782p-13", "-0x1.e3074fde8871fp-19",
                  "0x1.e8f434d018d63p-25", "-0x1.6fadb9f155744p-31", "0x1.aaec32af93359p-38")))
C = tuple(map(H, ("0x1.0000000000000p+0", "-0x1.3bd3cc9be45dep+0", "0x1.03c1f081b5ac4p-2",
                  "-0x1.55d3c7e3cbffap-6", "0x1.e1f506891babbp-11", "-0x1.a6d1f2a204a8cp-16",
                  "0x1.f9d38a3763cc3p-22", "-0x1.b6e24f44b128fp-28", "0x1.20c62c2f2d7f5p-34")))


def sincos_turns(t: float):
    if math.isnan(t) or math.isinf(t):
        return NAN, NAN
    if t == 0:
        return t, 1.0
    r = t - rint(t)
    y = 4.0 * r
    j = rint(y)
    x = y - j
    z = x * x
    s = x * horner(z, S)
    c = horner(z, C)
    return ((s, c), (c, -s), (-s, -c), (-c, s))[int(j) % 4]


# -- NUM-MATH-5 log_factorial -----------------------------------------------------------------------
LOGFACT = tuple(map(H, ("0x0p+0", "0x0p+0", "0x1.62e42fefa39efp-1", "0x1.cab0bfa2a2002p+0",
                        "0x1.96ca77c922cf9p+1", "0x1.326643c4479c9p+2", "0x1.a51273acf01cap+2",
                        "0x1.10ce1f32dcc30p+3", "0x1.5358e82fcb70dp+3", "0x1.99a8921a7f7cfp+3")))
HALF_LOG_2PI = H("0x1.d67f1c864beb5p-1")
B = tuple(map(H, ("0x1.5555555555555p-4", "-0x1.6c16c16c16c17p-9", "0x1.a01a01a01a01ap-11",
                  "-0x1.3813813813814p-11", "0x1.b951e2b18ff23p-11", "-0x1.f6ab0d9993c7dp-10",
                  "0x1.a41a41a41a41ap-8", "-0x1.e4286cb0f5398p-6")))


def log_factorial(k: float) -> float:
    if math.isinf(k):
        return INF
    if k < 10:
        return LOGFACT[int(k)]
    x = k + 1.0
    w = 1.0 / x
    z = w * w
    return (((x - 0.5) * log(x)) - x) + (HALF_LOG_2PI + (w * horner(z, B)))


# -- NUM-MATH-6 sin, cos -------------------------------------------------------------------------
INV_PIO2 = H("0x1.45f306dc9c883p-1")
P1, P2, P3 = H("0x1.921fb54400000p+0"), H("0x1.0b4611a600000p-34"), H("0x1.3198a2e000000p-69")
P3T = H("0x1.b839a252049c1p-104")
CW_MAX = H("0x1.921fb54442d18p+20")


def _pi_scaled(bits: int) -> int:
    """floor(π·2^bits), from Machin's formula π = 16·atan(1/5) − 4·atan(1/239) in integers."""
    guard = bits + 64
    one = 1 << guard

    def atan_inv(n: int) -> int:
        total, term, k, n2 = 0, one // n, 1, n * n
        while term:
            total += term // k if (k // 2) % 2 == 0 else -(term // k)
            term //= n2
            k += 2
        return total

    return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 64


PIO2_INT = _pi_scaled(1599)  # floor(2^1600 · π/2)


def _two_sum(a: float, b: float):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _reduce(x: float):
    if abs(x) <= CW_MAX:
        k = rint(x * INV_PIO2)
        a = x - (k * P1)
        s1, e1 = _two_sum(a, -(k * P2))
        s2, e2 = _two_sum(s1, -(k * P3))
        lo = (e1 + e2) - (k * P3T)
        hi = s2 + lo
        lo = lo - (hi - s2)
        return int(k), hi, lo
    xf = Fraction(x)
    t = xf * (1 << 1600) / PIO2_INT
    k = round(t)  # Fraction.__round__: nearest, ties to even
    rho = xf - Fraction(k * PIO2_INT, 1 << 1600)
    hi = float(rho)  # correctly rounded
    lo = float(rho - Fraction(hi))
    return k, hi, lo


def _sincos_rad(x: float):
    if math.isnan(x) or math.isinf(x):
        return NAN, NAN
    if x == 0:
        return x, 1.0
    k, hi, lo = _reduce(x)
    hz = 0.5 * (hi * hi)
    u = hi * INV_PIO2
    z = u * u
    s = hi + ((((u * z) * horner(z, S[1:])) + (lo * (1.0 - hz))))
    v = 1.0 - hz
    c = v + (((1.0 - v) - hz) + (((z * z) * horner(z, C[2:])) - (hi * lo)))
    q = k % 4
    return (s, c, -s, -c)[q], (c, -s, -c, s)[q]


def sin(x: float) -> float:
    return _sincos_rad(x)[0]


def cos(x: float) -> float:
    return _sincos_rad(x)[1]


# -- NUM-MATH-7 expm1 ------------------------------------------------------------------------------
EXPM1_NEG = H("-0x1.3687a00000000p+5")
Q = (1.0,) + tuple(map(H, ("-0x1.11111111110f4p-5", "0x1.a01a019fe5585p-10", "-0x1.4ce199eaadbb7p-14",
                           "0x1.0cfca86e65239p-18", "-0x1.afdb76e09c32dp-23")))


def expm1(x: float) -> float:
    if math.isnan(x):
        return NAN
    if x > EXP_OVER:
        return INF
    if x <= EXPM1_NEG:
        return -1.0
    if abs(x) < _pow2(-54):
        return x
    k = rint(x * INV_LN2)
    hi = x - (k * LN2_HI)
    lo = k * LN2_LO
    r = hi - lo
    c = (hi - r) - lo
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = horner(hxs, Q)
    t = 3.0 - (r1 * hfx)
    e = hxs * ((r1 - t) / (6.0 - (r * t)))
    ki = int(k)
    if ki == 0:
        return r - ((r * e) - hxs)
    e = ((r * (e - c)) - c) - hxs
    if ki == -1:
        return (0.5 * (r - e)) - 0.5
    if ki == 1:
        if r < -0.25:
            return -2.0 * (e - (r + 0.5))
        return 1.0 + (2.0 * (r - e))
    if ki <= -2 or ki > 56:
        y = 1.0 - (e - r)
        return _scale(y, k) - 1.0
    if ki < 20:
        return ((1.0 - _pow2(-ki)) - (e - r)) * _pow2(ki)
    return ((r - (e + _pow2(-ki))) + 1.0) * _pow2(ki)


# -- NUM-MATH-8 tanh -------------------------------------------------------------------------------
def tanh(x: float) -> float:
    if math.isnan(x):
        return NAN
    a = abs(x)
    if a < _pow2(-55):
        return x
    if a >= 22:
        z = 1.0
    elif a >= 1:
        t = expm1(2.0 * a)
        z = 1.0 - (2.0 / (t + 2.0))
    else:
        t = expm1(-2.0 * a)
        z = (-t) / (t + 2.0)
    return z if x > 0 else -z


# -- NUM-MATH-9 erf, erfc (fdlibm s_erf.c, coefficients from their bit patterns) ---------------------
ERX = _w(0x3FEB0AC1, 0x60000000)
EFX = _w(0x3FC06EBA, 0x8214DB69)
EFX8 = _w(0x3FF06EBA, 0x8214DB69)
PP = tuple(_w(*p) for p in ((0x3FC06EBA, 0x8214DB68), (0xBFD4CD7D, 0x691CB913), (0xBF9D2A51, 0xDBD7194F),
                            (0xBF77A291, 0x236668E4), (0xBEF8EAD6, 0x120016AC)))
QQ = (1.0,) + tuple(_w(*p) for p in ((0x3FD97779, 0xCDDADC09), (0x3FB0A54C, 0x5536CEBA),
                                     (0x3F74D022, 0xC4D36B0F), (0x3F215DC9, 0x221C1A10),
                                     (0xBED09C43, 0x42A26120)))
PA = tuple(_w(*p) for p in ((0xBF6359B8, 0xBEF77538), (0x3FDA8D00, 0xAD92B34D), (0xBFD7D240, 0xFBB8C3F1),
                            (0x3FD45FCA, 0x805120E4), (0xBFBC6398, 0x3D3E28EC), (0x3FA22A36, 0x599795EB),
                            (0xBF61BF38, 0x0A96073F)))
QA = (1.0,) + tuple(_w(*p) for p in ((0x3FBB3E66, 0x18EEE323), (0x3FE14AF0, 0x92EB6F33),
                                     (0x3FB2635C, 0xD99FE9A7), (0x3FC02660, 0xE763351F),
                                     (0x3F8BEDC2, 0x6B51DD1C), (0x3F888B54, 0x5735151D)))
RA = tuple(_w(*p) for p in ((0xBF843412, 0x600D6435), (0xBFE63416, 0xE4BA7360), (0xC0251E04, 0x41B0E726),
                            (0xC04F300A, 0xE4CBA38D), (0xC0644CB1, 0x84282266), (0xC067135C, 0xEBCCABB2),
                            (0xC0545265, 0x57E4D2F2), (0xC023A0EF, 0xC69AC25C)))
SA = (1.0,) + tuple(_w(*p) for p in ((0x4033A6B9, 0xBD707687), (0x4061350C, 0x526AE721),
                                     (0x407B290D, 0xD58A1A71), (0x40842B19, 0x21EC2868),
                                     (0x407AD021, 0x57700314), (0x405B28A3, 0xEE48AE2C),
                                     (0x401A47EF, 0x8E484A93), (0xBFAEEFF2, 0xEE749A62)))
RB = tuple(_w(*p) for p in ((0xBF843412, 0x39E86F4A), (0xBFE993BA, 0x70C285DE), (0xC031C209, 0x555F995A),
                            (0xC064145D, 0x43C5ED98), (0xC083EC88, 0x1375F228), (0xC0900461, 0x6A2E5992),
                            (0xC07E384E, 0x9BDC383F)))
SB = (1.0,) + tuple(_w(*p) for p in ((0x403E568B, 0x261D5190), (0x40745CAE, 0x221B9F0A),
                                     (0x409802EB, 0x189D5118), (0x40A8FFB7, 0x688C246A),
                                     (0x40A3F219, 0xCEDF3BE6), (0x407DA874, 0xE79FE763),
                                     (0xC03670E2, 0x42712D62)))
ERF_RA_MAX = H("0x1.6db6d00000000p+1")


def _low_cleared(a: float) -> float:
    bits = struct.unpack("<Q", struct.pack("<d", a))[0] & ~0xFFFFFFFF
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _erfc_tail(a: float) -> float:
    """``q`` of the third branch of NUM-MATH-9 (``a ≥ 1.25``)."""
    s = 1.0 / (a * a)
    if a < ERF_RA_MAX:
        RS = horner(s, RA) / horner(s, SA)
    else:
        RS = horner(s, RB) / horner(s, SB)
    zc = _low_cleared(a)
    return (exp(((-zc) * zc) - 0.5625) * exp(((zc - a) * (zc + a)) + RS)) / a


def _pq_small(x: float) -> float:
    z = x * x
    return horner(z, PP) / horner(z, QQ)


def _pq_mid(a: float) -> float:
    s = a - 1.0
    return horner(s, PA) / horner(s, QA)


def erf(x: float) -> float:
    if math.isnan(x):
        return NAN
    a = abs(x)
    if a < 0.84375:
        if a < _pow2(-28):
            if a < _pow2(-1022):
                return 0.125 * ((8.0 * x) + (EFX8 * x))
            return x + (EFX * x)
        return x + (x * _pq_small(x))
    if a < 1.25:
        pq = _pq_mid(a)
        return ERX + pq if x > 0 else -ERX - pq
    if a >= 6:
        return 1.0 if x > 0 else -1.0
    q = _erfc_tail(a)
    return 1.0 - q if x > 0 else q - 1.0


def erfc(x: float) -> float:
    if math.isnan(x):
        return NAN
    a = abs(x)
    if a < 0.84375:
        if a < _pow2(-56):
            return 1.0 - x
        y = _pq_small(x)
        if x < 0.25:
            return 1.0 - (x + (x * y))
        return 0.5 - ((x * y) + (x - 0.5))
    if a < 1.25:
        pq = _pq_mid(a)
        return (1.0 - ERX) - pq if x > 0 else 1.0 + (ERX + pq)
    if x >= 28:
        return 0.0
    if x <= -6:
        return 2.0
    q = _erfc_tail(a)
    return q if x > 0 else 2.0 - q


# -- NUM-MATH-10 … 13 ------------------------------------------------------------------------------
def sigmoid(x: float) -> float:
    if math.isnan(x):
        return NAN
    if x >= 0:
        return 1.0 / (1.0 + exp(-x))
    e = exp(x)
    return e / (1.0 + e)


def silu(x: float) -> float:
    if x == -INF:
        return -0.0
    return x * sigmoid(x)


def rsqrt(x: float) -> float:
    if math.isnan(x) or x < 0:
        return NAN
    if x == 0:
        return math.copysign(INF, x)
    if math.isinf(x):
        return 0.0
    return 1.0 / math.sqrt(x)


def _odd_integer(y: float) -> bool:
    return math.isfinite(y) and math.floor(y) == y and math.floor(y * 0.5) != y * 0.5


def pow_(x: float, y: float) -> float:
    if y == 0:
        return 1.0
    if x == 1.0:
        return 1.0
    if math.isnan(x) or math.isnan(y):
        return NAN
    if math.isinf(y):
        if abs(x) == 1:
            return 1.0
        small = abs(x) < 1
        return (0.0 if small else INF) if y > 0 else (INF if small else 0.0)
    odd = _odd_integer(y)
    if x == 0:
        if y < 0:
            return math.copysign(INF, x) if odd else INF
        return x if odd else 0.0
    if math.isinf(x):
        if y < 0:
            return math.copysign(0.0, x) if odd else 0.0
        return x if odd else INF
    if x < 0 and math.floor(y) != y:
        return NAN
    r = exp(y * log(abs(x)))
    return -r if (x < 0 and odd) else r


SQRT_HALF = H("0x1.6a09e667f3bcdp-1")
GELU_C, GELU_K = H("0x1.6e4e26d4801f7p-5"), H("0x1.9884533d43651p+0")


def gelu(x: float) -> float:
    if x == -INF:
        return -0.0
    return (0.5 * x) * erfc(-(x * SQRT_HALF))


def gelu_tanh(x: float) -> float:
    if x == -INF:
        return -0.0
    v = x + (GELU_C * ((x * x) * x))
    return x * sigmoid(GELU_K * v)


#: The unary graph ops whose f64 bits are these algorithms (NUM-MATH-k → function).
FUNCTIONS = {"log": log, "exp": exp, "sin": sin, "cos": cos, "expm1": expm1, "tanh": tanh, "erf": erf,
             "erfc": erfc, "sigmoid": sigmoid, "silu": silu, "rsqrt": rsqrt, "gelu": gelu}
