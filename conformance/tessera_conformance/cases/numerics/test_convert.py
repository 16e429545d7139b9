"""NUM-FMT-1, NUM-CVT-1 … NUM-CVT-7: conversions, TestFloat style.

Expected codes come from the exact-rational reference of :mod:`._ref_convert` (every code of a
format decoded from its bit fields; every source value split as ``(n + f)·2^q`` and stepped by
the mode's rule). Inputs are, for every format of at most 16 bits: every code of every such
format, and every value, midpoint and the nearest f32/f64 on each side of each midpoint (the
values where a rounding decision changes), in every rounding mode and overflow mode.

The backend runs ``op.cast`` on a few hundred of those inputs per (format, rounding, overflow)
and on every code of every narrow format; the full tables are checked once against the
oracle's ``numerics.cast`` (the ``oracle`` cases: strided by default, every input under
``-m slow``).
"""
from __future__ import annotations

import math
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import tessera_ref
from tessera_ref import numerics, op
from tessera_ref.errors import TesseraError
from tessera_conformance import assert_bits, clause, oracle_only, run

from . import _ref_convert as R
from . import _ref_rng as RNG
from ._common import as_f32, same_values, sample

MODES = [(r, o) for r in R.ROUNDINGS for o in R.OVERFLOWS]


def _source_array(values, source: str) -> np.ndarray:
    return as_f32(values) if source == "f32" else np.array(values, np.float64)


def _codes(values, target, rounding, overflow, u=None) -> np.ndarray:
    us = [None] * len(values) if u is None else u
    return np.array([R.round_code(v, target, rounding, overflow, w) for v, w in zip(values, us)], np.uint64)


def _expect(values, target, rounding="rne", overflow="native", u=None) -> np.ndarray:
    return R.codes_to_array(_codes(values, target, rounding, overflow, u), target)


def _cast_fn(target, rounding=None, overflow=None, seed=None):
    return lambda v: op.cast(v, target, rounding=rounding, overflow=overflow, seed=seed)


# -- every code decoded (NUM-FMT-1, NUM-CVT-7, NUM-CVT-4) -----------------------------------------

def _every_code(name: str) -> np.ndarray:
    return R.codes_to_array(np.arange(1 << R.SPECS[name].bits), name)


def _decoded(name: str, wide: str) -> np.ndarray:
    """Every code's value in f32/f64; NaN codes → the canonical quiet NaN with the code's sign."""
    codes = np.arange(1 << R.SPECS[name].bits)
    return _expect(_nan_signs(R.all_values(name), codes, name), wide)


@clause("NUM-FMT-1", "NUM-CVT-7", "NUM-CVT-4")
@pytest.mark.parametrize("name", R.NARROW)
@pytest.mark.parametrize("wide", ["f32", "f64"])
def test_every_code_decodes_on_the_backend(backend, name, wide):
    """Every code of every format of at most 16 bits, widened by ``op.cast``: its exact value
    read off the bit layout of NUM-FMT-1; a NaN code gives the canonical quiet NaN with the
    code's sign bit (e8m0's NaN has none)."""
    got = run(backend, _cast_fn(wide), _every_code(name))
    assert_bits(got, _decoded(name, wide), f"{name} → {wide}")


@oracle_only("the format registry has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-FMT-1")
def test_the_table_of_limits(backend):
    """max, smallest normal and smallest subnormal of the table are the extreme decoded values."""
    for name in R.NARROW + ("f32", "f64"):
        s = R.SPECS[name]
        fmt = numerics.get_format(name)
        assert (fmt.bits, fmt.exp_bits, fmt.man_bits, fmt.bias) == (s.bits, s.exp_bits, s.man_bits, s.bias), name
        assert fmt.max == float(s.max), name
        if s.min_normal is not None:
            assert fmt.min_normal == float(s.min_normal), name
        if s.min_subnormal is not None:
            assert fmt.min_subnormal == float(s.min_subnormal), name
        if s.bits <= 16:
            finite = [v for v in R.all_values(name) if math.isfinite(v)]
            assert max(finite) == float(s.max), name
            positive = [v for v in finite if v > 0]
            if s.kind in ("ieee", "fn", "finite"):
                assert min(positive) == float(s.min_subnormal), name
                normal = [v for c, v in enumerate(R.all_values(name))
                          if v > 0 and (c >> s.man_bits) & ((1 << s.exp_bits) - 1)]
                assert min(normal) == float(s.min_normal), name
    assert float(R.SPECS["fp8_e4m3"].max) == 1.75 * 2 ** 8
    assert R.all_values("e8m0")[0] == 2.0 ** -127 and math.isnan(R.all_values("e8m0")[255])


