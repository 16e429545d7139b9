"""Production sizes: rows and axes past 2^14 elements (past 2^20 in the slow set), matmuls with
K >= 2,048 and odd or prime M, N, K — where real kernels switch algorithms (several blocks
per row, online softmax, split K, partial tiles) and the canonical orders must still hold
(NUM-RED-1, NUM-RED-2). References: the sequential lane fold and fma chain of the graph_ir
references, IEEE 754-2019 maximum/minimum in any order, the first index of the extreme."""
import numpy as np
import pytest

from tessera_ref import op
from tessera_conformance import clause

from . import _reference as R
from ._cases import check, operand, values
from ._formats import round_values

#: The smallest prime past 2^14 and past 2^20: no power-of-two blocking divides them.
LONG, HUGE = 16411, 1048583


def _cancelling(shape, seed):
    """Terms of very different magnitudes that cancel: every summation order gives other bits."""
    g = np.random.default_rng(seed)
    return g.standard_normal(shape) * np.exp2(g.integers(-8, 14, shape))


def _sum_and_mean(backend, x, fmt, axis):
    """op.sum and op.mean of ``x`` (f64 values of ``fmt``) over ``axis`` in one program."""
    want = [round_values(R.lane_sum("f32", x, axis), fmt), round_values(R.lane_mean("f32", x, axis), fmt)]
    check(backend, lambda v: (op.sum(v, axis=axis), op.mean(v, axis=axis)), (round_values(x, fmt),), want,
          what=f"sum and mean of {list(x.shape)} over axis {axis}")


@clause("GRAPH-SUM-1", "GRAPH-MEAN-1", "NUM-RED-2")
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_sum_and_mean_of_long_rows(backend, fmt):
    """Rows of 16,411 elements: the 32-lane order over 513 passes, one rounding into storage."""
    _sum_and_mean(backend, values(operand(_cancelling((3, LONG), 31), fmt)), fmt, 1)


@clause("GRAPH-SUM-1", "GRAPH-MEAN-1", "NUM-RED-2")
def test_sum_and_mean_along_a_long_leading_axis(backend):
    """Axis 0 of [16411, 3]: every column is a row of the canonical order, read with a stride."""
    _sum_and_mean(backend, values(operand(_cancelling((LONG, 3), 32), "f32")), "f32", 0)


def _extreme_rows(length, seed):
    """Rows for max/min/argmax/argmin whose answers sit past 2^14: signed zeros only (-0 and a
    late +0), a NaN late, the extremes and their ties late, infinities."""
    g = np.random.default_rng(seed)
    rows = g.standard_normal((5, length))
    rows[0] = -0.0
    rows[0, length - 4] = rows[0, length - 1] = 0.0       # the maximum +0, tied, past 2^14
    rows[1, length - 5] = np.nan
    rows[2, length - 7] = rows[2, length - 3] = 9.5       # the maximum, tied, past 2^14
    rows[2, length - 11] = rows[2, length - 2] = -9.5     # the minimum, tied
    rows[3, :] = -np.inf
    rows[3, length - 1] = np.inf
    rows[4, 2 ** 14 - 1], rows[4, 2 ** 14] = 7.0, 7.0     # a tie across the 2^14 boundary
    return rows


@clause("GRAPH-MAX-1", "GRAPH-MIN-1")
def test_max_and_min_of_long_rows(backend):
    """IEEE 754-2019 maximum/minimum over 16,411 terms: NaN wins wherever it is, -0 < +0."""
    x = values(operand(_extreme_rows(LONG, 33), "f32"))
    check(backend, lambda v: (op.max(v, axis=1), op.min(v, axis=-1)), (round_values(x, "f32"),),
          [round_values(R.max_along(x, 1), "f32"), round_values(R.min_along(x, 1), "f32")])


def _first_extreme(x, which: str) -> list:
    """The first index of each row's NaN, else of its maximum/minimum (``which``) with -0 < +0."""
    fold = R.max_along if which == "max" else R.min_along
    out = []
    for row in x:
        nan = np.flatnonzero(np.isnan(row))
        if nan.size:
            out.append(int(nan[0]))
            continue
        best = fold(row[None, :], 1)[0]
        out.append(int(np.flatnonzero((row == best) & (np.signbit(row) == np.signbit(best)))[0]))
    return out


@clause("GRAPH-ARGMAX-1", "GRAPH-ARGMIN-1")
def test_argmax_and_argmin_of_long_rows(backend):
    """The first index of the extreme past 2^14: the first NaN, the first of tied values, +0 over
    -0 for argmax (and -0 over +0 for argmin)."""
    x = values(operand(_extreme_rows(LONG, 34), "f32"))
    want = [np.array(_first_extreme(x, "max"), np.int64), np.array(_first_extreme(x, "min"), np.int64)]
    assert want[0][0] == LONG - 4 and want[1][1] == LONG - 5 and want[0][2] == LONG - 7  # the tail decides
    check(backend, lambda v: (op.argmax(v, axis=1), op.argmin(v, axis=1)), (round_values(x, "f32"),), want)


