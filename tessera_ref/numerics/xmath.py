"""Exact-algorithm elementary functions in f64 (NUM-MATH).

Each function here is ONE specified algorithm built only from IEEE-754 binary64 basic
operations — ``+ - * /``, ``sqrt``, comparisons, ``roundToIntegralTiesToEven`` (``rint``),
``floor`` and exact exponent manipulation (``frexp``, multiplication by powers of two) — each
rounded to nearest even, with no fused multiply-add. The result is defined by the algorithm,
not by the host ``libm``, so a CUDA kernel written with ``__dadd_rn``/``__dmul_rn``/``__ddiv_rn``
and no contraction reproduces it bit for bit. Every constant is an exact f64, written as a
hex-float literal. Accuracy (not part of the definition), measured against extended precision:
within 1 ulp for :func:`log` and :func:`exp`, 1.6 ulp for :func:`sincos_turns`, 2 ulp for
:func:`log_factorial`; 0.93 ulp for :func:`sin` and :func:`cos` (every finite argument),
0.82 ulp for :func:`expm1`, 2.02 ulp for :func:`tanh`, 2.04 ulp for :func:`sigmoid`, 2.8 ulp for
:func:`silu`, 1.5 ulp for :func:`rsqrt`; :func:`erf` within 1 ulp and :func:`erfc` within 4 ulp
of the host's ``erf``/``erfc``; :func:`pow` as stated there. Each returns f64; a caller
converts the result once into its accumulation or storage format.

In the docstrings ``⊕ ⊖ ⊗ ⊘`` are the rounded f64 operations, evaluated in the order written.
"""
from __future__ import annotations

import numpy as np

__all__ = ["log", "exp", "sincos_turns", "log_factorial", "horner", "sin", "cos", "expm1", "tanh",
           "erf", "erfc", "sigmoid", "silu", "rsqrt", "pow", "gelu", "gelu_tanh"]

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


# ---------------------------------------------------------------------------------------
# sin and cos of an angle in radians

_INV_PIO2 = _H("0x1.45f306dc9c883p-1")       # RN(2/π)
_PIO2_1 = _H("0x1.921fb54400000p+0")         # π/2, top 33 bits: k ⊗ PIO2_1 exact for |k| ≤ 2^20
_PIO2_2 = _H("0x1.0b4611a600000p-34")        # next 33 bits of π/2
_PIO2_3 = _H("0x1.3198a2e000000p-69")        # next 33 bits of π/2
_PIO2_3T = _H("0x1.b839a252049c1p-104")      # RN(π/2 − PIO2_1 − PIO2_2 − PIO2_3)
_CW_MAX = _H("0x1.921fb54442d18p+20")        # 2^20·RN(π/2): Cody–Waite reduction up to here
# floor(π/2 · 2^1600), for the exact reduction of |x| > CW_MAX (fdlibm's e_rem_pio2.c splits
# PIO2_1 … PIO2_3T are the leading bits of this same number).
_PIO2_FRAC_BITS = 1600
_PIO2_INT = int(
    "1921fb54442d18469898cc51701b839a252049c1114cf98e804177d4c76273644a29410f31c6809b"
    "bdf2a33679a748636605614dbe4be286e9fc26adadaa3848bc90b6aecc4bcfd8de89885d34c6fdad"
    "617feb96de80d6fdbdc70d7f6b5133f4b5d3e4822f8963fcc9250cca3d9c8b67b8400f97142c77e0"
    "b31b4906c38aba734d22c7f51fa499ebf06caba47b9475b2c38c5e6ac410aa5773daa520ee12d2cd"
    "ace186a9c95793009e2e8d811943042f86520bc8c5c6d9c77c73cee58301d0c07364f0745d80f451"
    "f", 16)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum: ``s = a ⊕ b``, ``bb = s ⊖ a``, ``e = (a ⊖ (s ⊖ bb)) ⊕ (b ⊖ bb)``; ``s + e = a + b`` exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _reduce_exact(v: float) -> tuple[int, float, float]:
    """``(k mod 4, RN(ρ), RN(ρ − RN(ρ)))`` with ``ρ = v − k·PIO2_INT·2^-1600`` exactly (Python integers)."""
    n, d = v.as_integer_ratio()                 # d is a power of two ≤ 2^32 here
    big = (n << _PIO2_FRAC_BITS) // d           # v·2^1600, exact
    k, rem = divmod(big, _PIO2_INT)             # floor division: 0 ≤ rem < PIO2_INT
    if 2 * rem > _PIO2_INT or (2 * rem == _PIO2_INT and k & 1):
        k, rem = k + 1, rem - _PIO2_INT         # nearest integer, ties to even
    scale = 1 << _PIO2_FRAC_BITS
    hi = rem / scale                            # int / int: correctly rounded
    hn, hd = hi.as_integer_ratio()
    lo = (rem * hd - hn * scale) / (hd * scale)
    return k & 3, hi, lo


