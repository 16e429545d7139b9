"""The tile interpreter's results (TILE-EXEC-*, TILE-NUM-1): lanes, masks, loops, cp.async, mma."""
import numpy as np
import pytest
from tile_dsl import AXPY_DB, SAXPY
from tile_kernels import fill_prefix, matmul

from tessera_ref import kernel, op
from tessera_ref.errors import KernelError


def _f16_axpy(alpha, x, y):
    """alpha*x + y with each operation rounded once to f16 (float64 holds the exact values)."""
    prod = (np.float64(alpha) * x.astype(np.float64)).astype(np.float16)
    return (prod.astype(np.float64) + y.astype(np.float64)).astype(np.float16)


def test_saxpy_masks_the_tail_lanes():
    k = kernel.from_source(SAXPY)
    x = np.linspace(-3, 3, 1000, dtype=np.float32)
    y = np.full(1000, 0.1, np.float32)
    want = (np.float64(np.float32(0.7)) * x).astype(np.float32).astype(np.float64) + y
    report = k(x, y, np.float32(0.7), grid=8, lanes=128)
    assert np.array_equal(y, want.astype(np.float32))
    assert report.coverage == {"y": (1000, 1000)}
    assert report.findings == []


def test_double_buffered_axpy_processes_every_chunk():
    k = kernel.from_source(AXPY_DB.replace("TRAILING", "tbarrier()"))
    rng = np.random.default_rng(1)
    X = rng.standard_normal(1024).astype(np.float16)
    Y = rng.standard_normal(1024).astype(np.float16)
    want = _f16_axpy(np.float16(1.5), X, Y)
    report = k(X, Y, np.float16(1.5), grid=1, lanes=128)
    assert np.array_equal(Y.view(np.uint16), want.view(np.uint16))
    assert report.coverage["Y"] == (1024, 1024) and report.findings == []
    assert report.counters.barriers == 2 * 8 + 1


@pytest.mark.parametrize("bk", [16, 32, 64])
def test_tiled_matmul_is_bit_identical_to_op_matmul(bk):
    rng = np.random.default_rng(bk)
    a = (rng.standard_normal((128, 192)) * 1e3).astype(np.float32)
    b = rng.standard_normal((192, 64)).astype(np.float32)
    c = np.zeros((128, 64), np.float32)
    report = matmul.specialize(BK=bk)(a, b, c, grid=(2, 1), lanes=128)
    want = np.asarray(op.matmul(a, b))
    assert np.array_equal(c.view(np.uint32), want.view(np.uint32))
    assert report.counters.flops == 2 * 128 * 192 * 64


def test_tiled_matmul_rounds_like_a_sequential_fma_chain():
    """An independent check of the order: one output element by Python fmas in float64
    arithmetic that is exact here (small integers), against a catastrophic-cancellation case."""
    a = np.zeros((64, 64), np.float32)
    b = np.zeros((64, 64), np.float32)
    a[0, :3] = [2.0**24, 1.0, -(2.0**24)]
    b[:3, 0] = 1.0
    c = np.zeros((64, 64), np.float32)
    matmul.specialize(BK=32)(a, b, c, grid=(1, 1), lanes=64)
    # fma chain in k order: 2^24, then 2^24 + 1 -> 2^24 (ties to even), then 0 (reversed: 1)
    assert c[0, 0] == 0.0


def test_tiled_matmul_equals_an_independent_fma_chain_on_random_data():
    """Each fma by float64: a, b are multiples of 2^-4 below 2^7, so products and partial sums
    are multiples of 2^-8 below 2^25 — exact in float64 — and casting to float32 rounds once
    (an fma). The sums pass 2^16, where float32 must round, so the order shows in the bits."""
    rng = np.random.default_rng(7)
    a = (rng.integers(-2**11, 2**11, (64, 256)) / 16).astype(np.float32)
    b = (rng.integers(-2**11, 2**11, (256, 64)) / 16).astype(np.float32)
    want = np.zeros((64, 64), np.float32)
    for k in range(256):
        want = (want.astype(np.float64) + np.outer(a[:, k], b[k]).astype(np.float64)).astype(np.float32)
    c = np.zeros((64, 64), np.float32)
    matmul(a, b, c, grid=(1, 1), lanes=128)
    assert np.array_equal(c.view(np.uint32), want.view(np.uint32))
    assert not np.array_equal(want, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32))


