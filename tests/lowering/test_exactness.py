"""LOWER-EXACT-1: lowered Tile IR programs give the Graph IR interpreter's bits."""
import ml_dtypes
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, bits, lowered

from tessera_ref import op
from tessera_ref.ir import parse_module
from tessera_ref.errors import LoweringError, TileBarrierError, TileRaceError
from tessera_ref.interp.tile import run
from tessera_ref.numerics.reduce import dot_tiled

RNG = np.random.default_rng(7)
BF16, E4M3, E5M2 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
#: the narrow storage formats (f32 accumulation) of LOWER-EXACT-1
NARROW = [np.float16, BF16, E4M3, E5M2]


def _adversarial(shape, dtype=np.float32):
    """Values of very different magnitudes and signs: sums depend on their order."""
    span = {np.float32: 4, BF16: 4, np.float16: 2, E5M2: 2}.get(dtype, 1)  # f16/fp8 products stay finite
    x = RNG.standard_normal(shape) * 10.0 ** RNG.integers(-span, span + 1, size=shape)
    return x.astype(dtype)


@pytest.mark.parametrize("directives", [
    dict(tile=(32, 64, 32), stages=3),
    dict(tile=(32, 64, 32), stages=2, padding=1),
    dict(tile=(64, 32, 16), async_copy=False),
    dict(tile=(32, 32, 96), stages=4, swizzle="xor"),
    dict(shared=False),
])
def test_matmul_matches_graph_and_the_tiled_reference(directives):
    a, b = _adversarial((64, 96)), _adversarial((96, 128))
    got, want, reports, _ = lowered(lambda a, b: op.matmul(a, b), a, b, directives=directives)
    assert_same_bits(got, want)
    assert np.array_equal(bits(got[0]), bits(dot_tiled(a, b, tile_m=16, tile_n=16, tile_k=8)))
    assert reports[0].findings == [] and reports[0].coverage == {"D": (64 * 128, 64 * 128)}


@pytest.mark.parametrize("dtype", [np.float32] + NARROW)
def test_gemm_accumulates_into_c(dtype):
    """The fma chain starts from C converted into accum (a narrow C is not rounded again)."""
    a, b, c = (_adversarial((64, 64), dtype) for _ in range(3))
    got, want, _, _ = lowered(lambda a, b, c: op.gemm(a, b, c), a, b, c, directives=dict(tile=(32, 32, 16)))
    assert_same_bits(got, want)


