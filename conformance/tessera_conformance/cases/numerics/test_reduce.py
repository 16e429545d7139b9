"""NUM-RED-1 … NUM-RED-4: the canonical orders of dot products, axis reductions and
collectives, and exact mode.

The references fold with one exactly-rounded IEEE operation at a time (fractions rounded by
:mod:`._ref_convert`): a sequential fma fold over k for dot products; for axis reductions the
32 lanes, each a sequential left fold, then the xor butterfly; for collectives a fold in
ascending rank order; and for exact mode the sum of the terms as fractions, rounded once.
The inputs mix magnitudes and signs so that any other order gives other bits (each case
checks that a plain sequential fold disagrees somewhere).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tessera_ref import dist, numerics, op
from tessera_conformance import assert_bits, clause, eager, oracle_only, run

from . import _ref_convert as R
from ._common import as_f32


_SPREAD = {"f16": 3, "fp8_e5m2": 3, "fp8_e4m3": 2, "fp6_e3m2": 1, "fp6_e2m3": 0, "fp4_e2m1": 0}


def _wide_values(n: int, seed: int, storage: str = "f32", spread: int = 6) -> list:
    """Values of mixed magnitudes (10^-spread … 10^spread, less where ``storage``'s range is
    smaller) and signs, held in ``storage``."""
    spread = min(spread, _SPREAD.get(storage, spread))
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal(n) * 10.0 ** rng.integers(-spread, spread + 1, n)
    return [R.round_value(float(v), storage) for v in raw]


def _array(values, storage: str) -> np.ndarray:
    return R.codes_to_array([R.code_of(v, storage) for v in values], storage)


def _stored(values, storage: str, rounding="rne", overflow="native") -> np.ndarray:
    return R.codes_to_array([R.round_code(v, storage, rounding, overflow) for v in values], storage)


def _accum(storage: str) -> str:
    return storage if storage in ("f32", "f64") else "f32"


# -- dot products (NUM-RED-1) ------------------------------------------------------------------

def _dot(a_row, b_col, acc: str, start: float = 0.0) -> float:
    """``acc_{k+1} = fma(a_k, b_k, acc_k)`` for k ascending, from ``start`` (+0 or C)."""
    s = start
    for x, y in zip(a_row, b_col):
        s = R.fma(x, y, s, acc)
    return s


def _matmul_ref(A, B, storage, C=None):
    acc = _accum(storage)
    M, K = len(A), len(A[0])
    N = len(B[0])
    out = [[_dot(A[m], [B[k][n] for k in range(K)], acc, 0.0 if C is None else C[m][n]) for n in range(N)]
           for m in range(M)]
    return _stored([v for row in out for v in row], storage).reshape(M, N)


def _matrix(rows: int, cols: int, seed: int, storage: str) -> list:
    flat = _wide_values(rows * cols, seed, storage, spread=4 if storage in ("f32", "f64") else 2)
    return [flat[r * cols:(r + 1) * cols] for r in range(rows)]


def _np(M, storage) -> np.ndarray:
    return _array([v for row in M for v in row], storage).reshape(len(M), len(M[0]))


@clause("NUM-RED-1")
@pytest.mark.parametrize("storage", ["f32", "f64", "bf16", "f16", "fp8_e4m3", "fp6_e3m2"])
@pytest.mark.parametrize("shape", [(3, 67, 5), (2, 130, 66)], ids=["3x67x5", "2x130x66"])
def test_matmul_folds_fma_in_ascending_k(backend, storage, shape):
    """``op.matmul``: every output element is a sequential fma fold over k in ``accum`` from
    +0, rounded once into storage. K is not a multiple of any tile size here, and the
    operands span many binades so that any other order or an unfused multiply-add shows."""
    M, K, N = shape
    A, B = _matrix(M, K, 1, storage), _matrix(K, N, 2, storage)
    want = _matmul_ref(A, B, storage)
    got = run(backend, lambda a, b: op.matmul(a, b), _np(A, storage), _np(B, storage))
    assert_bits(got, want, f"matmul {storage} {shape}")
    Bt = [list(col) for col in zip(*B)]
    got_t = run(backend, lambda a, bt: op.matmul(a, bt, transpose_b=True), _np(A, storage), _np(Bt, storage))
    assert_bits(got_t, want, f"matmul(transpose_b) {storage} {shape}")
    if storage == "f32":  # the inputs tell orders apart: a reversed-k fold gives other bits somewhere
        rev = [[_dot(A[m][::-1], [B[k][n] for k in range(K)][::-1], "f32") for n in range(N)] for m in range(M)]
        assert not np.array_equal(_stored([v for r in rev for v in r], "f32").reshape(M, N), want)


@clause("NUM-RED-1")
@pytest.mark.parametrize("storage", ["f32", "bf16"])
def test_gemm_starts_from_c(backend, storage):
    """``op.gemm(a, b, c)``: the fold starts from ``C`` instead of +0, one rounding at the end."""
    A, B, C = _matrix(4, 37, 3, storage), _matrix(37, 6, 4, storage), _matrix(4, 6, 5, storage)
    got = run(backend, lambda a, b, c: op.gemm(a, b, c), _np(A, storage), _np(B, storage), _np(C, storage))
    assert_bits(got, _matmul_ref(A, B, storage, C), f"gemm {storage}")


@clause("NUM-RED-1")
def test_dot_products_of_bf16_beyond_the_f32_range(backend):
    """bf16 products below 2^-126 (down to 2^-266) or above the f32 max: the fused rounding
    is emulated, not the product rounded to f32 first."""
    a = [2.0 ** -100, 2.0 ** -100 * 1.5, 2.0 ** 100, -2.0 ** 100, 2.0 ** -70, 2.0 ** -133]
    b = [2.0 ** -40, 2.0 ** -45, 2.0 ** 100, 2.0 ** 100, 2.0 ** -70, 2.0 ** -133]
    A = [a, a[::-1], [1.0] + a[1:], [2.0 ** -140] + a[1:]]
    B = [[x, -x, 2 * x] for x in b]
    want = _matmul_ref(A, B, "bf16")
    got = run(backend, lambda u, v: op.matmul(u, v), _np(A, "bf16"), _np(B, "bf16"))
    assert_bits(got, want, "bf16 matmul with out-of-range products")


@clause("NUM-RED-1")
def test_empty_and_signed_zero_dot_products(backend):
    """K = 0 gives +0; the fold starts from +0, so all-(−0) products still give +0."""
    A = np.array([[-0.0, 0.0], [-1.0, -0.0]], np.float32)
    B = np.array([[0.0, -5.0], [-0.0, 0.0]], np.float32)
    want = np.array([[0.0, 0.0], [0.0, 5.0]], np.float32)
    assert_bits(run(backend, lambda u, v: op.matmul(u, v), A, B), want, "signed zeros")
    empty = run(backend, lambda u, v: op.matmul(u, v), np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32))
    assert_bits(empty, np.zeros((2, 3), np.float32), "K = 0")


# -- axis reductions (NUM-RED-2) ---------------------------------------------------------------

def _lane_sum(values, acc: str) -> float:
    """32 lanes, lane l folding x_l, x_{l+32}, … left to right (an empty lane holds −0),
    then the butterfly with xor offsets 16, 8, 4, 2, 1; lane 0's value."""
    lanes = []
    for l in range(32):
        s = -0.0
        for v in values[l::32]:
            s = R.add(s, v, acc)
        lanes.append(s)
    for off in (16, 8, 4, 2, 1):
        lanes = [R.add(lanes[l], lanes[l ^ off], acc) for l in range(32)]
    return lanes[0]