@oracle_only("numerics.decode has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-CVT-7")
@pytest.mark.parametrize("name", R.NARROW + ("f32",))
def test_oracle_decode(backend, name):
    """``decode(codes, F)``: the exact f32 value of each code (every code; f32 strided); codes
    outside ``[0, 2^bits)`` are an error."""
    s = R.SPECS[name]
    codes = np.arange(0, 1 << s.bits, 1 if s.bits <= 16 else 65521, dtype=np.uint64)
    got = numerics.decode(codes.astype(s.code_dtype), name)
    assert got.dtype == np.float32
    want = np.array([R.decode(int(c), s) for c in codes], np.float64)
    assert same_values(got, want), name
    f64 = numerics.decode(np.array([0x7FEFFFFFFFFFFFFF, 1], np.uint64), "f64")
    assert f64.dtype == np.float64 and f64[0] == float(R.SPECS["f64"].max) and f64[1] == 5e-324
    if s.bits < 16:
        with pytest.raises(TesseraError):
            numerics.decode(np.array([1 << s.bits], np.int64), name)
        with pytest.raises(TesseraError):
            numerics.decode(np.array([-1], np.int64), name)


# -- rounding and overflow through the backend (NUM-CVT-1 … NUM-CVT-3, NUM-CVT-6) ------------------

@clause("NUM-CVT-1", "NUM-CVT-2", "NUM-CVT-3")
@pytest.mark.parametrize("rounding,overflow", MODES, ids=[f"{r}-{o}" for r, o in MODES])
@pytest.mark.parametrize("target", R.NARROW)
def test_cast_boundaries_on_the_backend(backend, target, rounding, overflow):
    """A few hundred TestFloat inputs from f32 and from f64 (values, midpoints, their
    neighbours, out-of-range values, ±0, ±inf, NaN) converted by ``op.cast``."""
    for source in ("f32", "f64"):
        values = sample(R.boundary_values(target, source), 300, seed=zlib.crc32(f"{target}/{source}".encode()))
        values += [0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan]
        got = run(backend, _cast_fn(target, rounding, overflow), _source_array(values, source))
        assert_bits(got, _expect(values, target, rounding, overflow), f"{source} → {target} {rounding}/{overflow}")


@clause("NUM-CVT-1", "NUM-CVT-2")
@pytest.mark.parametrize("target", R.NARROW)
def test_cast_between_narrow_formats_on_the_backend(backend, target):
    """Every code of the 8-bit-or-narrower formats and a stride of the 16-bit ones, converted
    from their own storage dtype into ``target`` (two modes per source, cycling)."""
    for i, source in enumerate(R.NARROW):
        codes = np.arange(0, 1 << R.SPECS[source].bits, 1 if R.SPECS[source].bits <= 8 else 251)
        values = [R.all_values(source)[c] for c in codes]
        x = R.codes_to_array(codes, source)
        for rounding, overflow in (MODES[i % len(MODES)], MODES[(i + 3) % len(MODES)]):
            got = run(backend, _cast_fn(target, rounding, overflow), x)
            want = _expect(_nan_signs(values, codes, source), target, rounding, overflow)
            assert_bits(got, want, f"{source} → {target} {rounding}/{overflow}")


def _nan_signs(values, codes, source):
    """Decoded values with each NaN carrying its code's sign bit."""
    s = R.SPECS[source]
    return [(-math.nan if s.sign_bit and c & s.sign_bit else math.nan) if math.isnan(v) else v
            for v, c in zip(values, codes)]


