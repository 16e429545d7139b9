"""TILE-NUM: one rounding per scalar operation, mma as the fma chain of NUM-RED-1, the graph's
math and reductions, formats, IEEE min/max, canonical NaN and once-rounded conversions."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref import cp_async, kernel, op, tbarrier, tile, tshared
from tessera_ref.errors import KernelError
from tessera_ref.ir import tile as T
from tessera_ref.numerics import Policy
from tessera_conformance import ORACLE, assert_bits, clause, run

from .support import bits, dtype, fma_chain, launch, launch_module, round_to, warp_sum

_LANE_OPS = '''
@kernel
def k(X: F[n], Y: F[n], Z: F[n], P: mut F[n], Q: mut F[n], R: mut F[n]):
    i = tile.linear_id()
    P[i] = X[i] * Y[i] + Z[i]
    Q[i] = X[i] / Y[i] - Z[i]
    R[i] = min(X[i], Y[i]) * max(Y[i], Z[i])
'''


@clause("TILE-NUM-1", "TILE-NUM-2")
@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16", "f64"])
def test_every_scalar_operation_rounds_once(backend, fmt):
    """`a * b + c` is two roundings: the reference rounds the exact product, then the exact
    sum (each exact in float64 here, or rounded harmlessly: 53 >= 2p + 2)."""
    rng = np.random.default_rng(1)
    n = 256
    dt = dtype(fmt)
    x, y, z = (round_to(rng.standard_normal(n) * 4, fmt) for _ in range(3))
    if fmt == "f32":  # where an fma would differ: (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 exactly
        x[0] = y[0] = 1 + 2.0 ** -12
        z[0] = -(1 + 2.0 ** -11)
    k = kernel.from_source(_LANE_OPS.replace("F[", f"{fmt}["))
    out = [np.zeros(n, dt) for _ in range(3)]
    launch(backend, k, x, y, z, *out, grid=2, lanes=128)
    X, Y, Z = (a.astype(np.float64) for a in (x, y, z))
    r = lambda v: round_to(v, fmt).astype(np.float64)  # noqa: E731
    if fmt == "f64":
        want = [X * Y + Z, X / Y - Z, np.minimum(X, Y) * np.maximum(Y, Z)]
    else:
        want = [r(r(X * Y) + Z), r(r(X / Y) - Z), r(np.minimum(X, Y) * np.maximum(Y, Z))]
    for got, w in zip(out, want):
        assert_bits(got, round_to(w, fmt))
    if fmt == "f32":
        assert out[0][0] == 0.0  # not the fma's 2^-24


M, N, K = "M", "N", "K"
BM, BN, BK = 32, 32, 16


@kernel
def tiled_matmul(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]]):
    """C = A @ B: BM x BN output tiles, K walked BK at a time through shared memory."""
    m0 = tile.id(0) * BM
    n0 = tile.id(1) * BN
    sA = tshared.alloc[f32](BM, BK)
    sB = tshared.alloc[f32](BK, BN)
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(K, step=BK):
        cp_async.shared.global_(sA, A[m0:m0 + BM, k0:k0 + BK])
        cp_async.shared.global_(sB, B[k0:k0 + BK, n0:n0 + BN])
        cp_async.commit()
        cp_async.wait(0)
        tbarrier()
        acc += tile.mma(sA, sB, accum=f32)
        tbarrier()
    tile.store(C, index=(m0, n0), value=acc)


@clause("TILE-NUM-1")
@pytest.mark.parametrize("bk", [8, 16, 64])
def test_mma_is_the_fma_chain_in_k_order_for_any_tile_shape(backend, bk):
    """Sums pass 2^16, where f32 rounds multiples of 2^-8: the order shows in the bits."""
    rng = np.random.default_rng(7)
    a = (rng.integers(-2 ** 11, 2 ** 11, (64, 64)) / 16).astype(np.float32)
    b = (rng.integers(-2 ** 11, 2 ** 11, (64, 32)) / 16).astype(np.float32)
    c = np.zeros((64, 32), np.float32)
    launch(backend, tiled_matmul.specialize(BK=bk), a, b, c, grid=(2, 1), lanes=128)
    want = fma_chain(a, b).astype(np.float32)
    assert_bits(c, want)
    assert_bits(c, run(ORACLE, lambda a, b: op.matmul(a, b), a, b))
    assert not np.array_equal(want, (a.astype(np.float64) @ b).astype(np.float32))  # the order matters here


_NARROW_MMA = '''
@kernel
def k(A: FMT[32, 64], B: FMT[64, 32], C: mut OUT[32, 32]):
    a = tile.load(A, index=(0, 0), shape=(32, 64))
    b = tile.load(B, index=(0, 0), shape=(64, 32))
    acc = tile.zeros((32, 32), f32)
    acc += tile.mma(a, b, accum=f32)
    tile.store(C, index=(0, 0), value=acc)
'''


@clause("TILE-NUM-1", "TILE-NUM-2")
@pytest.mark.parametrize("fmt", ["f16", "bf16", "fp8_e4m3", "fp8_e5m2"])
def test_narrow_mma_accumulates_in_f32_and_rounds_once_into_storage(backend, fmt):
    """Products of these formats are exact in f32; the f32 fma chain, rounded once into the
    storage format, is op.matmul's result."""
    rng = np.random.default_rng(3)
    span = {"f16": 64, "bf16": 64, "fp8_e4m3": 6, "fp8_e5m2": 6}[fmt]
    a = round_to(rng.integers(-span, span + 1, (32, 64)) / 4, fmt)
    b = round_to(rng.integers(-span, span + 1, (64, 32)) / 4, fmt)
    k = kernel.from_source(_NARROW_MMA.replace("FMT", fmt).replace("OUT", fmt))
    c = np.zeros((32, 32), dtype(fmt))
    launch(backend, k, a, b, c, grid=1, lanes=64)
    assert_bits(c, round_to(fma_chain(a, b), fmt))
    assert_bits(c, run(ORACLE, lambda a, b: op.matmul(a, b), a, b))


