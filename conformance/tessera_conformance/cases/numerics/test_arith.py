"""NUM-EW-1 … NUM-EW-3: elementwise arithmetic under a policy, fma, transcendentals.

Expected bits: the exact real result (fractions) rounded once into ``accum`` with rne, then
converted once into storage with the policy's rounding and overflow (:mod:`._ref_convert`);
transcendentals from the NUM-MATH transcriptions of :mod:`._ref_math`.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tessera_ref import numerics, op
from tessera_conformance import assert_bits, clause, run

from . import _ref_convert as R
from . import _ref_math as M
from ._common import as_f32

BINARY = {"add": (op.add, R.add), "sub": (op.sub, R.sub), "mul": (op.mul, R.mul), "div": (op.div, R.div)}
STORAGE = ["f32", "f64", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1"]


def _accum(storage: str) -> str:
    return storage if storage in ("f32", "f64") else "f32"  # NUM-POL-1's default


def _held(values, storage: str) -> list:
    """Each value as ``storage`` holds it (the specials it lacks become what NUM-CVT makes them)."""
    return [R.decode(R.round_code(v, storage), R.SPECS[storage]) for v in values]


def _operands(storage: str, n: int, seed: int) -> list:
    """``n`` values of ``storage``: random codes for the narrow formats, random bit patterns
    otherwise; specials included."""
    rng = np.random.default_rng(seed)
    if storage in R.SPECS and R.SPECS[storage].bits <= 16:
        values = list(R.all_values(storage))
        return [values[i] for i in rng.integers(0, len(values), n)]
    dt = np.float32 if storage == "f32" else np.float64
    bits = rng.integers(0, 2 ** 32 if dt == np.float32 else 2 ** 63, n, dtype=np.uint64)
    if dt == np.float32:
        with np.errstate(invalid="ignore"):  # signalling NaNs widen to quiet ones
            v = bits.astype(np.uint32).view(np.float32).astype(np.float64)
    else:
        v = (bits ^ (rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(63))).view(np.float64)
    v = [float(x) for x in v]
    v[:12] = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 2.0 ** -149, 2.0 ** -126, 3.0, 0.5, -2.0 ** -140]
    return _held(v, storage)


def _array(values, storage: str) -> np.ndarray:
    return R.codes_to_array([R.code_of(v, storage) for v in values], storage)


def _stored(values, storage, rounding="rne", overflow="native") -> np.ndarray:
    return R.codes_to_array([R.round_code(v, storage, rounding, overflow) for v in values], storage)


@clause("NUM-EW-1")
@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("storage", STORAGE)
def test_binary_ops_round_once_in_accum_then_into_storage(backend, storage, name):
    """``op.add/sub/mul/div`` on two tensors of one format: the exact result rounded to nearest
    even in the policy's ``accum`` (f32 for storage narrower than 32 bits), then converted into
    storage; NaN results are the canonical quiet +NaN; subnormals are kept."""
    fn, ref = BINARY[name]
    a = _operands(storage, 512, seed=1)
    b = _operands(storage, 512, seed=2)
    b[:12] = _held([0.0, 0.0, math.inf, math.inf, 1.0, -0.0, 2.0 ** -149, 2.0 ** -149, -0.0, math.inf, 3.0,
                    2.0 ** -10], storage)
    acc = _accum(storage)
    want = _stored([ref(x, y, acc) for x, y in zip(a, b)], storage)
    got = run(backend, lambda u, v: fn(u, v), _array(a, storage), _array(b, storage))
    assert_bits(got, want, f"{name} in {storage}")


@clause("NUM-EW-1")
@pytest.mark.parametrize("storage", ["f32", "f64", "bf16", "f16", "fp8_e4m3"])
def test_sqrt_is_correctly_rounded_in_accum(backend, storage):
    a = [abs(v) if i % 3 else v for i, v in enumerate(_operands(storage, 512, seed=3))]
    acc = _accum(storage)
    want = _stored([R.sqrt(x, acc) for x in a], storage)
    assert_bits(run(backend, lambda u: op.sqrt(u), _array(a, storage)), want, f"sqrt in {storage}")


@clause("NUM-EW-1")
def test_policy_rounding_and_overflow_govern_the_storage_conversion(backend):
    """bf16 storage with ``accum=f32``: the f32 result converted with the policy's rounding
    (rne, rtz, rup, rdown) and overflow (native, saturate)."""
    a = _operands("bf16", 400, seed=4)
    b = _operands("bf16", 400, seed=5)
    a[0], b[0] = 3.0e38, 3.0e38  # an overflow
    x, y = _array(a, "bf16"), _array(b, "bf16")
    for rounding in ("rne", "rtz", "rup", "rdown"):
        for overflow in ("native", "saturate"):
            policy = numerics.Policy(numerics.bf16, accum=numerics.f32, rounding=rounding, overflow=overflow)
            for name, (fn, ref) in BINARY.items():
                want = _stored([ref(u, v, "f32") for u, v in zip(a, b)], "bf16", rounding, overflow)
                got = run(backend, lambda u, v: fn(op.cast(u, policy), op.cast(v, policy)), x, y)
                assert_bits(got.view(np.uint16), want.view(np.uint16), f"bf16 {name}, {rounding}/{overflow}")


@clause("NUM-EW-1")
def test_accum_is_the_format_of_the_arithmetic(backend):
    """``accum=bf16`` rounds each op once into bf16; the default ``accum=f32`` rounds into f32
    and then into bf16. (For +, −, ×, ÷ and sqrt the two agree — f32 has more than twice bf16's
    precision — but for fma they do not: the first triple here tells them apart.)"""
    a, b, c = _fma_triples("bf16", 300, seed=12)
    a[0], b[0], c[0] = -1.015625, -1.75, -3.096647560596466e-08
    narrow = numerics.Policy(numerics.bf16, accum=numerics.bf16)
    x, y, z = _array(a, "bf16"), _array(b, "bf16"), _array(c, "bf16")
    got = run(backend, lambda u, v, w: op.fma(op.cast(u, narrow), op.cast(v, narrow), op.cast(w, narrow)), x, y, z)
    want = _stored([R.fma(u, v, w, "bf16") for u, v, w in zip(a, b, c)], "bf16")
    assert_bits(got.view(np.uint16), want.view(np.uint16), "bf16 fma with accum=bf16")
    wide = run(backend, lambda u, v, w: op.fma(u, v, w), x, y, z)
    assert (float(got[0]), float(wide[0])) == (1.7734375, 1.78125)
    for name, (fn, ref) in BINARY.items():
        got = run(backend, lambda u, v: fn(op.cast(u, narrow), op.cast(v, narrow)), x, y)
        want = _stored([ref(u, v, "bf16") for u, v in zip(a, b)], "bf16")
        assert_bits(got.view(np.uint16), want.view(np.uint16), f"bf16 {name} with accum=bf16")


@clause("NUM-EW-1")
def test_operands_wider_than_accum_are_rounded_into_it(backend):
    """f64 storage with ``accum=f32``: each operand rounded to f32 (rne) first, the op done in
    f32, the f32 result stored exactly in f64."""
    policy = numerics.Policy(numerics.f64, accum=numerics.f32)
    rng = np.random.default_rng(6)
    a = list(rng.standard_normal(300) * 10.0 ** rng.integers(-40, 40, 300)) + [1 + 2.0 ** -30, 1e300, 2.0 ** -140]
    b = list(rng.standard_normal(300) * 10.0 ** rng.integers(-40, 40, 300)) + [2.0 ** -25, 1e300, 2.0 ** -140]
    for name, (fn, ref) in BINARY.items():
        want = np.array([ref(R.f32(u), R.f32(v), "f32") for u, v in zip(a, b)], np.float64)
        got = run(backend, lambda u, v: fn(op.cast(u, policy), op.cast(v, policy)), np.array(a), np.array(b))
        assert_bits(got, want, f"{name} of f64 operands in f32")


@clause("NUM-EW-1")
def test_nan_results_are_the_canonical_quiet_nan(backend):
    """inf − inf, 0·inf, 0/0, inf/inf, sqrt(−1) and NaN operands of any sign and payload all
    give 0x7FC00000 in f32 (hosts disagree on these bits; the definition does not)."""
    inf, nan_neg = np.float32(np.inf), np.array([0xFFC12345], np.uint32).view(np.float32)[0]
    a = np.array([inf, 0.0, 0.0, inf, nan_neg, 1.0, -inf], np.float32)
    b = np.array([inf, inf, 0.0, -inf, 1.0, nan_neg, -inf], np.float32)
    canonical = np.full(7, 0x7FC00000, np.uint32)
    assert_bits(run(backend, lambda u, v: op.sub(u, v), a[[0, 4, 5, 6]], b[[0, 4, 5, 6]]).view(np.uint32),
                canonical[:4], "sub")
    assert_bits(run(backend, lambda u, v: op.mul(u, v), a[[1, 4]], b[[1, 4]]).view(np.uint32), canonical[:2], "mul")
    assert_bits(run(backend, lambda u, v: op.div(u, v), a[[2, 3]], b[[2, 3]]).view(np.uint32), canonical[:2], "div")
    assert_bits(run(backend, lambda u, v: op.add(u, v), a[[0, 6]], -b[[0, 6]]).view(np.uint32), canonical[:2], "add")
    assert_bits(run(backend, lambda u: op.sqrt(u), np.array([-1.0, nan_neg], np.float32)).view(np.uint32),
                canonical[:2], "sqrt")


# -- fma (NUM-EW-2) ------------------------------------------------------------------------------

def _fma_triples(storage: str, n: int, seed: int):
    """Products with large cancellation against ``c`` (where one rounding and two differ)."""
    rng = np.random.default_rng(seed)
    a = _operands(storage, n, seed)
    b = _operands(storage, n, seed + 100)
    pool = _operands(storage, n, seed + 200)
    acc = _accum(storage)
    c = []
    for i, (x, y) in enumerate(zip(a, b)):
        p = R.mul(x, y, acc)
        if not math.isfinite(p) or i % 4 == 0:
            c.append(pool[i])
        else:  # −round(a·b) plus a little: the exact residual decides the result
            little = R.round_value(p * float(rng.standard_normal()) * 2.0 ** -20, storage) if p else 0.0
            c.append(R.round_value(R.add(-p, little, acc), storage))
    zeros = [(0.0, 5.0, -0.0), (-0.0, 5.0, -0.0), (0.0, -5.0, 0.0), (-0.0, 5.0, 0.0), (3.0, -0.0, -0.0),
             (2.0, 3.0, -6.0), (-2.0, 3.0, 6.0), (math.inf, 0.0, 1.0), (math.inf, 1.0, -math.inf),
             (1.0, 1.0, math.nan), (math.inf, 2.0, 3.0), (1.0, -0.0, -0.0)]
    for k, (x, y, z) in enumerate(zeros):
        a[k], b[k], c[k] = _held([x, y, z], storage)
    return a, b, c


@clause("NUM-EW-2")
@pytest.mark.parametrize("storage", ["f32", "f64", "bf16", "f16", "fp8_e5m2"])
def test_fma_rounds_once(backend, storage):
    """``op.fma(a, b, c)``: the exact ``a·b + c`` rounded once in ``accum`` (+0 for an exact zero
    unless ``a·b`` and ``c`` are both −0), then stored."""
    a, b, c = _fma_triples(storage, 512, seed=7)
    acc = _accum(storage)
    want = _stored([R.fma(x, y, z, acc) for x, y, z in zip(a, b, c)], storage)
    got = run(backend, lambda u, v, w: op.fma(u, v, w), _array(a, storage), _array(b, storage), _array(c, storage))
    assert_bits(got, want, f"fma in {storage}")


@clause("NUM-EW-2")
@pytest.mark.parametrize("storage", ["f32", "f64"])
def test_no_implicit_contraction(backend, storage):
    """``a * b + c`` written as two ops is two roundings — and on these inputs the two
    definitions differ, so a backend that contracts them into an fma fails."""
    a, b, c = _fma_triples(storage, 512, seed=8)
    two = [R.add(R.mul(x, y, storage), z, storage) for x, y, z in zip(a, b, c)]
    one = [R.fma(x, y, z, storage) for x, y, z in zip(a, b, c)]
    assert sum(R.code_of(u, storage) != R.code_of(v, storage) for u, v in zip(one, two)) > 50
    got = run(backend, lambda u, v, w: op.add(op.mul(u, v), w), _array(a, storage), _array(b, storage),
              _array(c, storage))
    assert_bits(got, _stored(two, storage), f"a*b + c in {storage}")


# -- transcendentals (NUM-EW-3) ---------------------------------------------------------------------

UNARY = ["exp", "log", "tanh", "erf", "erfc", "sin", "cos", "expm1", "sigmoid", "silu", "rsqrt", "gelu"]


def _math_inputs(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    v = list(rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 2, n))
    return v + [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 88.7, -103.9, 0.5, 1e-30, 30.0, 1e10]


@clause("NUM-EW-3")
@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("storage", ["f32", "bf16", "f16"])
def test_transcendentals_follow_the_num_math_algorithms(backend, name, storage):
    """``op.<fn>`` on f32/bf16/f16 tensors: the NUM-MATH algorithm on the exact accum (f32)
    value, in f64, rounded once to f32, then stored — not the host libm (a libm ``exp``,
    ``tanh`` or ``erf`` differs from these bits on some of the inputs)."""
    values = [R.round_value(v, storage) for v in _math_inputs(400, seed=9)]
    f = M.FUNCTIONS[name]
    want = _stored([R.f32(f(v)) for v in values], storage)
    got = run(backend, lambda u: getattr(op, name)(u), _array(values, storage))
    assert_bits(got, want, f"{name} in {storage}")


@clause("NUM-EW-3")
def test_gelu_tanh_and_pow_follow_the_algorithms(backend):
    values = [R.f32(v) for v in _math_inputs(300, seed=10)]
    want = R.codes_to_array([R.code_of(R.f32(M.gelu_tanh(v)), "f32") for v in values], "f32")
    assert_bits(run(backend, lambda u: op.gelu(u, approximate="tanh"), as_f32(values)), want, "gelu_tanh")
    rng = np.random.default_rng(11)
    x = [R.f32(v) for v in rng.uniform(0.01, 20.0, 200)] + [-2.0, -2.0, 0.0, -0.0, math.inf, 1.0, math.nan]
    y = [R.f32(v) for v in rng.uniform(-6.0, 6.0, 200)] + [3.0, 0.5, -1.0, -3.0, -2.0, math.nan, 0.0]
    want = R.codes_to_array([R.code_of(R.f32(M.pow_(u, v)), "f32") for u, v in zip(x, y)], "f32")
    assert_bits(run(backend, lambda u, v: op.pow(u, v), as_f32(x), as_f32(y)), want, "pow")