@clause("NUM-CVT-1")
def test_f64_sources_are_rounded_once(backend):
    """An f64 value is converted from its exact value: never through f32 first. Each input
    here is one f64 ulp from a tie of the target, where f32-then-target rounds the other way."""
    cases = [("bf16", 1 + 2.0 ** -8 + 2.0 ** -40, 1 + 2.0 ** -7), ("bf16", 1 + 2.0 ** -8 - 2.0 ** -40, 1.0),
             ("fp8_e4m3", 1 + 2.0 ** -4 + 2.0 ** -45, 1.125), ("f16", 1 + 2.0 ** -11 + 2.0 ** -50, 1 + 2.0 ** -10),
             ("fp4_e2m1", 0.25 + 2.0 ** -54, 0.5), ("fp4_e2m1", 0.75 - 2.0 ** -53, 0.5),
             ("e8m0", 1.5 - 2.0 ** -52, 1.0), ("int8", 2.5 + 2.0 ** -51, 3.0)]
    for target, x, want in cases:
        got = run(backend, _cast_fn(target), np.array([x, -x], np.float64))
        assert_bits(got, _expect([x, -x], target), f"{x!r} → {target}")
        if target not in ("e8m0", "int8"):
            assert float(got[0].astype(np.float64)) == want, (target, x)


@clause("NUM-CVT-1")
def test_integer_sources_are_exact(backend):
    """Integers of magnitude at most 2^53 are converted from their exact value (an ``index``
    tensor through the backend); the oracle rejects integers f64 cannot hold, complex numbers
    and objects."""
    ints = [0, 1, -1, 2 ** 24 + 1, -(2 ** 24 + 3), 2 ** 53, -(2 ** 53), 2 ** 53 - 1, 65519, 65520, 300, -129]
    for target in ("f32", "bf16", "f16", "fp8_e4m3", "int8", "fp4_e2m1"):
        for rounding in ("rne", "rtz"):
            got = run(backend, _cast_fn(target, rounding), np.array(ints, np.int64))
            assert_bits(got, _expect([Fraction(i) for i in ints], target, rounding), f"int64 → {target} {rounding}")
    if backend == "interp":
        assert numerics.encode(np.array([2 ** 53 + 2], np.int64), "f64") == np.uint64(0x4340000000000001)
        for bad in (np.array([2 ** 53 + 1], np.int64), np.array([2 ** 64 - 1], np.uint64),
                    np.array([1 + 1j]), np.array([object()], dtype=object)):
            with pytest.raises(TesseraError):
                numerics.cast(bad, "f32")


# -- hand-derived cases, from the words of the spec -----------------------------------------------

