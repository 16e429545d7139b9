"""NUM-RNG-1 … NUM-RNG-8: Philox4x32-10, keys, counter spaces and the draws.

Golden vectors (``golden/numerics_*.json``): the Random123 known answers and the spec's own
known answers for keys and draws. Every other expected value comes from the Python
transcription in :mod:`._ref_rng` (which the golden vectors check first). The backend is
driven through the ops that draw: ``op.rand`` (f32 and f64 uniforms: the raw bits and the
53-bit construction), ``op.randn`` (Box–Muller with NUM-MATH's log and turns), ``op.poisson``
and stochastic rounding (``test_convert``).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tessera_ref import numerics, op
from tessera_ref.errors import TesseraError
from tessera_ref.numerics import rng as lib_rng
from tessera_conformance import assert_bits, clause, golden, oracle_only, run

from . import _ref_rng as RNG

SEEDS = [(0, 0), (42, 0), (42, 1), (2 ** 64 - 1, 2 ** 64 - 1), (123456789012345, 77)]


def _hexwords(words) -> list:
    return [int(w, 16) for w in words]


# -- Philox (NUM-RNG-1) ------------------------------------------------------------------------

@clause("NUM-RNG-1")
def test_reference_reproduces_the_known_answers():
    """The case's own Philox gives Random123's known answers (so it may judge the rest)."""
    for case in golden("numerics_philox")["cases"]:
        assert RNG.philox(_hexwords(case["counter"]), _hexwords(case["key"])) == tuple(_hexwords(case["output"]))


@oracle_only("numerics.philox4x32_10 has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-RNG-1")
def test_philox_known_answers_and_broadcasting(backend):
    """``philox4x32_10(counter, key)``: the known answers, and counters ``(..., 4)`` with keys
    ``(..., 2)`` broadcasting over their leading axes."""
    cases = golden("numerics_philox")["cases"]
    counters = np.array([_hexwords(c["counter"]) for c in cases], np.uint32)
    keys = np.array([_hexwords(c["key"]) for c in cases], np.uint32)
    want = np.array([_hexwords(c["output"]) for c in cases], np.uint32)
    assert np.array_equal(numerics.philox4x32_10(counters, keys), want)
    rng = np.random.default_rng(1)
    c = rng.integers(0, 2 ** 32, (3, 1, 4), dtype=np.uint64).astype(np.uint32)
    k = rng.integers(0, 2 ** 32, (5, 2), dtype=np.uint64).astype(np.uint32)
    out = numerics.philox4x32_10(c, k)
    assert out.shape == (3, 5, 4) and out.dtype == np.uint32
    for i in range(3):
        for j in range(5):
            assert tuple(int(w) for w in out[i, j]) == RNG.philox([int(w) for w in c[i, 0]], [int(w) for w in k[j]])


# -- keys (NUM-RNG-2) ---------------------------------------------------------------------------

@oracle_only("RNGKey and fold are the numerics library's; no backend derives keys")
@clause("NUM-RNG-2")
def test_key_derivation_known_answers(backend):
    """``RNGKey(seed, stream).words`` and ``fold``: the spec's known answers, by the case's
    transcription and by the oracle; folds chain; an int seed is ``RNGKey(seed)``."""
    for case in golden("numerics_rng_keys")["cases"]:
        words = RNG.key_words(case["seed"], case["stream"])
        if case["fold"] is not None:
            words = RNG.fold(words, case["fold"])
        assert words == tuple(_hexwords(case["words"])), case
    for case in golden("numerics_rng_keys")["cases"]:
        key = numerics.RNGKey(case["seed"], case["stream"])
        if case["fold"] is not None:
            key = key.fold(case["fold"])
        assert [int(w) for w in key.words] == _hexwords(case["words"]), case
    for seed, stream in SEEDS:
        key = numerics.RNGKey(seed, stream)
        assert tuple(int(w) for w in key.words) == RNG.key_words(seed, stream)
        chained = key.fold(3).fold(2 ** 64 - 1)
        assert tuple(int(w) for w in chained.words) == RNG.fold(RNG.fold(RNG.key_words(seed, stream), 3), 2 ** 64 - 1)
    assert numerics.as_key(5).words.tolist() == numerics.RNGKey(5).words.tolist()
    assert numerics.RNGKey(3).fold(4).words.tolist() != numerics.RNGKey(3, 4).words.tolist()
    for bad in ((-1, 0), (2 ** 64, 0), (0, 2 ** 64)):
        with pytest.raises(TesseraError):
            numerics.RNGKey(*bad)


@clause("NUM-RNG-1", "NUM-RNG-2", "NUM-RNG-3", "NUM-RNG-4", "NUM-RNG-5")
@pytest.mark.parametrize("seed,stream", SEEDS, ids=[f"{s}-{t}" for s, t in SEEDS])
def test_rand_f32_on_the_backend(backend, seed, stream):
    """``op.rand(shape, seed, stream)``: element ``i`` (row-major) is
    ``(random_bits(RNGKey(seed, stream), i) >> 8)·2^-24`` — word ``i mod 4`` of block
    ``(lo32(i/4), hi32(i/4), 0, 0)``."""
    key = RNG.key_words(seed, stream)
    shape = (5, 7, 3)
    want = np.array([RNG.uniform_f32(key, i) for i in range(105)], np.float32).reshape(shape)
    got = run(backend, lambda: op.rand(shape, seed=seed, stream=stream))
    assert_bits(got, want, f"rand f32 seed {seed} stream {stream}")
    assert float(got.max()) < 1.0 and float(got.min()) >= 0.0


@clause("NUM-RNG-3", "NUM-RNG-5")
@pytest.mark.parametrize("seed,stream", SEEDS[:3], ids=[f"{s}-{t}" for s, t in SEEDS[:3]])
def test_rand_f64_on_the_backend(backend, seed, stream):
    """f64 uniforms: ``((a >> 5)·2^26 + (b >> 6))·2^-53`` from words ``2(i mod 2)``,
    ``2(i mod 2)+1`` of block ``(lo32(i/2), hi32(i/2), 1, 0)``."""
    key = RNG.key_words(seed, stream)
    want = np.array([RNG.uniform_f64(key, i) for i in range(77)], np.float64).reshape(7, 11)
    got = run(backend, lambda: op.rand((7, 11), seed=seed, stream=stream, dtype="f64"))
    assert_bits(got, want, f"rand f64 seed {seed}")


@clause("NUM-RNG-6", "NUM-RNG-3", "NUM-MATH-2", "NUM-MATH-4")
@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_randn_on_the_backend(backend, dtype):
    """``op.randn``: ``sqrt((−2) ⊗ log(1 ⊖ u1)) ⊗ cos-turns(u2)`` from block
    ``(lo32(i), hi32(i), 2, 0)``, with NUM-MATH's log and sincos_turns; f32 is that f64 value
    rounded once."""
    key = RNG.key_words(9, 4)
    z = [RNG.normal(key, i) for i in range(300)]
    want = np.array(z, np.float64).astype(np.float32 if dtype == "f32" else np.float64).reshape(20, 15)
    got = run(backend, lambda: op.randn((20, 15), seed=9, stream=4, dtype=dtype))
    assert_bits(got, want, f"randn {dtype}")
    assert np.all(np.isfinite(got)) and float(np.max(np.abs(got))) <= 8.58


LAMS = [0.0, 0.5, 4.0, 9.999, 10.0, 37.5, 1000.0, 1.0e6, 2.0 ** 40]


@clause("NUM-RNG-7", "NUM-RNG-3", "NUM-MATH-3", "NUM-MATH-5")
@pytest.mark.parametrize("lam", LAMS)
def test_poisson_on_the_backend(backend, lam):
    """``op.poisson(shape, lam, seed, stream)``: Knuth below 10, PTRS from 10, round ``d`` of
    element ``i`` reading block ``(lo32(i), hi32(i), 3, d)``."""
    key = RNG.key_words(17, 2)
    n = 120 if lam < 1e5 else 40
    want = np.array([RNG.poisson(key, i, lam) for i in range(n)], np.int64)
    got = run(backend, lambda: op.poisson((n,), lam, seed=17, stream=2))
    assert np.array_equal(np.asarray(got).astype(np.int64), want), (lam, got[:8], want[:8])
    if 0 < lam < 1e5:  # a sanity check on the transcription: the sample mean is near lam
        assert abs(want.mean() - lam) < 6 * math.sqrt(lam / n) + 1e-9


# -- counter spaces and the library draws (NUM-RNG-3 … NUM-RNG-7) ---------------------------------------

BIG = [0, 1, 2, 3, 4, 5, 2 ** 32 - 1, 2 ** 32, 2 ** 32 + 3, 2 ** 40 + 7, 2 ** 63, 2 ** 64 - 2, 2 ** 64 - 1]


@oracle_only("numerics.rng has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-RNG-3", "NUM-RNG-4", "NUM-RNG-5", "NUM-RNG-6", "NUM-RNG-7")
def test_draws_at_any_global_index(backend):
    """``random_bits``, ``uniform`` (f32, f64), ``normal`` and ``poisson`` at indices up to
    2^64 − 1, in any array shape and order: each element a function of (key, i) alone."""
    key = numerics.RNGKey(2024, 5)
    words = RNG.key_words(2024, 5)
    idx = np.array(BIG[::-1], np.uint64).reshape(1, -1)
    assert [int(v) for v in lib_rng.random_bits(key, idx).reshape(-1)] == [RNG.random_bits(words, i) for i in BIG[::-1]]
    u32 = lib_rng.uniform(key, idx, np.float32).reshape(-1)
    assert u32.dtype == np.float32 and [float(v) for v in u32] == [RNG.uniform_f32(words, i) for i in BIG[::-1]]
    u64 = lib_rng.uniform(key, idx, np.float64).reshape(-1)
    assert [float(v).hex() for v in u64] == [RNG.uniform_f64(words, i).hex() for i in BIG[::-1]]
    z = lib_rng.normal(key, idx, np.float64).reshape(-1)
    assert [float(v).hex() for v in z] == [RNG.normal(words, i).hex() for i in BIG[::-1]]
    for lam in (3.0, 250.0):
        p = lib_rng.poisson(key, idx, lam).reshape(-1)
        assert [int(v) for v in p] == [RNG.poisson(words, i, lam) for i in BIG[::-1]]
    lam = np.array([[0.1], [20.0]])
    p = lib_rng.poisson(key, np.arange(6, dtype=np.uint64).reshape(1, 6) * np.ones((2, 1), np.uint64), lam)
    assert p.dtype == np.int64 and [[int(v) for v in row] for row in p] == [
        [RNG.poisson(words, i, float(lam[r, 0])) for i in range(6)] for r in range(2)]


@oracle_only("numerics.rng has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-RNG-3", "NUM-RNG-5", "NUM-RNG-7")
def test_invalid_draws_are_errors(backend):
    key = numerics.RNGKey(1)
    for bad in (np.array([-1]), np.array([0.5]), np.array([2.0 ** 70])):
        with pytest.raises(TesseraError):
            lib_rng.random_bits(key, bad)
    with pytest.raises(TesseraError):
        lib_rng.uniform(key, np.arange(3), np.float16)
    for lam in (-1.0, math.nan, math.inf, 2.0 ** 53):
        with pytest.raises(TesseraError):
            lib_rng.poisson(key, np.arange(3), lam)


@oracle_only("numerics.rng has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-RNG-3")
def test_counter_spaces_are_disjoint(backend):
    """The spaces of NUM-RNG-3's table: the f32 bits and the f64 uniform of the same index
    read different blocks (words 2 and 3 of the counter select the space)."""
    key = numerics.RNGKey(8)
    words = RNG.key_words(8)
    i = np.arange(8, dtype=np.uint64)
    blocks = {space: [RNG.philox((n, 0, space, 0), words) for n in range(8)] for space in (0, 1, 2, 3)}
    bits = lib_rng.random_bits(key, i)
    assert [int(b) for b in bits] == [blocks[0][n // 4][n % 4] for n in range(8)]
    u64 = lib_rng.uniform(key, i, np.float64)
    assert [float(u) for u in u64] == [RNG.u53(*blocks[1][n // 2][2 * (n % 2):2 * (n % 2) + 2]) for n in range(8)]
    assert len({blocks[s][0] for s in blocks}) == 4
    assert RNG.philox((7, 0, 0, RNG.KEY_TAG), words)[:2] == RNG.fold(words, 7)


# -- whole tensors (NUM-RNG-8) ----------------------------------------------------------------------

@clause("NUM-RNG-8")
def test_whole_tensor_known_answers_on_the_backend(backend):
    """The spec's known answers with key 42 at ``i = 0 … 3``: ``op.rand`` (f64), ``op.randn``
    (f64) and ``op.poisson`` reproduce them; the f32 uniforms are the raw bits' top 24."""
    cases = {(c["draw"], c.get("lam")): c["values"] for c in golden("numerics_rng_draws")["cases"]}
    bits = [int(v, 16) for v in cases[("random_bits", None)]]
    assert_bits(run(backend, lambda: op.rand((4,), seed=42)), np.array([(b >> 8) * 2.0 ** -24 for b in bits],
                                                                        np.float32), "rand f32")
    assert_bits(run(backend, lambda: op.rand((2, 2), seed=42, dtype="f64")).reshape(-1),
                np.array([float.fromhex(v) for v in cases[("uniform_f64", None)]]), "rand f64")
    assert_bits(run(backend, lambda: op.randn((4,), seed=42, dtype="f64")),
                np.array([float.fromhex(v) for v in cases[("normal_f64", None)]]), "randn f64")
    for lam in (4, 1000):
        got = run(backend, lambda: op.poisson((4,), float(lam), seed=42))
        assert np.asarray(got).astype(np.int64).tolist() == cases[("poisson", lam)], lam
    words = RNG.key_words(42)
    assert [RNG.random_bits(words, i) for i in range(4)] == bits