def _fold(values, acc: str) -> float:
    s = -0.0
    for v in values:
        s = R.add(s, v, acc)
    return s


LENGTHS = [1, 5, 31, 32, 33, 64, 100, 1000, 4099]


@clause("NUM-RED-2")
@pytest.mark.parametrize("storage", ["f32", "bf16", "f16", "fp8_e5m2", "f64"])
def test_sum_is_the_warp_reduction(backend, storage):
    """``op.sum(x, axis=-1)`` over lengths 1 … 4099: the 32-lane fold and butterfly in
    ``accum``, rounded once into storage; the rows differ from a plain sequential fold."""
    acc = _accum(storage)
    differs = False
    for L in LENGTHS:
        rows = [_wide_values(L, 100 * L + r, storage) for r in range(3)]
        want = _stored([_lane_sum(row, acc) for row in rows], storage)
        got = run(backend, lambda x: op.sum(x, axis=-1), _array([v for r in rows for v in r], storage).reshape(3, L))
        assert_bits(got, want, f"sum of {L} in {storage}")
        differs |= any(R.code_of(_lane_sum(row, acc), acc) != R.code_of(_fold(row, acc), acc) for row in rows)
    assert differs, "the inputs do not tell the canonical order from a sequential fold"


@clause("NUM-RED-2")
def test_sum_along_a_leading_axis_and_of_a_vector(backend):
    """The order is per reduced axis whatever its position; a 1-D sum is one such reduction."""
    x = [_wide_values(70, 7 + c) for c in range(4)]  # 4 columns of 70
    arr = as_f32([x[c][r] for r in range(70) for c in range(4)]).reshape(70, 4)
    want = as_f32([_lane_sum(col, "f32") for col in x])
    assert_bits(run(backend, lambda v: op.sum(v, axis=0), arr), want, "sum over axis 0")
    assert_bits(run(backend, lambda v: op.sum(v), as_f32(x[0])), as_f32([_lane_sum(x[0], "f32")])[0], "1-D sum")


