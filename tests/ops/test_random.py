"""Random family: rand, randn, poisson, dropout (GRAPH-RAND-1 … GRAPH-DROPOUT-1)."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError
from tessera_ref.interp import run_function
from tessera_ref.ir import parse_module
from tessera_ref.numerics import Policy, cast, rng
from tessera_ref.ops import bind
from tessera_ref.ops.random import RAND

N = 100_000


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a)).view(np.uint8)


def _hex(values) -> list:
    return [float(v).hex() for v in np.asarray(values, dtype=np.float64).reshape(-1)]


# ---------------------------------------------------------------------------------------
# known answers (NUM-RNG-8, key 42 = RNGKey(42, 0)) — independent of the code under test

def test_known_answers_of_the_rng_clauses():
    bits = [0x184F5EF6, 0xCFF0D82A, 0x2B1A85B9, 0xF438C456]
    assert np.array_equal(np.asarray(op.rand((4,), seed=42)),
                          np.array([(b >> 8) * 2.0**-24 for b in bits], dtype=np.float32))
    assert _hex(op.rand((2, 2), seed=42, dtype="f64")) == [
        "0x1.d1c7c71134f38p-3", "0x1.fba0c203474b2p-2", "0x1.4aa2c383823bcp-1", "0x1.c13352a27805dp-1"]
    normal64 = ["-0x1.fe0dbd60b61aap-2", "0x1.d271b1ad4e896p-2", "-0x1.49fa9adbc560fp+0", "0x1.633e41e7a6580p+0"]
    assert _hex(op.randn((4,), seed=42, dtype="f64")) == normal64
    assert np.array_equal(np.asarray(op.randn((4,), seed=42)),
                          np.array([float.fromhex(h) for h in normal64]).astype(np.float32))
    assert np.asarray(op.poisson((4,), 4, seed=42)).tolist() == [6, 1, 5, 3]
    assert np.asarray(op.poisson((2, 2), 1000.0, seed=42)).tolist() == [[995, 1013], [1048, 985]]


def test_seed_and_stream_form_the_key():
    key = rng.RNGKey(7, 3)
    got = op.randn((5, 3), seed=7, stream=3)
    assert np.array_equal(np.asarray(got), rng.normal(key, np.arange(15).reshape(5, 3)))
    assert not np.array_equal(np.asarray(got), np.asarray(op.randn((5, 3), seed=7)))


# ---------------------------------------------------------------------------------------
# (a) distributions: mean/variance within 5 standard errors for 100k draws

def _check_moments(x, mean, var, fourth_central):
    x = np.asarray(x, dtype=np.float64)
    assert abs(x.mean() - mean) <= 5 * np.sqrt(var / x.size)
    # standard error of the sample variance: sqrt((μ4 − σ⁴)/N)
    assert abs(x.var() - var) <= 5 * np.sqrt((fourth_central - var**2) / x.size)


def test_rand_is_uniform_in_unit_interval():
    x = np.asarray(op.rand((N,), seed=1))
    assert x.dtype == np.float32 and x.min() >= 0 and x.max() < 1
    _check_moments(x, 0.5, 1 / 12, 1 / 80)
    assert np.all(np.asarray(op.rand((N,), seed=1, dtype="f64")) < 1)


def test_randn_is_standard_normal():
    _check_moments(op.randn((N,), seed=2), 0.0, 1.0, 3.0)


@pytest.mark.parametrize("lam", [0.0, 3.5, 40.0])
def test_poisson_moments(lam):
    x = op.poisson((N,), lam, seed=3)
    assert x.type == tr.ir.TensorType((N,), "index")
    _check_moments(x, lam, lam, lam * (1 + 3 * lam)) if lam else np.testing.assert_array_equal(x, 0)


def test_narrow_storage_is_the_f32_draw_converted():
    pol = Policy("bf16", rounding="rtz")
    got = op.rand((1000,), seed=4, dtype=pol)
    assert got.type == tr.ir.TensorType((1000,), pol)
    want = cast(rng.rand(rng.RNGKey(4), (1000,)), "bf16", rounding="rtz")
    assert np.array_equal(_bits(got), _bits(want))
    assert np.asarray(got).astype(np.float64).max() < 1  # rtz keeps [0, 1)
    fp8 = op.randn((1000,), seed=4, dtype="fp8_e4m3")
    assert np.array_equal(_bits(fp8), _bits(cast(rng.randn(rng.RNGKey(4), (1000,)), "fp8_e4m3")))


def test_stochastic_rounding_uses_the_folded_key():
    pol = Policy("bf16", rounding="stochastic")
    got = op.randn((2000,), seed=5, dtype=pol)
    draw = rng.randn(rng.RNGKey(5), (2000,))
    want = cast(draw, "bf16", rounding="stochastic", key=rng.RNGKey(5).fold(1))
    assert np.array_equal(_bits(got), _bits(want))
    assert not np.array_equal(_bits(got), _bits(cast(draw, "bf16", rounding="stochastic", key=5)))


# ---------------------------------------------------------------------------------------
# slices: element i depends on (key, i) only

def test_shape_changes_which_element_not_its_value():
    assert np.array_equal(_bits(np.asarray(op.randn((4, 8), seed=9))[1]),
                          _bits(np.asarray(op.randn((32,), seed=9))[8:16]))
    small = np.asarray(op.rand((1000,), seed=9, stream=2))
    big = np.asarray(op.rand((5, 10, 100), seed=9, stream=2))
    assert np.array_equal(_bits(small), _bits(big.reshape(-1)[:1000]))
    assert np.array_equal(np.asarray(op.poisson((7,), 20.0, seed=9)),
                          np.asarray(op.poisson((3, 7), 20.0, seed=9)).reshape(-1)[:7])


# ---------------------------------------------------------------------------------------
# dropout

def test_dropout_mask_scaling_and_zeros():
    rate, seed, stream = 0.3, 11, 4
    x = np.random.default_rng(0).standard_normal((50, 40)).astype(np.float32)
    y1 = np.asarray(op.dropout(x, rate, seed=seed, stream=stream))
    y2 = np.asarray(op.dropout(x, rate, seed=seed, stream=stream))
    assert np.array_equal(_bits(y1), _bits(y2))  # the mask depends on (seed, stream, i) only
    u = rng.uniform(rng.RNGKey(seed, stream), np.arange(x.size)).reshape(x.shape)
    keep = u.astype(np.float64) >= rate
    q = np.float32(1.0 - rate)
    want = np.where(keep, x / q, np.float32(0))  # one f32 division, correctly rounded
    assert np.array_equal(_bits(y1), _bits(want))
    assert not np.signbit(y1[~keep]).any()  # dropped → +0 even for negative x
    # the stated operation matters: multiplying by the rounded reciprocal gives other bits
    assert not np.array_equal(_bits(want), _bits(np.where(keep, x * (np.float32(1) / q), np.float32(0))))


def test_dropout_fraction_dropped():
    y = np.asarray(op.dropout(np.ones(N, np.float32), 0.25, seed=12))
    frac = np.mean(y == 0)
    assert abs(frac - 0.25) <= 5 * np.sqrt(0.25 * 0.75 / N)


def test_dropout_rate_zero_is_identity_bits():
    x = np.array([1.5, -0.0, np.inf], dtype=np.float32)
    x = np.concatenate([x, np.array([0x7FC01234], dtype=np.uint32).view(np.float32)])  # NaN payload
    assert np.array_equal(_bits(op.dropout(x, 0, seed=1)), _bits(x))


def test_dropout_bf16_rounds_once_into_storage():
    x = tr.asarray(np.linspace(-3, 3, 4096, dtype=np.float32), dtype="bf16")
    got = op.dropout(x, 0.1, seed=13)
    assert got.type == x.type
    u = rng.uniform(rng.RNGKey(13), np.arange(4096))
    kept = np.asarray(x).astype(np.float32) / np.float32(0.9)
    want = cast(np.where(u.astype(np.float64) >= 0.1, kept, np.float32(0)), "bf16")
    assert np.array_equal(_bits(got), _bits(want))


# ---------------------------------------------------------------------------------------
# (c) errors

def test_errors_name_the_problem_and_the_user_line():
    with pytest.raises(OpError, match=r"rand needs a seed.*test_random\.py:"):
        op.rand((3,))
    with pytest.raises(DTypeError, match=r"int8.*test_random\.py:"):
        op.rand((3,), seed=1, dtype="int8")
    with pytest.raises(OpError, match=r"'dtype'.*test_random\.py:"):
        op.randn((3,), seed=1, dtype="f33")
    with pytest.raises(OpError, match=r"'shape'.*test_random\.py:"):
        op.randn((3, -1), seed=1)
    with pytest.raises(OpError, match=r"'seed'.*test_random\.py:"):
        op.rand((3,), seed=-1)
    with pytest.raises(OpError, match=r"'rate'.*\[0\.0, 1\.0\).*test_random\.py:"):
        op.dropout(np.ones(3, np.float32), 1.0, seed=1)
    with pytest.raises(OpError, match=r"'lam'.*test_random\.py:"):
        op.poisson((3,), -1.0, seed=1)
    with pytest.raises(OpError, match=r"'lam'"):
        op.poisson((3,), float("nan"), seed=1)
    with pytest.raises(DTypeError, match=r"tensor<3xindex>.*test_random\.py:"):
        op.dropout(np.ones(3, np.int64), 0.5, seed=1)
    with pytest.raises(OpError, match=r"unknown attribute.*'mean'.*test_random\.py:"):
        bind(RAND, shape=(3,), seed=1, mean=0.0)


# ---------------------------------------------------------------------------------------
# (d) eager == jit, (e) IR round trip, CSE of identical calls

def _model(x):
    a = op.rand((4, 6), seed=1, dtype="bf16")
    b = op.randn((4, 6), seed=1, stream=2, dtype="f64")
    c = op.poisson((4, 6), 12.5, seed=3)
    d = op.dropout(x, 0.4, seed=4)
    return a, b, c, d


def test_jit_matches_eager_and_ir_round_trips():
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    eager = _model(x)
    f = tr.jit(_model)
    for a, b in zip(eager, f(x)):
        assert np.array_equal(_bits(a), _bits(b))
    m = f.trace(x)
    text = str(m)
    assert "tessera.graph.poisson" in text and "lam = 12.5" in text
    parsed = parse_module(text)
    assert str(parsed) == text
    for a, b in zip(eager, run_function(parsed.body.first_op, x)):
        assert np.array_equal(_bits(a), _bits(b))


def test_identical_calls_may_be_merged_distinct_streams_are_not():
    f = tr.jit(lambda: (op.rand((3,), seed=1), op.rand((3,), seed=1), op.rand((3,), seed=1, stream=1)))
    a, b, c = f()
    assert np.array_equal(_bits(a), _bits(b)) and not np.array_equal(_bits(a), _bits(c))
    assert f.inspect_ir().count("tessera.graph.rand") == 2


def test_cost_counts_outputs_only():
    from tessera_ref.ops.primitive import Call
    t = tr.ir.TensorType((8, 4), "bf16")
    attrs = RAND.check_attrs({"shape": (8, 4), "seed": 1, "dtype": "bf16"})
    assert RAND.cost(Call(RAND, attrs, (), (t,))) == (32, 64)
