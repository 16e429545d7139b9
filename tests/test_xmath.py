"""Exact-algorithm math (NUM-MATH-1 … NUM-MATH-5).

Accuracy is measured against two references: NumPy's libm (allowed here, in tests only) in
ulps, and an extended-precision reference (``np.longdouble``, 64-bit significand on x86) in
fractions of an f64 ulp. Golden bit patterns pin the algorithms themselves: any change of a
constant, a reduction step or the evaluation order changes them.
"""
import hashlib
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera_ref.numerics import xmath

EXTENDED = np.finfo(np.longdouble).nmant >= 63
needs_extended = pytest.mark.skipif(not EXTENDED, reason="np.longdouble is not wider than f64 here")
PI_LD = np.longdouble("3.14159265358979323846264338327950288419716939937510582097494459")
TINY = 5e-324
N = 100_000


def ulp_distance(a, b):
    """|a − b| in units in the last place, counted on the f64 grid (both finite)."""
    def ordered(x):
        i = np.asarray(x, dtype=np.float64).view(np.int64)
        return np.where(i < 0, np.int64(-(2**63)) - i, i)
    return np.abs(ordered(a) - ordered(b))


def ulp_error(got, ref_ld):
    """|got − ref| / ulp(ref) with ref in extended precision (ulp of f64 at ref; subnormal aware)."""
    ref64 = ref_ld.astype(np.float64)
    ulp = np.spacing(np.abs(ref64)).astype(np.longdouble)
    return (np.abs(got.astype(np.longdouble) - ref_ld) / ulp).astype(float)