@clause("NUM-RED-2")
def test_empty_sums_and_signed_zeros(backend):
    """The sum of an empty axis is −0; sums of −0 stay −0; a +0 anywhere makes +0."""
    got = run(backend, lambda v: op.sum(v, axis=1), np.zeros((2, 0), np.float32))
    assert_bits(got, as_f32([-0.0, -0.0]), "empty")
    got = run(backend, lambda v: op.sum(v, axis=1), as_f32([[-0.0] * 40, [-0.0] * 39 + [0.0]]))
    assert_bits(got, as_f32([-0.0, 0.0]), "signed zeros")


@clause("NUM-RED-2", "NUM-EW-1")
def test_sum_specials(backend):
    """NaN and inf − inf give the canonical +NaN; one infinity survives."""
    rows = [[1.0, math.nan, 2.0], [math.inf, 1.0, -math.inf], [-math.inf, -3.0, 5.0], [2.0 ** 127] * 3]
    want = as_f32([_lane_sum(r, "f32") for r in rows])
    want[np.isnan(want)] = np.uint32(0x7FC00000).view(np.float32)
    x = as_f32(rows)
    x[0, 1] = np.uint32(0xFFC00001).view(np.float32)
    assert_bits(run(backend, lambda v: op.sum(v, axis=1), x), want, "specials")


@clause("NUM-RED-2")
@pytest.mark.parametrize("storage", ["f32", "bf16", "f64", "bf16/bf16"])
def test_mean_divides_once_by_the_exact_length(backend, storage):
    """``op.mean``: the canonical sum ``s`` in ``accum``, then the exact quotient ``s / L``
    rounded once (L itself is never rounded into accum: with ``accum=bf16`` the lengths 257
    and 515 are not bf16 values), then stored."""
    storage, _, acc = storage.partition("/")
    acc = acc or _accum(storage)
    policy = numerics.Policy(numerics.get_format(storage), accum=numerics.get_format(acc))
    rounded_length_differs = False
    for L in (3, 33, 257, 515, 1000):
        rows = [_wide_values(L, 5 * L + r, storage, spread=3) for r in range(4)]
        sums = [_lane_sum(row, acc) for row in rows]
        means = [R.round_value(Fraction(s) / L, acc) if math.isfinite(s) else s for s in sums]
        want = _stored(means, storage)
        rounded_length_differs |= means != [R.div(s, R.round_value(L, acc), acc) for s in sums]
        x = _array([v for r in rows for v in r], storage).reshape(4, L)
        got = run(backend, lambda v: op.mean(op.cast(v, policy), axis=-1), x)
        assert_bits(got.view(np.uint8), want.view(np.uint8), f"mean of {L} in {storage} (accum {acc})")
    assert rounded_length_differs or acc != "bf16", "the inputs do not tell s / L from s / fl(L)"


