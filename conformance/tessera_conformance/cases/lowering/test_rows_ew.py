"""LOWER-ROWS-1 (row reductions in the warp order, softmax, normalizations) and LOWER-EW-1
(elementwise kernels, vectorized and coalesced)."""
import numpy as np
import pytest

from tessera_ref import op
from tessera_ref.errors import TileBarrierError
from tessera_conformance import assert_bits, assert_close, clause

from ..tiles.support import (bits, counters, dtype, findings, global_sectors, launch_module, part, round_to,
                             tile_error, warp_sum)
from .support import adversarial, graph, lowered, tile_funcs

RNG = np.random.default_rng(13)


def _rows(x, axis):
    """``x`` as [O, L, I] rows (LOWER-PLAN-1), then [O·I, L] for the reference."""
    axes = (axis,) if isinstance(axis, int) else tuple(range(x.ndim)) if axis is None else axis
    lo, hi = min(axes), max(axes) + 1
    o, l = int(np.prod(x.shape[:lo])), int(np.prod(x.shape[lo:hi]))
    return x.reshape(o, l, -1).transpose(0, 2, 1).reshape(-1, l)


def reference(name, x, axis):
    """NUM-RED-2 computed here: the warp-order sum (mean: one exact division), max and min."""
    rows = _rows(x, axis)
    if name in ("sum", "mean"):
        s = warp_sum(rows)[:, 0].astype(np.float64)
        r = s / rows.shape[1] if name == "mean" else s
        return round_to(round_to(r, "f32").astype(np.float64), {np.float64: "f64"}.get(x.dtype.type, "f32"))
    return getattr(np, name)(rows.astype(np.float64), axis=1).astype(np.float32)


@clause("LOWER-ROWS-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("shape, axis", [((6, 200), 1), ((40, 3), 0), ((3, 37, 5), (1, 2)), ((4, 70), None)])
def test_reductions_in_the_warp_order(backend, name, shape, axis):
    x = adversarial(RNG, shape)
    f = lambda x: getattr(op, name)(x, axis=axis)  # noqa: E731
    got, reports, _ = lowered(backend, f, x)
    assert_bits(got, graph(f, x))
    assert_bits(got[0].reshape(-1), reference(name, x, axis).reshape(-1))
    assert all(findings(backend, r) == [] for r in reports)


@clause("LOWER-ROWS-1")
def test_the_data_tells_the_orders_apart():
    """These rows' sequential f32 sums differ from the warp order's (so the cases above see it)."""
    x = adversarial(RNG, (6, 200))
    sequential = np.zeros(6, np.float32)
    for j in range(200):
        sequential = sequential + x[:, j]
    assert not np.array_equal(bits(sequential), bits(warp_sum(x)[:, 0]))


@clause("LOWER-ROWS-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("fmt", ["f16", "bf16", "fp8_e4m3"])
def test_narrow_rows_fold_in_f32_and_round_once(backend, fmt):
    x = round_to(RNG.standard_normal((5, 90)) * 3, fmt)
    got, _, _ = lowered(backend, lambda x: op.sum(x, axis=1), x)
    assert_bits(got[0], round_to(warp_sum(x)[:, 0].astype(np.float64), fmt))


@clause("LOWER-ROWS-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("shape, axis", [((3, 0), 1), ((0, 5), 0), ((2, 0, 3), 1)])
def test_an_empty_row_combines_identities(backend, shape, axis):
    """sum −0, max −inf, min +inf, mean −0 ⊘ 0: the canonical NaN."""
    x = np.ones(shape, np.float32)
    for name, pattern in {"sum": 0x80000000, "max": 0xFF800000, "min": 0x7F800000, "mean": 0x7FC00000}.items():
        f = lambda x: getattr(op, name)(x, axis=axis)  # noqa: E731
        got, _, _ = lowered(backend, f, x)
        assert got[0].size and (bits(got[0]) == pattern).all(), name
        assert_bits(got, graph(f, x))


def _softmax64(x, axis=-1):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@clause("LOWER-ROWS-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("fmt, axis", [("f32", -1), ("f32", 0), ("f16", -1), ("bf16", -1)])
def test_softmax(backend, fmt, axis):
    x = round_to(RNG.standard_normal((6, 70)) * 4, fmt)
    x[1, 5] = -np.inf
    f = lambda x: op.softmax(x, axis=axis)  # noqa: E731
    got, reports, _ = lowered(backend, f, x)
    assert_bits(got, graph(f, x))
    eps = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}[fmt]
    assert_close(got[0], _softmax64(x, axis), rel=4 * eps)
    assert findings(backend, reports[0]) == []


@clause("LOWER-ROWS-1", "LOWER-EXACT-1")
def test_an_all_minus_inf_row_is_the_canonical_nan(backend):
    x = adversarial(RNG, (4, 33))
    x[2] = -np.inf
    got, _, _ = lowered(backend, lambda x: op.softmax(x), x)
    assert (bits(got[0][2]) == 0x7FC00000).all()
    assert_bits(got, graph(lambda x: op.softmax(x), x))


@clause("LOWER-ROWS-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("name, params", [("layernorm_safe", 0), ("layernorm_safe", 2), ("rmsnorm_safe", 0),
                                          ("rmsnorm_safe", 1)])
def test_normalizations(backend, name, params):
    x = (RNG.standard_normal((6, 70)) * 3 + 1).astype(np.float32)
    extra = [RNG.standard_normal(70).astype(np.float32) for _ in range(params)]
    f = lambda x, *p: getattr(op, name)(x, *p)  # noqa: E731
    got, _, _ = lowered(backend, f, x, *extra)
    assert_bits(got, graph(f, x, *extra))
    x64 = x.astype(np.float64)
    c = x64 - x64.mean(axis=1, keepdims=True) if name == "layernorm_safe" else x64
    ref = c / np.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5)
    if params:
        ref = ref * extra[0]
    if params == 2:
        ref = ref + extra[1]
    assert_close(got[0], ref, rel=1e-5)


@clause("LOWER-ROWS-1", "TILE-WARP-1")
def test_the_butterfly_is_warp_shuffles_and_needs_whole_warps(backend):
    """Five shuffles and no barrier; launched with a partial last warp (112 lanes), the
    shuffles read lanes that do not exist, which is reported (a divergent warp)."""
    x = adversarial(RNG, (4, 64))
    _, _, program = lowered(backend, lambda x: op.sum(x, axis=1), x)
    text = str(program.tile)
    assert text.count('"tessera.tile.shfl_xor"') == 5 and '"tessera.tile.barrier"' not in text
    with tile_error(backend, TileBarrierError, "lanes 112-127"):
        launch_module(backend, program.tile, [x.reshape(4, 64, 1), np.zeros((4, 1), np.float32)], grid=1,
                      lanes=112, checks=True)


# -- elementwise ------------------------------------------------------------------------------

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


@clause("LOWER-EW-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16", "fp8_e5m2", "f64"])
@pytest.mark.parametrize("name", list(BINARY))
def test_each_element_is_one_operation_rounded_once(backend, fmt, name):
    a = round_to(RNG.standard_normal((5, 77)) * 4, fmt)
    b = round_to(RNG.standard_normal((5, 77)) * 4 + 0.5, fmt)
    f = lambda a, b: getattr(op, name)(a, b)  # noqa: E731
    got, _, _ = lowered(backend, f, a, b, directives=dict(vectorize=4))
    with np.errstate(all="ignore"):
        assert_bits(got[0], round_to(BINARY[name](a.astype(np.float64), b.astype(np.float64)), fmt))
    assert_bits(got, graph(f, a, b))


