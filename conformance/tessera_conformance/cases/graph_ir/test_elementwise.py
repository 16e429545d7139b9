"""GRAPH-EW-1…5: arithmetic, fma, where, comparisons and logic, bit for bit."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, ShapeError
from tessera_conformance import clause, run

from . import _reference as R
from ._cases import check, operand, policy, rng, specials, values
from ._formats import FORMATS, canonical_nan, from_codes, round_values

BINARY = {"add": R.add, "sub": R.sub, "mul": R.mul, "div": R.div,
          "minimum": lambda A, a, b: R.minimum(a, b), "maximum": lambda A, a, b: R.maximum(a, b)}
UNARY = {"neg": np.negative, "abs": np.abs}
#: storage format -> its default accum (NUM-POL-1)
STORAGE = {"f32": "f32", "f64": "f64", "bf16": "f32", "f16": "f32", "fp8_e4m3": "f32", "fp8_e5m2": "f32",
           "fp6_e3m2": "f32", "fp4_e2m1": "f32"}


def _pair(fmt, n=96, seed=0):
    """Operands of ``fmt``: a random part (wide exponent range, so sums cancel and products
    under/overflow in narrow formats) and every pair of the format's special values."""
    g = rng(seed)
    lim = min(FORMATS[fmt].max, 1e30)
    a = g.standard_normal(n) * np.exp2(g.integers(-12, 12, n))
    b = g.standard_normal(n) * np.exp2(g.integers(-12, 12, n))
    a, b = np.clip(a, -lim, lim), np.clip(b, -lim, lim)
    sp = specials(fmt)
    sa, sb = np.meshgrid(sp, sp)
    return np.concatenate([a, sa.ravel()]), np.concatenate([b, sb.ravel()])


@clause("GRAPH-EW-1")
@pytest.mark.parametrize("fmt", sorted(STORAGE))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_arithmetic_is_one_rounding_in_accum_then_storage(backend, name, fmt):
    """Exact operands, one IEEE op in accum (IEEE 754-2019 min/max), one conversion into storage."""
    a, b = (operand(v, fmt) for v in _pair(fmt))
    A = STORAGE[fmt]
    want = round_values(BINARY[name](A, values(a), values(b)), fmt)
    check(backend, getattr(op, name), (a, b), want, what=f"{name} {fmt}")