def _ieee_max(values, sign: int) -> float:
    """IEEE 754-2019 maximum (sign=1) or minimum (sign=−1): NaN wins, −0 < +0."""
    best = None
    for v in values:
        if math.isnan(v):
            return math.nan
        key = (sign * v, sign * math.copysign(1.0, v))
        if best is None or key > best[0]:
            best = (key, v)
    return best[1]


@clause("NUM-RED-2")
def test_max_min_argmax_argmin(backend):
    """max/min are IEEE maximum/minimum (NaN wins, −0 < +0); argmax/argmin the smallest index
    of the extreme value, or of the first NaN."""
    padded = [[0.0, -0.0, -0.0, -1.0], [-0.0, 0.0, -1.0, 0.0], [3.0, 7.0, 7.0, 0.0], [1.0, math.nan, 9.0, math.nan],
              [-math.inf, -math.inf, -5.0, -5.0], [2.0, 2.0, -3.0, -3.0], [-0.0, -0.0, -0.0, -0.0]]
    x = as_f32(padded)
    for name, sign in (("max", 1), ("min", -1)):
        want = as_f32([_ieee_max(r, sign) for r in padded])
        want[np.isnan(want)] = np.uint32(0x7FC00000).view(np.float32)
        assert_bits(run(backend, lambda v: getattr(op, name)(v, axis=1), x), want, name)
        idx = []
        for r in padded:
            target = _ieee_max(r, sign)
            idx.append(next(i for i, v in enumerate(r) if (math.isnan(v) and math.isnan(target)) or
                            (v == target and math.copysign(1, v) == math.copysign(1, target))))
        got = run(backend, lambda v: getattr(op, "arg" + name)(v, axis=1), x)
        assert np.array_equal(got, np.array(idx)), (name, got, idx)
    rng = np.random.default_rng(3)
    big = rng.integers(-3, 4, (4, 300)).astype(np.float32)
    for name, pick in (("argmax", np.argmax), ("argmin", np.argmin)):
        assert np.array_equal(run(backend, lambda v: getattr(op, name)(v, axis=1), big), pick(big, axis=1))


# -- collectives (NUM-RED-3) -----------------------------------------------------------------

def _rank_fold(contribs, acc: str) -> list:
    out = []
    for column in zip(*contribs):
        s = column[0]
        for v in column[1:]:
            s = R.add(s, v, acc)
        out.append(s)
    return out


@clause("NUM-RED-3")
@pytest.mark.parametrize("storage", ["f32", "bf16"])
@pytest.mark.parametrize("ranks", [3, 4, 8])
def test_all_reduce_folds_in_ascending_rank_order(backend, storage, ranks):
    """``dist.all_reduce`` of a pending sum over a mesh axis: ``((x0 ⊕ x1) ⊕ x2) ⊕ …`` in
    ``accum``, converted once into storage; every rank receives the same bits."""
    contribs = [_wide_values(96, 31 * ranks + r, storage) for r in range(ranks)]
    acc = _accum(storage)
    want = _stored(_rank_fold(contribs, acc), storage)
    assert _rank_fold(contribs, acc) != _rank_fold(contribs[::-1], acc), "the inputs do not tell rank orders apart"

    def program():
        mesh = dist.Mesh(("tp",), range(ranks), (ranks,))
        x = dist.from_shards([_array(c, storage) for c in contribs], dist.ShardSpec(None, ("tp",), reduce="sum"),
                             mesh, dtype=storage)
        y = dist.all_reduce(x, "tp")
        return [y.shard(i) for i in range(ranks)]

    shards = eager(backend, program)
    for i, s in enumerate(shards):
        assert_bits(np.asarray(s).reshape(-1), want, f"rank {i} of {ranks}")