@clause("LOWER-EW-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_maximum_minimum_neg_abs_and_scalars(backend, fmt):
    """IEEE maximum/minimum (−0 < +0 either way, NaN wins), and 0-d operands."""
    a = round_to(np.array([-0.0, 0.0, np.nan, 1.0, -np.inf, 3.0] * 20), fmt)
    b = round_to(np.array([0.0, -0.0, 1.0, np.nan, np.nan, -2.0] * 20), fmt)
    nan = round_to(np.array([np.nan]), fmt)[0]
    for name, want in (("maximum", [0.0, 0.0, nan, nan, nan, 3.0]), ("minimum", [-0.0, -0.0, nan, nan, nan, -2.0])):
        f = lambda a, b: getattr(op, name)(a, b)  # noqa: E731
        got, _, _ = lowered(backend, f, a, b)
        assert_bits(got[0], round_to(np.array(want * 20, np.float64), fmt))
        assert_bits(got, graph(f, a, b))
    f = lambda a: op.abs(-a * 2.0)  # noqa: E731
    got, _, _ = lowered(backend, f, a)
    assert_bits(got, graph(f, a))
    finite = np.isfinite(a.astype(np.float64))
    assert_bits(got[0][finite], round_to(np.abs(a[finite].astype(np.float64) * 2), fmt))


@clause("LOWER-EW-1")
@pytest.mark.parametrize("n, lanes, v, fmt", [(1000, 128, 1, "f32"), (1000, 64, 4, "f32"), (77 * 5, 128, 2, "f16"),
                                              (4096, 256, 4, "f32"), (300, 32, 3, "bf16")])
def test_lane_t_of_tile_g_handles_g_lanes_v_plus_j_lanes_plus_t(backend, n, lanes, v, fmt):
    """The grid is ceil(n / (lanes · v)) and the global traffic is that of this mapping: every
    request is coalesced."""
    a, b = (round_to(RNG.standard_normal(n), fmt) for _ in range(2))
    got, reports, program = lowered(backend, lambda a, b: a + b, a, b, directives=dict(lanes=lanes, vectorize=v))
    assert_bits(got[0], round_to(a.astype(np.float64) + b.astype(np.float64), fmt))
    grid = -(-n // (lanes * v))
    assert tuple(part(backend, reports[0], "grid")) == (grid,) and part(backend, reports[0], "lanes") == lanes
    size = dtype(fmt).itemsize
    requests = []
    for g in range(grid):
        for j in range(v):
            for w in range(0, lanes, 32):
                e = [g * lanes * v + j * lanes + t for t in range(w, w + 32)]
                requests.append([x * size for x in e if x < n])
    requests = [r for r in requests if r]
    c = counters(backend, reports[0])
    assert (c.hbm_read_bytes, c.hbm_write_bytes) == (64 * global_sectors(requests, size),
                                                     32 * global_sectors(requests, size))
    assert c.global_requests == 3 * len(requests)
    assert tile_funcs(program)[0].attributes["launch.lanes"] == lanes