def _reduce_pio2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x ≡ k·π/2 + (hi + lo)``: Cody–Waite for ``|x| ≤ CW_MAX``, exact beyond (NUM-MATH-6)."""
    big = np.abs(x) > _CW_MAX
    xs = np.where(big, 0.0, x)
    k = np.rint(xs * _INV_PIO2)
    a = xs - k * _PIO2_1
    s1, e1 = _two_sum(a, -(k * _PIO2_2))
    s2, e2 = _two_sum(s1, -(k * _PIO2_3))
    lo = (e1 + e2) - k * _PIO2_3T
    hi = s2 + lo
    lo = lo - (hi - s2)
    if big.any():
        for i in np.flatnonzero(big):
            k.flat[i], hi.flat[i], lo.flat[i] = _reduce_exact(float(x.flat[i]))  # any rank: flat indices
    return k, hi, lo


def _sincos_kernel(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sin and cos of ``hi + lo``, ``|hi| ≲ π/4``, with the polynomials of NUM-MATH-4."""
    hz = 0.5 * (hi * hi)
    u = hi * _INV_PIO2                        # the angle in quarter turns
    z = u * u
    s = hi + ((u * z) * horner(z, _SIN_COEFFS[1:]) + lo * (1.0 - hz))
    v = 1.0 - hz
    c = v + (((1.0 - v) - hz) + ((z * z) * horner(z, _COS_COEFFS[2:]) - hi * lo))
    return s, c


def sin(x) -> np.ndarray:
    """Sine of f64 ``x`` in radians (NUM-MATH-6); see :func:`cos` for the algorithm."""
    return _elementwise(lambda v: _sincos_rad(v)[0], x)


def cos(x) -> np.ndarray:
    """Cosine of f64 ``x`` in radians (NUM-MATH-6).

    Algorithm:

    1. Specials: NaN, ±inf → NaN. ``sin(±0) = ±0``, ``cos(±0) = 1``.
    2. Reduction to ``x ≡ k·π/2 + (hi + lo)``, ``|hi + lo| ≲ π/4``, ``|lo| ≤ ulp(hi)/2``:

       - ``|x| ≤ CW_MAX`` (Cody–Waite with a 3-part split of π/2): ``k = rint(x ⊗ INV_PIO2)``
         (so ``|k| ≤ 2^20``), ``a = x ⊖ k ⊗ PIO2_1`` (both exact),
         ``(s1, e1) = TwoSum(a, −(k ⊗ PIO2_2))``, ``(s2, e2) = TwoSum(s1, −(k ⊗ PIO2_3))`` (the
         products are exact), ``lo = (e1 ⊕ e2) ⊖ k ⊗ PIO2_3T``, ``hi = s2 ⊕ lo``,
         ``lo = lo ⊖ (hi ⊖ s2)``. ``TwoSum(a, b)`` is ``s = a ⊕ b``, ``bb = s ⊖ a``,
         ``e = (a ⊖ (s ⊖ bb)) ⊕ (b ⊖ bb)``.
       - ``|x| > CW_MAX``: exact reduction with ``K = floor(π/2 · 2^1600)`` (``_PIO2_INT``):
         ``k`` is the integer nearest ``x·2^1600/K`` (ties to even), ``ρ = x − k·K·2^-1600``
         exactly, ``hi = RN(ρ)``, ``lo = RN(ρ − hi)`` (Python integers here; a kernel may use
         Payne–Hanek with the same bits of ``K``).

    3. Kernel, with the coefficients ``SIN_k``/``COS_k`` of :func:`sincos_turns` in the variable
       ``u`` (the angle in quarter turns): ``hz = 0.5 ⊗ (hi ⊗ hi)``, ``u = hi ⊗ INV_PIO2``,
       ``z = u ⊗ u``, ``s = hi ⊕ (((u ⊗ z) ⊗ horner(z, SIN_1…SIN_8)) ⊕ lo ⊗ (1 ⊖ hz))``,
       ``v = 1 ⊖ hz``, ``c = v ⊕ (((1 ⊖ v) ⊖ hz) ⊕ ((z ⊗ z) ⊗ horner(z, COS_2…COS_8) ⊖ hi ⊗ lo))``.
       (``SIN_0 ⊗ u`` and ``COS_1 ⊗ z`` are replaced by their exact values ``hi`` and
       ``−hi²/2``.)
    4. With ``q = k mod 4``: sin is ``s, c, −s, −c`` and cos is ``c, −s, −c, s`` for ``q = 0…3``.

    Constants: ``INV_PIO2 = 0x1.45f306dc9c883p-1``, ``PIO2_1 = 0x1.921fb54400000p+0``,
    ``PIO2_2 = 0x1.0b4611a600000p-34``, ``PIO2_3 = 0x1.3198a2e000000p-69``,
    ``PIO2_3T = 0x1.b839a252049c1p-104``, ``CW_MAX = 0x1.921fb54442d18p+20``. Sine is exactly
    odd and cosine exactly even.
    """
    return _elementwise(lambda v: _sincos_rad(v)[1], x)


