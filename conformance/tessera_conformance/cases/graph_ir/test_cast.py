"""GRAPH-CAST-1: every element converted once (NUM-CVT), kinds, and the cast errors."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError
from tessera_conformance import clause, run

from . import _reference as R
from ._cases import check, grid, operand, policy, specials, values
from ._formats import FORMATS, round_values

TARGETS = ["bf16", "f16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "int8", "int4"]


def _sources():
    """f32 values: wide random magnitudes, exact ties and near-ties of narrow grids, values
    beyond every narrow max, subnormals and the f32 specials."""
    g = np.random.default_rng(11)
    wide = g.standard_normal(160) * np.exp2(g.integers(-20, 20, 160))
    ties = np.array([0.25, 0.75, 1.25, 2.5, 3.5, -2.5, 5.0, 0.74, 0.76, -0.76, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8,
                     7.75, 29.0, 449.0, 464.0, 57344.0, 61440.0, 65520.0, 1e5, -1e5, 127.5, -128.5, 7.5, -8.5])
    return values(operand(np.concatenate([wide, ties, specials("f32"), 2.0 ** -np.arange(8, 30, 3)]), "f32"))


@clause("GRAPH-CAST-1")
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rup", "rdown"])
@pytest.mark.parametrize("target", TARGETS)
def test_number_to_format(backend, target, rounding):
    """f32 -> every format: the exact value rounded once with the rounding/overflow keywords (NUM-CVT)."""
    x = _sources()
    xs = round_values(x, "f32")
    for overflow in ("native", "saturate"):
        want = round_values(x, target, rounding, overflow)
        check(backend, lambda v: op.cast(v, target, rounding=rounding, overflow=overflow), (xs,), want,
              what=f"{target} {rounding} {overflow}")


@clause("GRAPH-CAST-1")
def test_target_policy_rounding_and_no_accum_step(backend):
    """The target policy's rounding applies; a wider (f64) source is rounded once, directly."""
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30), 1 + 2.0 ** -8, 3.0000001, 1e-45, 1e300])
    check(backend, lambda v: op.cast(v, "bf16"), (tr.asarray(x, dtype="f64"),), round_values(x, "bf16"))
    check(backend, lambda v: op.cast(v, "f32"), (tr.asarray(x, dtype="f64"),), round_values(x, "f32"))
    pol = policy("f16", rounding="rup", overflow="saturate")
    check(backend, lambda v: op.cast(v, pol), (tr.asarray(x, dtype="f64"),), round_values(x, "f16", "rup", "saturate"))
    check(backend, lambda v: op.cast(v, pol, rounding="rdown"), (tr.asarray(x, dtype="f64"),),
          round_values(x, "f16", "rdown", "saturate"))


@clause("GRAPH-CAST-1", "GRAPH-TYPE-3")
def test_stochastic_cast_uses_the_row_major_index(backend):
    """rounding="stochastic" with seed: element i uses random_bits(seed, i) (NUM-CVT-5)."""
    x = values(operand(grid(-4, 4, 6 * 70, seed=12).reshape(6, 70), "f32"))
    u = R.random_bits(R.key_words(5), np.arange(x.size)).reshape(x.shape)
    for target in ("bf16", "fp8_e4m3", "fp4_e2m1", "int8"):
        want = round_values(x, target, "stochastic", u=u)
        check(backend, lambda v: op.cast(v, target, rounding="stochastic", seed=5), (round_values(x, "f32"),), want,
              what=target)
    with pytest.raises(OpError, match="seed"):
        run(backend, lambda v: op.cast(v, "bf16", rounding="stochastic"), round_values(x, "f32"))


@clause("GRAPH-CAST-1")
def test_to_i1_and_index(backend):
    """-> i1 is x != 0 (NaN true); -> index truncates, NaN gives 0, out of range saturates."""
    x = np.array([0.0, -0.0, np.nan, -np.nan, 1.5, -1.5, 2.5, -0.75, 2.0 ** 62, 2.0 ** 63, -2.0 ** 63, -2.0 ** 64,
                  np.inf, -np.inf, 1e-45, 123456789.0, -7.99])
    xs = round_values(x, "f32")
    xv = values(xs)
    to_index = np.array([0 if np.isnan(v) else 2 ** 63 - 1 if v >= 2.0 ** 63 else -(2 ** 63) if v < -2.0 ** 63
                         else int(np.trunc(v)) for v in xv], np.int64)
    check(backend, lambda v: (op.cast(v, "i1"), op.cast(v, "index")), (xs,), [xv != 0, to_index])
    b = np.array([1.5, -0.0, 3.0], dtype=np.float64)
    check(backend, lambda v: op.cast(v, "index"), (operand(b, "bf16"),), np.array([1, 0, 3], np.int64))


@clause("GRAPH-CAST-1")
def test_kinds_to_numbers_and_to_themselves(backend):
    """i1 -> index/f32 is 0/1; index -> a format rounds once; a kind to itself is the identity."""
    m = np.array([True, False, True])
    check(backend, lambda v: (op.cast(v, "index"), op.cast(v, "f32"), op.cast(v, "i1")), (m,),
          [np.array([1, 0, 1], np.int64), np.array([1, 0, 1], np.float32), m])
    n = np.array([0, -3, 257, 2 ** 24 + 1, -(2 ** 53), 2 ** 53, 65519, 65520, 300])
    nv = n.astype(np.float64)
    check(backend, lambda v: (op.cast(v, "f32"), op.cast(v, "bf16"), op.cast(v, "f16"), op.cast(v, "int8"),
                              op.cast(v, "index"), op.cast(v, "i1")), (n,),
          [round_values(nv, "f32"), round_values(nv, "bf16"), round_values(nv, "f16"), round_values(nv, "int8"),
           n, n != 0])


@clause("GRAPH-CAST-1")
def test_index_beyond_2_53_is_a_runtime_error(backend):
    """An index of magnitude above 2^53 is an OpError when the op runs (even an f64-exact one)."""
    for bad in (2 ** 53 + 2, -(2 ** 53 + 1)):
        with pytest.raises(OpError):
            run(backend, lambda v: op.cast(v, "f32"), np.array([1, bad], np.int64))


@clause("GRAPH-CAST-1")
def test_cast_errors(backend):
    """Complex sources/targets, rounding with an i1/index target, scaled target policies are errors."""
    z = np.array([1 + 2j], np.complex64)
    with pytest.raises(DTypeError):
        run(backend, lambda v: op.cast(v, "f32"), z)
    with pytest.raises((DTypeError, OpError)):
        run(backend, lambda v: op.cast(v, "complex<f32>"), np.ones(2, np.float32))
    with pytest.raises(OpError):
        run(backend, lambda v: op.cast(v, "i1", rounding="rtz"), np.ones(2, np.float32))
    with pytest.raises(OpError):
        run(backend, lambda v: op.cast(v, "index", overflow="saturate"), np.ones(2, np.float32))
    with pytest.raises(OpError):
        run(backend, lambda v: op.cast(v, policy("fp8_e4m3", scaling="per_tensor")), np.ones(2, np.float32))
    assert FORMATS["fp4_e2m1"].max == 6.0