def _math_kernel(fn, fmt, shape):
    kb = T.KernelBuilder("math", [("X", T.buffer(shape, fmt)), ("Y", T.buffer(shape, fmt), True)])
    X, Y = kb.params
    kb.frag_store(kb.subview(Y, [0, 0], shape), kb.unary(fn, kb.frag_load(kb.subview(X, [0, 0], shape))))
    return kb.finish()


@clause("TILE-NUM-1")
@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("fn", T.MATH_FNS)
def test_fragment_math_is_the_graph_op(backend, fn, fmt):
    shape = (2, 32)
    x = round_to(np.linspace(0.05, 3.9, 64).reshape(shape) * (1 if fn in ("log", "rsqrt") else (-1) ** np.arange(64).reshape(shape)), fmt)
    y = np.zeros_like(x)
    launch_module(backend, _math_kernel(fn, fmt, shape), [x, y], grid=1, lanes=32)
    graph_op = (lambda v: op.gelu(v, approximate="tanh")) if fn == "gelu_tanh" else getattr(op, fn)
    assert_bits(y, run(ORACLE, graph_op, x))


def _reduce_kernel(fn, shape):
    kb = T.KernelBuilder("red", [("X", T.buffer(shape, "f32")), ("Y", T.buffer((shape[0], 1), "f32"), True)])
    X, Y = kb.params
    kb.frag_store(kb.subview(Y, [0, 0], (shape[0], 1)), kb.reduce(kb.frag_load(kb.subview(X, [0, 0], shape)), fn, 1))
    return kb.finish()


@clause("TILE-NUM-1")
@pytest.mark.parametrize("fn", ["sum", "mean", "max", "min"])
def test_fragment_reduce_is_the_warp_order(backend, fn):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 100)) * 10.0 ** rng.integers(-3, 4, (4, 100))).astype(np.float32)
    y = np.zeros((4, 1), np.float32)
    launch_module(backend, _reduce_kernel(fn, x.shape), [x, y], grid=1, lanes=32)
    assert_bits(y, run(ORACLE, lambda v: getattr(op, fn)(v, axis=1, keepdims=True), x))
    s = warp_sum(x)
    want = {"sum": s, "mean": (s.astype(np.float64) / 100).astype(np.float32),
            "max": x.max(axis=1, keepdims=True), "min": x.min(axis=1, keepdims=True)}[fn]
    assert_bits(y, want)
    if fn == "sum":
        sequential = np.zeros((4, 1), np.float32)
        for j in range(100):
            sequential = sequential + x[:, j:j + 1]
        assert not np.array_equal(sequential, y)


