"""The compiled dot-product kernels (NUM-RED-1) against independent references.

References: an exact-fma chain on ``fractions.Fraction`` rounded by
``numerics_reference.round_f32`` (finite values), and a chain of the NumPy elementwise
:func:`~tessera_ref.numerics.arith.fma` (tested against rationals in ``test_arith``), which
also gives IEEE's inf/NaN results. Bits must match exactly, and must not depend on the
number of numba threads.
"""
import os
import pathlib
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from determinism import digests_across_environments
from tessera_ref.numerics import kernels, reduce
from tessera_ref.numerics.arith import fma
from tessera_ref.numerics.reduce import dot_canonical

import numerics_reference as R

ULP1 = 2.0 ** -23  # spacing of f32 at 1


def identical(x, y) -> bool:
    """Same dtype, shape and bits (NaNs included: both sides return the canonical NaN)."""
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def fma_chain(a, b, c=None, fmt="f32"):
    """``acc = fma(a_k, b_k, acc)`` for k ascending with the elementwise NumPy fma, batched."""
    dtype = np.float64 if fmt == "f64" else np.float32
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    acc = np.zeros(shape, dtype)
    if c is not None:
        acc[...] = c
    for k in range(a.shape[-1]):
        acc = fma(a[..., :, k, None], b[..., None, k, :], acc, fmt)
    return acc


def fraction_chain(a, b, c=None):
    """The same chain in exact rationals, each step rounded once to f32 (finite values)."""
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    out = np.empty((M, N), np.float32)
    for i in range(M):
        for j in range(N):
            acc = np.float32(0.0 if c is None else c[i, j])
            for k in range(K):
                acc = R.round_f32(Fraction(float(a[i, k])) * Fraction(float(b[k, j]))
                                  + Fraction(float(acc)))
            out[i, j] = acc
    return out


def spread(rng, shape, lo=-30, hi=30):
    """f32 values over many binades: products with bits far below the running sum."""
    return (rng.standard_normal(shape) * np.exp2(rng.integers(lo, hi, shape))).astype(np.float32)


def test_random_f32_matches_the_fma_chain():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((37, 70)).astype(np.float32), rng.standard_normal((70, 45)).astype(np.float32)
    assert identical(dot_canonical(a, b), fma_chain(a, b))
    a, b, c = spread(rng, (37, 70)), spread(rng, (70, 45)), spread(rng, (37, 45))
    got = dot_canonical(a, b, c=c)
    assert identical(got, fma_chain(a, b, c))
    two_roundings = c.copy()  # teeth: multiply-then-add in f32 gives other bits here
    for k in range(70):
        two_roundings = two_roundings + a[:, k, None] * b[None, k, :]
    assert not identical(got, two_roundings)


@pytest.mark.parametrize("lo,hi,clo,chi", [(-30, 30, -30, 30),      # inexact f64 sums
                                           (-100, -60, -149, -125),  # subnormal results
                                           (20, 60, -10, 10)])       # large, mixed signs
