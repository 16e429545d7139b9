"""NUM-MATH-1 … NUM-MATH-13: the exact-algorithm math library, bit for bit.

Expected values: the clauses transcribed operation by operation in Python floats
(:mod:`._ref_math`; IEEE binary64, one rounding per operation, no contraction, no libm).
The backend runs the graph ops on f64 tensors, whose results are the algorithms' f64 values
(a NaN result is the canonical quiet +NaN, NUM-EW-1); ``sincos_turns`` and ``log_factorial``
have no op of their own — the backend meets them inside ``randn`` and ``poisson``
(``test_rng``) — and are checked here in the oracle's library.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tessera_ref import op
from tessera_ref.numerics import xmath
from tessera_conformance import assert_bits, clause, oracle_only, run

from . import _ref_convert as R
from . import _ref_math as M
from ._common import f64_bits

H = float.fromhex


def _near(*points) -> list:
    """Each point and its two f64 neighbours, both signs."""
    out = []
    for p in points:
        for v in (p, math.nextafter(p, -math.inf), math.nextafter(p, math.inf)):
            out += [v, -v]
    return out


def _random(n: int, seed: int, lo: float, hi: float) -> list:
    rng = np.random.default_rng(seed)
    return [float(v) for v in rng.uniform(lo, hi, n)] + [float(v) for v in
                                                           rng.standard_normal(n) * 10.0 ** rng.uniform(lo, hi, n)]


SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, -5e-324, 2.0 ** -1022, 1.0, -1.0, 0.5, 2.0, 1e300, -1e300]

INPUTS = {
    "log": SPECIAL + _near(H("0x1.6a09e667f3bcdp-1"), 1.0, 2.0, 1e-310, 3.0) + [abs(v) for v in _random(300, 1, -300, 300)],
    "exp": SPECIAL + _near(M.EXP_OVER, M.EXP_UNDER, -708.4, 0.5 * math.log(2), 1e-20) + _random(300, 2, -2, 2.86),
    "sin": SPECIAL + _near(M.CW_MAX, math.pi / 4, math.pi / 2, math.pi, 3 * math.pi / 2, 1e22, 2.0 ** 1000, 6.0e8)
    + _random(300, 3, -3, 8),
    "expm1": SPECIAL + _near(M.EXP_OVER, M.EXPM1_NEG, 2.0 ** -54, 0.3465, -0.3465, 1.0397, -1.0397, 13.5, 38.8,
                             40.0, 700.0) + _random(300, 4, -2, 2.6),
    "tanh": SPECIAL + _near(2.0 ** -55, 1.0, 22.0, 0.5) + _random(300, 5, -3, 1.4),
    "erf": SPECIAL + _near(2.0 ** -28, 2.0 ** -56, 2.0 ** -1022, 0.84375, 1.25, M.ERF_RA_MAX, 6.0, 28.0, 0.25)
    + _random(300, 6, -2, 0.8),
    "sigmoid": SPECIAL + _near(745.2, 709.8, 36.8, 1e-17) + _random(300, 7, -2, 2.9),
    "rsqrt": SPECIAL + _near(4.0, 2.0 ** -1074, 2.0 ** 1023) + [abs(v) for v in _random(300, 8, -300, 300)],
    "gelu": SPECIAL + _near(5.0, 40.0, 1e103, 1e155, 1e-200) + _random(300, 9, -2, 1.5),
}
INPUTS["cos"] = INPUTS["sin"]
INPUTS["erfc"] = INPUTS["erf"]
INPUTS["silu"] = INPUTS["sigmoid"]

CLAUSES = {"log": "NUM-MATH-2", "exp": "NUM-MATH-3", "sin": "NUM-MATH-6", "cos": "NUM-MATH-6",
           "expm1": "NUM-MATH-7", "tanh": "NUM-MATH-8", "erf": "NUM-MATH-9", "erfc": "NUM-MATH-9",
           "sigmoid": "NUM-MATH-10", "silu": "NUM-MATH-10", "rsqrt": "NUM-MATH-11", "gelu": "NUM-MATH-13"}


def _check_unary(backend, name: str, ref, graph, inputs) -> None:
    x = np.array(inputs, np.float64)
    want = f64_bits([ref(float(v)) for v in x])
    assert_bits(run(backend, graph, x), want, name)


def _unary_cases():
    return [pytest.param(name, marks=pytest.mark.clause(CLAUSES[name], "NUM-MATH-1"), id=name) for name in CLAUSES]


@clause("NUM-MATH-1")
@pytest.mark.parametrize("name", _unary_cases())
def test_f64_ops_are_the_algorithms(backend, name):
    """``op.<fn>`` on f64 tensors: the clause's algorithm bit for bit, at its thresholds,
    branch boundaries (each with both f64 neighbours) and across its domain."""
    _check_unary(backend, name, M.FUNCTIONS[name], lambda v: getattr(op, name)(v), INPUTS[name])


@clause("NUM-MATH-13", "NUM-MATH-10", "NUM-MATH-1")
def test_gelu_tanh(backend):
    """``op.gelu(x, approximate="tanh")``: ``x ⊗ sigmoid(2·RN(√(2/π)) ⊗ (x ⊕ RN(0.044715) ⊗ x³))``;
    where ``x³`` overflows the result is ``x`` or −0."""
    _check_unary(backend, "gelu_tanh", M.gelu_tanh, lambda v: op.gelu(v, approximate="tanh"), INPUTS["gelu"])


POW_X = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, math.inf, -math.inf, math.nan, 3.7, 1e-300, -8.0, 10.0]
POW_Y = [0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, math.inf, -math.inf, math.nan, 2.5, 1e300, 7.0, -1075.0]


@clause("NUM-MATH-12", "NUM-MATH-1")
def test_pow(backend):
    """``op.pow`` on f64: the table of IEEE specials (every pair of the special operands),
    then ``exp(y ⊗ log|x|)`` negated for negative ``x`` and odd integer ``y`` — integer powers
    are not exact (``pow(−2, 3)`` is not −8)."""
    pairs = [(x, y) for x in POW_X for y in POW_Y]
    rng = np.random.default_rng(12)
    pairs += [(float(a), float(b)) for a, b in zip(rng.uniform(0, 30, 300), rng.uniform(-20, 20, 300))]
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    want = f64_bits([M.pow_(a, b) for a, b in pairs])
    assert_bits(run(backend, lambda u, v: op.pow(u, v), x, y), want, "pow")
    # The clause's example says −0x1.fffffffffffffp+2; its own algorithm gives ...ffep+2 (which
    # is also exp(RN(3·RN(ln 2))) correctly rounded). The algorithm is what is normative.
    assert M.pow_(-2.0, 3.0) == -H("0x1.ffffffffffffep+2")


@clause("NUM-MATH-11")
def test_rsqrt_is_two_correctly_rounded_operations(backend):
    """``rsqrt(x) = 1 ⊘ sqrt(x)`` in f64: two correctly rounded operations (so not correctly
    rounded itself); +0 → +inf, −0 → −inf, x < 0 → NaN, +inf → +0."""
    _check_unary(backend, "rsqrt", M.rsqrt, lambda v: op.rsqrt(v), INPUTS["rsqrt"])
    x = [v for v in INPUTS["rsqrt"] if 0 < v < math.inf]
    assert [M.rsqrt(v) for v in x] == [R.div(1.0, R.sqrt(v, "f64"), "f64") for v in x]


# -- the functions without an op of their own (the oracle's library) ------------------------------

@oracle_only("numerics.xmath.horner has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-MATH-1")
def test_horner(backend):
    """``horner(z; c0 … cn)``: ``p = cn``, then ``p = (p ⊗ z) ⊕ cj`` downwards."""
    rng = np.random.default_rng(14)
    z = rng.standard_normal(200) * 3
    coeffs = tuple(float(c) for c in rng.standard_normal(9))
    assert [float(v).hex() for v in xmath.horner(z, coeffs)] == [M.horner(float(v), coeffs).hex() for v in z]


@oracle_only("numerics.xmath.sincos_turns has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-MATH-4")
def test_sincos_turns(backend):
    """``sincos_turns(t)``: exact reduction to a quarter turn, the S/C polynomials; exact
    0 and ±1 at multiples of a quarter turn; ``t + n`` gives the bits of ``t``."""
    t = ([0.0, -0.0, 0.25, 0.5, 0.75, 1.0, -0.25, 1.25, 1e16, 2.0 ** 60 + 0.5, math.inf, math.nan, 0.125, 1 / 3]
         + _random(300, 15, -3, 2))
    s, c = xmath.sincos_turns(np.array(t))
    want = [M.sincos_turns(v) for v in t]
    for v, si, ci, (ws, wc) in zip(t, s, c, want):
        assert (math.isnan(si) and math.isnan(ws)) or float(si).hex() == ws.hex(), (v, si, ws)
        assert (math.isnan(ci) and math.isnan(wc)) or float(ci).hex() == wc.hex(), (v, ci, wc)
    for q, (ws, wc) in zip((0.0, 0.25, 0.5, 0.75), ((0.0, 1.0), (1.0, 0.0), (0.0, -1.0), (-1.0, 0.0))):
        got = M.sincos_turns(q + 3.0)
        assert abs(got[0]) == abs(ws) and abs(got[1]) == abs(wc)
    assert M.sincos_turns(0.1 + 5.0) == M.sincos_turns(5.1) and M.sincos_turns(0.3) != M.sincos_turns(-0.3)


@oracle_only("numerics.xmath.log_factorial has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-MATH-5")
def test_log_factorial(backend):
    """``log_factorial(k)``: the correctly rounded table below 10, the Stirling series from 10."""
    k = [float(v) for v in list(range(0, 60)) + [99, 100, 1000, 12345, 10 ** 6, 2 ** 40, 2 ** 52]] + [math.inf]
    got = xmath.log_factorial(np.array(k))
    assert [float(v).hex() for v in got] == [M.log_factorial(v).hex() for v in k]
    for n in range(2, 10):
        assert M.log_factorial(float(n)) == float.fromhex(M.LOGFACT[n].hex())
        assert abs(M.log_factorial(float(n)) - math.lgamma(n + 1)) <= 2 ** -50 * math.lgamma(n + 1)
