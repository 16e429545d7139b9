"""AD-MEAN-1, AD-MAX-1, AD-MIN-1, AD-ARGMAX-1, AD-RAND-1: the mean's single division by the exact
count, the one element max/min picks (references written in NumPy from the clause's words),
and the ops with no derivative."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_conformance import assert_bits, clause, eager

from ._reference import exact_inner, grad_on, ints, jvp_on, vjp_on

BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn


# -- mean --------------------------------------------------------------------------------------
@clause("AD-MEAN-1")
@pytest.mark.parametrize("shape, axis, keepdims", [((3, 4, 5), 1, False), ((3, 4), (0, 1), True),
                                                    ((6, 5), None, False)])
def test_mean_cotangent_is_one_division_by_the_count_in_f64(backend, shape, axis, keepdims):
    """f64 mean: ``x̄ = ḡ ⊘ L`` spread, one division; the tangent the mean of the tangent."""
    x, v = ints(shape, 1), ints(shape, 2)
    y = np.mean(x, axis=axis, keepdims=keepdims)
    u = ints(np.shape(y), 3, lo=1, hi=7)
    L = x.size // max(np.size(y), 1)
    f = lambda a: op.mean(a, axis=axis, keepdims=keepdims)  # noqa: E731
    (bar,) = vjp_on(backend, f, (x,), u)
    kept = u if keepdims or axis is None else np.expand_dims(u, axis)
    assert_bits(bar, np.broadcast_to(kept / L, shape).astype(np.float64))
    t = jvp_on(backend, f, (x,), (v,))
    assert_bits(t, np.asarray(np.sum(v, axis=axis, keepdims=keepdims) / L))


@clause("AD-MEAN-1")
@pytest.mark.parametrize("fmt, dtype, length", [("bf16", BF16, 257), ("fp8_e4m3", FP8, 17), ("f32", np.float32, 257)])
def test_mean_cotangent_divides_by_the_exact_count_in_accum(backend, fmt, dtype, length):
    """Narrow mean: ``RN_storage(RN_f32(ḡ / L))`` with the exact L (bf16: 257, not 256)."""
    for g in (1.0, 3.0):
        x = tr.asarray(np.ones(length), policy=fmt)
        u = tr.asarray(np.array(g), policy=fmt)
        (bar,) = vjp_on(backend, lambda a: op.mean(a), (x,), u)
        want = (np.float32(g) / np.float32(length)).astype(dtype)  # IEEE f32 division, then RNE
        assert_bits(bar, np.full(length, want, dtype=dtype), f"cotangent {g}")


# -- max / min ---------------------------------------------------------------------------------
def _pick(x, axis, largest: bool):
    """The flat index of the element the clause picks per group: first extreme, NaN first, −0 < +0."""
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    kept = [a for a in range(x.ndim) if a not in axes]
    index = np.arange(x.size).reshape(x.shape).transpose(kept + list(axes))
    vals = x.transpose(kept + list(axes))
    index = index.reshape(index.shape[:len(kept)] + (-1,))
    vals = vals.reshape(index.shape)
    picks = np.zeros(index.shape[:-1], np.int64)
    for g in np.ndindex(*index.shape[:-1]):
        row, best = vals[g], None
        for j, v in enumerate(row):
            if np.isnan(v):
                best = j
                break
            if best is None:
                best = j
                continue
            b = row[best]
            better = (v > b or (v == b and v == 0 and np.signbit(b) and not np.signbit(v))) if largest else \
                     (v < b or (v == b and v == 0 and np.signbit(v) and not np.signbit(b)))
            if better:
                best = j
        picks[g] = index[g][best]
    return picks


MAXMIN = [
    ("max", np.array([[[1.0, 7.0], [7.0, 0.0]], [[2.0, 2.0], [np.nan, 2.0]]]), (1, 2)),
    ("min", np.array([[3.0, -0.0, 0.0, -0.0], [0.0, -0.0, 1.0, -1.0]]), 1),
    ("max", np.array([[0.0, -0.0, 0.0], [-0.0, 0.0, 5.0]]), 1),
    ("max", ints((3, 4, 5), 4, lo=-2, hi=2), (0, 2)),
    ("min", ints((3, 4, 5), 5, lo=-2, hi=2), 2),
    ("max", ints((3, 4), 6, lo=-1, hi=1), None),
    ("min", ints((3, 4, 2), 7, lo=-1, hi=1), 1),
]


@pytest.mark.parametrize("name, x, axis", [pytest.param(*c, id=f"{c[0]}-{i}", marks=clause(f"AD-{c[0].upper()}-1"))
                                           for i, c in enumerate(MAXMIN)])
def test_max_min_send_everything_to_one_element(backend, name, x, axis):
    """max/min: the whole cotangent to the picked element, +0 elsewhere; jvp the tangent there."""
    reduce = getattr(op, name)
    f = lambda a: reduce(a, axis=axis)  # noqa: E731
    picks = _pick(x, axis, name == "max")
    u = ints(picks.shape, 8, lo=1, hi=9)
    (bar,) = vjp_on(backend, f, (x,), u)
    want = np.zeros(x.size)
    want[picks.ravel()] = u.ravel()
    assert_bits(bar, want.reshape(x.shape))
    v = ints(x.shape, 9)
    v.ravel()[0] = np.inf if picks.ravel()[0] != 0 else v.ravel()[0]  # an inf elsewhere does not leak
    t = jvp_on(backend, f, (x,), (v,))
    assert_bits(t, v.ravel()[picks].reshape(picks.shape))


@pytest.mark.parametrize("name", [pytest.param("max", marks=clause("AD-MAX-1")),
                                  pytest.param("min", marks=clause("AD-MIN-1"))])
@pytest.mark.parametrize("shape, axis", [((0, 3), 0), ((2, 0), 1)])
def test_max_min_over_an_empty_axis_pick_nothing(backend, name, shape, axis):
    """Over an empty axis the cotangent is +0 of the operand's shape and the tangent is +0."""
    reduce = getattr(op, name)
    x = np.zeros(shape)
    g = grad_on(backend, lambda a: op.sum(reduce(a, axis=axis)), x)
    assert_bits(g, np.zeros(shape))
    out_shape = tuple(d for i, d in enumerate(shape) if i != axis)
    t = jvp_on(backend, lambda a: reduce(a, axis=axis), (x,), (np.ones(shape),))
    assert_bits(t, np.zeros(out_shape))