#: (format, x, rounding, overflow, expected value) — each derived by hand from NUM-CVT-2/3/6.
HAND = [
    ("fp4_e2m1", 0.74, "rne", "native", 0.5), ("fp4_e2m1", 0.76, "rne", "native", 1.0),
    ("fp4_e2m1", 0.25, "rne", "native", 0.0), ("fp4_e2m1", -0.25, "rne", "native", -0.0),
    ("fp4_e2m1", 2.5, "rne", "native", 2.0), ("fp4_e2m1", 3.5, "rne", "native", 4.0),
    ("fp4_e2m1", 5.0, "rne", "native", 4.0), ("fp4_e2m1", 7.0, "rne", "native", 6.0),
    ("fp4_e2m1", 100.0, "rne", "native", 6.0), ("fp4_e2m1", 0.1, "rup", "native", 0.5),
    ("fp4_e2m1", -0.1, "rup", "native", -0.0), ("fp4_e2m1", -0.1, "rdown", "native", -0.5),
    ("fp8_e4m3", 464.0, "rne", "native", 448.0), ("fp8_e4m3", 464.5, "rne", "native", math.nan),
    ("fp8_e4m3", -465.0, "rne", "native", -math.nan), ("fp8_e4m3", 463.9, "rne", "native", 448.0),
    ("fp8_e4m3", 1e6, "rtz", "native", 448.0), ("fp8_e4m3", -1e6, "rup", "native", -448.0),
    ("fp8_e4m3", -1e6, "rdown", "native", -math.nan), ("fp8_e4m3", 1e6, "rne", "saturate", 448.0),
    ("fp8_e4m3", 2.0 ** -10, "rne", "native", 0.0), ("fp8_e4m3", 3 * 2.0 ** -11, "rne", "native", 2.0 ** -9),
    ("fp8_e4m3", math.inf, "rne", "native", math.nan), ("fp8_e4m3", -math.inf, "rne", "saturate", -448.0),
    ("fp8_e5m2", 61440.0, "rne", "native", math.inf), ("fp8_e5m2", 61439.0, "rne", "native", 57344.0),
    ("fp8_e5m2", 1e9, "rdown", "native", 57344.0), ("fp8_e5m2", -1e9, "rdown", "native", -math.inf),
    ("f16", 65520.0, "rne", "native", math.inf), ("f16", 65520.0, "rtz", "native", 65504.0),
    ("f16", 2.0 ** -25, "rne", "native", 0.0), ("f16", 2.0 ** -25, "rup", "native", 2.0 ** -24),
    ("bf16", 1 + 2.0 ** -8, "rne", "native", 1.0), ("bf16", 1 + 3 * 2.0 ** -8, "rne", "native", 1 + 2.0 ** -6),
    ("fp6_e2m3", 7.75, "rne", "native", 7.5), ("fp6_e2m3", 0.0625, "rne", "native", 0.0),
    ("fp6_e3m2", 30.0, "rne", "native", 28.0), ("fp6_e3m2", 0.03125, "rne", "native", 0.0),
    ("int8", 2.5, "rne", "native", 2.0), ("int8", -2.5, "rne", "native", -2.0),
    ("int8", -2.5, "rtz", "native", -2.0), ("int8", 2.7, "rtz", "native", 2.0),
    ("int8", -2.2, "rdown", "native", -3.0), ("int8", 1000.0, "rne", "native", 127.0),
    ("int8", -1000.0, "rne", "native", -128.0), ("int8", math.nan, "rne", "native", 0.0),
    ("int4", 7.5, "rne", "native", 7.0), ("int4", -8.5, "rne", "native", -8.0),
    ("e8m0", 1.5, "rne", "native", 2.0), ("e8m0", 1.4, "rne", "native", 1.0), ("e8m0", 3.0, "rne", "native", 4.0),
    ("e8m0", 1.1, "rup", "native", 2.0), ("e8m0", 1.9, "rtz", "native", 1.0), ("e8m0", 1.9, "rdown", "native", 1.0),
    ("e8m0", 2.0 ** -130, "rne", "native", 2.0 ** -127), ("e8m0", 2.0 ** -140, "rtz", "native", 2.0 ** -127),
    ("e8m0", 0.0, "rne", "native", math.nan), ("e8m0", -0.0, "rne", "saturate", math.nan),
    ("e8m0", -4.0, "rne", "native", math.nan), ("e8m0", -math.inf, "rne", "saturate", math.nan),
    ("e8m0", math.inf, "rne", "native", math.nan), ("e8m0", math.inf, "rne", "saturate", 2.0 ** 127),
    ("e8m0", 2.0 ** 128, "rtz", "native", 2.0 ** 127), ("e8m0", 1.6 * 2.0 ** 127, "rne", "native", math.nan),
]