def test_adversarial_f32_matches_exact_rationals(lo, hi, clo, chi):
    rng = np.random.default_rng(lo + 200)
    a, b, c = spread(rng, (5, 40), lo, hi), spread(rng, (40, 6), lo // 2, hi // 2), spread(rng, (5, 6), clo, chi)
    assert identical(dot_canonical(a, b, c=c), fraction_chain(a, b, c))


def test_ties_at_the_f32_midpoint_round_once():
    # acc has an odd last bit; a·b is half its ulp minus ulp·2^-47, so the exact sum lies just
    # below the f32 midpoint: one rounding goes down to acc, while rounding the f64 sum (which
    # lands on the midpoint) and then to f32 ties to the even neighbour above
    rng = np.random.default_rng(3)
    n = 400
    acc = spread(rng, (n,), -140, 120)
    acc = (acc.view(np.uint32) | 1).view(np.float32)  # odd last bit, both signs, subnormals too
    half_ulp = np.abs(np.spacing(acc).astype(np.float64)) / 2
    scale = np.exp2(np.floor(np.log2(half_ulp) / 2) + rng.integers(-5, 6, n))  # a, b normal
    sign = rng.choice([-1.0, 1.0], n)
    a = ((1 + ULP1) * scale * sign).astype(np.float32)
    b = ((1 - ULP1) * half_ulp / scale * np.sign(acc) * sign).astype(np.float32)
    assert (a.astype(np.float64) * b == np.sign(acc) * half_ulp * (1 - ULP1 ** 2)).all()
    got = dot_canonical(a[:, None, None], b[:, None, None], c=acc[:, None, None])[:, 0, 0]
    want = np.array([R.round_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
                     for x, y, z in zip(a, b, acc)], np.float32)
    assert identical(got, want)
    naive = (a.astype(np.float64) * b + acc).astype(np.float32)  # f64 add, then f32: twice
    normal = np.abs(acc) >= np.float32(2.0 ** -126)  # there the f64 sum is inexact
    assert normal.sum() > n // 2 and (naive[normal] != got[normal]).all()
    assert identical(got[normal], acc[normal])


def test_cancellation_and_signed_zeros():
    # one 1x2 @ 2x1 product per batch element; (1, -0) as the second pair leaves acc unchanged
    x = np.float32(3e-30)
    a = np.float32([[1, 1], [1, 1], [-0.0, 1], [1, -1], [-1, 1]])[:, None, :]
    b = np.float32([[x, -x], [-0.0, -0.0], [-0.0, -0.0], [x, x], [x, -0.0]])[:, :, None]
    c = np.float32([-0.0, -0.0, -0.0, -0.0, x])[:, None, None]
    got = dot_canonical(a, b, c=c)
    assert identical(got, fma_chain(a, b, c))
    assert (got == 0).all()  # exact cancellation of nonzero terms gives +0; -0 + -0 is -0
    assert np.signbit(got).ravel().tolist() == [False, True, False, False, False]


def test_inf_nan_and_overflow():
    inf, nan, big = np.float32(np.inf), np.float32(np.nan), np.float32(3e38)
    a = np.float32([[inf, 0], [inf, -inf], [big, big], [big, -big], [nan, 1], [1, inf]])
    b = np.float32([[0, 1], [1, 1]])
    got = dot_canonical(a, b)
    want = np.float32([[nan, inf], [nan, nan], [big, inf], [-big, 0], [nan, nan], [inf, inf]])
    assert identical(got, want)  # inf·0 and inf − inf are NaN (canonical), f32 overflow is inf
    assert identical(got, fma_chain(a, b))
    assert identical(dot_canonical(np.float32([[big, big, -big]]), np.ones((3, 1), np.float32)),
                     np.float32([[inf]]))
    rng = np.random.default_rng(4)
    x, y = spread(rng, (9, 30), 50, 120), spread(rng, (30, 11), 0, 70)
    x[rng.random(x.shape) < 0.05] = np.inf
    y[rng.random(y.shape) < 0.05] = -np.inf
    y[rng.random(y.shape) < 0.05] = 0
    assert identical(dot_canonical(x, y), fma_chain(x, y))


@pytest.mark.parametrize("fma_mode", ["", "emulate"])  # the platform's fma, the emulation
def test_batched_broadcast_and_strided_inputs(fma_mode, monkeypatch):
    monkeypatch.setenv(kernels.FMA_ENV, fma_mode)
    rng = np.random.default_rng(5)
    a, b, c = spread(rng, (3, 1, 7, 20)), spread(rng, (4, 20, 9)), spread(rng, (7, 9))
    got = dot_canonical(a, b, c=c)
    assert got.shape == (3, 4, 7, 9)
    assert identical(got, fma_chain(a, b, c))
    assert identical(got[2, 1], dot_canonical(a[2, 0], b[1], c=c))
    at = np.ascontiguousarray(a[0, 0].T).T  # Fortran order
    bb = np.broadcast_to(b[0], (2, 20, 9))  # read-only, zero strides
    assert identical(dot_canonical(at, bb), fma_chain(a[0, 0], np.stack([b[0]] * 2)))
    assert identical(dot_canonical(a[0, 0, :, ::2], b[0, ::2]), fma_chain(a[0, 0, :, ::2], b[0, ::2]))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.int8])
def test_narrow_operands(dtype):
    rng = np.random.default_rng(6)
    a, b = (spread(rng, (11, 50), -2, 3) * 4).astype(dtype), (spread(rng, (50, 8), -2, 3) * 4).astype(dtype)
    assert identical(dot_canonical(a, b), fma_chain(a, b))


def test_f32_operands_with_f64_accumulation():
    rng = np.random.default_rng(7)
    a, b = spread(rng, (6, 40), -60, 60), spread(rng, (40, 5), -60, 60)
    got = dot_canonical(a, b, accum="f64")
    assert got.dtype == np.float64
    assert identical(got, fma_chain(a, b, fmt="f64"))