def test_non_uniform_loop_bound_is_an_error():
    src = '''
@kernel
def bad(Y: mut f32[n]):
    i = tile.lane_id()
    for j in range(i):
        Y[i] = 1.0
'''
    with pytest.raises(KernelError, match=r"the loop end differs between lanes.*\[at <tessera>:5\]"):
        kernel.from_source(src)(np.zeros(4, np.float32), grid=1, lanes=4)


def test_store_into_a_non_mut_buffer_is_an_error():
    src = '''
@kernel
def bad(Y: f32[n]):
    Y[tile.lane_id()] = 1.0
'''
    with pytest.raises(KernelError, match="not declared mut"):
        kernel.from_source(src)(np.zeros(4, np.float32), grid=1, lanes=4)


def test_arguments_are_checked_against_the_annotations():
    k = kernel.from_source(SAXPY)
    with pytest.raises(KernelError, match="dtype float32"):
        k(np.zeros(4), np.zeros(4, np.float32), 1.0)
    with pytest.raises(KernelError, match="n=4"):
        k(np.zeros(4, np.float32), np.zeros(5, np.float32), 1.0)


def test_fragment_softmax_is_bit_identical_to_op_softmax():
    """Fragments: elementwise ops broadcast, tile.reduce follows NUM-RED-2, exp is NUM-MATH-3."""
    from tessera_ref.interp.tile import run
    from tessera_ref.ir import tile as T

    kb = T.KernelBuilder("softmax", [("X", T.buffer((8, 64), "f32")), ("Y", T.buffer((8, 64), "f32"), True)])
    X, Y = kb.params
    x = kb.frag_load(kb.subview(X, [0, 0], (8, 64)))
    e = kb.unary("exp", kb.binary("sub", x, kb.reduce(x, "max", 1)))
    kb.frag_store(kb.subview(Y, [0, 0], (8, 64)), kb.binary("div", e, kb.reduce(e, "sum", 1)))
    a = (np.random.default_rng(5).standard_normal((8, 64)) * 30).astype(np.float32)
    y = np.zeros_like(a)
    run(kb.finish(), [a, y], lanes=64)
    want = np.asarray(op.softmax(a, axis=-1))
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
    # and not by accident: an f64 NumPy softmax rounded to f32 differs in some element
    e64 = np.exp(a.astype(np.float64) - a.max(axis=1, keepdims=True))
    assert not np.array_equal((e64 / e64.sum(axis=1, keepdims=True)).astype(np.float32), y)


def test_seed_004_swizzled_f16_gemm_accumulates_in_f32():
    """Seed 004 §2.6: xor-swizzled f16 shared tiles, C += tile.mma(sA, sB, accum=f32). Small
    integers keep every product and sum exact, so the reference is the integer product."""
    src = '''
@kernel
def gemm(A: f16[M, K], B: f16[K, N], C: mut f32[M, N]):
    sA = tshared.alloc[f16](BM, BK, swizzle="xor")
    sB = tshared.alloc[f16](BK, BN, swizzle="xor")
    C_acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(K, step=BK):
        cp_async.shared.global(sA, A[0:BM, k0:k0+BK])
        cp_async.shared.global(sB, B[k0:k0+BK, 0:BN])
        cp_async.commit()
        cp_async.wait(0)
        tbarrier()
        C_acc += tile.mma(sA, sB, accum=f32)
        tbarrier()
    tile.store(C, index=(0, 0), value=C_acc)
'''
    k = kernel.from_source(src, constants={"BM": 32, "BN": 64, "BK": 64})
    rng = np.random.default_rng(7)
    a = rng.integers(-8, 9, (32, 128))
    b = rng.integers(-8, 9, (128, 64))
    C = np.zeros((32, 64), np.float32)
    report = k(a.astype(np.float16), b.astype(np.float16), C, grid=1, lanes=128)
    assert np.array_equal(C, (a @ b).astype(np.float32))
    assert report.findings == []