@clause("TILE-NUM-2")
@pytest.mark.parametrize("fmt", ["int8", "fp4_e2m1", "e8m0"])
def test_other_formats_are_kernel_errors(backend, fmt):
    src = f"@kernel\ndef k(X: {fmt}[n], Y: mut f32[n]):\n    i = tile.lane_id()\n    Y[i] = 0.0\n"
    with pytest.raises(KernelError, match=fmt):
        k = kernel.from_source(src)
        launch(backend, k, np.zeros(4, np.uint8), np.zeros(4, np.float32), grid=1, lanes=4)


@clause("TILE-NUM-2")
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_is_computed_on_only_by_moving_comparing_and_mma(backend, fmt):
    src = f'''
@kernel
def k(X: {fmt}[32], Y: mut {fmt}[32], Z: mut {fmt}[32], W: mut {fmt}[32]):
    s = tshared.alloc[{fmt}](32)
    i = tile.lane_id()
    cp_async.shared.global(s, X[0:32])
    cp_async.commit()
    cp_async.wait(0)
    tbarrier()
    v = s[i]
    u = X[31 - i]
    w = u
    if v > u:
        w = v
    Y[i] = -v
    Z[i] = abs(u)
    W[i] = w
'''
    x = round_to(np.linspace(-6, 6, 32), fmt)
    outs = [np.zeros_like(x) for _ in range(3)]
    launch(backend, kernel.from_source(src), x, *outs, grid=1, lanes=32)
    u = x[::-1]
    assert_bits(outs[0], (bits(x) ^ 0x80).view(x.dtype))  # neg flips the sign bit
    assert_bits(outs[1], (bits(u) & 0x7F).view(x.dtype))
    assert_bits(outs[2], np.where(x.astype(np.float64) > u.astype(np.float64), x, u))
    bad = src.replace("Y[i] = -v", "Y[i] = v + u")
    with pytest.raises(KernelError, match=fmt):
        launch(backend, kernel.from_source(bad), x, *outs, grid=1, lanes=32)