def test_empty_axes():
    c = np.float32([[1, -0.0, 2]])
    assert identical(dot_canonical(np.zeros((1, 0), np.float32), np.zeros((0, 3), np.float32), c=c), c)
    assert dot_canonical(np.zeros((0, 4), np.float32), np.zeros((4, 3), np.float32)).shape == (0, 3)
    assert dot_canonical(np.zeros((2, 0, 4), np.float32), np.zeros((4, 3), np.float32)).shape == (2, 0, 3)


def test_kernels_update_out_in_place():
    rng = np.random.default_rng(8)
    A, B, C = spread(rng, (2, 3, 10), -8, 8), spread(rng, (2, 10, 4), -8, 8), spread(rng, (2, 3, 4), -8, 8)
    for hardware in (True, False):  # the packed kernel's fma, then the emulation
        out = C.copy()
        kernels.dot_rows(out, A, B, exact_products=False, hardware=hardware)
        assert identical(out, fma_chain(A, B, C))
    A, B, C = A.astype(np.float16), B.astype(np.float16), C.astype(np.float16)  # exact products
    for hardware in (True, False):  # fma, then multiply-then-add
        out = C.astype(np.float32)
        kernels.dot_rows(out, A.astype(np.float32), B.astype(np.float32), exact_products=True,
                         hardware=hardware)
        assert identical(out, fma_chain(A, B, C))


def test_one_thread_and_many_give_the_same_bits():
    rng = np.random.default_rng(9)
    a, b = spread(rng, (2, 130, 256)), spread(rng, (256, 161))
    assert a.size * b.shape[-1] >= reduce._PARALLEL_MIN_FMAS  # runs on all threads
    whole = dot_canonical(a, b)
    pieces = [dot_canonical(a[:, i:i + 9], b) for i in range(0, 130, 9)]  # each on one thread
    assert identical(whole, np.concatenate(pieces, axis=1))


_SCRIPT = """
import hashlib, os
os.environ["NUMBA_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]  # before numba loads
import numba
import numpy as np
from tessera_ref.numerics.reduce import _PARALLEL_MIN_FMAS, dot_canonical
assert numba.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
rng = np.random.default_rng(9)
def spread(shape):
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape))).astype(np.float32)
a, b, c = spread((2, 130, 256)), spread((256, 161)), spread((130, 161))
assert a.size * b.shape[-1] >= _PARALLEL_MIN_FMAS
h = hashlib.sha256()
for r in (dot_canonical(a, b, c=c), dot_canonical(a.astype(np.float16), b.astype(np.float16)),
          dot_canonical(a, b, accum="f64")):
    h.update(r.tobytes())
print(h.hexdigest())
"""


def test_bits_do_not_depend_on_the_numba_thread_count():
    first, second = digests_across_environments(_SCRIPT)  # 1 thread, then 2
    assert first == second


# -- the platform's fma and its fallback --------------------------------------------------------

def test_hard_cases_are_what_exact_rationals_say():
    # the self-test's hand-computed table, checked independently: finite rows by rationals
    # (sign of a zero by hand), inf/NaN rows by IEEE's rules
    for a, b, c, want in kernels._HARD_CASES.view(np.float32):
        if np.isfinite([a, b, c]).all():
            exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
            if exact == 0:
                expected_sign = np.signbit(a) != np.signbit(b) and np.signbit(c)  # -0 only from -0 + -0
                assert want == 0 and np.signbit(want) == expected_sign
            elif abs(exact) >= Fraction(2) ** 128:
                assert want == np.inf * np.sign(float(exact))
            else:
                assert R.round_f32(exact).view(np.uint32) == want.view(np.uint32)
        else:
            with np.errstate(all="ignore"):
                ieee = np.float64(a) * np.float64(b) + np.float64(c)  # exact in f64 here
            assert identical(np.float32(ieee) if not np.isnan(ieee) else np.float32(np.nan), want)
    a, b, c, want = kernels._HARD_CASES.T.copy().view(np.float32)
    with np.errstate(all="ignore"):
        twice = a * b + c  # multiply, then add: other bits in the cases the table marks
    assert (twice.view(np.uint32) != want.view(np.uint32)).sum() >= 3


