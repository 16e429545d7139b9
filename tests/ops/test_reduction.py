"""Axis reductions (GRAPH-SUM-1 … GRAPH-ARGMIN-1).

References: NumPy in f64 (values within stated bounds), a scalar transcription of the
NUM-RED-2 lane/butterfly order written here (bits), ``fractions.Fraction`` sums rounded by
``numerics_reference.fraction_encode`` (exact mode), and ``np.argmax`` / ``np.max``.
"""
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import numerics_reference as R
import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_ref.interp import run_function
from tessera_ref.ir import parse_module
from tessera_ref.numerics import Policy, get_format
from tessera_ref.numerics.rng import as_key, random_bits
from tessera_ref.ops import bind, primitive

F32 = np.float32
EXACT = Policy("f32", reduction="exact")


def _bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


def lane_sum(terms) -> np.float32:
    """NUM-RED-2 in f32, scalar by scalar: 32 lanes from -0, then the xor butterfly."""
    lanes = [F32(-0.0)] * 32
    for i, t in enumerate(terms):
        lanes[i % 32] = F32(lanes[i % 32] + F32(t))
    for offset in (16, 8, 4, 2, 1):
        lanes = [F32(lanes[i] + lanes[i ^ offset]) for i in range(32)]
    return lanes[0]


def _data(shape, seed=0, dtype=F32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, shape))).astype(dtype)