def test_matmul_on_small_integers_is_exact():
    a = RNG.integers(-8, 8, (32, 48)).astype(np.float32)
    b = RNG.integers(-8, 8, (48, 32)).astype(np.float32)
    got, _, _, _ = lowered(lambda a, b: op.matmul(a, b), a, b, directives=dict(tile=(16, 16, 16)))
    assert np.array_equal(got[0], (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis,keepdims", [(1, False), (0, False), ((1, 2), True), (None, False)])
def test_axis_reductions(name, axis, keepdims):
    x = _adversarial((3, 37, 40))
    got, want, reports, _ = lowered(lambda x: getattr(op, name)(x, axis=axis, keepdims=keepdims), x)
    assert_same_bits(got, want)
    assert all(r.findings == [] for r in reports)


@pytest.mark.parametrize("shape,axis", [((3, 0), 1), ((0, 5), 0), ((2, 0, 3), 1)])
def test_reductions_over_an_empty_axis_give_the_identity(shape, axis):
    """A row of length 0: the lane folds and the butterfly combine identities only, so sum
    is −0, max −inf, min +inf and mean −0 / 0, the canonical NaN (hand-derived values)."""
    x = np.ones(shape, np.float32)
    expected = {"sum": 0x80000000, "max": 0xFF800000, "min": 0x7F800000, "mean": 0x7FC00000}
    for name, pattern in expected.items():
        got, want, reports, _ = lowered(lambda x: getattr(op, name)(x, axis=axis), x)
        assert_same_bits(got, want)
        assert got[0].size > 0 and (bits(got[0]) == pattern).all() and reports[0].findings == []


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_a_reduction_over_no_axes_is_elementwise(name):
    """``axis=()`` reduces nothing (GRAPH: a row of one element each): −0 ⊕ x = x, x / 1 = x."""
    x = _adversarial((3, 40))
    x[0, :2] = [-0.0, 0.0]
    got, want, reports, _ = lowered(lambda x: getattr(op, name)(x, axis=()), x)
    assert_same_bits(got, want)
    assert_same_bits(got[0], x)  # −0 ⊕ x = x, signed zeros included
    assert reports[0].findings == []


def test_the_data_tells_reduction_orders_apart():
    """A sequential f32 sum of this row differs from the canonical one the kernel reproduces."""
    x = _adversarial((4, 200))
    got, want, _, _ = lowered(lambda x: op.sum(x, axis=1), x)
    assert_same_bits(got, want)
    sequential = np.zeros(4, np.float32)
    for j in range(200):
        sequential = sequential + x[:, j]
    assert not np.array_equal(bits(sequential), bits(got[0]))


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_softmax(axis, dtype):
    x = (RNG.standard_normal((6, 70)) * 4).astype(dtype)
    got, want, reports, _ = lowered(lambda x: op.softmax(x, axis=axis), x)
    assert_same_bits(got, want)
    assert reports[0].findings == []


def test_softmax_rows_with_inf():
    x = (RNG.standard_normal((4, 33)) * 4).astype(np.float32)
    x[1, 5] = -np.inf
    x[2, :] = -np.inf  # an all -inf row gives NaN (GRAPH-SOFTMAX-1): the canonical NaN in both
    got, want, _, _ = lowered(lambda x: op.softmax(x), x)
    assert_same_bits(got, want)
    assert np.isnan(got[0][2]).all() and not np.signbit(got[0][2]).any()


@pytest.mark.parametrize("name,params", [("layernorm_safe", 0), ("layernorm_safe", 2), ("rmsnorm_safe", 1)])
def test_normalizations(name, params):
    x = (RNG.standard_normal((6, 70)) * 3 + 1).astype(np.float32)
    extra = [RNG.standard_normal(70).astype(np.float32) for _ in range(params)]
    got, want, _, _ = lowered(lambda x, *p: getattr(op, name)(x, *p), x, *extra)
    assert_same_bits(got, want)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum"])
@pytest.mark.parametrize("dtype,vectorize", [(np.float32, 1), (np.float32, 4), (np.float16, 4)])
def test_elementwise(name, dtype, vectorize):
    a, b = _adversarial((5, 77), dtype), _adversarial((5, 77), dtype) + dtype(0.5)
    got, want, reports, _ = lowered(lambda a, b: getattr(op, name)(a, b), a, b, directives=dict(vectorize=vectorize))
    assert_same_bits(got, want)
    assert reports[0].coverage["y"] == (385, 385)


def test_a_whole_program_lowers_kernel_by_kernel():
    a = _adversarial((64, 64))
    got, want, reports, program = lowered(lambda a, b: op.softmax(op.matmul(a, b) * 2.0), a, a)
    assert_same_bits(got, want)
    assert [r.kernel.rsplit("_", 1)[-1] for r in reports] == ["matmul", "mul", "softmax"]


def test_unsupported_ops_are_named():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(LoweringError, match="transpose"):
        lowered(lambda x: op.transpose(x), x)


def _without_first(text: str, needle: str, after: str) -> str:
    start = text.index(after)
    at = text.index(needle, start)
    line_start = text.rindex("\n", 0, at)
    return text[:line_start] + text[text.index("\n", at):]


def test_planted_missing_barrier_in_the_pipeline_is_a_race():
    """The cp.async pipeline's barrier is what makes it correct: remove it, the checker objects."""
    a = _adversarial((64, 64))
    _, _, _, program = lowered(lambda a, b: op.matmul(a, b), a, a, directives=dict(tile=(32, 32, 16), stages=2))
    text = _without_first(str(program.tile), '"tessera.tile.barrier"', '"tessera.tile.for"')
    broken = parse_module(text)
    out = np.zeros((64, 64), np.float32)
    with pytest.raises(TileRaceError):
        run(broken, [a, a, out], grid=(2, 2), lanes=128, checks=True)


def test_the_butterfly_is_warp_shuffles_without_barriers_or_shared_memory():
    x = _adversarial((4, 64))
    _, _, reports, program = lowered(lambda x: op.sum(x, axis=1), x)
    text = str(program.tile)
    assert text.count('"tessera.tile.shfl_xor"') == 5
    assert '"tessera.tile.barrier"' not in text and '"tessera.tile.alloc"' not in text
    c = reports[0].counters
    assert c.barriers == 0 and c.smem_requests == 0 and c.shuffles == 5 * 4  # 4 rows, one warp each


def test_planted_partial_warp_in_the_butterfly_is_a_finding():
    """Launched with 112 lanes, the fourth warp has 16 lanes: its shuffles read lanes that do
    not exist, which the checker reports at the shuffle's line."""
    x = _adversarial((4, 64))
    _, _, _, program = lowered(lambda x: op.sum(x, axis=1), x)
    with pytest.raises(TileBarrierError, match=r"shfl_xor by 16.*not by lanes 112-127"):
        run(program.tile, [x.reshape(4, 64, 1), np.zeros((4, 1), np.float32)], grid=(1,), lanes=112, checks=True)


# ---------------------------------------------------------------------------------------
# narrow storage (bf16, fp8) with f32 accumulation

@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("directives", [dict(tile=(32, 64, 32), stages=3, padding=1), dict(shared=False)])
def test_narrow_matmul_matches_graph(dtype, directives):
    a, b = _adversarial((64, 96), dtype), _adversarial((96, 128), dtype)
    got, want, reports, _ = lowered(lambda a, b: op.matmul(a, b), a, b, directives=directives)
    assert_same_bits(got, want)
    assert got[0].dtype == dtype and reports[0].findings == []


@pytest.mark.parametrize("dtype", [BF16, E4M3, E5M2])
def test_narrow_matmul_on_small_integers_is_the_rounded_integer_product(dtype):
    """An independent reference: small integers make every f32 partial sum exact, so the
    result is the integer product rounded once (f64 -> f32 exact, -> storage one RNE)."""
    span = {BF16: 16, E4M3: 3, E5M2: 4}[dtype]  # e4m3: |sums| <= 32·9 < 448, no overflow
    a = RNG.integers(-span, span + 1, (32, 32)).astype(dtype)
    b = RNG.integers(-span, span + 1, (32, 32)).astype(dtype)
    got, _, _, _ = lowered(lambda a, b: op.matmul(a, b), a, b, directives=dict(tile=(16, 16, 16)))
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(bits(got[0]), bits(exact.astype(np.float32).astype(dtype)))
    assert (got[0].astype(np.float64) != exact).any()  # some results do round


def test_fp8_overflow_follows_each_format():
    """Results beyond the format's range: e4m3 has no infinity (NaN), e5m2 overflows to inf
    (NUM-CVT, native overflow) — in the kernel's epilogue exactly as in the graph."""
    for dtype, special in ((E4M3, np.isnan), (E5M2, np.isinf)):
        a = np.full((16, 64), 32.0).astype(dtype)
        b = np.full((64, 16), 32.0 if dtype == E4M3 else 448.0).astype(dtype)
        got, want, _, _ = lowered(lambda a, b: op.matmul(a, b), a, b)
        assert_same_bits(got, want)
        assert special(got[0].astype(np.float32)).all()


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_narrow_axis_reductions(dtype, name):
    x = _adversarial((3, 37, 40), dtype)
    got, want, reports, _ = lowered(lambda x: getattr(op, name)(x, axis=(1, 2), keepdims=True), x)
    assert_same_bits(got, want)
    assert all(r.findings == [] for r in reports)


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_softmax_and_normalizations(dtype):
    x = (RNG.standard_normal((6, 70)) * 3 + 1).astype(dtype)
    w, bias = (RNG.standard_normal(70).astype(dtype) for _ in range(2))
    for fn, args in ((lambda x: op.softmax(x), (x,)), (lambda x, w, b: op.layernorm_safe(x, w, b), (x, w, bias)),
                     (lambda x, w: op.rmsnorm_safe(x, w), (x, w))):
        got, want, _, _ = lowered(fn, *args)
        assert_same_bits(got, want)
    # an independent float64 softmax agrees to the storage format's rounding
    got, _, _, _ = lowered(lambda x: op.softmax(x), x)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    ulp = float(ml_dtypes.finfo(dtype).eps)
    assert np.all(np.abs(got[0].astype(np.float64) - ref) <= ulp * np.abs(ref) + ml_dtypes.finfo(dtype).smallest_subnormal)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_narrow_elementwise(dtype, name):
    a, b = _adversarial((5, 77), dtype), _adversarial((5, 77), dtype)
    got, want, _, _ = lowered(lambda a, b: getattr(op, name)(a, b), a, b, directives=dict(vectorize=4))
    assert_same_bits(got, want)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_elementwise_max_min_of_signed_zeros_and_nan(dtype):
    """GRAPH-EW-1's maximum/minimum through the lowering: −0 < +0 in either order, NaN wins."""
    a = np.array([-0.0, 0.0, np.nan, 1.0, -np.inf] * 26, np.float32).astype(dtype)
    b = np.array([0.0, -0.0, 1.0, np.nan, np.nan] * 26, np.float32).astype(dtype)
    for name in ("maximum", "minimum"):
        got, want, _, _ = lowered(lambda a, b: getattr(op, name)(a, b), a, b)
        assert_same_bits(got, want)


# ---------------------------------------------------------------------------------------
# batched and transposed matmuls (LOWER-MATMUL-4)

@pytest.mark.parametrize("sa,sb,flags,directives", [
    ((3, 64, 96), (3, 96, 64), {}, dict(tile=(32, 32, 32))),
    ((2, 1, 64, 32), (3, 32, 64), {}, dict(tile=(32, 32, 16), stages=3)),  # batch axes broadcast
    ((64, 32), (2, 3, 32, 64), {}, dict(shared=False, tile=(32, 32, 16))),  # a 2-D operand, batched b
    ((64, 64), (64, 128), dict(transpose_a=True), dict(tile=(32, 64, 16), stages=3)),
    ((64, 64), (128, 64), dict(transpose_b=True), dict(tile=(32, 32, 32), padding=1)),
    ((2, 64, 64), (2, 128, 64), dict(transpose_a=True, transpose_b=True), dict(async_copy=False)),
])
def test_batched_and_transposed_matmul(sa, sb, flags, directives):
    a, b = _adversarial(sa), _adversarial(sb)
    got, want, reports, _ = lowered(lambda a, b: op.matmul(a, b, **flags), a, b, directives=directives)
    assert_same_bits(got, want)
    assert reports[0].findings == [] and reports[0].coverage["D"][0] == want[0].size
    # independently: the tiled NUM-RED-1 reference on the explicitly transposed, broadcast operands
    ta = np.swapaxes(a, -1, -2) if flags.get("transpose_a") else a
    tb = np.swapaxes(b, -1, -2) if flags.get("transpose_b") else b
    batch = want[0].shape[:-2]
    ta, tb = np.broadcast_to(ta, batch + ta.shape[-2:]), np.broadcast_to(tb, batch + tb.shape[-2:])
    for idx in np.ndindex(*batch):
        ref = dot_tiled(np.ascontiguousarray(ta[idx]), np.ascontiguousarray(tb[idx]), tile_m=16, tile_n=16, tile_k=8)
        assert np.array_equal(bits(got[0][idx]), bits(ref))


@pytest.mark.parametrize("sa,sb,flags,tile", [
    ((96, 64), (96, 128), dict(transpose_a=True), [64, 64, 32]),  # M=64, K=96: not a's [-2:]
    ((64, 96), (80, 96), dict(transpose_b=True), [64, 40, 32]),  # N=80 is b's rows
    ((2, 3, 96, 48), (3, 40, 96), dict(transpose_a=True, transpose_b=True), [48, 40, 32]),
    ((2, 1, 48, 80), (3, 80, 24), {}, [48, 24, 20]),
])
def test_default_schedule_fits_batched_and_transposed_matmuls(sa, sb, flags, tile):
    """SCHED-FIT-1 sizes the tile from (M, N, K) with the transposes applied, so the default
    schedule lowers and runs these end to end with the Graph IR interpreter's bits."""
    a, b = _adversarial(sa), _adversarial(sb)
    got, want, reports, program = lowered(lambda a, b: op.matmul(a, b, **flags), a, b)
    assert_same_bits(got, want)
    assert reports[0].findings == [] and reports[0].coverage["D"][0] == want[0].size
    kop = next(o for o in program.func.regions[0].entry if o.name == "tessera.schedule.kernel")
    assert list(kop.attributes["tile"]) == tile


def test_batched_bf16_gemm_with_a_broadcast_c():
    a, b = _adversarial((2, 64, 64), BF16), _adversarial((2, 64, 64), BF16)
    c = _adversarial((64, 64), BF16)
    got, want, _, _ = lowered(lambda a, b, c: op.gemm(a, b, c, transpose_b=True), a, b, c,
                              directives=dict(tile=(32, 32, 32)))
    assert_same_bits(got, want)


def test_transposed_operand_without_shared_memory_is_a_lowering_error():
    a = _adversarial((64, 64))
    with pytest.raises(LoweringError, match="transpose_a=True.*through shared memory.*use_shared_memory"):
        lowered(lambda a, b: op.matmul(a, b, transpose_a=True), a, a, directives=dict(shared=False))


def test_c_broadcast_inside_the_matrix_is_a_lowering_error():
    a, bias = _adversarial((64, 64)), _adversarial((64,))
    with pytest.raises(LoweringError, match=r"C tensor<64xf32> must end in the result's matrix shape \[64, 64\]"):
        lowered(lambda a, b, c: op.gemm(a, b, c), a, a, bias)


def test_empty_results_are_a_lowering_error_and_k_0_lowers():
    x = np.ones((0, 64), np.float32)
    with pytest.raises(LoweringError, match=r"matmul: the result tensor<0x64xf32> has no elements"):
        lowered(lambda a, b: op.matmul(a, b), x, np.ones((64, 64), np.float32))
    got, want, _, _ = lowered(lambda a, b: op.matmul(a, b), np.ones((8, 0), np.float32), np.ones((0, 32), np.float32))
    assert_same_bits(got, want)  # K = 0: no mma, the +0 accumulator
    assert not np.signbit(got[0]).any() and (got[0] == 0).all()