def test_the_packed_kernel_gives_the_hard_cases():
    a, b, c, want = kernels._HARD_CASES.T.copy().view(np.float32)
    for hardware in (True, False):  # the platform's fma, then the emulation
        got = []
        for t in range(a.size):  # one 1x1x1 product per case
            out = c[t].reshape(1, 1, 1).copy()
            kernels.dot_rows(out, a[t].reshape(1, 1, 1), b[t].reshape(1, 1, 1),
                             exact_products=False, hardware=hardware)
            got.append(out.ravel()[0])
        assert identical(reduce.canonical_nan(np.float32(got)), want)


def test_the_self_test_passes_here_and_rejects_a_double_rounding_fma(monkeypatch):
    assert kernels._self_test()
    exact_kernel = kernels.gemm_packed
    monkeypatch.setattr(kernels, "gemm_packed", lambda o, a, b, fused: exact_kernel(o, a, b, False))
    assert not kernels._self_test()  # multiply-then-add: two roundings


def test_an_inexact_fma_falls_back_to_the_emulation_and_warns_once(monkeypatch):
    monkeypatch.setattr(kernels, "_self_test", lambda: False)
    kernels._hardware_fma_checked.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="emulates each f32 fma"):
            assert not kernels.hardware_fma()
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not kernels.hardware_fma()  # decided once: no second warning
        rng = np.random.default_rng(11)
        a, b, c = spread(rng, (13, 40)), spread(rng, (40, 35)), spread(rng, (13, 35))
        assert identical(dot_canonical(a, b, c=c), fma_chain(a, b, c))
    finally:
        kernels._hardware_fma_checked.cache_clear()


def test_the_environment_switch_forces_the_emulation(monkeypatch):
    monkeypatch.setenv(kernels.FMA_ENV, "emulate")
    assert not kernels.hardware_fma()
    monkeypatch.delenv(kernels.FMA_ENV)
    assert kernels.hardware_fma()


_F32_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -149, -(2.0 ** -149), 2.0 ** -126,
                 3.4e38, -3.4e38, 1.0, -1.0]


@st.composite
def _operands(draw):
    """Shapes around the micro-tile (K = 0 included) and f32 values over every binade, with
    subnormals, signed zeros, infinities and NaNs."""
    nb, M, K, N = (draw(st.integers(1, 2)), draw(st.integers(0, 19)), draw(st.integers(0, 12)),
                   draw(st.integers(0, 70)))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)

    def values(shape):
        with np.errstate(over="ignore"):  # overflowing draws are infinities, wanted too
            x = spread(rng, shape, -150, 128)
        pick = rng.random(shape) < draw(st.sampled_from([0.0, 0.05, 0.3]))
        x[pick] = rng.choice(np.float32(_F32_SPECIALS), int(pick.sum()))
        return x
    return values((nb, M, K)), values((nb, K, N)), values((nb, M, N))


@settings(max_examples=60, deadline=None)
@given(_operands())
def test_packed_kernel_matches_the_emulation(ops):
    A, B, C = ops
    with np.errstate(all="ignore"):
        hw, emulated = C.copy(), C.copy()
        kernels.dot_rows(hw, A, B, exact_products=False, hardware=True)
        kernels.dot_rows(emulated, A, B, exact_products=False, hardware=False)
    assert identical(reduce.canonical_nan(hw), reduce.canonical_nan(emulated))


@settings(max_examples=40, deadline=None)
@given(_operands())
def test_packed_kernel_with_exact_products_matches_the_fma_chain(ops):
    with np.errstate(all="ignore"):
        A, B, C = (x.astype(np.float16).astype(np.float32) for x in ops)  # exact products
        want = fma_chain(A, B, C)
        for hardware in (True, False):
            out = C.copy()
            kernels.dot_rows(out, A, B, exact_products=True, hardware=hardware)
            assert identical(reduce.canonical_nan(out), want)


def test_threads_split_tiles_without_changing_bits():
    rng = np.random.default_rng(13)
    A, B, C = spread(rng, (2, 61, 90)), spread(rng, (2, 90, 75)), spread(rng, (2, 61, 75))
    outs = []
    for threads in (1, 2, 3, 64):  # 64: more threads than tiles
        out = C.copy()
        kernels.dot_rows(out, A, B, exact_products=False, threads=threads)
        outs.append(out)
    assert all(identical(o, outs[0]) for o in outs) and identical(outs[0], fma_chain(A, B, C))