_SPECIAL = [(-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (np.nan, 1.0), (1.0, np.nan), (-np.inf, np.nan),
            (np.inf, -np.inf), (2.0, -3.0)]


def _extremes(fmt, n):
    kb = T.KernelBuilder("extremes", [("X", T.buffer((1, n), fmt)), ("Y", T.buffer((1, n), fmt))]
                         + [(o, T.buffer((1, n), fmt), True) for o in ("MX", "MN", "FX", "FN")])
    X, Y, MX, MN, FX, FN = kb.params
    i = kb.lane_id()
    x, y = kb.load(X, [0, i]), kb.load(Y, [0, i])
    kb.store(MX, [0, i], kb.binary("max", x, y))
    kb.store(MN, [0, i], kb.binary("min", x, y))
    fx, fy = (kb.frag_load(kb.subview(B, [0, 0], (1, n))) for B in (X, Y))
    kb.frag_store(kb.subview(FX, [0, 0], (1, n)), kb.binary("max", fx, fy))
    kb.frag_store(kb.subview(FN, [0, 0], (1, n)), kb.binary("min", fx, fy))
    return kb.finish()


@clause("TILE-NUM-2")
@pytest.mark.parametrize("fmt", ["f32", "f64", "f16", "bf16"])
def test_min_and_max_are_ieee_minimum_and_maximum(backend, fmt):
    """−0 < +0 in either order; a NaN operand gives the canonical NaN (sign clear)."""
    x = round_to(np.array([[a for a, _ in _SPECIAL]]), fmt)
    y = round_to(np.array([[b for _, b in _SPECIAL]]), fmt)
    outs = [np.zeros_like(x) for _ in range(4)]
    launch_module(backend, _extremes(fmt, x.shape[1]), [x, y, *outs], grid=1, lanes=x.shape[1])
    nan = round_to(np.array([np.nan]), fmt)[0]
    want_max = round_to(np.array([[0.0, 0.0, -0.0, np.nan, np.nan, np.nan, np.inf, 2.0]]), fmt)
    want_min = round_to(np.array([[-0.0, -0.0, -0.0, np.nan, np.nan, np.nan, -np.inf, -3.0]]), fmt)
    assert not np.signbit(nan)
    for got, want in zip(outs, (want_max, want_min) * 2):
        assert_bits(got, want)


_NAN = '''
@kernel
def k(X: F[4], Y: mut F[4]):
    i = tile.lane_id()
    Y[i] = X[i] - X[(i + 1) % 4] * 1.0
'''


@clause("TILE-NUM-2")
@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16", "f64"])
def test_arithmetic_nans_are_the_canonical_quiet_nan(backend, fmt):
    """inf − inf, and NaNs of either sign or payload propagated, all give the sign-clear quiet NaN."""
    dt = dtype(fmt)
    neg_nan = (bits(round_to(np.array([np.nan]), fmt)) | (1 << (8 * dt.itemsize - 1))
               | 1).view(dt)  # −NaN with a payload bit
    x = np.concatenate([round_to(np.array([np.inf, np.inf]), fmt), neg_nan, round_to(np.array([1.0]), fmt)])
    y = np.zeros(4, dt)
    launch(backend, kernel.from_source(_NAN.replace("F[", f"{fmt}[")), x, y, grid=1, lanes=4)
    canonical = {"f32": 0x7FC00000, "f16": 0x7E00, "bf16": 0x7FC0, "f64": 0x7FF8000000000000}[fmt]
    assert (bits(y)[:3] == canonical).all()  # inf − inf, inf − (−NaN), (−NaN) − 1
    assert y[3] == -np.inf


def _convert_kernel(src, dst):
    """Lane stores of SRC values into a DST global buffer and a DST shared buffer (read back),
    and a SRC fragment stored into a DST buffer."""
    kb = T.KernelBuilder("convert", [("X", T.buffer((64,), src))]
                         + [(o, T.buffer((64,), dst), True) for o in ("Y", "Z", "F")])
    X, Y, Z, F = kb.params
    i = kb.lane_id()
    s = kb.alloc((64,), dst)
    kb.store(Y, [i], kb.load(X, [i]))
    kb.store(s, [i], kb.load(X, [i]))
    kb.barrier()
    kb.store(Z, [i], kb.load(s, [i]))
    kb.frag_store(kb.subview(F, [0], (64,)), kb.frag_load(kb.subview(X, [0], (64,))))
    return kb.finish()


CONVERSIONS = [("f32", "f16"), ("f32", "bf16"), ("f32", "fp8_e4m3"), ("f32", "fp8_e5m2"), ("f64", "f32"),
               ("f64", "bf16"), ("f16", "f32"), ("bf16", "f64")]


def _conversion_data(src):
    rng = np.random.default_rng(11)
    v = rng.standard_normal(64) * 10.0 ** rng.integers(-6, 6, 64)
    v[:6] = [1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30), 1e6, -1e6, 470.0, -6e4]
    return round_to(v, src)


@clause("TILE-NUM-2")
@pytest.mark.parametrize("src, dst", CONVERSIONS)
def test_storing_into_another_format_rounds_once_with_its_own_overflow(backend, src, dst):
    """Stores convert by NUM-CVT: nearest even from the exact value (f64 1 + 2^-8 + 2^-30 is
    bf16 1 + 2^-7, not the 1.0 of rounding through f32), an e4m3 overflow the NaN of its sign,
    others ±inf; widening is exact."""
    x = _conversion_data(src)
    outs = [np.zeros(64, dtype(dst)) for _ in range(3)]
    launch_module(backend, _convert_kernel(src, dst), [x, *outs], grid=1, lanes=64)
    want = round_to(x.astype(np.float64), dst)
    for got in outs:
        assert_bits(got, want)


_CONVERT = '''
@kernel
def k(X: SRC[n], Y: mut DST[n]):
    i = tile.lane_id()
    Y[i] = X[i]
'''