@clause("AD-MAX-1")
def test_max_adjoint_law_is_exact(backend):
    """⟨J v, u⟩ = ⟨v, Jᵀ u⟩ in exact rationals for the selection max makes."""
    x, v = ints((4, 6), 11, lo=-2, hi=2), ints((4, 6), 12)
    u = ints((6,), 13)
    f = lambda a: op.max(a, axis=0)  # noqa: E731
    assert exact_inner(jvp_on(backend, f, (x,), (v,)), u) == exact_inner(v, vjp_on(backend, f, (x,), u)[0])


# -- ops without a derivative ------------------------------------------------------------------
@clause("AD-ARGMAX-1")
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_passes_no_cotangent(backend, name):
    """argmax/argmin pass no cotangent: only the direct use of ``x`` counts."""
    x = np.array([[1.0, 3.0, 2.0], [5.0, 0.0, 4.0]])
    which = getattr(op, name)
    idx = getattr(np, name)(x, axis=1).astype(np.float64)[:, None]

    def f(a):
        return op.sum(a * op.reshape(op.cast(which(a, axis=1), "f64"), (2, 1)))
    assert_bits(grad_on(backend, f, x), np.broadcast_to(idx, x.shape).astype(np.float64))
    assert_bits(grad_on(backend, lambda a: op.sum(op.cast(which(a, axis=1), "f64")), x), np.zeros((2, 3)))
    v = ints((2, 3), 14)
    assert_bits(jvp_on(backend, f, (x,), (v,)), np.asarray(np.sum(v * idx)))


@clause("AD-RAND-1")
def test_random_draws_are_constants_of_the_derivative(backend):
    """rand/randn/poisson draws are constant factors of a gradient and add nothing to a tangent."""
    x = np.ones(6)
    draws = eager(backend, lambda: (op.rand((6,), seed=3, dtype="f64"), op.randn((6,), seed=4, dtype="f64"),
                                    op.cast(op.poisson((6,), 2.5, seed=5), "f64")))

    def f(a):
        return op.sum(a * op.rand((6,), seed=3, dtype="f64") + a * op.randn((6,), seed=4, dtype="f64")
                      + a * op.cast(op.poisson((6,), 2.5, seed=5), "f64"))
    g = grad_on(backend, f, x)
    assert_bits(g, (draws[2] + draws[1]) + draws[0])  # the uses' cotangents added in reverse order (AD-REV-2)
    v = ints((6,), 15)
    noise = lambda: op.randn((6,), seed=4, dtype="f64") * op.rand((6,), seed=3, dtype="f64")  # noqa: E731
    t = jvp_on(backend, lambda a: a + noise(), (x,), (v,))
    assert_bits(t, v)