def _log_points():
    r = np.random.default_rng(1)
    parts = [
        np.exp2(r.uniform(-1074, 1024, N // 2)),                # log-uniform over the whole range
        r.uniform(0.5, 2.0, N // 4),                             # around 1
        1.0 + r.uniform(-1, 1, N // 8) * np.exp2(r.integers(-52, -1, N // 8)),
        r.uniform(0, 1, N // 8) * 2.2250738585072014e-308,      # subnormals
        np.exp2(np.arange(-1074, 1024, dtype=np.float64)),       # powers of two
        np.array([TINY, 2.2250738585072014e-308, np.finfo(np.float64).max, math.sqrt(0.5),
                  np.nextafter(math.sqrt(0.5), 0), np.nextafter(math.sqrt(0.5), 1), np.e, 10.0]),
    ]
    x = np.concatenate(parts)
    return x[(x > 0) & np.isfinite(x)]


def _exp_points():
    r = np.random.default_rng(2)
    return np.concatenate([
        r.uniform(-745.2, 709.79, N // 2),
        r.uniform(-1, 1, N // 4) * np.exp2(r.integers(-60, 0, N // 4)),
        r.uniform(-40, 40, N // 4),
        np.arange(-745, 710, dtype=np.float64),
        np.array([0.0, -0.0, 709.782712893383973096, -745.13321910194110842, -708.39, -708.4]),
    ])


def _turn_points():
    r = np.random.default_rng(3)
    return np.concatenate([
        r.uniform(-1, 1, N // 2) * np.exp2(r.integers(-80, 12, N // 2)),
        r.uniform(-1e6, 1e6, N // 4),
        np.arange(-4096, 4097) / 1024.0,                          # multiples of 1/1024 turn
        np.arange(-4096, 4097) / 1024.0 + 1e-9,
        r.integers(-2**40, 2**40, 1000) * 2.0**-30,
    ])


def _turn_reference(t):
    """sin/cos(2πt) in extended precision; the reduction to a quarter turn is exact for any t."""
    r = t.astype(np.longdouble) - np.rint(t.astype(np.longdouble))
    q = np.rint(4 * r)
    th = (4 * r - q) * (PI_LD / 2)
    s, c = np.sin(th), np.cos(th)
    q = q.astype(np.int64) & 3
    return np.choose(q, (s, c, -s, -c)), np.choose(q, (c, -s, -c, s))


# ---------------------------------------------------------------------------------------
# accuracy

def test_log_within_2_ulp_of_numpy_and_1_ulp_of_truth():
    x = _log_points()
    got = xmath.log(x)
    assert got.dtype == np.float64 and got.shape == x.shape
    assert ulp_distance(got, np.log(x)).max() <= 2
    if EXTENDED:
        assert ulp_error(got, np.log(x.astype(np.longdouble))).max() < 1.0


def test_exp_within_2_ulp_of_numpy_and_1_ulp_of_truth():
    x = _exp_points()
    got = xmath.exp(x)
    assert ulp_distance(got, np.exp(x)).max() <= 2
    if EXTENDED:
        ref = np.exp(x.astype(np.longdouble))
        assert ulp_error(got, ref).max() < 1.0


@needs_extended
def test_sincos_turns_within_2_ulp_of_truth():
    t = _turn_points()
    s, c = xmath.sincos_turns(t)
    rs, rc = _turn_reference(t)
    for got, ref in ((s, rs), (c, rc)):
        exact_zero = ref == 0
        assert np.all(got[exact_zero] == 0)
        assert ulp_error(got[~exact_zero], ref[~exact_zero]).max() < 2.0


def test_sincos_turns_against_numpy_where_the_angle_is_exact():
    # t = k / 2**m with 2π t computed by numpy from the same exact quarter-turn reduction
    k = np.arange(-20000, 20001)
    t = k / 65536.0
    s, c = xmath.sincos_turns(t)
    r = t - np.rint(t)
    q = np.rint(4 * r)
    x = 4 * r - q                                # exact, |x| ≤ 1/2
    th = x * (np.pi / 2)                         # one rounding: a ≤ 1 ulp perturbation of the angle
    qs = q.astype(np.int64) & 3
    ns = np.choose(qs, (np.sin(th), np.cos(th), -np.sin(th), -np.cos(th)))
    nc = np.choose(qs, (np.cos(th), -np.sin(th), -np.cos(th), np.sin(th)))
    nz = (ns != 0) & (s != 0)
    assert ulp_distance(s[nz], ns[nz]).max() <= 3
    assert ulp_distance(c[nc != 0], nc[nc != 0]).max() <= 3


@needs_extended
@given(st.floats(min_value=TINY, max_value=1.7976931348623157e308))
def test_log_property(x):
    got = xmath.log(np.array([x]))
    assert ulp_error(got, np.log(np.array([x], dtype=np.longdouble)))[0] < 1.0


@needs_extended
@given(st.floats(min_value=-745.0, max_value=709.0))
def test_exp_property(x):
    got = xmath.exp(np.array([x]))
    assert ulp_error(got, np.exp(np.array([x], dtype=np.longdouble)))[0] < 1.0


@needs_extended
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_sincos_property(t):
    s, c = xmath.sincos_turns(np.array([t]))
    rs, rc = _turn_reference(np.array([t]))
    for got, ref in ((s, rs), (c, rc)):
        if ref[0] == 0:
            assert got[0] == 0
        else:
            assert ulp_error(got, ref)[0] < 2.0


def test_log_factorial_matches_lgamma():
    k = np.concatenate([np.arange(0, 2000), np.exp2(np.arange(11, 52)).round(), [1e15, 2.0**52]])
    got = xmath.log_factorial(k)
    ref = np.array([math.lgamma(v + 1) for v in k])
    assert np.all(np.abs(got - ref) <= 8e-16 * np.maximum(ref, 1.0))   # both within ~2 ulp of truth
    # the small-k table is exactly the correctly rounded log k!
    assert xmath.log_factorial(np.arange(10.0)).tolist() == [
        0.0, 0.0, 0.6931471805599453, 1.791759469228055, 3.1780538303479458, 4.787491742782046,
        6.579251212010101, 8.525161361065415, 10.60460290274525, 12.801827480081469]
    assert xmath.log_factorial(np.inf) == np.inf


# ---------------------------------------------------------------------------------------
# special values and exact cases

def test_log_special_values():
    x = np.array([1.0, 0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, TINY, 2.0, 0.5])
    got = xmath.log(x)
    assert got[0] == 0 and not np.signbit(got[0])
    assert got[1] == -np.inf and got[2] == -np.inf
    assert np.isnan(got[3]) and np.isnan(got[4]) and np.isnan(got[6])
    assert got[5] == np.inf
    assert got[7] == -744.4400719213812
    assert got[8] == 0.6931471805599453 and got[9] == -0.6931471805599453
    # every power of two gives k·ln2 computed as in NUM-MATH-2
    k = np.arange(-1074, 1024)
    expected = k * float.fromhex("0x1.62e42fee00000p-1") + k * float.fromhex("0x1.a39ef35793c76p-33")
    assert np.array_equal(xmath.log(np.exp2(k.astype(float))), expected)


def test_exp_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.79, -745.2, 709.782712893383973096,
                  -745.13321910194110842, 1e-300, -1e-300])
    got = xmath.exp(x)
    assert got[0] == 1 and got[1] == 1
    assert got[2] == np.inf and got[3] == 0 and np.isnan(got[4])
    assert got[5] == np.inf and got[6] == 0
    assert got[7] == 1.7976931348622732e308
    assert got[8] == TINY
    assert got[9] == 1 and got[10] == 1


def test_exp_subnormal_results_are_within_one_subnormal_ulp():
    x = np.linspace(-745.1, -708.4, 20001)
    got = xmath.exp(x)
    assert ulp_distance(got, np.exp(x)).max() <= 1


def test_sincos_special_values_and_quarter_turns():
    s, c = xmath.sincos_turns(np.array([np.inf, -np.inf, np.nan]))
    assert np.all(np.isnan(s)) and np.all(np.isnan(c))
    s, c = xmath.sincos_turns(np.array([0.0, -0.0]))
    assert s.tolist() == [0.0, -0.0] and np.signbit(s[1]) and not np.signbit(s[0])
    assert c.tolist() == [1.0, 1.0]
    t = np.arange(-40, 41) / 4.0                      # every quarter turn: exact 0 and ±1
    s, c = xmath.sincos_turns(t)
    q = np.arange(-40, 41) % 4
    assert np.array_equal(np.abs(s), np.array([0, 1, 0, 1])[q].astype(float))
    assert np.array_equal(s[q == 1], np.ones((q == 1).sum()))
    assert np.array_equal(s[q == 3], -np.ones((q == 3).sum()))
    assert np.array_equal(c[q == 0], np.ones((q == 0).sum()))
    assert np.array_equal(c[q == 2], -np.ones((q == 2).sum()))
    assert np.all(c[q % 2 == 1] == 0)
    s, c = xmath.sincos_turns(np.array([1e300, -2.0**60, 2.0**52 + 1]))   # integers: a whole turn
    assert np.all(s == 0) and np.all(c == 1)


def test_sincos_turns_exact_periodicity_and_symmetry():
    t = np.random.default_rng(5).integers(-2**30, 2**30, 20000) * 2.0**-31   # |t| < 1/2, exact grid
    s0, c0 = xmath.sincos_turns(t)
    for n in (1.0, -3.0, 1024.0):                      # t + n is exact for these t
        s1, c1 = xmath.sincos_turns(t + n)
        assert np.array_equal(s0, s1) and np.array_equal(c0, c1)
    sm, cm = xmath.sincos_turns(-t)
    nz = s0 != 0
    assert np.array_equal(sm[nz], -s0[nz]) and np.array_equal(cm, c0)
    assert np.all(np.abs(s0) <= 1) and np.all(np.abs(c0) <= 1)


def test_shapes_and_scalars():
    assert xmath.log(2.0).shape == ()
    assert xmath.exp(np.ones((3, 4))).shape == (3, 4)
    s, c = xmath.sincos_turns(np.zeros((2, 0)))
    assert s.shape == c.shape == (2, 0)
    big = np.linspace(0.1, 10, 5 * (1 << 15) + 5).reshape(5, -1)     # several chunks
    assert np.array_equal(xmath.log(big), np.stack([xmath.log(row) for row in big]))


def test_horner_is_two_roundings_per_step():
    z = np.random.default_rng(0).uniform(-2, 2, 1000)
    coeffs = (0.1, -0.7, 1.0 / 3.0, 2.5)
    expected = ((2.5 * z + 1.0 / 3.0) * z + -0.7) * z + 0.1
    assert np.array_equal(xmath.horner(z, coeffs), expected)


# ---------------------------------------------------------------------------------------
# scalar transcriptions of the NUM-MATH text (Python floats are IEEE f64, round() ties to even)

H = float.fromhex
LN2_HI, LN2_LO = H("0x1.62e42fee00000p-1"), H("0x1.a39ef35793c76p-33")
LG = [H(v) for v in ("0x1.5555555555593p-1", "0x1.999999997fa04p-2", "0x1.2492494229359p-2",
                     "0x1.c71c51d8e78afp-3", "0x1.7466496cb03dep-3", "0x1.39a09d078c69fp-3",
                     "0x1.2f112df3e5244p-3")]
P = [H(v) for v in ("0x1.555555555553ep-3", "-0x1.6c16c16bebd93p-9", "0x1.1566aaf25de2cp-14",
                    "-0x1.bbd41c5d26bf1p-20", "0x1.6376972bea4d0p-25")]


def spec_horner(z, coeffs):
    p = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        p = p * z + c
    return p


def spec_log(x):
    m, e = math.frexp(x)
    if m < H("0x1.6a09e667f3bcdp-1"):
        m, e = 2 * m, e - 1
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    r = z * spec_horner(z, LG)
    hfsq = (0.5 * f) * f
    k = float(e)
    return k * LN2_HI - ((hfsq - (s * (hfsq + r) + k * LN2_LO)) - f)


def spec_exp(x):
    k = float(round(x * H("0x1.71547652b82fep+0")))
    hi = x - k * LN2_HI
    lo = k * LN2_LO
    r = hi - lo
    z = r * r
    c = r - z * spec_horner(z, P)
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    k1 = math.floor(k / 2)
    return (y * 2.0**k1) * 2.0**(k - k1)


SIN = [H(v) for v in ("0x1.921fb54442d18p+0", "-0x1.4abbce625be53p-1", "0x1.466bc6775aae2p-4",
                      "-0x1.32d2cce62bd86p-8", "0x1.50783487ee782p-13", "-0x1.e3074fde8871fp-19",
                      "0x1.e8f434d018d63p-25", "-0x1.6fadb9f155744p-31", "0x1.aaec32af93359p-38")]
COS = [1.0] + [H(v) for v in ("-0x1.3bd3cc9be45dep+0", "0x1.03c1f081b5ac4p-2", "-0x1.55d3c7e3cbffap-6",
                              "0x1.e1f506891babbp-11", "-0x1.a6d1f2a204a8cp-16", "0x1.f9d38a3763cc3p-22",
                              "-0x1.b6e24f44b128fp-28", "0x1.20c62c2f2d7f5p-34")]


def spec_sincos(t):
    if t == 0:
        return t, 1.0
    r = t - round(t)
    y = 4.0 * r
    j = round(y)
    x = y - j
    z = x * x
    s, c = x * spec_horner(z, SIN), spec_horner(z, COS)
    return [(s, c), (c, -s), (-s, -c), (-c, s)][j % 4]


def test_log_is_the_specified_algorithm():
    x = _log_points()[::20]
    assert xmath.log(x).tolist() == [spec_log(v) for v in x.tolist()]


def test_exp_is_the_specified_algorithm_including_rounding_ties():
    inv_ln2 = H("0x1.71547652b82fep+0")
    ties = []                                    # x with x ⊗ INV_LN2 exactly k + 1/2: rint matters
    for k in range(-1075, 1024):
        x = (k + 0.5) / inv_ln2
        ties += [c for c in (x, math.nextafter(x, math.inf), math.nextafter(x, -math.inf))
                 if c * inv_ln2 == k + 0.5]
    assert len(ties) > 1000
    x = np.concatenate([_exp_points()[::20], ties])
    x = x[(x >= -745.13321910194110842) & (x <= 709.782712893383973096)]
    assert xmath.exp(x).tolist() == [spec_exp(v) for v in x.tolist()]


def test_sincos_turns_is_the_specified_algorithm():
    t = _turn_points()[::20]
    got = xmath.sincos_turns(t)
    for v, s, c in zip(t.tolist(), *(a.tolist() for a in got)):
        es, ec = spec_sincos(v)
        assert (s, c) == (es, ec) and math.copysign(1, s) == math.copysign(1, es)


# ---------------------------------------------------------------------------------------
# the algorithms themselves are pinned (NUM-MATH is normative: a CUDA port must match these)

def test_golden_bits():
    assert [xmath.log(v).item().hex() for v in (3.0, 0.5, 1e-300, 123.456)] == [
        "0x1.193ea7aad030ap+0", "-0x1.62e42fefa39efp-1", "-0x1.5963447f87fb5p+9", "0x1.343774f3e2362p+2"]
    assert [xmath.exp(v).item().hex() for v in (3.0, 0.5, 1e-300, 123.456)] == [
        "0x1.415e5bf6fb106p+4", "0x1.a61298e1e069cp+0", "0x1.0000000000000p+0", "0x1.1428e1cbc0143p+178"]
    assert [tuple(a.item().hex() for a in xmath.sincos_turns(v)) for v in (0.1, 0.3, 1 / 3)] == [
        ("0x1.2cf2304755a5ep-1", "0x1.9e3779b97f4a8p-1"),
        ("0x1.e6f0e13445500p-1", "-0x1.3c6ef372fe94ep-2"),
        ("0x1.bb67ae8584cabp-1", "-0x1.ffffffffffffep-2"),
    ]


def _digest():
    h = hashlib.sha256()
    h.update(xmath.log(np.exp2(np.linspace(-1074, 1023, 50001))).tobytes())
    h.update(xmath.exp(np.linspace(-746, 710, 50001)).tobytes())
    for a in xmath.sincos_turns(np.linspace(-2, 2, 50001)):
        h.update(a.tobytes())
    h.update(xmath.log_factorial(np.arange(0.0, 5000.0)).tobytes())
    return h.hexdigest()


def test_golden_digest():
    assert _digest() == "7a18f7c4af0f41aa6647b772d7e3a520674c34107f2aed4a7624923cc8904eeb"
