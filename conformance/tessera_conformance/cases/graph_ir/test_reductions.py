"""GRAPH-SUM-1 … GRAPH-ARGMIN-1: the canonical 32-lane order, exact mode, and the orders of
maximum/minimum/argmax/argmin, against a sequential lane reference and exact fractions."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, ShapeError
from tessera_conformance import clause, run

from . import _reference as R
from ._cases import check, operand, policy, values
from ._formats import round_fraction, round_values


def _flatten(x, axes):
    """The reduced axes, ascending, flattened row-major onto the last axis (the clause's order)."""
    axes = sorted(a % x.ndim for a in axes)
    keep = [a for a in range(x.ndim) if a not in axes]
    y = np.transpose(x, keep + axes)
    return y.reshape(y.shape[:len(keep)] + (-1,)), keep


def _cancelling(shape, seed=0):
    """Terms of very different magnitudes that cancel: every summation order gives other bits."""
    g = np.random.default_rng(seed)
    x = g.standard_normal(shape) * np.exp2(g.integers(-8, 14, shape))
    return x


def _keepdims(r, x_shape, axes):
    return r.reshape([1 if a in [b % len(x_shape) for b in axes] else d for a, d in enumerate(x_shape)])


CASES = [((1000,), (0,)), ((3, 700), (1,)), ((5, 40, 9), (0, 2)), ((6, 4, 33), (-1, -3)), ((2, 3, 4), (0, 1, 2))]


@clause("GRAPH-SUM-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16", "f64"])
@pytest.mark.parametrize("shape,axes", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_sum_canonical_lane_order(backend, shape, axes, fmt):
    """32 lanes folded from -0, xor butterfly, one rounding; reduced axes flattened row-major."""
    A = "f64" if fmt == "f64" else "f32"
    x = values(operand(_cancelling(shape, sum(shape)), fmt))
    xs = tr.asarray(x, dtype="f64") if fmt == "f64" else round_values(x, fmt)
    flat, _ = _flatten(x, axes)
    want = round_values(R.lane_sum(A, flat), fmt)
    check(backend, lambda v: op.sum(v, axis=axes if len(axes) > 1 else axes[0]), (xs,), want, what="sum")
    check(backend, lambda v: op.sum(v, axis=axes, keepdims=True), (xs,), _keepdims(want, shape, axes),
          what="keepdims")


@clause("GRAPH-SUM-1", "GRAPH-MEAN-1")
def test_lane_order_shows_through_bf16_storage(backend):
    """Order-dependent f32 absorption shows through bf16 storage (sum and mean)."""
    g = np.random.default_rng(4)
    x = values(operand(g.uniform(0.5, 1.5, (4, 700)), "bf16"))
    x[:, 0:640:2] = 2.0 ** 24 * np.where((np.arange(320) // 32) % 2, -1.0, 1.0)
    xs = round_values(x, "bf16")
    check(backend, lambda v: (op.sum(v, axis=1), op.mean(v, axis=-1)), (xs,),
          [round_values(R.lane_sum("f32", x), "bf16"), round_values(R.lane_mean("f32", x), "bf16")])


@clause("GRAPH-SUM-1")
def test_sum_of_everything_and_the_empty_sum(backend):
    """axis=None reduces every axis in row-major order; the empty sum is −0 (canonical)."""
    x = values(operand(_cancelling((7, 50), 3), "f32"))
    check(backend, op.sum, (round_values(x, "f32"),), round_values(R.lane_sum("f32", x.ravel()), "f32"))
    check(backend, lambda v: op.sum(v, axis=1), (np.zeros((3, 0), np.float32),), np.full(3, -0.0, np.float32))


@clause("GRAPH-SUM-1")
def test_sum_exact_mode(backend):
    """reduction=exact: the exact sum rounded once; an exact zero is +0; NaN/inf rules."""
    x = values(operand(_cancelling((4, 300), 5), "bf16"))
    x[1] = np.concatenate([x[1, :150], -x[1, :150]])          # an exactly zero sum
    x[2, 7], x[3, 3], x[3, 9] = np.nan, np.inf, -np.inf
    pol = policy("bf16", reduction="exact")
    want = np.stack([round_fraction(R.exact_sum(r), "bf16") for r in x])
    assert not np.signbit(values(want)[1])
    check(backend, lambda v: op.sum(v, axis=1), (tr.asarray(round_values(x, "bf16"), policy=pol),), want)
    empty = tr.asarray(np.zeros((2, 0), np.float32), policy=policy("f32", reduction="exact"))
    check(backend, lambda v: op.sum(v, axis=1), (empty,), np.zeros(2, np.float32))


@clause("GRAPH-SUM-1", "GRAPH-TYPE-3")
def test_sum_stochastic_rounding(backend):
    """rounding="stochastic": output element i uses random_bits(seed, i)."""
    x = values(operand(_cancelling((12, 64), 6), "f32"))
    pol = policy("bf16", rounding="stochastic")
    xb = values(round_values(x, "bf16"))
    u = R.random_bits(R.key_words(9), np.arange(12))
    want = round_values(R.lane_sum("f32", xb), "bf16", "stochastic", u=u)
    check(backend, lambda v: op.sum(v, axis=1, seed=9), (tr.asarray(round_values(xb, "bf16"), policy=pol, seed=0),),
          want)


@clause("GRAPH-SUM-1", "GRAPH-MEAN-1", "GRAPH-MAX-1", "GRAPH-MIN-1")
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_reduction_errors(backend, name):
    """Non-float operands are a DTypeError; an axis named twice or out of range a ShapeError."""
    fn = getattr(op, name)
    with pytest.raises(DTypeError):
        run(backend, fn, np.arange(6))
    x = np.ones((2, 3), np.float32)
    for axis in ((0, 0), (1, -1), 2, -3):
        with pytest.raises(ShapeError):
            run(backend, lambda v: fn(v, axis=axis), x)


@clause("GRAPH-MEAN-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_mean_canonical(backend, fmt):
    """The lane sum in accum divided once, correctly rounded, by the exact L, then storage."""
    x = values(operand(_cancelling((6, 97, 5), 7), fmt))
    flat, _ = _flatten(x, (1,))
    want = round_values(R.lane_mean("f32", flat), fmt)
    check(backend, lambda v: op.mean(v, axis=1), (round_values(x, fmt),), want)


@clause("GRAPH-MEAN-1")
def test_mean_exact_and_empty(backend):
    """Exact: the exact quotient S/L rounded once (+0 for S = 0); L = 0 gives NaN in both modes."""
    x = values(operand(_cancelling((3, 77), 8), "f32"))
    x[2] = np.concatenate([x[2, :38], -x[2, :38], [0.0]])
    pol = policy("f32", reduction="exact")
    want = np.stack([round_fraction(R.exact_sum(r) / 77, "f32") for r in x])
    check(backend, lambda v: op.mean(v, axis=1), (tr.asarray(round_values(x, "f32"), policy=pol),), want)
    for p in (None, pol):
        e = np.zeros((2, 0), np.float32)
        got = run(backend, lambda v: op.mean(v, axis=1), e if p is None else tr.asarray(e, policy=p))
        assert got.shape == (2,) and np.isnan(got).all()


@clause("GRAPH-SUM-1", "GRAPH-MEAN-1", "GRAPH-TYPE-3")
def test_exact_mode_with_stochastic_rounding(backend):
    """Exact mode with stochastic rounding decides on the exact S (or S/L) and random_bits."""
    x = values(operand(_cancelling((24, 33), 10), "bf16"))
    a = tr.asarray(round_values(x, "bf16"), policy=policy("bf16", reduction="exact", rounding="stochastic"), seed=0)
    u = R.random_bits(R.key_words(3), np.arange(24))
    sums = [R.exact_sum(r) for r in x]
    check(backend, lambda v: (op.sum(v, axis=1, seed=3), op.mean(v, axis=1, seed=3)), (a,),
          [np.stack([round_fraction(S, "bf16", "stochastic", u=int(u[i])) for i, S in enumerate(sums)]),
           np.stack([round_fraction(S / 33, "bf16", "stochastic", u=int(u[i])) for i, S in enumerate(sums)])])


@clause("GRAPH-MAX-1", "GRAPH-MIN-1")
def test_max_min_ieee_2019(backend):
    """maximum/minimum over the terms: NaN if any term is NaN, −0 < +0; empty: −inf / +inf."""
    rows = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [1.0, np.nan, 3.0], [-np.inf, -5.0, -np.inf],
                     [2.0, 7.0, 7.0]])
    check(backend, lambda v: (op.max(v, axis=1), op.min(v, axis=1)), (rows.astype(np.float32),),
          [np.float32([0.0, 0.0, np.nan, -5.0, 7.0]), np.float32([-0.0, -0.0, np.nan, -np.inf, 2.0])])
    g = values(operand(_cancelling((4, 200), 9), "bf16"))
    check(backend, lambda v: (op.max(v, axis=(0, 1)), op.min(v, axis=0, keepdims=True)), (round_values(g, "bf16"),),
          [round_values(np.max(g), "bf16"), round_values(np.min(g, axis=0, keepdims=True), "bf16")])
    empty = np.zeros((2, 0), np.float32)
    check(backend, lambda v: (op.max(v, axis=1), op.min(v, axis=1)), (empty,),
          [np.full(2, -np.inf, np.float32), np.full(2, np.inf, np.float32)])


@clause("GRAPH-ARGMAX-1", "GRAPH-ARGMIN-1")
def test_argmax_argmin_order(backend):
    """The first index of the max/min: NaN wins (first NaN), -0 < +0, ties to the first."""
    rows = np.array([[-0.0, 0.0, -0.0, 0.0], [1.0, np.nan, 3.0, np.nan], [5.0, 2.0, 5.0, 2.0],
                     [-np.inf, np.inf, np.inf, -np.inf]], np.float32)
    check(backend, lambda v: (op.argmax(v, axis=1), op.argmin(v, axis=1)), (rows,),
          [np.array([1, 1, 0, 1], np.int64), np.array([0, 1, 1, 0], np.int64)])
    check(backend, lambda v: (op.argmax(v, axis=0), op.argmin(v, axis=-2, keepdims=True)), (rows,),
          [np.array([2, 1, 3, 1], np.int64), np.array([[3, 1, 0, 1]], np.int64)])


@clause("GRAPH-ARGMAX-1", "GRAPH-ARGMIN-1")
def test_argmax_flattened_and_errors(backend):
    """axis=None flattens row-major (rank 0 or keepdims); an empty reduced axis is a ShapeError."""
    x = values(operand(np.random.default_rng(3).standard_normal((5, 7)), "bf16"))
    x[3, 2] = x.max()  # a tie after the first maximum
    xs = round_values(x, "bf16")
    check(backend, lambda v: (op.argmax(v), op.argmin(v), op.argmax(v, keepdims=True)), (xs,),
          [np.array(np.argmax(x), np.int64), np.array(np.argmin(x), np.int64),
           np.array(np.argmax(x), np.int64).reshape(1, 1)])
    for fn in (op.argmax, op.argmin):
        with pytest.raises(ShapeError):
            run(backend, lambda v: fn(v, axis=1), np.zeros((3, 0), np.float32))
