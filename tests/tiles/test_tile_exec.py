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
    # fma chain in k order: 2^24, then 2^24 + 1 -> 2^24 (ties to even), then 0
    assert c[0, 0] == 0.0


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
    result = fill_prefix.tune(dict(args=[np.zeros(512, np.float32)], grid=1, lanes=128), "H100",
                              progress=False, cache=False)
    assert "BM=128 stages=2" in str(result)


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