@clause("GRAPH-SOFTMAX-1")
def test_softmax_of_long_rows(backend):
    """m = max, e = exp(x - m), s = the lane sum of 16,411 terms, y = e / s; masked -inf entries
    give 0 (a kernel switching to an online softmax for long rows must keep these bits)."""
    x = values(operand(np.random.default_rng(35).standard_normal((2, LONG)) * 4.0, "f32"))
    x[1, ::5] = -np.inf
    x[1, LONG - 3] = 12.0  # the row's maximum, near its end
    check(backend, op.softmax, (round_values(x, "f32"),), round_values(R.softmax("f32", x, -1), "f32"))


@clause("GRAPH-LAYERNORMSAFE-1", "GRAPH-RMSNORMSAFE-1")
def test_norms_of_long_rows(backend):
    """layernorm_safe (weight and bias) and rmsnorm_safe (weight) over rows of 16,411: the two
    and one lane-sum passes of the formula."""
    g = np.random.default_rng(36)
    x = values(operand(g.standard_normal((2, LONG)) * 3.0 + 50.0, "f32"))
    w, b = (values(operand(g.standard_normal(LONG), "f32")) for _ in range(2))
    check(backend, lambda a, c, d: (op.layernorm_safe(a, c, d), op.rmsnorm_safe(a, c)),
          tuple(round_values(v, "f32") for v in (x, w, b)),
          [round_values(R.layernorm("f32", x, w, b), "f32"), round_values(R.rmsnorm("f32", x, w), "f32")])


#: (M, K, N): K >= 2,048 (a power of two, and odd), and odd, prime and unit sizes.
MATMULS = [(3, 2048, 5), (4, 2055, 2), (3, 67, 5), (2, 67, 5), (1, 129, 1), (67, 3, 129), (129, 1, 3), (1, 1, 1)]


@clause("GRAPH-MATMUL-1", "NUM-RED-1")
@pytest.mark.parametrize("m,k,n", MATMULS, ids=[f"{m}x{k}x{n}" for m, k, n in MATMULS])
def test_matmul_at_long_and_odd_sizes(backend, m, k, n):
    """One fma chain per element, k ascending from +0: K tiles, split K or partial tiles of a
    kernel change no bit."""
    g = np.random.default_rng(37 + k)
    a, b = (values(operand(_cancelling(s, int(g.integers(1 << 30))), "f32")) for s in ((m, k), (k, n)))
    check(backend, op.matmul, (round_values(a, "f32"), round_values(b, "f32")),
          round_values(R.matmul("f32", a, b), "f32"), what=f"[{m}, {k}] @ [{k}, {n}]")


# -- past 2^20 (slow) ------------------------------------------------------------------------------

@pytest.mark.slow
@clause("GRAPH-SUM-1", "GRAPH-MEAN-1", "GRAPH-MAX-1", "GRAPH-MIN-1", "GRAPH-ARGMAX-1", "GRAPH-ARGMIN-1",
        "NUM-RED-2")
def test_reductions_past_2_20(backend):
    """A row of 1,048,583 elements and a leading axis of as many: sum, mean, max, min, argmax."""
    row = values(operand(_cancelling((1, HUGE), 38), "f32"))
    _sum_and_mean(backend, row, "f32", 1)
    _sum_and_mean(backend, values(operand(_cancelling((HUGE, 2), 39), "f32")), "f32", 0)
    x = values(operand(_extreme_rows(HUGE, 40), "f32"))
    check(backend, lambda v: (op.max(v, axis=1), op.min(v, axis=1), op.argmax(v, axis=1), op.argmin(v, axis=1)),
          (round_values(x, "f32"),),
          [round_values(R.max_along(x, 1), "f32"), round_values(R.min_along(x, 1), "f32"),
           np.array(_first_extreme(x, "max"), np.int64), np.array(_first_extreme(x, "min"), np.int64)])


@pytest.mark.slow
@clause("GRAPH-SOFTMAX-1", "GRAPH-LAYERNORMSAFE-1", "GRAPH-RMSNORMSAFE-1")
def test_row_ops_past_2_20(backend):
    """softmax, layernorm_safe and rmsnorm_safe over a row of 1,048,583 elements."""
    x = values(operand(np.random.default_rng(41).standard_normal((1, HUGE)) * 4.0, "f32"))
    check(backend, lambda v: (op.softmax(v), op.layernorm_safe(v), op.rmsnorm_safe(v)), (round_values(x, "f32"),),
          [round_values(R.softmax("f32", x, -1), "f32"), round_values(R.layernorm("f32", x), "f32"),
           round_values(R.rmsnorm("f32", x), "f32")])


@pytest.mark.slow
@clause("GRAPH-MATMUL-1", "NUM-RED-1")
def test_matmul_with_a_prime_k_past_2048(backend):
    """K = 2,053 (prime: a tile of one column per K step) and K = 16,411."""
    for m, k, n in ((3, 2053, 5), (2, LONG, 3)):
        g = np.random.default_rng(42 + k)
        a, b = (values(operand(_cancelling(s, int(g.integers(1 << 30))), "f32")) for s in ((m, k), (k, n)))
        check(backend, op.matmul, (round_values(a, "f32"), round_values(b, "f32")),
              round_values(R.matmul("f32", a, b), "f32"), what=f"[{m}, {k}] @ [{k}, {n}]")