def test_python_autotune_decorator_specializes_each_configuration():
    from tessera_ref.frontend.kernel import AutotunedKernel

    assert isinstance(fill_prefix, AutotunedKernel)
    x = np.zeros(512, np.float32)
    for config, k in fill_prefix.variants():
        x[:] = 0
        k(x, grid=1, lanes=128)
        assert (x[:config["BM"]] == config["stages"]).all() and (x[config["BM"]:] == 0).all()



def test_autotune_delegates_the_sweep_to_the_autotuner():
    """Every configuration runs specialized: fill_prefix stores BM floats (4·BM bytes of
    HBM writes, whole sectors), so the BM=128 ones are the fastest (memory-bound)."""
    result = fill_prefix.tune(dict(args=[np.zeros(512, np.float32)], grid=1, lanes=128), "H100",
                              progress=False, cache=False)
    written = {(t.config["BM"], t.config["stages"]): t.details["hbm_bytes"] for t in result.trials}
    assert written == {(128, 2): 512, (128, 3): 512, (256, 2): 1024, (256, 3): 1024}
    assert result.best["BM"] == 128


@pytest.mark.parametrize("fn", ["exp", "log", "tanh", "rsqrt", "sigmoid", "erf"])
def test_fragment_math_is_bit_identical_to_the_graph_op(fn):
    from tessera_ref.interp.tile import run
    from tessera_ref.ir import tile as T

    kb = T.KernelBuilder("f", [("X", T.buffer((4, 32), "f16")), ("Y", T.buffer((4, 32), "f16"), True)])
    X, Y = kb.params
    kb.frag_store(kb.subview(Y, [0, 0], (4, 32)), kb.unary(fn, kb.frag_load(kb.subview(X, [0, 0], (4, 32)))))
    x = (np.random.default_rng(3).random((4, 32)) * 4 + 0.01).astype(np.float16)
    y = np.zeros_like(x)
    run(kb.finish(), [x, y], lanes=32)
    want = np.asarray(getattr(op, fn)(x))
    assert np.array_equal(y.view(np.uint16), want.view(np.uint16))


def _bits(x):
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


# operand pairs whose IEEE 754-2019 maximum/minimum differ from a naive comparison: signed
# zeros in both orders, NaN on either side, infinities
_SPECIAL = [(-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (np.nan, 1.0), (1.0, np.nan), (-np.inf, np.nan),
            (np.inf, -np.inf), (2.0, -3.0)]


def _extreme_kernel(fmt, n):
    """Lane values and fragments: MX[i] = max(X[i], Y[i]), MN[i] = min(...), FX/FN the same
    computed on [1, n] fragments."""
    from tessera_ref.ir import tile as T

    kb = T.KernelBuilder("extremes", [("X", T.buffer((1, n), fmt)), ("Y", T.buffer((1, n), fmt))]
                         + [(o, T.buffer((1, n), fmt), True) for o in ("MX", "MN", "FX", "FN")])
    X, Y, MX, MN, FX, FN = kb.params
    i = kb.lane_id()
    x, y = kb.load(X, [0, i]), kb.load(Y, [0, i])
    kb.store(MX, [0, i], kb.binary("max", x, y))
    kb.store(MN, [0, i], kb.binary("min", x, y))
    fx, fy = (kb.frag_load(kb.subview(B, [0, 0], (1, n))) for B in (X, Y))
    kb.barrier()
    kb.frag_store(kb.subview(FX, [0, 0], (1, n)), kb.binary("max", fx, fy))
    kb.frag_store(kb.subview(FN, [0, 0], (1, n)), kb.binary("min", fx, fy))
    return kb.finish()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, "bf16"])
