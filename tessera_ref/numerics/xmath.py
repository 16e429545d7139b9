"""Exact-algorithm elementary functions in f64 (NUM-MATH).

Each function here is ONE specified algorithm built only from IEEE-754 binary64 basic
operations — ``+ - * /``, ``sqrt``, comparisons, ``roundToIntegralTiesToEven`` (``rint``),
``floor`` and exact exponent manipulation (``frexp``, multiplication by powers of two) — each
rounded to nearest even, with no fused multiply-add. The result is defined by the algorithm,
not by the host ``libm``, so a CUDA kernel written with ``__dadd_rn``/``__dmul_rn``/``__ddiv_rn``
and no contraction reproduces it bit for bit. Every constant is an exact f64, written as a
hex-float literal. Accuracy (not part of the definition), measured against extended precision:
within 1 ulp for :func:`log` and :func:`exp`, 1.6 ulp for :func:`sincos_turns`, 2 ulp for
:func:`log_factorial`.

In the docstrings ``⊕ ⊖ ⊗ ⊘`` are the rounded f64 operations, evaluated in the order written.
"""
from __future__ import annotations

import numpy as np

__all__ = ["log", "exp", "sincos_turns", "log_factorial", "horner"]

_H = float.fromhex


def horner(z: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    """``c0 ⊕ z ⊗ (c1 ⊕ z ⊗ (c2 ⊕ … ⊕ z ⊗ c_n))`` — Horner's rule, two roundings per step (NUM-MATH-1).

    ``coeffs`` are in ascending order of power. The innermost step is ``p = c_n``; then for
    ``j = n−1 … 0``: ``p = (p ⊗ z) ⊕ c_j``. Never contracted into an fma.
    """
    p = np.full_like(z, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p *= z
        p += c
    return p


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


_CHUNK = 1 << 15  # elements per pass: elementwise, so chunking changes speed, never bits


def _elementwise(core, x, nout: int = 1):
    """Apply the elementwise ``core`` to f64 ``x`` in cache-sized chunks."""
    x = _f64(x)
    if x.size <= _CHUNK:
        return core(x)
    flat = x.reshape(-1)
    outs = tuple(np.empty(flat.shape) for _ in range(nout))
    for s in range(0, flat.size, _CHUNK):
        part = core(flat[s:s + _CHUNK])
        for out, values in zip(outs, part if nout > 1 else (part,)):
            out[s:s + _CHUNK] = values
    outs = tuple(out.reshape(x.shape) for out in outs)
    return outs if nout > 1 else outs[0]


def _pow2(k: np.ndarray) -> np.ndarray:
    """Exactly ``2**k`` as f64 for integer-valued f64 ``k`` in [-1022, 1023] (built from bits)."""
    return ((k.astype(np.int64) + 1023) << 52).view(np.float64)


# ---------------------------------------------------------------------------------------
# log

_SQRT_HALF = _H("0x1.6a09e667f3bcdp-1")      # RN(sqrt(2)/2)
_LN2_HI = _H("0x1.62e42fee00000p-1")         # ln 2, top 32 bits (k ⊗ LN2_HI is exact for |k| < 2^21)
_LN2_LO = _H("0x1.a39ef35793c76p-33")        # RN(ln 2 − LN2_HI)
# Minimax coefficients of (log(1+f) − 2s)/(2s)·… in z = s², from fdlibm e_log.c (Sun
# Microsystems, freely redistributable): R(z) = z·(Lg1 + z·(Lg2 + … + z·Lg7)), |s| ≤ 0.1716.
_LOG_COEFFS = (
    _H("0x1.5555555555593p-1"),  # Lg1
    _H("0x1.999999997fa04p-2"),  # Lg2
    _H("0x1.2492494229359p-2"),  # Lg3
    _H("0x1.c71c51d8e78afp-3"),  # Lg4
    _H("0x1.7466496cb03dep-3"),  # Lg5
    _H("0x1.39a09d078c69fp-3"),  # Lg6
    _H("0x1.2f112df3e5244p-3"),  # Lg7
)


def log(x) -> np.ndarray:
    """Natural logarithm of f64 ``x`` (NUM-MATH-2).

    Algorithm (fdlibm's ``__ieee754_log`` with one evaluation order):

    1. Specials: NaN → NaN; ``x < 0`` (and −inf) → NaN; ``±0`` → −inf; +inf → +inf.
    2. ``m, e = frexp(x)`` (exact; subnormals included), ``m ∈ [1/2, 1)``. If
       ``m < SQRT_HALF`` then ``m = 2·m, e = e − 1`` (exact), so ``m ∈ [√2/2, √2)``.
    3. ``f = m ⊖ 1`` (exact), ``s = f ⊘ (2 ⊕ f)``, ``z = s ⊗ s``,
       ``R = z ⊗ horner(z, Lg1…Lg7)``, ``hfsq = (0.5 ⊗ f) ⊗ f``, ``k = e`` as f64.
    4. ``log x = (k ⊗ LN2_HI) ⊖ ((hfsq ⊖ ((s ⊗ (hfsq ⊕ R)) ⊕ (k ⊗ LN2_LO))) ⊖ f)``.

    ``log(1) = +0`` exactly. Constants: ``SQRT_HALF = 0x1.6a09e667f3bcdp-1``,
    ``LN2_HI = 0x1.62e42fee00000p-1``, ``LN2_LO = 0x1.a39ef35793c76p-33`` and ``Lg1…Lg7`` as
    listed in the module (hex literals).
    """
    return _elementwise(_log, x)


def _log(x: np.ndarray) -> np.ndarray:
    ok = np.isfinite(x) & (x > 0)
    xs = np.where(ok, x, 1.0)
    m, e = np.frexp(xs)
    low = m < _SQRT_HALF
    m = np.where(low, m * 2.0, m)
    k = (e - low).astype(np.float64)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    r = z * horner(z, _LOG_COEFFS)
    hfsq = (0.5 * f) * f
    res = k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)
    if not ok.all():
        res = np.where(ok, res, np.where(x == 0, -np.inf, np.where(x == np.inf, np.inf, np.nan)))
    return res


# ---------------------------------------------------------------------------------------
# exp

_INV_LN2 = _H("0x1.71547652b82fep+0")        # RN(1/ln 2)
_EXP_OVERFLOW = _H("0x1.62e42fefa39efp+9")   # ≈ 709.78: largest x with finite exp(x)
_EXP_UNDERFLOW = _H("-0x1.74910d52d3051p+9")  # ≈ −745.13: below it exp(x) rounds to 0
# Remez coefficients of r·(exp(r)+1)/(exp(r)−1) ≈ 2 + P1 r² + … + P5 r¹⁰ on |r| ≤ ln2/2,
# from fdlibm e_exp.c (Sun Microsystems, freely redistributable).
_EXP_COEFFS = (
    _H("0x1.555555555553ep-3"),   # P1
    _H("-0x1.6c16c16bebd93p-9"),  # P2
    _H("0x1.1566aaf25de2cp-14"),  # P3
    _H("-0x1.bbd41c5d26bf1p-20"),  # P4
    _H("0x1.6376972bea4d0p-25"),  # P5
)


def _scale_pow2(y: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``(y ⊗ 2^k1) ⊗ 2^k2`` with ``k1 = floor(k/2)``, ``k2 = k − k1``: ``y·2^k`` rounded once."""
    k1 = np.floor(k * 0.5)
    k2 = k - k1
    return (y * _pow2(k1)) * _pow2(k2)


def exp(x) -> np.ndarray:
    """``e**x`` of f64 ``x`` (NUM-MATH-3).

    Algorithm (fdlibm's ``__ieee754_exp`` with a single reduction path):

    1. Specials: NaN → NaN; ``x > EXP_OVERFLOW`` (+inf included) → +inf;
       ``x < EXP_UNDERFLOW`` (−inf included) → +0.
    2. ``k = rint(x ⊗ INV_LN2)`` (ties to even), ``hi = x ⊖ (k ⊗ LN2_HI)`` (exact),
       ``lo = k ⊗ LN2_LO``, ``r = hi ⊖ lo``.
    3. ``z = r ⊗ r``, ``c = r ⊖ (z ⊗ horner(z, P1…P5))``,
       ``y = 1 ⊖ ((lo ⊖ ((r ⊗ c) ⊘ (2 ⊖ c))) ⊖ hi)``.
    4. ``exp x = (y ⊗ 2^k1) ⊗ 2^k2`` with ``k1 = floor(k/2)``, ``k2 = k − k1``: the first
       product is exact, so the result is ``y·2^k`` rounded once (gradual underflow, overflow
       to +inf).

    Constants: ``INV_LN2 = 0x1.71547652b82fep+0``, ``EXP_OVERFLOW = 0x1.62e42fefa39efp+9``,
    ``EXP_UNDERFLOW = -0x1.74910d52d3051p+9``, ``LN2_HI``, ``LN2_LO`` as in :func:`log`, and
    ``P1…P5`` as listed in the module.
    """
    return _elementwise(_exp, x)


def _exp(x: np.ndarray) -> np.ndarray:
    ok = (x <= _EXP_OVERFLOW) & (x >= _EXP_UNDERFLOW)
    xs = np.where(ok, x, 0.0)
    k = np.rint(xs * _INV_LN2)
    hi = xs - k * _LN2_HI
    lo = k * _LN2_LO
    r = hi - lo
    z = r * r
    c = r - z * horner(z, _EXP_COEFFS)
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    with np.errstate(over="ignore", under="ignore"):
        res = _scale_pow2(y, k)
    if not ok.all():
        special = np.where(x > _EXP_OVERFLOW, np.inf, np.where(x < _EXP_UNDERFLOW, 0.0, np.nan))
        res = np.where(ok, res, special)
    return res


# ---------------------------------------------------------------------------------------
# sin and cos of an angle in turns

# Taylor coefficients of sin(πx/2)/x and cos(πx/2) in z = x², |x| ≤ 1/2:
# SIN_k = RN((−1)^k (π/2)^(2k+1) / (2k+1)!), COS_k = RN((−1)^k (π/2)^(2k) / (2k)!), k = 0…8.
_SIN_COEFFS = (
    _H("0x1.921fb54442d18p+0"),
    _H("-0x1.4abbce625be53p-1"),
    _H("0x1.466bc6775aae2p-4"),
    _H("-0x1.32d2cce62bd86p-8"),
    _H("0x1.50783487ee782p-13"),
    _H("-0x1.e3074fde8871fp-19"),
    _H("0x1.e8f434d018d63p-25"),
    _H("-0x1.6fadb9f155744p-31"),
    _H("0x1.aaec32af93359p-38"),
)
_COS_COEFFS = (
    1.0,
    _H("-0x1.3bd3cc9be45dep+0"),
    _H("0x1.03c1f081b5ac4p-2"),
    _H("-0x1.55d3c7e3cbffap-6"),
    _H("0x1.e1f506891babbp-11"),
    _H("-0x1.a6d1f2a204a8cp-16"),
    _H("0x1.f9d38a3763cc3p-22"),
    _H("-0x1.b6e24f44b128fp-28"),
    _H("0x1.20c62c2f2d7f5p-34"),
)


def sincos_turns(t) -> tuple[np.ndarray, np.ndarray]:
    """``(sin 2πt, cos 2πt)`` for f64 ``t`` measured in turns (NUM-MATH-4).

    Algorithm:

    1. Specials: ``t`` = ±inf or NaN → (NaN, NaN).
    2. Exact reduction: ``r = t ⊖ rint(t)`` ∈ [−1/2, 1/2], ``y = 4 ⊗ r``, ``j = rint(y)`` ∈
       {−2 … 2}, ``x = y ⊖ j`` ∈ [−1/2, 1/2] — all three operations are exact, so
       ``2πt ≡ (π/2)(j + x)`` with no rounding at all.
    3. ``z = x ⊗ x``, ``s = x ⊗ horner(z, SIN_0…SIN_8)`` (≈ sin(πx/2)),
       ``c = horner(z, COS_0…COS_8)`` (≈ cos(πx/2)).
    4. With ``q = j mod 4``: q=0 → (s, c); q=1 → (c, −s); q=2 → (−s, −c); q=3 → (−c, s).
    5. ``t = ±0`` gives ``(t, 1)`` (the sign of a zero sine follows ``t``).

    Up to the sign of zero results, sine is odd and cosine even in ``t`` exactly; multiples of
    1/4 turn give exact 0 and ±1. ``SIN_k`` and ``COS_k`` are the correctly rounded Taylor
    coefficients listed in the module.
    """
    return _elementwise(_sincos_turns, t, nout=2)


def _sincos_turns(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(t)
    ts = np.where(ok, t, 0.0)
    r = ts - np.rint(ts)
    y = 4.0 * r
    j = np.rint(y)
    x = y - j
    z = x * x
    s = x * horner(z, _SIN_COEFFS)
    c = horner(z, _COS_COEFFS)
    q = j.astype(np.int64) & 3
    sin = np.choose(q, (s, c, -s, -c))
    cos = np.choose(q, (c, -s, -c, s))
    sin = np.where(ts == 0.0, ts, sin)
    if not ok.all():
        sin = np.where(ok, sin, np.nan)
        cos = np.where(ok, cos, np.nan)
    return sin, cos


# ---------------------------------------------------------------------------------------
# log k!

# RN(log k!) for k = 0 … 9.
_LOG_FACTORIAL_TABLE = np.array([
    0.0,
    0.0,
    _H("0x1.62e42fefa39efp-1"),
    _H("0x1.cab0bfa2a2002p+0"),
    _H("0x1.96ca77c922cf9p+1"),
    _H("0x1.326643c4479c9p+2"),
    _H("0x1.a51273acf01cap+2"),
    _H("0x1.10ce1f32dcc30p+3"),
    _H("0x1.5358e82fcb70dp+3"),
    _H("0x1.99a8921a7f7cfp+3"),
])
_HALF_LOG_2PI = _H("0x1.d67f1c864beb5p-1")  # RN(log(2π)/2)
# Stirling series: B_2n / (2n(2n−1)), n = 1 … 8, correctly rounded.
_STIRLING_COEFFS = (
    _H("0x1.5555555555555p-4"),
    _H("-0x1.6c16c16c16c17p-9"),
    _H("0x1.a01a01a01a01ap-11"),
    _H("-0x1.3813813813814p-11"),
    _H("0x1.b951e2b18ff23p-11"),
    _H("-0x1.f6ab0d9993c7dp-10"),
    _H("0x1.a41a41a41a41ap-8"),
    _H("-0x1.e4286cb0f5398p-6"),
)


def log_factorial(k) -> np.ndarray:
    """``log(k!) = lgamma(k+1)`` for integer-valued f64 ``k ≥ 0`` (NUM-MATH-5).

    Algorithm: for ``k < 10``, the table ``RN(log k!)``. For ``k ≥ 10``, with ``x = k ⊕ 1``,
    ``w = 1 ⊘ x``, ``z = w ⊗ w``, the Stirling series
    ``((x ⊖ 0.5) ⊗ log(x) ⊖ x) ⊕ (HALF_LOG_2PI ⊕ (w ⊗ horner(z, S_1…S_8)))`` with ``log`` from
    NUM-MATH-2, ``HALF_LOG_2PI = 0x1.d67f1c864beb5p-1`` and ``S_n = RN(B_2n / (2n(2n−1)))``.
    The series' truncation error at ``x ≥ 11`` is below 10⁻¹⁸. The caller guarantees integer
    ``k ≥ 0``; +inf gives +inf.
    """
    return _elementwise(_log_factorial, k)


def _log_factorial(k: np.ndarray) -> np.ndarray:
    x = k + 1.0
    big = k >= 10.0
    xb = np.where(big & (k < np.inf), x, 11.0)
    w = 1.0 / xb
    z = w * w
    with np.errstate(invalid="ignore"):
        stirling = ((xb - 0.5) * _log(xb) - xb) + (_HALF_LOG_2PI + w * horner(z, _STIRLING_COEFFS))
    small = _LOG_FACTORIAL_TABLE[np.where(big, 0, k).astype(np.int64)]
    return np.where(big, np.where(k < np.inf, stirling, np.inf), small)