def _sincos_rad(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(x)
    xs = np.where(ok, x, 0.0)
    k, hi, lo = _reduce_pio2(xs)
    s, c = _sincos_kernel(hi, lo)
    q = k.astype(np.int64) & 3
    sin = np.choose(q, (s, c, -s, -c))
    cos = np.choose(q, (c, -s, -c, s))
    sin = np.where(xs == 0.0, xs, sin)
    if not ok.all():
        sin = np.where(ok, sin, np.nan)
        cos = np.where(ok, cos, np.nan)
    return sin, cos


# ---------------------------------------------------------------------------------------
# expm1 and tanh

_EXPM1_NEG = _H("-0x1.3687a00000000p+5")      # ≈ −38.82 (−56 ln 2): at or below, expm1 = −1
_TINY_54 = _H("0x1p-54")
# Rational-approximation coefficients of expm1 on |r| ≤ 0.5 ln 2, from fdlibm s_expm1.c
# (Sun Microsystems, freely redistributable): r1 = 1 + hxs·(Q1 + hxs·(Q2 + … + hxs·Q5)).
_EXPM1_COEFFS = (
    1.0,
    _H("-0x1.11111111110f4p-5"),  # Q1
    _H("0x1.a01a019fe5585p-10"),  # Q2
    _H("-0x1.4ce199eaadbb7p-14"),  # Q3
    _H("0x1.0cfca86e65239p-18"),  # Q4
    _H("-0x1.afdb76e09c32dp-23"),  # Q5
)


def expm1(x) -> np.ndarray:
    """``e**x − 1`` of f64 ``x``, accurate near 0 (NUM-MATH-7).

    Algorithm (fdlibm's ``expm1`` with the reduction of :func:`exp`):

    1. Specials: NaN → NaN; ``x > EXP_OVERFLOW`` (+inf included) → +inf;
       ``x ≤ EXPM1_NEG`` (−inf included) → −1; ``|x| < 2^-54`` (±0 included) → ``x``.
    2. ``k = rint(x ⊗ INV_LN2)``, ``hi = x ⊖ k ⊗ LN2_HI`` (exact), ``lo = k ⊗ LN2_LO``,
       ``r = hi ⊖ lo``, ``c = (hi ⊖ r) ⊖ lo``.
    3. ``hfx = 0.5 ⊗ r``, ``hxs = r ⊗ hfx``, ``r1 = horner(hxs, 1, Q1…Q5)``,
       ``t = 3 ⊖ r1 ⊗ hfx``, ``e = hxs ⊗ ((r1 ⊖ t) ⊘ (6 ⊖ r ⊗ t))``.
    4. ``k = 0``: ``r ⊖ (r ⊗ e ⊖ hxs)``. Otherwise ``e = ((r ⊗ (e ⊖ c)) ⊖ c) ⊖ hxs`` and

       - ``k = −1``: ``(0.5 ⊗ (r ⊖ e)) ⊖ 0.5``;
       - ``k = 1``: ``r < −0.25``: ``−2 ⊗ (e ⊖ (r ⊕ 0.5))``, else ``1 ⊕ 2 ⊗ (r ⊖ e)``;
       - ``k ≤ −2`` or ``k > 56``: ``y = 1 ⊖ (e ⊖ r)``, result ``(y·2^k rounded once) ⊖ 1``
         (the scaling as in :func:`exp`);
       - ``2 ≤ k < 20``: ``((1 − 2^-k) ⊖ (e ⊖ r)) ⊗ 2^k``;
       - ``20 ≤ k ≤ 56``: ``((r ⊖ (e ⊕ 2^-k)) ⊕ 1) ⊗ 2^k``.

    Constants: ``EXPM1_NEG = -0x1.3687a00000000p+5``, ``Q1…Q5`` (fdlibm's, listed in the
    module), and ``EXP_OVERFLOW``, ``INV_LN2``, ``LN2_HI``, ``LN2_LO`` of :func:`exp`.
    """
    return _elementwise(_expm1, x)


def _expm1(x: np.ndarray) -> np.ndarray:
    ok = (x <= _EXP_OVERFLOW) & (x > _EXPM1_NEG)
    xs = np.where(ok, x, 0.0)
    k = np.rint(xs * _INV_LN2)
    hi = xs - k * _LN2_HI
    lo = k * _LN2_LO
    r = hi - lo
    c = (hi - r) - lo
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = horner(hxs, _EXPM1_COEFFS)
    t = 3.0 - r1 * hfx
    e = hxs * ((r1 - t) / (6.0 - r * t))
    res0 = r - (r * e - hxs)
    e = ((r * (e - c)) - c) - hxs
    kc = np.clip(k, -60.0, 1024.0)
    with np.errstate(over="ignore"):
        y = 1.0 - (e - r)
        far = _scale_pow2(y, kc) - 1.0
    kn = np.clip(kc, -1022.0, 1023.0)
    mid_lo = ((1.0 - _pow2(-np.clip(kn, 0.0, 60.0))) - (e - r)) * _pow2(kn)
    mid_hi = ((r - (e + _pow2(-np.clip(kn, 0.0, 60.0)))) + 1.0) * _pow2(kn)
    res = np.select(
        [k == 0.0, k == -1.0, (k == 1.0) & (r < -0.25), k == 1.0, (k <= -2.0) | (k > 56.0), k < 20.0],
        [res0, 0.5 * (r - e) - 0.5, -2.0 * (e - (r + 0.5)), 1.0 + 2.0 * (r - e), far, mid_lo],
        mid_hi)
    res = np.where(np.abs(x) < _TINY_54, x, res)
    if not ok.all():
        special = np.where(x > _EXP_OVERFLOW, np.inf, np.where(x <= _EXPM1_NEG, -1.0, np.nan))
        res = np.where(ok, res, special)
    return res


def tanh(x) -> np.ndarray:
    """Hyperbolic tangent of f64 ``x`` (NUM-MATH-8).

    Algorithm (fdlibm's ``tanh``), with ``a = |x|`` and :func:`expm1`:

    1. NaN → NaN; ``a < 2^-55`` (±0 included) → ``x``; ``a ≥ 22`` (±inf included) → ±1.
    2. ``1 ≤ a < 22``: ``t = expm1(2 ⊗ a)``, ``z = 1 ⊖ 2 ⊘ (t ⊕ 2)``.
    3. ``2^-55 ≤ a < 1``: ``t = expm1(−2 ⊗ a)``, ``z = −t ⊘ (t ⊕ 2)``.
    4. The result is ``z`` for ``x > 0`` and ``−z`` for ``x < 0`` (exactly odd).
    """
    return _elementwise(_tanh, x)


def _tanh(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    big = a >= 1.0
    t = _expm1(np.where(big, 2.0, -2.0) * np.where(a < 22.0, a, 0.0))
    z = np.where(big, 1.0 - 2.0 / (t + 2.0), -t / (t + 2.0))
    z = np.where(a >= 22.0, 1.0, z)
    res = np.where(x < 0, -z, z)
    res = np.where(a < _H("0x1p-55"), x, res)
    return np.where(np.isnan(x), np.nan, res)


# ---------------------------------------------------------------------------------------
# erf and erfc

# Coefficients from fdlibm s_erf.c (Sun Microsystems, freely redistributable).
_ERX = _H("0x1.b0ac160000000p-1")            # erx = (float)0.84506291151
_EFX = _H("0x1.06eba8214db69p-3")            # 2/√π − 1
_EFX8 = _H("0x1.06eba8214db69p+0")           # 8·EFX
_ERF_PP = tuple(_H(v) for v in (             # erf on [0, 0.84375]: numerator in z = x²
    "0x1.06eba8214db68p-3", "-0x1.4cd7d691cb913p-2", "-0x1.d2a51dbd7194fp-6",
    "-0x1.7a291236668e4p-8", "-0x1.8ead6120016acp-16"))
_ERF_QQ = (1.0,) + tuple(_H(v) for v in (    # … denominator
    "0x1.97779cddadc09p-2", "0x1.0a54c5536cebap-4", "0x1.4d022c4d36b0fp-8",
    "0x1.15dc9221c1a10p-13", "-0x1.09c4342a26120p-18"))
_ERF_PA = tuple(_H(v) for v in (             # erf on [0.84375, 1.25]: numerator in s = |x| − 1
    "-0x1.359b8bef77538p-9", "0x1.a8d00ad92b34dp-2", "-0x1.7d240fbb8c3f1p-2",
    "0x1.45fca805120e4p-2", "-0x1.c63983d3e28ecp-4", "0x1.22a36599795ebp-5",
    "-0x1.1bf380a96073fp-9"))
_ERF_QA = (1.0,) + tuple(_H(v) for v in (
    "0x1.b3e6618eee323p-4", "0x1.14af092eb6f33p-1", "0x1.2635cd99fe9a7p-4",
    "0x1.02660e763351fp-3", "0x1.bedc26b51dd1cp-7", "0x1.88b545735151dp-7"))
_ERF_RA = tuple(_H(v) for v in (             # erfc on [1.25, 1/0.35]: numerator in s = 1/x²
    "-0x1.43412600d6435p-7", "-0x1.63416e4ba7360p-1", "-0x1.51e0441b0e726p+3",
    "-0x1.f300ae4cba38dp+5", "-0x1.44cb184282266p+7", "-0x1.7135cebccabb2p+7",
    "-0x1.4526557e4d2f2p+6", "-0x1.3a0efc69ac25cp+3"))
_ERF_SA = (1.0,) + tuple(_H(v) for v in (
    "0x1.3a6b9bd707687p+4", "0x1.1350c526ae721p+7", "0x1.b290dd58a1a71p+8",
    "0x1.42b1921ec2868p+9", "0x1.ad02157700314p+8", "0x1.b28a3ee48ae2cp+6",
    "0x1.a47ef8e484a93p+2", "-0x1.eeff2ee749a62p-5"))
_ERF_RB = tuple(_H(v) for v in (             # erfc on [1/0.35, 28]
    "-0x1.4341239e86f4ap-7", "-0x1.993ba70c285dep-1", "-0x1.1c209555f995ap+4",
    "-0x1.4145d43c5ed98p+7", "-0x1.3ec881375f228p+9", "-0x1.004616a2e5992p+10",
    "-0x1.e384e9bdc383fp+8"))
_ERF_SB = (1.0,) + tuple(_H(v) for v in (
    "0x1.e568b261d5190p+4", "0x1.45cae221b9f0ap+8", "0x1.802eb189d5118p+10",
    "0x1.8ffb7688c246ap+11", "0x1.3f219cedf3be6p+11", "0x1.da874e79fe763p+8",
    "-0x1.670e242712d62p+4"))
_ERF_RA_MAX = _H("0x1.6db6d00000000p+1")     # ≈ 2.857 (1/0.35): RA/SA below, RB/SB from here


def _erf_parts(x: np.ndarray):
    """The shared pieces of :func:`erf` and :func:`erfc` for finite ``x``."""
    a = np.abs(x)
    r0 = a < 0.84375
    xa = np.where(r0, x, 0.5)
    z = xa * xa
    y = horner(z, _ERF_PP) / horner(z, _ERF_QQ)
    sa = np.where(r0 | (a >= 1.25), 1.0, a) - 1.0
    pq = horner(sa, _ERF_PA) / horner(sa, _ERF_QA)
    ac = np.where((a >= 1.25) & (a < 28.0), a, 2.0)
    s = 1.0 / (ac * ac)
    low = ac < _ERF_RA_MAX
    rs = np.where(low, horner(s, _ERF_RA), horner(s, _ERF_RB)) / \
        np.where(low, horner(s, _ERF_SA), horner(s, _ERF_SB))
    zc = (ac.view(np.int64) & np.int64(-(1 << 32))).view(np.float64)
    q = (_exp(-zc * zc - 0.5625) * _exp((zc - ac) * (zc + ac) + rs)) / ac
    return a, r0, xa, y, pq, q


def erf(x) -> np.ndarray:
    """The error function of f64 ``x`` (NUM-MATH-9).

    Algorithm (fdlibm's ``s_erf.c``), with ``a = |x|`` and ``sign`` the sign of ``x``:

    1. NaN → NaN; ``a ≥ 6`` (±inf included) → ``±1``.
    2. ``a < 2^-28``: ``a < 2^-1022``: ``0.125 ⊗ (8 ⊗ x ⊕ EFX8 ⊗ x)``, else ``x ⊕ EFX ⊗ x``
       (±0 → ±0).
    3. ``2^-28 ≤ a < 0.84375``: ``z = x ⊗ x``, ``y = horner(z, PP0…PP4) ⊘ horner(z, 1, QQ1…QQ5)``,
       ``x ⊕ x ⊗ y``.
    4. ``0.84375 ≤ a < 1.25``: ``s = a ⊖ 1``, ``P/Q = horner(s, PA0…PA6) ⊘ horner(s, 1, QA1…QA6)``;
       ``x > 0``: ``ERX ⊕ P/Q``; ``x < 0``: ``−ERX ⊖ P/Q``.
    5. ``1.25 ≤ a < 6``: ``s = 1 ⊘ (a ⊗ a)``; ``R/S = horner(s, RA0…RA7) ⊘ horner(s, 1, SA1…SA8)``
       if ``a < ERF_RA_MAX``, else ``horner(s, RB0…RB6) ⊘ horner(s, 1, SB1…SB7)``;
       ``zc = a`` with the low 32 bits of its encoding cleared (exact),
       ``q = (exp(−zc ⊗ zc ⊖ 0.5625) ⊗ exp((zc ⊖ a) ⊗ (zc ⊕ a) ⊕ R/S)) ⊘ a`` with :func:`exp`;
       ``x > 0``: ``1 ⊖ q``, ``x < 0``: ``q ⊖ 1``.

    Constants (fdlibm's, listed in the module): ``ERX = 0x1.b0ac160000000p-1``,
    ``EFX = 0x1.06eba8214db69p-3``, ``EFX8 = 0x1.06eba8214db69p+0``, ``PP``, ``QQ``, ``PA``,
    ``QA``, ``RA``, ``SA``, ``RB``, ``SB``, and ``ERF_RA_MAX = 0x1.6db6d00000000p+1``.
    """
    return _elementwise(_erf, x)


def _erf(x: np.ndarray) -> np.ndarray:
    ok = np.isfinite(x)
    xs = np.where(ok, x, 0.0)
    a, r0, xa, y, pq, q = _erf_parts(xs)
    neg = xs < 0
    xt = np.where(a < _H("0x1p-28"), xs, 0.0)
    tiny = np.where(a < _H("0x1p-1022"), 0.125 * (8.0 * xt + _EFX8 * xt), xt + _EFX * xt)
    res = np.select(
        [a < _H("0x1p-28"), r0, a < 1.25, a < 6.0],
        [tiny, xa + xa * y, np.where(neg, -_ERX - pq, _ERX + pq), np.where(neg, q - 1.0, 1.0 - q)],
        np.where(neg, -1.0, 1.0))
    if not ok.all():
        res = np.where(ok, res, np.where(np.isnan(x), np.nan, np.where(x > 0, 1.0, -1.0)))
    return res


def erfc(x) -> np.ndarray:
    """The complementary error function ``1 − erf(x)`` of f64 ``x`` (NUM-MATH-9).

    Algorithm (fdlibm's ``s_erf.c``), with the pieces ``y``, ``P/Q``, ``q`` of :func:`erf`:

    1. NaN → NaN; ``x ≥ 28`` (+inf included) → +0; ``x ≤ −6`` (−inf included) → 2.
    2. ``a < 2^-56``: ``1 ⊖ x``.
    3. ``2^-56 ≤ a < 0.84375``: ``x < 0.25``: ``1 ⊖ (x ⊕ x ⊗ y)``; else
       ``0.5 ⊖ ((x ⊗ y) ⊕ (x ⊖ 0.5))``.
    4. ``0.84375 ≤ a < 1.25``: ``x > 0``: ``(1 ⊖ ERX) ⊖ P/Q``; ``x < 0``: ``1 ⊕ (ERX ⊕ P/Q)``.
    5. ``1.25 ≤ a`` (and ``x < 28``, ``x > −6``): ``x > 0``: ``q``; ``x < 0``: ``2 ⊖ q``.
    """
    return _elementwise(_erfc, x)


def _erfc(x: np.ndarray) -> np.ndarray:
    ok = (x < 28.0) & (x > -6.0)
    xs = np.where(ok, x, 0.0)
    a, r0, xa, y, pq, q = _erf_parts(xs)
    neg = xs < 0
    small = np.where(xa < 0.25, 1.0 - (xa + xa * y), 0.5 - ((xa * y) + (xa - 0.5)))
    res = np.select(
        [a < _H("0x1p-56"), r0, a < 1.25],
        [1.0 - xs, small, np.where(neg, 1.0 + (_ERX + pq), (1.0 - _ERX) - pq)],
        np.where(neg, 2.0 - q, q))
    if not ok.all():
        res = np.where(ok, res, np.where(x >= 28.0, 0.0, np.where(x <= -6.0, 2.0, np.nan)))
    return res


# ---------------------------------------------------------------------------------------
# activations, rsqrt, pow

def sigmoid(x) -> np.ndarray:
    """The logistic function ``1/(1 + e**−x)`` of f64 ``x`` (NUM-MATH-10).

    Algorithm, with :func:`exp`: ``x ≥ 0`` (+0, −0, +inf included): ``1 ⊘ (1 ⊕ exp(−x))``;
    ``x < 0`` (−inf included): ``e = exp(x)``, ``e ⊘ (1 ⊕ e)`` (no cancellation and no
    overflow on either side). NaN → NaN; ``sigmoid(+inf) = 1``, ``sigmoid(−inf) = +0``.
    """
    return _elementwise(_sigmoid, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    pos = x >= 0
    e = _exp(np.where(pos, -x, x))
    return np.where(pos, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x) -> np.ndarray:
    """``x·sigmoid(x)`` of f64 ``x`` (NUM-MATH-10): ``x ⊗ sigmoid(x)``; ``silu(−inf) = −0``."""
    return _elementwise(_silu, x)


def _silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.where(x == -np.inf, -0.0, x * _sigmoid(x))


def rsqrt(x) -> np.ndarray:
    """``1/√x`` of f64 ``x`` as exactly two IEEE operations: ``1 ⊘ sqrt(x)`` (NUM-MATH-11).

    Not correctly rounded (two roundings; within 1 ulp). A CUDA kernel must compute
    ``1.0 / sqrt(x)`` with IEEE division and square root (``__ddiv_rn(1.0, __dsqrt_rn(x))``,
    for f32 ``__fdiv_rn(1.0f, __fsqrt_rn(x))``), never ``rsqrt``/``rsqrtf`` or fast-math.
    Specials follow: ``x < 0`` (−inf included) and NaN → NaN, ``+0 → +inf``, ``−0 → −inf``,
    ``+inf → +0``.
    """
    return _elementwise(_rsqrt, x)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(x)


def pow(x, y) -> np.ndarray:  # noqa: A001 - the name is the function's
    """``x**y`` for f64 ``x``, ``y`` (broadcast), IEEE-754 ``pow`` specials (NUM-MATH-12).

    Algorithm: the first matching rule of

    1. ``y = ±0`` → 1 (even for NaN ``x``); ``x = +1`` → 1 (even for NaN ``y``).
    2. ``x`` or ``y`` NaN → NaN.
    3. ``y = ±inf``: ``|x| = 1`` → 1; ``|x| < 1`` → +0 for ``y = +inf``, +inf for ``y = −inf``;
       ``|x| > 1`` → +inf for ``y = +inf``, +0 for ``y = −inf``.
    4. ``x = ±0``: ``y < 0``: ``±inf`` (sign of ``x``) if ``y`` is an odd integer, else +inf;
       ``y > 0``: ``x`` if ``y`` is an odd integer, else +0.
    5. ``x = ±inf``: ``y < 0``: ``±0`` (sign of ``x``) if ``y`` is an odd integer, else +0;
       ``y > 0``: ``x`` if ``y`` is an odd integer, else +inf.
    6. ``x < 0`` and ``y`` not an integer → NaN.
    7. Otherwise ``r = exp(y ⊗ log(|x|))`` (:func:`exp`, :func:`log`), negated when ``x < 0``
       and ``y`` is an odd integer.

    An odd integer is a finite ``y`` with ``floor(y) = y`` and ``floor(y ⊗ 0.5) ≠ y ⊗ 0.5``.
    Accuracy is limited by the rounding of ``y ⊗ log|x|``: the relative error is about
    ``(1 + |y·log x|)·2^-52``, i.e. within 2 ulp for ``|y·log x| ≤ 1`` but up to several
    hundred ulp when the result approaches the overflow or underflow threshold. ``pow(x, 2)``
    is not ``x ⊗ x``; use multiplication for integer powers where bits matter.
    """
    x, y = np.broadcast_arrays(_f64(x), _f64(y))
    xf, yf = x.reshape(-1), y.reshape(-1)
    out = np.empty(xf.shape)
    for s in range(0, xf.size, _CHUNK):
        out[s:s + _CHUNK] = _pow(xf[s:s + _CHUNK], yf[s:s + _CHUNK])
    return out.reshape(x.shape)


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ax = np.abs(x)
    fin_y = np.isfinite(y)
    yint = fin_y & (np.floor(np.where(fin_y, y, 0.0)) == y)
    hy = np.where(fin_y, y, 0.0) * 0.5
    yodd = yint & (np.floor(hy) != hy)
    ok = np.isfinite(x) & (x != 0) & fin_y
    lx = _log(np.where(ok, ax, 1.0))
    with np.errstate(over="ignore", invalid="ignore"):
        r = _exp(np.where(ok, y, 0.0) * lx)
    r = np.where((x < 0) & yodd, -r, r)
    r = np.where((x < 0) & ~yint, np.nan, r)
    with np.errstate(invalid="ignore"):
        r = np.where(x == -np.inf, np.where(y < 0, np.where(yodd, -0.0, 0.0), np.where(yodd, -np.inf, np.inf)), r)
        r = np.where(x == np.inf, np.where(y < 0, 0.0, np.inf), r)
        r = np.where(x == 0, np.where(y < 0, np.where(yodd, np.copysign(np.inf, x), np.inf),
                                      np.where(yodd, x, 0.0)), r)
        r = np.where(np.isinf(y), np.where(ax == 1, 1.0, np.where((ax < 1) == (y > 0), 0.0, np.inf)), r)
    r = np.where(np.isnan(x) | np.isnan(y), np.nan, r)
    return np.where((y == 0) | (x == 1), 1.0, r)


_SQRT_2_OVER_PI_X2 = _H("0x1.9884533d43651p+0")  # 2·RN(√(2/π)) (exact doubling)
_GELU_C = _H("0x1.6e4e26d4801f7p-5")            # RN(0.044715)


def gelu(x) -> np.ndarray:
    """GELU, ``0.5·x·(1 + erf(x/√2))``, of f64 ``x`` (NUM-MATH-13).

    Algorithm: ``(0.5 ⊗ x) ⊗ erfc(−(x ⊗ SQRT_HALF))`` with :func:`erfc`
    (``1 + erf(t) = erfc(−t)``, which avoids the cancellation for negative ``x``) and
    ``SQRT_HALF = 0x1.6a09e667f3bcdp-1``. NaN → NaN, ``+inf → +inf``, ``−inf → −0``.
    """
    return _elementwise(_gelu, x)


def _gelu(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.where(x == -np.inf, -0.0, (0.5 * x) * _erfc(-(x * _SQRT_HALF)))


def gelu_tanh(x) -> np.ndarray:
    """The tanh approximation of GELU, ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` (NUM-MATH-13).

    Algorithm, using ``(1 + tanh u)/2 = sigmoid(2u)``:
    ``v = x ⊕ GELU_C ⊗ ((x ⊗ x) ⊗ x)``, result ``x ⊗ sigmoid(K2 ⊗ v)`` with :func:`sigmoid`,
    ``GELU_C = 0x1.6e4e26d4801f7p-5`` (RN(0.044715)) and ``K2 = 0x1.9884533d43651p+0``
    (``2·RN(√(2/π))``, so ``K2 ⊗ v`` is exactly twice ``RN(√(2/π)) ⊗ v``). NaN → NaN,
    ``+inf → +inf``, ``−inf → −0``; where ``x³`` overflows, ``v = ±inf`` and the result is
    ``x`` or ``−0``.
    """
    return _elementwise(_gelu_tanh, x)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        v = x + _GELU_C * ((x * x) * x)
        return np.where(x == -np.inf, -0.0, x * _sigmoid(_SQRT_2_OVER_PI_X2 * v))