def test_float_max_min_are_the_graph_maximum_and_minimum(dtype):
    """TILE-NUM-1: Tile IR max/min are op.maximum/op.minimum bit for bit (−0 < +0 in either
    operand order, NaN wins and is the canonical NaN)."""
    from tessera_ref.interp.tile import run
    from tessera_ref.numerics import get_format

    dtype = get_format(dtype).dtype
    x = np.array([[a for a, _ in _SPECIAL]]).astype(dtype)
    y = np.array([[b for _, b in _SPECIAL]]).astype(dtype)
    outs = [np.zeros_like(x) for _ in range(4)]
    run(_extreme_kernel(get_format(dtype).name, x.shape[1]), [x, y, *outs], lanes=x.shape[1])
    want_max, want_min = np.asarray(op.maximum(x, y)), np.asarray(op.minimum(x, y))
    for got, want in zip(outs, (want_max, want_min) * 2):
        assert np.array_equal(_bits(got), _bits(want))
    # hand-derived: max(−0, +0) = max(+0, −0) = +0, min(+0, −0) = −0, NaN with the sign clear
    assert list(np.signbit(outs[0][0, :3])) == [False, False, True]
    assert list(np.signbit(outs[1][0, :3])) == [True, True, True]
    assert np.isnan(outs[0][0, 3:6]).all() and not np.signbit(outs[0][0, 3:6]).any()
    # and np.maximum/np.minimum alone would not do: on equal zeros they return one operand
    naive_max, naive_min = np.maximum(x[0, :2], y[0, :2]), np.minimum(x[0, :2], y[0, :2])
    assert np.signbit(naive_max).any() or not np.signbit(naive_min).all()


def test_bf16_lane_arithmetic_is_one_rounding_in_bf16():
    """bf16 values computed on in bf16 (no cast): each operation is the exact result
    rounded once to bf16. Products of bf16 values and sums of close magnitudes are exact
    in f32, so the reference is the exact f64 value -> f32 (exact) -> bf16 (one RNE)."""
    import ml_dtypes

    src = '''
@kernel
def fma2(X: bf16[n], Y: bf16[n], P: mut bf16[n], S: mut bf16[n]):
    i = tile.linear_id()
    P[i] = X[i] * Y[i]
    S[i] = X[i] + Y[i]
'''
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(256) * 4).astype(ml_dtypes.bfloat16)
    y = (rng.standard_normal(256) * 4).astype(ml_dtypes.bfloat16)
    p, s = np.zeros_like(x), np.zeros_like(x)
    kernel.from_source(src)(x, y, p, s, grid=2, lanes=128)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    for got, exact in ((p, x64 * y64), (s, x64 + y64)):
        want = exact.astype(np.float32).astype(ml_dtypes.bfloat16)
        assert np.array_equal(_bits(got), _bits(want))
    assert (p.astype(np.float64) != x64 * y64).any()  # and the products do need rounding


def test_fp8_values_are_stored_but_not_computed_on():
    import ml_dtypes

    src = '''
@kernel
def bad(X: fp8_e4m3[n], Y: mut fp8_e4m3[n]):
    i = tile.linear_id()
    Y[i] = X[i] + X[i]
'''
    x = np.ones(32, ml_dtypes.float8_e4m3fn)
    with pytest.raises(KernelError, match="fp8_e4m3 is a storage format.*cast the values to f32"):
        kernel.from_source(src)(x, np.zeros_like(x), grid=1, lanes=32)


def test_bf16_constants_are_rounded_once_from_the_double():
    """1 + 2^-8 + 2^-30 lies just above a bf16 midpoint: rounded once it is 1 + 2^-7;
    rounded through f32 (as ml_dtypes converts a double) it would tie to 1.0."""
    import ml_dtypes

    from tessera_ref.interp.tile import run
    from tessera_ref.ir import tile as T

    v = 1 + 2.0 ** -8 + 2.0 ** -30
    kb = T.KernelBuilder("c", [("Y", T.buffer((2,), "bf16"), True), ("s", "bf16")])
    Y, s = kb.params
    kb.store(Y, [0], kb.const(v, "bf16"))
    kb.if_(kb.binary("eq", kb.lane_id(), 0), then=lambda: kb.store(Y, [1], s) or [])
    y = np.zeros(2, ml_dtypes.bfloat16)
    run(kb.finish(), [y, v], lanes=1)
    assert y.astype(np.float64).tolist() == [1 + 2.0 ** -7] * 2
    assert float(np.float64(v).astype(ml_dtypes.bfloat16)) == 1.0  # the double rounding avoided