# -- exact mode (NUM-RED-4) --------------------------------------------------------------------

def _exact_sum(values, storage: str, rounding="rne") -> float:
    if any(math.isnan(v) for v in values):
        return math.nan
    infs = {v for v in values if math.isinf(v)}
    if len(infs) == 2:
        return math.nan
    if infs:
        return infs.pop()
    total = sum((Fraction(v) for v in values), Fraction(0))
    return 0.0 if total == 0 else R.round_value(total, storage, rounding)


def _exact(storage: str, **kw) -> numerics.Policy:
    return numerics.Policy(numerics.get_format(storage), reduction="exact", **kw)


@clause("NUM-RED-4")
@pytest.mark.parametrize("storage", ["f32", "bf16", "fp8_e4m3", "f16", "f64"])
def test_exact_sum_is_the_real_sum_rounded_once(backend, storage):
    """``op.sum`` under ``reduction="exact"``: the exact sum rounded once into storage — for
    every permutation of the terms."""
    rng = np.random.default_rng(11)
    for L in (1, 7, 100, 3000):
        row = _wide_values(L, L, storage, spread=12 if storage in ("f32", "f64") else 3)
        want = _stored([_exact_sum(row, storage)], storage)
        for trial in range(3):
            perm = row if trial == 0 else [row[i] for i in rng.permutation(L)]
            got = run(backend, lambda x: op.sum(op.cast(x, _exact(storage)), axis=-1), _array(perm, storage))
            assert_bits(np.asarray(got).reshape(1), want, f"exact sum of {L} {storage}, permutation {trial}")


@clause("NUM-RED-4")
def test_exact_sum_signs_and_specials(backend):
    """A zero exact sum is +0 (all −0 terms, the empty sum, cancellation); NaN terms give NaN,
    +inf with −inf NaN, infinities of one sign that infinity; a sum beyond max overflows
    only if the exact total does."""
    cases = [([-0.0, -0.0], 0.0), ([], 0.0), ([1.0, -1.0], 0.0), ([-3.0, 1.0, 2.0], 0.0),
             ([1.0, math.nan], math.nan), ([math.inf, -math.inf], math.nan), ([math.inf, 1.0, math.inf], math.inf),
             ([-math.inf, 3.0], -math.inf), ([2.0 ** 127, 2.0 ** 127, -(2.0 ** 127)], 2.0 ** 127)]
    policy = _exact("f32")
    for terms, expect in cases:
        x = as_f32(terms) if terms else np.zeros(0, np.float32)
        got = float(np.asarray(run(backend, lambda v: op.sum(op.cast(v, policy)), x)).astype(np.float64))
        assert (math.isnan(got) and math.isnan(expect)) or (
            got == expect and math.copysign(1, got) == math.copysign(1, expect)), (terms, got)


@clause("NUM-RED-4")
def test_exact_results_that_round_to_zero_keep_their_sign(backend):
    """bf16 products below half of bf16's smallest subnormal, summed exactly: the non-zero
    total rounds to a zero of its own sign (a tie at 2^-134 goes to the even +0)."""
    policy = _exact("bf16")
    a_col, b_row = [-(2.0 ** -70), 2.0 ** -70, 2.0 ** -67, -(2.0 ** -67)], [2.0 ** -70, 2.0 ** -67, 1.5 * 2.0 ** -67]
    A, B = _array(a_col, "bf16").reshape(4, 1), _array(b_row, "bf16").reshape(1, 3)
    got = run(backend, lambda a, b: op.matmul(op.cast(a, policy), op.cast(b, policy)), A, B)
    want = _stored([-0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0 ** -133, -0.0, -0.0, -(2.0 ** -133)],
                   "bf16").reshape(4, 3)
    exact = [Fraction(a) * Fraction(b) for a in a_col for b in b_row]
    assert_bits(want, _stored(exact, "bf16").reshape(4, 3), "the reference")
    assert_bits(got, want, "exact bf16 products")