def test_the_emulation_switch_gives_the_same_bits_in_a_fresh_process():
    plain = digests_across_environments(_SCRIPT)[0]
    env = dict(os.environ, **{kernels.FMA_ENV: "emulate"},
               PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]) + os.pathsep
               + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == plain


# -- compiled bf16/f16 conversions against NumPy's and ml_dtypes' -----------------------------

def _hard_f32_bits() -> np.ndarray:
    """Every exponent with the mantissas around f16's and bf16's rounding points (ties to odd
    and even, one ulp off), both signs, plus random bit patterns (NaNs included)."""
    low = [0, 1, 0xFFF, 0x1000, 0x1001, 0x2000, 0x3000, 0x2FFF, 0x3001, 0x7FFF, 0x8000, 0x8001,
           0x18000, 0x17FFF, 0x7FFFFF, 0x7FF000, 0x7FEFFF, 0x7F8000, 0x7F7FFF]
    grid = ((np.arange(256, dtype=np.uint32) << 23)[:, None] | np.uint32(low)[None, :]).ravel()
    rng = np.random.default_rng(12)
    rand = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([grid, grid | np.uint32(0x80000000), rand])


@pytest.mark.parametrize("name,dtype,max_code", [("f16", np.float16, 0x7BFF),
                                                 ("bf16", ml_dtypes.bfloat16, 0x7F7F)])
def test_compiled_encode_matches_the_libraries(name, dtype, max_code):
    from tessera_ref.numerics import formats
    from tessera_ref.numerics.convert import encode

    x = _hard_f32_bits().view(np.float32)
    nan = np.isnan(x)
    with np.errstate(all="ignore"):
        ref = x.astype(dtype).view(np.uint16)  # NumPy's / ml_dtypes' RNE conversion
    got = encode(x, name)
    assert (got[~nan] == ref[~nan]).all()
    fmt = formats.get_format(name)
    assert (got[nan] == (fmt.nan_code | (x[nan].view(np.uint32) >> 16 & 0x8000))).all()
    saturated = encode(x, name, overflow="saturate")
    inf = ~nan & ((ref & 0x7FFF) == fmt.inf_code)
    assert inf.sum() > 5 and (saturated[inf] == (max_code | (ref[inf] & 0x8000))).all()
    assert (saturated[~inf] == got[~inf]).all()


@pytest.mark.parametrize("name,dtype", [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
def test_compiled_decode_of_every_code(name, dtype):
    from tessera_ref.numerics.convert import decode

    codes = np.arange(1 << 16, dtype=np.uint16)
    with np.errstate(all="ignore"):
        ref = codes.view(dtype).astype(np.float32)
    got = decode(codes.reshape(256, 256), name).ravel()
    nan = np.isnan(ref)
    assert identical(got[~nan], ref[~nan])
    assert np.isnan(got[nan]).all() and (np.signbit(got[nan]) == np.signbit(ref[nan])).all()


@pytest.mark.parametrize("dtype,idt", [(np.float32, np.int32), (np.float64, np.int64)])
def test_magnitude_range_skips_zeros_and_specials(dtype, idt):
    inf = int(np.array(np.inf, dtype).view(idt))
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -3.0, 2.0, -1e-300, 1e-45], dtype)
    finite = x[np.isfinite(x) & (x != 0)]
    lo, hi = kernels.magnitude_range(x.view(idt), inf)
    got = np.array([lo, hi], idt).view(dtype)
    assert got.tolist() == [np.abs(finite).min(), np.abs(finite).max()]
    none = np.array([0.0, -0.0, np.nan, -np.inf], dtype)
    assert kernels.magnitude_range(none.view(idt), inf) == (inf, 0)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_widening_into_f32_is_exact_with_canonical_nans(dtype):
    from tessera_ref.numerics.arith import to_accum

    codes = np.arange(1 << 16, dtype=np.uint16)
    values = codes.view(dtype).reshape(256, 256)[:, ::3]  # strided too
    got = to_accum(values, "f32")
    with np.errstate(all="ignore"):
        ref = values.astype(np.float32)  # NumPy's / ml_dtypes' widening
    nan = np.isnan(ref)
    assert identical(got[~nan], ref[~nan])
    sign = (values.view(np.uint16)[nan].astype(np.uint32) & 0x8000) << 16
    assert (got[nan].view(np.uint32) == (np.uint32(0x7FC00000) | sign)).all()
