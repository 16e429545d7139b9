"""GRAPH-RAND-1 … GRAPH-DROPOUT-1: values keyed by RNGKey(seed, stream) and the row-major
index, against an independent Philox4x32-10 (checked on the Random123 known answers)."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError
from tessera_conformance import assert_bits, clause, golden, run

from . import _reference as R
from ._cases import check, operand, policy, values
from ._formats import from_codes, round_values


def _reference_reproduces_known_answers():
    """The reference generator reproduces the spec's Philox and key known answers."""
    out = R.philox(np.array([0, 0, 0, 0], np.uint64), np.array([0, 0], np.uint64))
    assert [int(v) for v in out] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert R.key_words(0) == (0x9E87C685, 0x5B7BD1C4) and R.key_words(0, 1) == (0xE882B260, 0xBC1226C8)
    assert [int(v) for v in R.random_bits(R.key_words(42), np.arange(4))] == [0x184F5EF6, 0xCFF0D82A, 0x2B1A85B9,
                                                                              0xF438C456]


def _idx(shape):
    return np.arange(int(np.prod(shape))).reshape(shape)


GOLDEN = golden("graph_ir_random")["cases"]


@clause("GRAPH-RAND-1", "GRAPH-RANDN-1", "GRAPH-POISSON-1")
@pytest.mark.parametrize("case", GOLDEN, ids=[f"{c['op']}-{c['inputs'].get('dtype', 'index')}-{i}"
                                              for i, c in enumerate(GOLDEN)])
def test_known_answers(backend, case):
    """The NUM-RNG-8 known answers (key 42, i = 0…3) through the ops (golden/graph_ir_random.json)."""
    kw = dict(case["inputs"])
    shape = tuple(kw.pop("shape"))
    fn = getattr(op, case["op"])
    got = run(backend, lambda: fn(shape, **kw))
    exp = case["expected"]
    if "values" in exp:
        want = np.array(exp["values"], np.int64).reshape(shape)
    else:
        want = from_codes(np.array([int(h, 16) for h in exp["bits"]], np.uint64), exp["dtype"]).reshape(shape)
    assert_bits(got, want, case["op"])


@clause("GRAPH-RAND-1")
def test_rand_f32_and_f64(backend):
    """Element i is the f32 uniform (bits >> 8) * 2^-24, or the f64 uniform; stream changes the key."""
    _reference_reproduces_known_answers()
    shape = (4, 9)
    check(backend, lambda: op.rand(shape, seed=42), (), R.uniform32(R.key_words(42), _idx(shape)).astype(np.float32))
    check(backend, lambda: op.rand(shape, seed=42, stream=3), (),
          R.uniform32(R.key_words(42, 3), _idx(shape)).astype(np.float32))
    assert_bits(run(backend, lambda: op.rand(shape, seed=7, dtype="f64")), R.uniform64(R.key_words(7), _idx(shape)))


@clause("GRAPH-RAND-1")
def test_rand_into_narrow_storage(backend):
    """The uniform converted once into storage (bf16 may give 1.0, rtz not); SR keys by fold(1)."""
    shape = (64, 64)
    u = R.uniform32(R.key_words(1), _idx(shape))
    want = round_values(u, "bf16")
    assert (values(want) == 1.0).any()
    check(backend, lambda: op.rand(shape, seed=1, dtype="bf16"), (), want)
    check(backend, lambda: op.rand(shape, seed=1, dtype=policy("bf16", rounding="rtz")), (),
          round_values(u, "bf16", "rtz"))
    bits = R.random_bits(R.fold(R.key_words(1, 2), 1), _idx(shape))
    u2 = R.uniform32(R.key_words(1, 2), _idx(shape))
    check(backend, lambda: op.rand(shape, seed=1, stream=2, dtype=policy("bf16", rounding="stochastic")), (),
          round_values(u2, "bf16", "stochastic", u=bits))


@clause("GRAPH-RAND-1", "GRAPH-RANDN-1")
def test_values_depend_on_the_index_only(backend):
    """randn((4, 8))[1] equals randn((32,))[8:16] bitwise; a non-float dtype is a DTypeError."""
    a = run(backend, lambda: op.randn((4, 8), seed=5))
    b = run(backend, lambda: op.randn((32,), seed=5))
    assert_bits(a[1], b[8:16])
    for fn in (op.rand, op.randn):
        with pytest.raises(DTypeError):
            run(backend, lambda: fn((3,), seed=1, dtype="int8"))


@clause("GRAPH-RANDN-1")
def test_randn_box_muller(backend):
    """Box-Muller normal(key, i) in f64, rounded once to f32 unless f64, then into storage."""
    shape = (5, 7)
    z = R.normal(R.key_words(42), _idx(shape))
    check(backend, lambda: (op.randn(shape, seed=42), op.randn(shape, seed=42, dtype="f64"),
                            op.randn(shape, seed=42, dtype="bf16")), (),
          [z.astype(np.float32), z, round_values(values(z.astype(np.float32)), "bf16")])


@clause("GRAPH-POISSON-1")
@pytest.mark.parametrize("lam", [0.0, 0.5, 4.0, 9.99, 10.0, 1000.0])
def test_poisson_counts(backend, lam):
    """An index tensor of NUM-RNG-7 counts (Knuth below 10, PTRS from 10)."""
    shape = (3, 5)
    words = R.key_words(42)
    want = np.array([R.poisson(words, i, lam) for i in range(15)], np.int64).reshape(shape)
    check(backend, lambda: op.poisson(shape, lam, seed=42), (), want)


@clause("GRAPH-POISSON-1")
def test_poisson_rate_errors(backend):
    """lam outside [0, 2^52] (negative, NaN, inf, too large) is an OpError."""
    for lam in (-1.0, float("nan"), float("inf"), 2.0 ** 53):
        with pytest.raises(OpError):
            run(backend, lambda: op.poisson((2,), lam, seed=1))


@clause("GRAPH-DROPOUT-1")
@pytest.mark.parametrize("fmt,rate", [("f32", 0.25), ("bf16", 0.1), ("f32", 0.7), ("f64", 0.3)])
def test_dropout_mask_and_scale(backend, fmt, rate):
    """Kept iff uniform(key, i, f32) ≥ rate; kept x ⊘ RN_accum(1 ⊖ rate), dropped +0 (NaN too)."""
    x = values(operand(np.random.default_rng(3).standard_normal((16, 24)) * 4, fmt))
    x[0, :6] = [np.nan, -0.0, np.inf, -np.inf, np.nan, 0.0]
    words = R.key_words(9, 1)
    u = R.uniform32(words, _idx(x.shape))
    A = "f64" if fmt == "f64" else "f32"
    q = R.acc(1.0 - rate, A)
    want = round_values(np.where(u >= rate, R.div(A, x, q), 0.0), fmt)
    arg = tr.asarray(x, dtype="f64") if fmt == "f64" else round_values(x, fmt)
    check(backend, lambda v: op.dropout(v, rate, seed=9, stream=1), (arg,), want, what=fmt)


@clause("GRAPH-DROPOUT-1")
def test_dropout_rate_zero_and_errors(backend):
    """rate = 0 returns x bit for bit (NaN payloads kept); rate outside [0, 1) is an OpError."""
    x = from_codes(np.array([0x7FC00001, 0xFFFFFFFF, 0x80000000, 0x3F800001], np.uint64), "f32")
    check(backend, lambda v: op.dropout(v, 0.0, seed=1), (x,), x)
    for rate in (1.0, -0.1, 1.5):
        with pytest.raises(OpError):
            run(backend, lambda v: op.dropout(v, rate, seed=1), x)
