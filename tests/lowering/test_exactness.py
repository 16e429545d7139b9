"""LOWER-EXACT-1: lowered Tile IR programs give the Graph IR interpreter's bits."""
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, bits, lowered

from tessera_ref import op
from tessera_ref.ir import parse_module
from tessera_ref.errors import LoweringError, TileRaceError
from tessera_ref.interp.tile import run
from tessera_ref.numerics.reduce import dot_tiled

RNG = np.random.default_rng(7)


def _adversarial(shape, dtype=np.float32):
    """Values of very different magnitudes and signs: sums depend on their order."""
    span = 4 if dtype == np.float32 else 2  # f16 products stay finite
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


def test_gemm_accumulates_into_c():
    a, b, c = _adversarial((64, 64)), _adversarial((64, 64)), _adversarial((64, 64))
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
    x[2, :] = -np.inf  # an all -inf row gives NaN (GRAPH-SOFTMAX-1)
    got, want, _, _ = lowered(lambda x: op.softmax(x), x)
    assert np.array_equal(np.isnan(got[0]), np.isnan(want[0]))
    ok = ~np.isnan(want[0])
    assert np.array_equal(bits(got[0][ok]), bits(want[0][ok]))


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


def test_planted_missing_butterfly_barrier_is_a_race():
    x = _adversarial((4, 64))
    _, _, _, program = lowered(lambda x: op.sum(x, axis=1), x)
    text = str(program.tile)
    i = text.index('"tessera.tile.load"', text.index('"tessera.tile.store"'))  # the first butterfly read
    j = text.index('"tessera.tile.barrier"', i)
    broken = parse_module(text[:text.rindex("\n", 0, j)] + text[text.index("\n", j):])
    with pytest.raises(TileRaceError):
        run(broken, [x.reshape(4, 64, 1), np.zeros((4, 1), np.float32)], grid=(1,), lanes=128, checks=True)