@pytest.mark.parametrize("shape,axis", [((300,), None), ((5, 70), 1), ((4, 3, 33), (0, 2)), ((6, 40), -2)])
@pytest.mark.parametrize("dtype", [F32, ml_dtypes.bfloat16])
def test_sum_and_mean_agree_with_f64(shape, axis, dtype):
    # Bound: each output is a tree of additions of depth d = ceil(L/32) + 5 in f32, so
    # |s - exact| ≤ d·2^-24·Σ|x| (Higham's γ_d, d·u ≪ 1); the mean adds one f32 rounding of
    # the quotient (2^-24 relative) and bf16 storage one rounding into bf16 (2^-8 relative).
    x = _data(shape, dtype=dtype)
    x64 = x.astype(np.float64)
    axes = tuple(range(x.ndim)) if axis is None else tuple(np.atleast_1d(axis) % x.ndim)
    L = int(np.prod([shape[a] for a in axes]))
    d = -(-L // 32) + 5
    store = 2.0 ** -8 if dtype is ml_dtypes.bfloat16 else 0.0
    for name, ref, scale in (("sum", x64.sum(axis=axes), 1.0), ("mean", x64.mean(axis=axes), 1.0 / L)):
        got = np.asarray(getattr(op, name)(tr.asarray(x), axis=axis)).astype(np.float64)
        bound = d * 2.0 ** -24 * np.abs(x64).sum(axis=axes) * scale + (2.0 ** -24 + store) * np.abs(ref)
        assert got.shape == ref.shape and np.all(np.abs(got - ref) <= bound), name


def test_sum_is_the_lane_order_not_sequential_or_pairwise():
    # 2^24 followed by ones: left to right every 1 is lost (2^24 + 1 ties to 2^24); in lanes
    # the ones pair up to 2s first, which survive. The three orders give three answers.
    x = np.ones(64, dtype=F32)
    x[0] = 2.0 ** 24
    seq = F32(0)
    for t in x:
        seq = F32(seq + t)
    got = np.asarray(op.sum(tr.asarray(x)))
    assert _bits(got).tobytes() == _bits(lane_sum(x)).tobytes()
    assert got != seq and got != F32(2.0 ** 24 + 63)
    # random data with cancellation: lane order vs NumPy's pairwise f32 sum
    rng = np.random.default_rng(5)
    for _ in range(20):
        y = (rng.standard_normal(200) * np.exp2(rng.integers(-10, 20, 200))).astype(F32)
        if lane_sum(y) != np.sum(y):
            break
    else:
        pytest.fail("no input separating the lane order from np.sum")
    assert _bits(op.sum(tr.asarray(y))).tobytes() == _bits(lane_sum(y)).tobytes()


def test_multi_axis_flattens_reduced_axes_row_major():
    x = _data((3, 5, 4, 7), seed=2)
    got = np.asarray(op.sum(tr.asarray(x), axis=(3, 1), keepdims=True))
    assert got.shape == (3, 1, 4, 1)
    for i in range(3):
        for k in range(4):
            terms = [x[i, j, k, m] for j in range(5) for m in range(7)]  # axis 1 major, axis 3 minor
            assert _bits(got[i, 0, k, 0]).tobytes() == _bits(lane_sum(terms)).tobytes()


def test_mean_divides_the_lane_sum_once():
    x = _data((4, 45), seed=3)
    got = np.asarray(op.mean(tr.asarray(x), axis=1))
    for row, g in zip(x, got):
        want = R.fraction_encode(Fraction(float(lane_sum(row))) / 45, "f32")  # exact quotient, one rounding
        assert int(np.float32(g).view(np.uint32)) == want


def test_max_min_and_special_values():
    x = _data((6, 50), seed=4)
    assert np.array_equal(np.asarray(op.max(tr.asarray(x), axis=1)), x.max(axis=1))
    assert np.array_equal(np.asarray(x_arr := tr.asarray(x)).min(axis=0), np.asarray(x_arr.min(axis=0)))
    z = tr.asarray(F32([-0.0, 0.0, -0.0]))
    assert not np.signbit(np.asarray(op.max(z))) and np.signbit(np.asarray(op.min(z)))
    assert np.isnan(np.asarray(op.max(tr.asarray(F32([1.0, np.nan, 2.0])))))
    empty = tr.asarray(np.zeros((2, 0), F32))
    assert np.asarray(op.max(empty, axis=1)).tolist() == [-np.inf, -np.inf]
    s = np.asarray(op.sum(empty, axis=1))
    assert s.tolist() == [0.0, 0.0] and np.signbit(s).all()  # the empty sum is -0
    assert np.isnan(np.asarray(op.mean(empty, axis=1))).all()


def test_argmax_argmin():
    x = _data((5, 37), seed=6)
    a = tr.asarray(x)
    assert np.array_equal(np.asarray(op.argmax(a, axis=1)), np.argmax(x, axis=1))
    assert np.array_equal(np.asarray(op.argmin(a, axis=0)), np.argmin(x, axis=0))
    assert int(np.asarray(op.argmax(a))) == int(np.argmax(x))  # row-major flattened
    assert op.argmax(a).type.policy.name == "index" and op.argmax(a, keepdims=True).shape == (1, 1)
    assert op.argmin(a, axis=1, keepdims=True).shape == (5, 1)
    ties = tr.asarray(F32([1.0, 3.0, 3.0, np.nan, 0.0, np.nan]))
    assert int(np.asarray(op.argmax(ties))) == 3 and int(np.asarray(op.argmin(ties))) == 3  # first NaN
    signed = tr.asarray(F32([-0.0, 0.0, -0.0, 0.0]))
    assert int(np.asarray(op.argmax(signed))) == 1 and int(np.asarray(op.argmin(signed))) == 0
    assert int(np.asarray(op.argmax(tr.asarray(F32([2.0, 5.0, 5.0]))))) == 1  # first of equal maxima


@pytest.mark.parametrize("storage", ["f32", "bf16", "f16"])
def test_exact_mode_sum_and_mean_round_once(storage):
    pol = Policy(storage, reduction="exact")
    x = np.concatenate([_data(200, seed=7), F32([2.0 ** 12, 3.0, -2.0 ** 12, 2.0 ** -20])])
    xs = tr.asarray(x, policy=pol)
    vals = np.asarray(xs).astype(np.float64)
    exact = sum(Fraction(float(v)) for v in vals)
    got_sum, got_mean = op.sum(xs), op.mean(xs)
    fmt = get_format(storage)
    assert got_sum.type.policy == pol
    assert int(np.asarray(got_sum).view(fmt.code_dtype)) == R.fraction_encode(exact, storage)
    assert int(np.asarray(got_mean).view(fmt.code_dtype)) == R.fraction_encode(exact / vals.size, storage)
    # the order of the terms does not matter
    assert _bits(op.sum(tr.asarray(x[::-1], policy=pol))).tobytes() == _bits(got_sum).tobytes()


def test_exact_mode_directed_and_stochastic_rounding():
    x = F32([1.0, 2.0 ** -30, 2.0 ** -30, 2.0 ** -31] * 3)
    exact = sum(Fraction(float(v)) for v in x)
    for rounding in ("rup", "rdown", "rtz"):
        pol = Policy("f32", reduction="exact", rounding=rounding)
        got = np.asarray(op.mean(tr.asarray(x, policy=pol))).view(np.uint32)
        assert int(got) == R.fraction_encode(exact / x.size, "f32", rounding)
    sto = Policy("bf16", reduction="exact", rounding="stochastic")
    row = F32([1.0, 1.0, 1.0, 2.0 ** -7, 2.0 ** -9])  # mean = (154 + 0.1)·2^-8: up w.p. 0.1
    xs = tr.asarray(np.tile(row, (64, 1)).astype(ml_dtypes.bfloat16), policy=sto)
    with pytest.raises(OpError, match="seed"):
        op.sum(xs, axis=1)
    a, b = op.mean(xs, axis=1, seed=1), op.mean(xs, axis=1, seed=1)
    assert np.array_equal(_bits(a), _bits(b))
    # NUM-CVT-5 on the exact quotient: row i uses random_bits(seed, i)
    u = random_bits(as_key(1), np.arange(64, dtype=np.uint64))
    q = sum(Fraction(float(v)) for v in row) / row.size
    want = [R.fraction_encode(q, "bf16", "stochastic", u=int(ui)) for ui in u]
    assert np.asarray(a).view(np.uint16).tolist() == want and len(set(want)) == 2


def test_array_methods():
    x = tr.asarray(_data((3, 4), seed=8))
    for name in ("sum", "mean", "max", "min"):
        assert np.array_equal(_bits(getattr(x, name)(axis=1)), _bits(getattr(op, name)(x, axis=1)))
    assert x.sum().shape == ()


def test_errors():
    x = tr.asarray(np.zeros((2, 3), F32))
    with pytest.raises(ShapeError, match=r"tensor<2x3xf32>.*test_reduction\.py:"):
        op.sum(x, axis=2)
    with pytest.raises(ShapeError, match="twice"):
        op.mean(x, axis=(1, -1))
    with pytest.raises(DTypeError, match=r"tensor<3xindex>.*test_reduction\.py:"):
        op.max(tr.asarray(np.arange(3)))
    with pytest.raises(OpError, match="one int axis"):
        op.argmax(x, axis=(0, 1))
    with pytest.raises(ShapeError, match=r"empty.*test_reduction\.py:"):
        op.argmin(tr.asarray(np.zeros((2, 0), F32)), axis=1)
    with pytest.raises(OpError, match="keepdims"):
        op.sum(x, keepdims=1)
    with pytest.raises(OpError, match="unknown attribute"):
        bind(primitive("sum"), x, axes=(0,))


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "argmax", "argmin"])
def test_eager_equals_jit(name):
    x = tr.asarray(_data((4, 70), seed=9), dtype="bf16")
    fn = lambda a: getattr(op, name)(a, axis=1)  # noqa: E731
    assert np.array_equal(_bits(tr.jit(fn)(x)), _bits(fn(x)))


def test_module_round_trips_and_reruns():
    @tr.jit
    def f(a, b):
        return op.mean(a, axis=(0, 2)), op.sum(b), op.argmax(a, axis=1), op.max(a, keepdims=True)

    a = tr.asarray(_data((3, 4, 40), seed=10))
    b = tr.asarray(_data((5, 6), seed=11), policy=EXACT)
    text = str(f.trace(a, b))
    assert str(parse_module(text)) == text
    rerun = run_function(parse_module(text).body.first_op, np.asarray(a), np.asarray(b))
    for got, want in zip(rerun, f(a, b)):
        assert np.array_equal(_bits(got), _bits(want))