@oracle_only("numerics.rand / randn / randpoisson has no backend entry point; the case checks the oracle's numerics "
             "library")
@clause("NUM-RNG-8")
def test_whole_tensor_functions_and_slices(backend):
    """``rand``/``randn``/``randpoisson`` index ``arange(prod(shape)).reshape(shape)`` (f32 by
    default): a slice drawn with its global indices equals the slice of the whole tensor."""
    key = numerics.RNGKey(42)
    for draw, single in ((numerics.rand, lib_rng.uniform), (numerics.randn, lib_rng.normal)):
        whole = draw(key, (6, 10))
        assert whole.dtype == np.float32 and whole.shape == (6, 10)
        idx = np.arange(60, dtype=np.uint64).reshape(6, 10)
        assert np.array_equal(single(key, idx[2:5, 3:9], np.float32), whole[2:5, 3:9])
    p = numerics.randpoisson(key, (3, 4), 4.0)
    assert p.dtype == np.int64 and p.reshape(-1)[:4].tolist() == [6, 1, 5, 3]


@clause("NUM-RNG-8")
@pytest.mark.parametrize("devices", [1, 2, 4, 8])
def test_sharded_draws_equal_the_unsharded_tensor(backend, devices):
    """A random tensor made on a mesh (``dist.tensor(init="randn")``) has the same global bits
    on every mesh: each device draws its block with the global indices."""
    from tessera_ref import dist
    from tessera_conformance import eager

    def draw(n):
        mesh = dist.Mesh(("tp",), range(n), (n,))
        return dist.tensor((16, 24), dist.ShardSpec((1,), ("tp",)), mesh, "f32", init="randn", seed=5).numpy()

    assert_bits(eager(backend, draw, devices), eager(backend, draw, 1), f"randn on {devices} devices")