@clause("NUM-CVT-2", "NUM-CVT-3", "NUM-CVT-6")
def test_hand_derived_cases_on_the_backend(backend):
    """Values derived by hand from the clauses (fp4 0.74 → 0.5 and 0.76 → 1.0; e4m3 overflow is
    NaN keeping the sign; directed modes stop at max toward zero; e8m0 ties go up, tiny values
    give 2^-127, zero and negatives NaN)."""
    for target, x, rounding, overflow, want in HAND:
        got = run(backend, _cast_fn(target, rounding, overflow), np.array([x], np.float64))
        value = float(np.asarray(got).astype(np.float64)[0])
        assert (math.isnan(value) and math.isnan(want)) or (value == want and math.copysign(1, value) ==
                                                              math.copysign(1, want)), (target, x, rounding, overflow, value)
        if math.isnan(want) and R.SPECS[target].sign_bit:
            sign = int(np.asarray(got).view(np.uint8 if R.SPECS[target].bits <= 8 else np.uint16)[0]) >> (R.SPECS[target].bits - 1)
            assert sign == (math.copysign(1, want) < 0), (target, x, "NaN keeps the sign")
        assert_bits(got, _expect([x], target, rounding, overflow), f"{x!r} → {target} {rounding}/{overflow}")


# -- NaN (NUM-CVT-4) ------------------------------------------------------------------------------

_NAN_F32 = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FC12345, 0xFFFFFFFF, 0x7FBFFFFF]


@clause("NUM-CVT-4")
@pytest.mark.parametrize("target", R.NARROW + ("f32", "f64"))
def test_nan_sources(backend, target):
    """Quiet and signalling NaNs of both signs with payloads: the canonical quiet NaN with the
    source's sign in IEEE formats (payload dropped), S.1111.111 in e4m3, 0xFF in e8m0, −0 in
    fp6/fp4 whatever the sign, 0 in the integer formats — in every rounding and overflow mode."""
    x = np.array(_NAN_F32, np.uint32).view(np.float32)
    signs = [bool(b >> 31) for b in _NAN_F32]
    values = [-math.nan if s else math.nan for s in signs]
    want = _expect(values, target)
    s = R.SPECS[target]
    for v, w in zip(values, R.array_codes(want, target)):
        if s.kind == "ieee":
            assert int(w) & ~s.sign_bit == R.canonical_nan(target)
        elif s.kind == "finite":
            assert int(w) == s.sign_bit
        elif s.kind == "int":
            assert int(w) == 0
    for rounding, overflow in MODES:
        assert_bits(run(backend, _cast_fn(target, rounding, overflow), x), want, f"NaN → {target} {rounding}/{overflow}")
    f64 = np.array([0x7FF8000000000001, 0xFFF0000000000001], np.uint64).view(np.float64)
    assert_bits(run(backend, _cast_fn(target), f64), _expect([math.nan, -math.nan], target), f"f64 NaN → {target}")


# -- stochastic rounding (NUM-CVT-5) ----------------------------------------------------------------