@clause("TILE-NUM-2", "TILE-FE-1")
@pytest.mark.parametrize("src, dst", [("f32", "f16")])
def test_a_python_kernel_lane_store_converts(backend, src, dst):
    x = _conversion_data(src)
    y = np.zeros(64, dtype(dst))
    launch(backend, kernel.from_source(_CONVERT.replace("SRC", src).replace("DST", dst)), x, y, grid=1, lanes=64)
    assert_bits(y, round_to(x.astype(np.float64), dst))


def _cast_kernel(src, policy, n):
    kb = T.KernelBuilder("cvt", [("X", T.buffer((n,), src)), ("Y", T.buffer((n,), policy.storage.name), True)])
    X, Y = kb.params
    i = kb.linear_id()
    kb.if_(kb.binary("lt", i, n), then=lambda: kb.store(Y, [i], kb.cast(kb.load(X, [i]), policy)) or [])
    return kb.finish()


@clause("TILE-NUM-3")
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rup", "rdown"])
@pytest.mark.parametrize("overflow", ["native", "saturate"])
@pytest.mark.parametrize("src, dst", [("f16", "fp8_e4m3"), ("f32", "bf16"), ("f16", "f32"), ("bf16", "bf16")])
def test_cast_is_the_graph_cast_with_the_policys_modes(backend, src, dst, rounding, overflow):
    """Every f16/bf16 code (f32: every value with 16 low zero bits: all bf16 values), NaN
    payloads of both signs included; the expected codes are the oracle's cast, and a few are
    checked by hand."""
    n = 1 << 16
    codes = np.arange(n, dtype=np.uint32)
    x = (codes << 16).view(np.float32) if src == "f32" else codes.astype(np.uint16).view(dtype(src))
    policy = Policy(dst, rounding=rounding, overflow=overflow)
    y = np.zeros(n, dtype(dst))
    launch_module(backend, _cast_kernel(src, policy, n), [x, y], grid=n // 256, lanes=256)
    assert_bits(y, run(ORACLE, lambda v: op.cast(v, dst, rounding=rounding, overflow=overflow), x))
    yb = bits(y)
    if src == "f16" and dst == "f32":  # 0x7E01 / 0xFE23: the canonical NaN of the sign, not the payload
        assert yb[0x7E01] == 0x7FC00000 and yb[0xFE23] == 0xFFC00000
        assert yb[0x7C00] == (0x7F7FFFFF if overflow == "saturate" else 0x7F800000)
    if src == "f16" and dst == "fp8_e4m3":  # 0x5FD0 = 500: over 448
        toward_zero = rounding in ("rtz", "rdown")
        assert yb[0x5FD0] == (0x7E if overflow == "saturate" or toward_zero else 0x7F)


@clause("TILE-RNG-1")
@pytest.mark.parametrize("fmt", ["f32", "f64"])
def test_uniform_is_the_counter_rng_of_the_element_index(backend, fmt):
    """Lane values are NUM-RNG-5's uniforms of the element index, whatever the launch shape;
    the first four f64 values under RNGKey(42) are the spec's (NUM-RNG-8), written out here."""
    from tessera_ref.numerics import rng
    n = 1000
    kb = T.KernelBuilder("u", [("Y", T.buffer((n,), fmt), True)])
    i = kb.linear_id()
    kb.if_(kb.binary("lt", i, n), then=lambda: kb.store(kb.params[0], [i], kb.uniform(i, fmt, seed=42)) or [])
    module = kb.finish()
    outs = []
    for grid, lanes in ((8, 128), (32, 32)):
        y = np.zeros(n, dtype(fmt))
        launch_module(backend, module, [y], grid=grid, lanes=lanes)
        outs.append(y)
    assert_bits(outs[0], outs[1])
    assert_bits(outs[0], rng.uniform(rng.RNGKey(42), np.arange(n, dtype=np.uint64), dtype(fmt)))
    if fmt == "f64":
        assert [float.hex(float(v)) for v in outs[0][:4]] == ["0x1.d1c7c71134f38p-3", "0x1.fba0c203474b2p-2",
                                                            "0x1.4aa2c383823bcp-1", "0x1.c13352a27805dp-1"]
