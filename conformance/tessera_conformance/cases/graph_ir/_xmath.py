"""Independent re-implementation of the NUM-MATH algorithms (docs/spec/_rng.md), from the
spec text: f64 NumPy arrays, one IEEE operation per ufunc call (NumPy contracts nothing),
constants as the spec's hex literals (erf/erfc: fdlibm ``s_erf.c``'s coefficients, typed in
from their published bit patterns). No host math library decides a bit here.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["log", "exp", "expm1", "tanh", "erf", "erfc", "sigmoid", "silu", "gelu", "gelu_tanh",
           "rsqrt", "pow", "sin", "cos", "sincos_turns", "log_factorial"]

H = float.fromhex


def _w(hi: int, lo: int) -> float:
    """An f64 from its high and low 32-bit words (fdlibm's notation)."""
    return float(np.array([(hi << 32) | lo], np.uint64).view(np.float64)[0])


def horner(z, *coeffs):
    """``horner(z; c0 … cn)``: p = cn, then p = (p ⊗ z) ⊕ cj for j = n−1 … 0."""
    p = np.full_like(z, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = p * z + c
    return p


def _f(x):
    return np.asarray(x, np.float64)


LN2_HI, LN2_LO = H("0x1.62e42fee00000p-1"), H("0x1.a39ef35793c76p-33")
LG = [H(s) for s in ("0x1.5555555555593p-1", "0x1.999999997fa04p-2", "0x1.2492494229359p-2",
                     "0x1.c71c51d8e78afp-3", "0x1.7466496cb03dep-3", "0x1.39a09d078c69fp-3",
                     "0x1.2f112df3e5244p-3")]
P = [H(s) for s in ("0x1.555555555553ep-3", "-0x1.6c16c16bebd93p-9", "0x1.1566aaf25de2cp-14",
                    "-0x1.bbd41c5d26bf1p-20", "0x1.6376972bea4d0p-25")]
INVLN2 = H("0x1.71547652b82fep+0")


def log(x):
    """NUM-MATH-2."""
    x = _f(x)
    ok = np.isfinite(x) & (x > 0)
    m, e = np.frexp(np.where(ok, x, 1.0))
    small = m < H("0x1.6a09e667f3bcdp-1")
    m = np.where(small, 2 * m, m)
    e = np.where(small, e - 1, e)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    R = z * horner(z, *LG)
    hfsq = (0.5 * f) * f
    k = e.astype(np.float64)
    r = (k * LN2_HI) - ((hfsq - ((s * (hfsq + R)) + (k * LN2_LO))) - f)
    r = np.where(x == np.inf, np.inf, r)
    r = np.where(x == 0, -np.inf, r)
    return np.where(np.isnan(x) | (x < 0), np.nan, r)


def _scale(y, k):
    """(y ⊗ 2^k1) ⊗ 2^k2 with k1 = floor(k/2), k2 = k − k1."""
    k1 = np.floor(k / 2)
    k2 = k - k1
    return (y * np.ldexp(1.0, k1.astype(np.int32))) * np.ldexp(1.0, k2.astype(np.int32))


def exp(x):
    """NUM-MATH-3."""
    x = _f(x)
    big, tiny = x > H("0x1.62e42fefa39efp+9"), x < -H("0x1.74910d52d3051p+9")
    xs = np.where(np.isnan(x) | big | tiny, 0.0, x)
    k = np.rint(xs * INVLN2)
    hi = xs - k * LN2_HI
    lo = k * LN2_LO
    r = hi - lo
    z = r * r
    c = r - z * horner(z, *P)
    y = 1.0 - ((lo - ((r * c) / (2.0 - c))) - hi)
    out = _scale(y, k)
    out = np.where(big, np.inf, np.where(tiny, 0.0, out))
    return np.where(np.isnan(x), np.nan, out)


Q = [H(s) for s in ("-0x1.11111111110f4p-5", "0x1.a01a019fe5585p-10", "-0x1.4ce199eaadbb7p-14",
                    "0x1.0cfca86e65239p-18", "-0x1.afdb76e09c32dp-23")]


def expm1(x):
    """NUM-MATH-7."""
    x = _f(x)
    big, neg = x > H("0x1.62e42fefa39efp+9"), x <= -H("0x1.3687a00000000p+5")
    tiny = np.abs(x) < 2.0 ** -54
    special = np.isnan(x) | big | neg | tiny
    xs = np.where(special, 0.5, x)
    k = np.rint(xs * INVLN2)
    hi = xs - k * LN2_HI
    lo = k * LN2_LO
    r = hi - lo
    c = (hi - r) - lo
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = horner(hxs, 1.0, *Q)
    t = 3.0 - r1 * hfx
    e = hxs * ((r1 - t) / (6.0 - r * t))
    k0 = r - (r * e - hxs)
    e2 = ((r * (e - c)) - c) - hxs
    km1 = (0.5 * (r - e2)) - 0.5
    k1 = np.where(r < -0.25, -2.0 * (e2 - (r + 0.5)), 1.0 + 2.0 * (r - e2))
    y = 1.0 - (e2 - r)
    kfar = _scale(y, k) - 1.0
    ki = np.clip(k, -1100, 1100).astype(np.int64)
    p2k = np.ldexp(1.0, ki.astype(np.int32))
    pm2k = np.ldexp(1.0, (-ki).astype(np.int32))
    kmid = ((1.0 - pm2k) - (e2 - r)) * p2k
    khigh = ((r - (e2 + pm2k)) + 1.0) * p2k
    out = np.select([k == 0, k == -1, k == 1, (k <= -2) | (k > 56), k < 20],
                    [k0, km1, k1, kfar, kmid], khigh)
    out = np.where(tiny, x, out)
    out = np.where(big, np.inf, np.where(neg, -1.0, out))
    return np.where(np.isnan(x), np.nan, out)


def tanh(x):
    """NUM-MATH-8."""
    x = _f(x)
    a = np.abs(x)
    with np.errstate(over="ignore", invalid="ignore"):
        t1 = expm1(2.0 * a)
        z_mid = 1.0 - 2.0 / (t1 + 2.0)
        t2 = expm1(-2.0 * a)
        z_low = -t2 / (t2 + 2.0)
    z = np.where(a >= 22, 1.0, np.where(a >= 1, z_mid, z_low))
    out = np.where(x < 0, -z, z)
    out = np.where(a < 2.0 ** -55, x, out)
    return np.where(np.isnan(x), np.nan, out)


# fdlibm s_erf.c coefficients, from their (high word, low word) bit patterns
ERX, EFX, EFX8 = _w(0x3FEB0AC1, 0x60000000), _w(0x3FC06EBA, 0x8214DB69), _w(0x3FF06EBA, 0x8214DB69)
PP = [_w(0x3FC06EBA, 0x8214DB68), _w(0xBFD4CD7D, 0x691CB913), _w(0xBF9D2A51, 0xDBD7194F),
      _w(0xBF77A291, 0x236668E4), _w(0xBEF8EAD6, 0x120016AC)]
QQ = [_w(0x3FD97779, 0xCDDADC09), _w(0x3FB0A54C, 0x5536CEBA), _w(0x3F74D022, 0xC4D36B0F),
      _w(0x3F215DC9, 0x221C1A10), _w(0xBED09C43, 0x42A26120)]
PA = [_w(0xBF6359B8, 0xBEF77538), _w(0x3FDA8D00, 0xAD92B34D), _w(0xBFD7D240, 0xFBB8C3F1),
      _w(0x3FD45FCA, 0x805120E4), _w(0xBFBC6398, 0x3D3E28EC), _w(0x3FA22A36, 0x599795EB),
      _w(0xBF61BF38, 0x0A96073F)]
QA = [_w(0x3FBB3E66, 0x18EEE323), _w(0x3FE14AF0, 0x92EB6F33), _w(0x3FB2635C, 0xD99FE9A7),
      _w(0x3FC02660, 0xE763351F), _w(0x3F8BEDC2, 0x6B51DD1C), _w(0x3F888B54, 0x5735151D)]
RA = [_w(0xBF843412, 0x600D6435), _w(0xBFE63416, 0xE4BA7360), _w(0xC0251E04, 0x41B0E726),
      _w(0xC04F300A, 0xE4CBA38D), _w(0xC0644CB1, 0x84282266), _w(0xC067135C, 0xEBCCABB2),
      _w(0xC0545265, 0x57E4D2F2), _w(0xC023A0EF, 0xC69AC25C)]
SA = [_w(0x4033A6B9, 0xBD707687), _w(0x4061350C, 0x526AE721), _w(0x407B290D, 0xD58A1A71),
      _w(0x40842B19, 0x21EC2868), _w(0x407AD021, 0x57700314), _w(0x405B28A3, 0xEE48AE2C),
      _w(0x401A47EF, 0x8E484A93), _w(0xBFAEEFF2, 0xEE749A62)]
RB = [_w(0xBF843412, 0x39E86F4A), _w(0xBFE993BA, 0x70C285DE), _w(0xC031C209, 0x555F995A),
      _w(0xC064145D, 0x43C5ED98), _w(0xC083EC88, 0x1375F228), _w(0xC0900461, 0x6A2E5992),
      _w(0xC07E384E, 0x9BDC383F)]
SB = [_w(0x403E568B, 0x261D5190), _w(0x40745CAE, 0x221B9F0A), _w(0x409802EB, 0x189D5118),
      _w(0x40A8FFB7, 0x688C246A), _w(0x40A3F219, 0xCEDF3BE6), _w(0x407DA874, 0xE79FE763),
      _w(0xC03670E2, 0x42712D62)]


def _erf_parts(x):
    """The pieces both erf and erfc use, for every element."""
    a = np.abs(x)
    with np.errstate(all="ignore"):
        z = x * x
        y = horner(z, *PP) / horner(z, 1.0, *QQ)
        s1 = a - 1.0
        pq = horner(s1, *PA) / horner(s1, 1.0, *QA)
        s = 1.0 / (a * a)
        rs = np.where(a < H("0x1.6db6d00000000p+1"), horner(s, *RA) / horner(s, 1.0, *SA),
                      horner(s, *RB) / horner(s, 1.0, *SB))
        zc = (np.where(np.isfinite(a), a, 0.0).view(np.int64) & ~np.int64(0xFFFFFFFF)).view(np.float64)
        q = (exp(-zc * zc - 0.5625) * exp((zc - a) * (zc + a) + rs)) / a
    return a, y, pq, q


def erf(x):
    """NUM-MATH-9, erf."""
    x = _f(x)
    a, y, pq, q = _erf_parts(x)
    with np.errstate(all="ignore"):
        tiny = np.where(a < 2.0 ** -1022, 0.125 * (8.0 * x + EFX8 * x), x + EFX * x)
        r0 = np.where(a < 2.0 ** -28, tiny, x + x * y)
        r1 = np.where(x > 0, ERX + pq, -ERX - pq)
        r2 = np.where(x > 0, 1.0 - q, q - 1.0)
    out = np.select([a < 0.84375, a < 1.25, a < 6], [r0, r1, r2], np.where(x > 0, 1.0, -1.0))
    return np.where(np.isnan(x), np.nan, out)


def erfc(x):
    """NUM-MATH-9, erfc."""
    x = _f(x)
    a, y, pq, q = _erf_parts(x)
    with np.errstate(all="ignore"):
        r0 = np.where(a < 2.0 ** -56, 1.0 - x,
                      np.where(x < 0.25, 1.0 - (x + x * y), 0.5 - ((x * y) + (x - 0.5))))
        r1 = np.where(x > 0, (1.0 - ERX) - pq, 1.0 + (ERX + pq))
        r2 = np.where(x > 0, q, 2.0 - q)
    out = np.select([a < 0.84375, a < 1.25, x >= 28, x <= -6], [r0, r1, 0.0, 2.0], r2)
    return np.where(np.isnan(x), np.nan, out)


def sigmoid(x):
    """NUM-MATH-10."""
    x = _f(x)
    with np.errstate(all="ignore"):
        pos = 1.0 / (1.0 + exp(-x))
        e = exp(x)
        neg = e / (1.0 + e)
    return np.where(np.isnan(x), np.nan, np.where(x >= 0, pos, neg))


def silu(x):
    """NUM-MATH-10, silu (silu(−∞) = −0)."""
    x = _f(x)
    with np.errstate(all="ignore"):
        out = x * sigmoid(x)
    return np.where(x == -np.inf, -0.0, out)


def gelu(x):
    """NUM-MATH-13, gelu: (0.5 ⊗ x) ⊗ erfc(−(x ⊗ 1/√2))."""
    x = _f(x)
    with np.errstate(all="ignore"):
        out = (0.5 * x) * erfc(-(x * H("0x1.6a09e667f3bcdp-1")))
    out = np.where(x == np.inf, np.inf, np.where(x == -np.inf, -0.0, out))
    return np.where(np.isnan(x), np.nan, out)


def gelu_tanh(x):
    """NUM-MATH-13, gelu_tanh: x ⊗ sigmoid(C2 ⊗ (x ⊕ C1 ⊗ ((x ⊗ x) ⊗ x)))."""
    x = _f(x)
    with np.errstate(all="ignore"):
        v = x + H("0x1.6e4e26d4801f7p-5") * ((x * x) * x)
        out = x * sigmoid(H("0x1.9884533d43651p+0") * v)
    out = np.where(x == np.inf, np.inf, np.where(x == -np.inf, -0.0, out))
    return np.where(np.isnan(x), np.nan, out)


def rsqrt(x):
    """NUM-MATH-11: 1 ⊘ sqrt(x)."""
    x = _f(x)
    with np.errstate(all="ignore"):
        return 1.0 / np.sqrt(x)


def _odd_int(y):
    with np.errstate(invalid="ignore"):
        return np.isfinite(y) & (np.floor(y) == y) & (np.floor(y * 0.5) != y * 0.5)


def pow(x, y):
    """NUM-MATH-12, by the first matching rule."""
    x, y = np.broadcast_arrays(_f(x), _f(y))
    odd = _odd_int(y)
    integer = np.isfinite(y) & (np.floor(np.where(np.isfinite(y), y, 0.0)) == y)
    ax = np.abs(x)
    with np.errstate(all="ignore"):
        r = exp(y * log(ax))
        general = np.where((x < 0) & odd, -r, r)
    inf_y = np.where(ax == 1, 1.0, np.where(ax < 1, np.where(y > 0, 0.0, np.inf), np.where(y > 0, np.inf, 0.0)))
    zero_x = np.where(y < 0, np.where(odd, np.copysign(np.inf, x), np.inf), np.where(odd, x, 0.0))
    inf_x = np.where(y < 0, np.where(odd, np.copysign(0.0, x), 0.0), np.where(odd, x, np.inf))
    return np.select(
        [y == 0, x == 1, np.isnan(x) | np.isnan(y), np.isinf(y), x == 0, np.isinf(x), (x < 0) & ~integer],
        [1.0, 1.0, np.nan, inf_y, zero_x, inf_x, np.nan], general)


S = [H(s) for s in ("0x1.921fb54442d18p+0", "-0x1.4abbce625be53p-1", "0x1.466bc6775aae2p-4",
                    "-0x1.32d2cce62bd86p-8", "0x1.50783487ee782p-13", "-0x1.e3074fde8871fp-19",
                    "0x1.e8f434d018d63p-25", "-0x1.6fadb9f155744p-31", "0x1.aaec32af93359p-38")]
C = [H(s) for s in ("0x1.0000000000000p+0", "-0x1.3bd3cc9be45dep+0", "0x1.03c1f081b5ac4p-2",
                    "-0x1.55d3c7e3cbffap-6", "0x1.e1f506891babbp-11", "-0x1.a6d1f2a204a8cp-16",
                    "0x1.f9d38a3763cc3p-22", "-0x1.b6e24f44b128fp-28", "0x1.20c62c2f2d7f5p-34")]


def sincos_turns(t):
    """NUM-MATH-4: (sin 2πt, cos 2πt)."""
    t = _f(t)
    bad = ~np.isfinite(t)
    ts = np.where(bad, 0.5, t)
    r = ts - np.rint(ts)
    y = 4.0 * r
    j = np.rint(y)
    x = y - j
    z = x * x
    s = x * horner(z, *S)
    c = horner(z, *C)
    q = np.mod(j, 4).astype(np.int64)
    sin = np.choose(q, (s, c, -s, -c))
    cos = np.choose(q, (c, -s, -c, s))
    sin = np.where(t == 0, t, sin)
    cos = np.where(t == 0, 1.0, cos)
    return np.where(bad, np.nan, sin), np.where(bad, np.nan, cos)


P1, P2, P3 = H("0x1.921fb54400000p+0"), H("0x1.0b4611a600000p-34"), H("0x1.3198a2e000000p-69")
P3T = H("0x1.b839a252049c1p-104")
TWO_OVER_PI = H("0x1.45f306dc9c883p-1")


def _pi_scaled(bits: int) -> int:
    """floor(π · 2^bits) by Machin's formula in integer arithmetic (with guard bits)."""
    guard = 64
    one = 1 << (bits + guard)

    def arctan_inv(n):
        total, term, k, sign = 0, one // n, 1, 1
        n2 = n * n
        while term:
            total += sign * (term // k)
            term //= n2
            k += 2
            sign = -sign
        return total

    return (16 * arctan_inv(5) - 4 * arctan_inv(239)) >> guard


_PIO2_INT = _pi_scaled(1600) >> 1   # floor(2^1600 · π/2)


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _reduce(x):
    """NUM-MATH-6 step 2: (k, hi, lo) per element."""
    k = np.rint(x * TWO_OVER_PI)
    a = x - k * P1
    s1, e1 = _two_sum(a, -(k * P2))
    s2, e2 = _two_sum(s1, -(k * P3))
    lo = (e1 + e2) - k * P3T
    hi = s2 + lo
    lo = lo - (hi - s2)
    kq = np.mod(k, 4).astype(np.int64)
    far = np.abs(x) > H("0x1.921fb54442d18p+20")
    for i in np.flatnonzero(far.ravel()):
        xv = Fraction(float(x.flat[i]))
        num = xv * 2 ** 1600 / _PIO2_INT
        kk = math.floor(num)
        frac = num - kk
        if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and kk % 2 == 1):
            kk += 1
        rho = xv - Fraction(kk * _PIO2_INT, 2 ** 1600)
        h = float(rho)
        hi.flat[i], lo.flat[i], kq.flat[i] = h, float(rho - Fraction(h)), kk % 4
    return kq, hi, lo


def _sincos_kernel(hi, lo):
    hz = 0.5 * (hi * hi)
    u = hi * TWO_OVER_PI
    z = u * u
    s = hi + (((u * z) * horner(z, *S[1:])) + lo * (1.0 - hz))
    v = 1.0 - hz
    c = v + (((1.0 - v) - hz) + ((z * z) * horner(z, *C[2:]) - hi * lo))
    return s, c


def sin(x):
    """NUM-MATH-6, sine."""
    x = _f(x).copy()
    bad = ~np.isfinite(x)
    xs = np.where(bad, 0.5, x)
    q, hi, lo = _reduce(xs)
    s, c = _sincos_kernel(hi, lo)
    out = np.choose(q, (s, c, -s, -c))
    out = np.where(x == 0, x, out)
    return np.where(bad, np.nan, out)


def cos(x):
    """NUM-MATH-6, cosine."""
    x = _f(x).copy()
    bad = ~np.isfinite(x)
    xs = np.where(bad, 0.5, x)
    q, hi, lo = _reduce(xs)
    s, c = _sincos_kernel(hi, lo)
    out = np.choose(q, (c, -s, -c, s))
    out = np.where(x == 0, 1.0, out)
    return np.where(bad, np.nan, out)


LOGFACT_TABLE = [0.0, 0.0] + [H(s) for s in (
    "0x1.62e42fefa39efp-1", "0x1.cab0bfa2a2002p+0", "0x1.96ca77c922cf9p+1", "0x1.326643c4479c9p+2",
    "0x1.a51273acf01cap+2", "0x1.10ce1f32dcc30p+3", "0x1.5358e82fcb70dp+3", "0x1.99a8921a7f7cfp+3")]
BN = [H(s) for s in ("0x1.5555555555555p-4", "-0x1.6c16c16c16c17p-9", "0x1.a01a01a01a01ap-11",
                     "-0x1.3813813813814p-11", "0x1.b951e2b18ff23p-11", "-0x1.f6ab0d9993c7dp-10",
                     "0x1.a41a41a41a41ap-8", "-0x1.e4286cb0f5398p-6")]


def log_factorial(k: float) -> float:
    """NUM-MATH-5 (scalar)."""
    if k == math.inf:
        return math.inf
    if k < 10:
        return LOGFACT_TABLE[int(k)]
    x = k + 1.0
    w = 1.0 / x
    z = w * w
    lx = float(log(np.array(x)))
    return ((x - 0.5) * lx - x) + (H("0x1.d67f1c864beb5p-1") + w * float(horner(np.array(z), *BN)))