@clause("GRAPH-EW-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_neg_and_abs_are_exact_sign_operations(backend, name, fmt):
    """neg/abs flip or clear the sign of every non-NaN value exactly (zeros, infinities too)."""
    a = operand(np.concatenate([_pair(fmt)[0][:64], specials(fmt)[:-1] if FORMATS[fmt].kind == "ieee"
                                else specials(fmt)]), fmt)
    want = round_values(UNARY[name](values(a)), fmt)
    check(backend, getattr(op, name), (a,), want, what=name)


@clause("GRAPH-EW-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_nan_results_are_the_canonical_quiet_nan(backend, fmt):
    """inf - inf, 0 * inf and 0/0 give the canonical quiet NaN with the sign clear."""
    x, y = operand([np.inf, 0.0, -np.inf, 0.0], fmt), operand([np.inf, np.inf, -np.inf, -0.0], fmt)
    xv, yv = values(x), values(y)
    want = [round_values(f("f32", u, v), fmt) for f, u, v in ((R.sub, xv, yv), (R.mul, xv, yv), (R.div, xv, xv))]
    assert np.isnan(values(want[0])[[0, 2]]).all() and not np.signbit(values(want[0])[0])
    check(backend, lambda a, b: (op.sub(a, b), op.mul(a, b), op.div(a, a)), (x, y), want, what=fmt)


@clause("GRAPH-EW-1")
@pytest.mark.parametrize("name", sorted(BINARY) + sorted(UNARY))
def test_nan_operands_give_the_canonical_nan(backend, name):
    """NaN operands with payloads or sign give the canonical quiet NaN (neg and abs too)."""
    nans = from_codes(np.array([0x7FC00001, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint64), "f32")
    one = np.ones(4, np.float32)
    args = (nans,) if name in UNARY else (nans, one)
    check(backend, getattr(op, name), args, np.full(4, canonical_nan("f32")), what=name)


@clause("GRAPH-EW-1")
def test_no_implicit_contraction(backend):
    """a * b + c is two ops and two roundings: 1 + 2^-11 + 2^-24 (a tie) rounds to even first."""
    a = np.full(3, 1 + 2.0 ** -12, np.float32)
    c = np.full(3, -(1 + 2.0 ** -11), np.float32)
    check(backend, lambda x, y, z: x * y + z, (a, a, c), np.zeros(3, np.float32))


@clause("GRAPH-EW-1", "GRAPH-TYPE-2")
def test_mixed_elements_and_shapes_are_errors(backend):
    """Different elements are a DTypeError naming both types; unbroadcastable shapes a ShapeError."""
    f32, bf = np.ones(3, np.float32), tr.asarray(np.ones(3, np.float32), dtype="bf16")
    with pytest.raises(DTypeError, match=r"tensor<3xbf16>.*tensor<3xf32>|tensor<3xf32>.*tensor<3xbf16>"):
        run(backend, op.add, bf, f32)
    other = tr.asarray(np.ones(3, np.float32), policy=policy("f32", rounding="rtz"))
    with pytest.raises(DTypeError, match="rtz"):
        run(backend, op.mul, f32, other)
    with pytest.raises(ShapeError, match=r"tensor<2x3xf32>.*tensor<4xf32>"):
        run(backend, op.sub, np.ones((2, 3), np.float32), np.ones(4, np.float32))
    with pytest.raises(DTypeError):
        run(backend, op.add, np.array([True]), np.array([False]))
    with pytest.raises(DTypeError):
        run(backend, op.div, np.arange(3), np.arange(3))  # integers take add/sub/mul/neg/... only (GRAPH-EW-6)


@clause("GRAPH-EW-1")
def test_broadcasting_is_numpy_right_aligned(backend):
    """Shapes broadcast as in NumPy: [3,1] with [4] gives [3,4]."""
    a = np.arange(3, dtype=np.float32).reshape(3, 1)
    b = np.arange(4, dtype=np.float32) * np.float32(0.5)
    check(backend, op.add, (a, b), (a.astype(np.float64) + b).astype(np.float32))


# -- fma ---------------------------------------------------------------------------------------

@clause("GRAPH-EW-2")
@pytest.mark.parametrize("fmt", ["f32", "bf16", "f64"])
def test_fma_rounds_the_exact_value_once(backend, fmt):
    """fma(a, b, c) is the exact a*b + c rounded once into accum, then into storage."""
    g = rng(3)
    A = STORAGE[fmt]
    av = values(operand(g.standard_normal(256), fmt))
    bv = values(operand(g.standard_normal(256), fmt))
    cv = values(operand(-(av * bv) * (1 + g.standard_normal(256) * 2.0 ** -20), fmt))
    av[-6:], bv[-6:], cv[-6:] = [2.0, -0.0, 1.0, np.inf, 0.0, np.nan], [3.0, 5.0, -0.0, 1.0, np.inf, 1.0], \
        [-6.0, -0.0, -0.0, -np.inf, 1.0, 1.0]   # +0 from an exact zero, -0 only from -0 + -0, inf - inf, 0*inf
    a, b, c = (round_values(v, fmt) for v in (av, bv, cv))
    want = round_values(R.fma(A, av, bv, cv), fmt)
    check(backend, op.fma, (a, b, c), want, what=fmt)
    if fmt == "bf16":
        return  # bf16 products are exact in f32: fma equals multiply-then-add there (NUM-RED-1)
    two = round_values(R.add(A, R.mul(A, av, bv), cv), fmt)
    assert not np.array_equal(want[:250].view(np.uint8), two[:250].view(np.uint8)), "inputs do not separate fma"


# -- where ---------------------------------------------------------------------------------------

@clause("GRAPH-EW-3")
def test_where_selects_bits_and_broadcasts(backend):
    """where(cond, a, b) copies a's or b's bits (NaN payloads, −0, narrow codes), broadcasting."""
    a = from_codes(np.array([0x7FC00001, 0xFFFFFFFF, 0x80000000, 0x3F800000], np.uint64), "f32")  # payload NaNs, -0, 1
    b = from_codes(np.array([[0x00000001], [0x7F800001]], np.uint64), "f32")  # a subnormal, a signalling NaN
    cond = np.array([True, False, True, False])
    want = np.where(cond, a, b)
    check(backend, op.where, (cond, a, b), want)
    q = operand([0.5, -6.0, 3.0], "fp4_e2m1")
    check(backend, op.where, (np.array([[True], [False]]), q, operand([-0.0], "fp4_e2m1")),
          np.where(np.array([[True], [False]]), q, operand([-0.0], "fp4_e2m1")))


@clause("GRAPH-EW-3")
def test_where_type_errors(backend):
    """cond must be i1 and a, b one element (DTypeError)."""
    x = np.ones(2, np.float32)
    with pytest.raises(DTypeError, match="i1"):
        run(backend, op.where, x, x, x)
    with pytest.raises(DTypeError):
        run(backend, op.where, np.array([True, False]), x, tr.asarray(x, dtype="bf16"))


# -- comparisons and logic -------------------------------------------------------------------------

CMP = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


@clause("GRAPH-EW-4")
@pytest.mark.parametrize("name", CMP)
def test_comparisons_are_ieee(backend, name):
    """IEEE comparisons give i1: NaN unordered (only not_equal true), -0 == +0; bf16 and index too."""
    sp = specials("f32")
    a, b = (v.ravel() for v in np.meshgrid(sp, sp))
    ref = getattr(np, name)
    fa, fb = np.float32(a), np.float32(b)
    with np.errstate(invalid="ignore"):
        check(backend, getattr(op, name), (fa, fb), ref(a, b))
        ba, bb = operand(a[:40], "bf16"), operand(b[:40], "bf16")
        check(backend, getattr(op, name), (ba, bb), ref(values(ba), values(bb)))
    ia, ib = np.array([-5, 0, 7, 2 ** 62, -(2 ** 62)]), np.array([[-5], [2 ** 62]])
    check(backend, getattr(op, name), (ia, ib), ref(ia, ib))


@clause("GRAPH-EW-5")
def test_logic_on_masks(backend):
    """logical_and/or/not on i1 operands, broadcast; non-i1 operands are a DTypeError."""
    p = np.array([[True], [False]])
    q = np.array([True, False, True])
    check(backend, lambda x, y: (op.logical_and(x, y), op.logical_or(x, y), op.logical_not(y)), (p, q),
          [np.logical_and(p, q), np.logical_or(p, q), np.logical_not(q)])
    with pytest.raises(DTypeError):
        run(backend, op.logical_and, np.ones(3, np.float32), q)
    with pytest.raises(DTypeError):
        run(backend, op.logical_not, np.arange(3))


@clause("GRAPH-TYPE-3", "GRAPH-EW-1")
@pytest.mark.parametrize("fmt", ["bf16", "fp8_e4m3", "f16"])
@pytest.mark.parametrize("rounding,overflow", [("rtz", "native"), ("rup", "saturate"), ("rdown", "native"),
                                               ("rne", "saturate")])
def test_results_stored_with_the_policy(backend, fmt, rounding, overflow):
    """The accum result is converted once into storage with the policy's rounding and overflow."""
    pol = policy(fmt, rounding=rounding, overflow=overflow)
    g = rng(8)
    lim = FORMATS[fmt].max
    av = values(operand(np.concatenate([g.standard_normal(60) * 3, [lim, -lim, lim / 2]]), fmt))
    bv = values(operand(np.concatenate([g.standard_normal(60) * 3, [3.0, 3.0, 2.5]]), fmt))
    args = tuple(tr.asarray(round_values(v, fmt), policy=pol) for v in (av, bv))
    want = [round_values(f("f32", av, bv), fmt, rounding, overflow) for f in (R.mul, R.add, R.div)]
    check(backend, lambda x, y: (op.mul(x, y), op.add(x, y), op.div(x, y)), args, want, what=f"{fmt} {rounding}")