def _stochastic_inputs(target: str, n: int, seed: int) -> list:
    values = [v for v in R.boundary_values(target, "f32") if math.isfinite(v)]
    picks = sample(values * (1 + n // len(values)), n - 4, seed)
    return picks + [math.nan, math.inf, -0.0, 0.0]


@clause("NUM-CVT-5", "NUM-RNG-4")
@pytest.mark.parametrize("target", ["bf16", "f16", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp4_e2m1", "e8m0", "int8"])
@pytest.mark.parametrize("overflow", R.OVERFLOWS)
def test_stochastic_rounding_on_the_backend(backend, target, overflow):
    """``op.cast(x, F, rounding="stochastic", seed=s)``: element ``i`` rounds away from zero
    iff ``u < f·2^32`` with ``u = random_bits(RNGKey(s), i)``, ``i`` the row-major index of
    a 2-D tensor (Philox and the key derivation from the case's own transcription)."""
    seed = 1234 + len(target)
    values = _stochastic_inputs(target, 256, seed)
    key = RNG.key_words(seed)
    u = [RNG.random_bits(key, i) for i in range(len(values))]
    x = as_f32(values).reshape(16, 16)
    got = run(backend, _cast_fn(target, "stochastic", overflow, seed), x)
    want = _expect(values, target, "stochastic", overflow, u).reshape(16, 16)
    assert_bits(got, want, f"stochastic → {target}/{overflow}")


@clause("NUM-CVT-5")
def test_stochastic_rounding_probability(backend):
    """Half-way values round up for about half the elements, a quarter-way value for about a
    quarter: the counts are those of ``u < f·2^32`` over the Philox stream (exactly), and
    within a few standard deviations of ``n·f``."""
    n = 4096
    for value, f in ((1 + 2.0 ** -8, 0.5), (1 + 2.0 ** -9, 0.25), (-(1 + 3 * 2.0 ** -9), 0.75)):
        x = np.full(n, value, np.float32)
        got = run(backend, _cast_fn("bf16", "stochastic", None, 7), x).astype(np.float64)
        up = int(np.sum(np.abs(got) > 1.0))  # the neighbours are ±1 and ±(1 + 2^-7)
        key = RNG.key_words(7)
        exact = sum(RNG.random_bits(key, i) < f * 2 ** 32 for i in range(n))
        assert up == exact
        assert abs(up - n * f) < 5 * math.sqrt(n * f * (1 - f)), (value, up)


@clause("NUM-CVT-5")
def test_stochastic_rounding_needs_a_key(backend):
    with pytest.raises(TesseraError):
        run(backend, _cast_fn("bf16", "stochastic"), np.ones(4, np.float32))
    if backend == "interp":
        with pytest.raises(TesseraError):
            numerics.cast(np.ones(4, np.float32), "bf16", rounding="stochastic")


@oracle_only("numerics.cast(index=...) has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-CVT-5")
def test_stochastic_shards_equal_the_unsharded_conversion(backend):
    """A shard that passes its global indices gets the same codes as the same slice of the
    whole conversion; by default the indices are ``0 … size−1`` in C order."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 12)).astype(np.float32)
    key = tessera_ref.numerics.RNGKey(99)
    for target in ("bf16", "fp8_e4m3", "fp4_e2m1", "int4"):
        whole = numerics.encode(x, target, rounding="stochastic", key=key)
        idx = np.arange(x.size, dtype=np.uint64).reshape(x.shape)
        for rows, cols in ((slice(0, 4), slice(None)), (slice(4, 8), slice(6, 12)), (slice(1, 3), slice(2, 5))):
            part = numerics.encode(x[rows, cols], target, rounding="stochastic", key=key, index=idx[rows, cols])
            assert np.array_equal(part, whole[rows, cols]), (target, rows, cols)
        u = [RNG.random_bits(RNG.key_words(99), i) for i in range(x.size)]
        want = _codes([float(v) for v in x.reshape(-1)], target, "stochastic", "native", u)
        assert np.array_equal(whole.reshape(-1).astype(np.uint64), want), target


# -- the full tables, against the oracle's numerics.cast ----------------------------------------------

def _table_inputs(target: str, stride: int) -> list:
    """(source dtype name, values, source codes or None): every code of every narrow format
    and the TestFloat boundaries of ``target`` from f32 and f64, every ``stride``-th of each."""
    out = []
    for source in R.NARROW:
        codes = np.arange(0, 1 << R.SPECS[source].bits, stride if R.SPECS[source].bits > 8 else 1)
        out.append((source, _nan_signs([R.all_values(source)[c] for c in codes], codes, source), codes))
    for source in ("f32", "f64"):
        values = R.boundary_values(target, source)
        step = stride if len(values) > 4000 else 1
        out.append((source, list(values[::step]) + [math.nan, -math.nan], None))
    return out


def _check_table(target: str, stride: int) -> None:
    for source, values, codes in _table_inputs(target, stride):
        x = R.codes_to_array(codes, source) if codes is not None else _source_array(values, source)
        want = np.array([R.round_codes(v, target, MODES) for v in values], np.uint64).reshape(len(values), len(MODES))
        for k, (rounding, overflow) in enumerate(MODES):
            got = numerics.encode(x, target, rounding=rounding, overflow=overflow).astype(np.uint64)
            bad = np.flatnonzero(got != want[:, k])
            assert not bad.size, (f"{source} → {target} {rounding}/{overflow}: {bad.size} of {len(values)} codes "
                                  f"differ; first {values[bad[0]]!r}: got {int(got[bad[0]]):#x}, "
                                  f"expected {int(want[bad[0], k]):#x}")


@oracle_only("numerics.cast has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-CVT-1", "NUM-CVT-2", "NUM-CVT-3", "NUM-CVT-4", "NUM-CVT-6")
@pytest.mark.parametrize("target", R.NARROW)
def test_oracle_conversion_table(backend, target):
    """The oracle's ``numerics.cast``: every code of every 8-bit-or-narrower format, every
    97th code of f16/bf16 and every 97th TestFloat boundary of the 16-bit targets (all of
    them for the narrower ones), × 4 rounding modes × 2 overflow modes."""
    _check_table(target, 97)


@oracle_only("numerics.cast has no backend entry point; the case checks the oracle's numerics library")
@pytest.mark.slow
@clause("NUM-CVT-1", "NUM-CVT-2", "NUM-CVT-3", "NUM-CVT-4", "NUM-CVT-6")
@pytest.mark.parametrize("target", R.NARROW)
def test_oracle_conversion_table_exhaustive(backend, target):
    """As above with every input: all 65536 codes of f16 and bf16 and every boundary of the
    16-bit targets (about 1.3 M exact conversions per target)."""
    _check_table(target, 1)


# -- names and storage (NUM-FMT-2, NUM-FMT-3) -----------------------------------------------------------

NAMES = {"fp8": "fp8_e4m3", "fp6": "fp6_e2m3", "fp4": "fp4_e2m1", "fp32": "f32", "fp16": "f16", "fp64": "f64",
         "bfloat16": "bf16"}


@clause("NUM-FMT-2")
@pytest.mark.parametrize("alias", sorted(NAMES))
def test_names_resolve_on_the_backend(backend, alias):
    """A cast to the bare or alias name gives the bits of the cast to the format it names."""
    x = as_f32([0.3, -1.7, 5.0, 12.0, 1e-3, 65519.0, 2.0 ** -20])
    got = run(backend, _cast_fn(alias), x)
    assert_bits(got, _expect([float(v) for v in x], NAMES[alias]), alias)


@oracle_only("the format registry has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-FMT-2")
def test_python_names_are_the_registry_formats(backend):
    for alias, name in NAMES.items():
        assert numerics.get_format(alias) is numerics.get_format(name)
    for attr, name in (("f32", "f32"), ("f16", "f16"), ("bf16", "bf16"), ("f64", "f64"), ("fp8", "fp8_e4m3"),
                       ("fp6", "fp6_e2m3"), ("fp4", "fp4_e2m1"), ("fp8_e5m2", "fp8_e5m2"), ("fp6_e3m2", "fp6_e3m2")):
        assert getattr(tessera_ref, attr) is numerics.get_format(name), attr


@clause("NUM-FMT-3")
@pytest.mark.parametrize("name", R.NARROW)
def test_storage_dtype_holds_one_code_per_element(backend, name):
    """Values of a sub-byte format are held one per byte in the ml_dtypes dtype of the same
    name, the code in the low bits (the other bits zero)."""
    s = R.SPECS[name]
    x = as_f32([-6.0, -0.5, 0.0, 0.75, 3.0, 1.0, -1.0, 2.0])
    got = run(backend, _cast_fn(name), x)
    assert got.dtype == np.dtype(s.dtype), (name, got.dtype)
    codes = R.array_codes(got, name).astype(np.uint64)
    assert np.all(codes < (1 << s.bits)), (name, codes)
    assert np.array_equal(codes, _codes([float(v) for v in x], name, "rne", "native")), name
    names = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "fp6_e2m3": "float6_e2m3fn",
             "fp6_e3m2": "float6_e3m2fn", "fp4_e2m1": "float4_e2m1fn", "e8m0": "float8_e8m0fnu", "int4": "int4",
             "bf16": "bfloat16", "f16": "float16", "int8": "int8"}
    assert np.dtype(s.dtype) == np.dtype(getattr(ml_dtypes, names[name], None) or names[name])