@clause("NUM-RED-4")
def test_exact_sum_is_rounded_once_with_the_policy_rounding(backend):
    """bf16 terms 1, 2^-8, 2^-30, −2^-60: the exact sum lies just above a bf16 tie, which an
    f32 accumulator would land on; rounded once, rne and rup give 1 + 2^-7, rtz and rdown 1."""
    terms = [1.0, 2.0 ** -8, 2.0 ** -30, -(2.0 ** -60)]
    expect = {"rne": 1 + 2.0 ** -7, "rtz": 1.0, "rup": 1 + 2.0 ** -7, "rdown": 1.0}
    for rounding, value in expect.items():
        policy = numerics.Policy(numerics.bf16, reduction="exact", rounding=rounding)
        got = run(backend, lambda v: op.sum(op.cast(v, policy)), _array(terms, "bf16"))
        want = _stored([_exact_sum(terms, "bf16", rounding)], "bf16", rounding)
        assert_bits(np.asarray(got).reshape(1), want, rounding)
        assert float(want[0]) == value, rounding
    assert R.round_value(_lane_sum(terms, "f32"), "bf16") == 1.0  # an f32 accumulator lands on the tie


@clause("NUM-RED-4")
@pytest.mark.parametrize("storage", ["f32", "bf16", "fp8_e4m3"])
def test_exact_matmul(backend, storage):
    """``op.matmul`` under exact mode: ``Σ_k a_k·b_k`` exactly, rounded once."""
    A, B = _matrix(3, 200, 21, storage), _matrix(200, 4, 22, storage)
    dots = [sum((Fraction(a) * Fraction(B[k][n]) for k, a in enumerate(A[m])), Fraction(0))
            for m in range(3) for n in range(4)]
    want = _stored([d if d else 0.0 for d in dots], storage).reshape(3, 4)
    policy = _exact(storage)
    got = run(backend, lambda a, b: op.matmul(op.cast(a, policy), op.cast(b, policy)), _np(A, storage), _np(B, storage))
    assert_bits(got, want, f"exact matmul {storage}")


@clause("NUM-RED-4")
@pytest.mark.parametrize("storage", ["f32", "bf16"])
def test_exact_sum_is_the_same_on_every_mesh(backend, storage):
    """A sum over a sharded axis under exact mode: the same bits on meshes of 1, 2, 4 and 8
    devices (the pending partial sums are carried exactly), equal to the exact sum."""
    x = _wide_values(4096, 5, storage, spread=8 if storage == "f32" else 3)
    want = _stored([_exact_sum(x, storage)], storage)

    def program(n):
        mesh = dist.Mesh(("tp",), range(n), (n,))
        t = dist.tensor(shape=(len(x),), layout=dist.ShardSpec((0,), ("tp",)), mesh=mesh, dtype=_exact(storage),
                        data=_array(x, storage))
        total = dist.all_reduce(op.sum(t), "tp")
        return [total.shard(i) for i in range(n)]

    for n in (1, 2, 4, 8):
        for i, shard in enumerate(eager(backend, program, n)):
            assert_bits(np.asarray(shard).reshape(1), want, f"mesh of {n}, rank {i}")


@oracle_only("numerics.ExactAccumulator has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-RED-4")
def test_exact_accumulators_merge_exactly(backend):
    """``ExactAccumulator``: any split of the terms, accumulated separately and merged, rounds
    to the same bits as the whole (the partials are never rounded)."""
    rng = np.random.default_rng(13)
    x = as_f32(_wide_values(5000, 14, "f32", spread=15))
    want = _stored([_exact_sum([float(v) for v in x], "f32")], "f32")
    for trial in range(5):
        cuts = np.sort(rng.choice(np.arange(1, x.size), 1 + trial * 3, replace=False))
        parts = np.split(x[rng.permutation(x.size)], cuts)
        total = numerics.ExactAccumulator()
        for part in parts:
            acc = numerics.ExactAccumulator()
            acc.add(part, axis=0)
            total.merge(acc)
        assert_bits(np.asarray(total.round("f32")).reshape(1), want, f"split {trial}")
    assert_bits(np.asarray(numerics.exact_sum(x)).reshape(1), want, "exact_sum")
