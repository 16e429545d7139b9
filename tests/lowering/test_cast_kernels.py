"""LOWER-CAST-1, TILE-NUM-3: casts between the tile formats lower to elementwise kernels
(alone or fused into a chain, LOWER-FUSE-1) whose bits on the tile interpreter are the Graph
IR cast's (GRAPH-CAST-1) — exhaustively over every f16, bf16 and fp8 value, and over an f32
sample holding every special value and every rounding tie of the targets, into every tile
format with every rounding and overflow mode (stochastic rounding with the graph's key and
index)."""
import ml_dtypes
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, bits, lowered

import tessera_ref as t
from tessera_ref import backends, op
from tessera_ref.errors import BackendError, LoweringError
from tessera_ref.ir import schedule as S
from tessera_ref.lowering import lower

pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered in cast"),
              pytest.mark.filterwarnings("ignore:overflow encountered in cast")]

TARGETS = ["f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2"]
NARROW = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
          "fp8_e5m2": ml_dtypes.float8_e5m2}
MODES = [(r, o) for r in ("rne", "rtz", "rup", "rdown") for o in ("native", "saturate")]
WIDE = {"lanes": 1024, "vectorize": 8}  # 8192 elements per tile: few tiles for the exhaustive inputs


def _every_value(fmt):
    dtype = NARROW[fmt]
    n = np.dtype(dtype).itemsize
    return np.arange(1 << (8 * n), dtype=f"u{n}").view(dtype)


def _f32_sample():
    rng = np.random.default_rng(15)
    rand = rng.integers(0, 1 << 32, 60_000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0x0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF,
                        0x1, 0x80000001, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x007FFFFF], np.uint32)
    ties = []
    for dtype in NARROW.values():  # every midpoint between neighbours of each narrow format, and its neighbours
        v = np.sort(_every_value_of(dtype))
        mid = ((v[:-1] + v[1:]) / 2).astype(np.float32)
        ties += [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
    x = np.concatenate([rand.view(np.float32), special.view(np.float32), *ties])
    return x.reshape(-1, 2) if x.size % 2 == 0 else x[:-1].reshape(-1, 2)


def _every_value_of(dtype):
    n = np.dtype(dtype).itemsize
    v = np.arange(1 << (8 * n), dtype=f"u{n}").view(dtype).astype(np.float64)
    return v[np.isfinite(v)]


def _check(x, target):
    for rounding, overflow in MODES:
        got, want, _, program = lowered(lambda x: op.cast(x, target, rounding=rounding, overflow=overflow), x,
                                        directives=WIDE, checks=False)
        assert [k.attributes["op"] for k in program.func.regions[0].entry if k.name == S.KERNEL] == ["cast"]
        assert_same_bits(got, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("source", list(NARROW))
def test_every_narrow_value_casts_to_the_graphs_bits(source, target):
    _check(_every_value(source), target)


@pytest.mark.parametrize("target", TARGETS)
def test_f32_specials_and_ties_cast_to_the_graphs_bits(target):
    _check(_f32_sample(), target)


@pytest.mark.parametrize("target", ["f32", "bf16", "fp8_e4m3"])
def test_f64_sources(target):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(20_000) * 2.0 ** rng.integers(-160, 140, 20_000)
    x[:6] = [np.nan, -np.nan, np.inf, -np.inf, 1e300, 2.0 ** -1074]
    _check(x, target)


def test_a_nan_payload_becomes_the_canonical_nan_of_its_sign():
    """Hand-checked codes: f16 NaNs 0x7E01 and 0xFE23 widen to f32 0x7FC00000 and 0xFFC00000
    (the tile cast used to keep the payload, GRAPH-CAST-1 does not); into e4m3 0x7F and 0xFF."""
    x = np.array([0x7E01, 0xFE23, 0x3C00, 0x7C00], np.uint16).view(np.float16)
    got, want, _, _ = lowered(lambda x: op.cast(x, "f32"), x)
    assert list(bits(got[0])) == [0x7FC00000, 0xFFC00000, 0x3F800000, 0x7F800000] == list(bits(want[0]))
    got, _, _, _ = lowered(lambda x: op.cast(x, "fp8_e4m3"), x)
    assert list(bits(got[0])) == [0x7F, 0xFF, 0x38, 0x7F]
    got, _, _, _ = lowered(lambda x: op.cast(x, "f16"), x)  # into its own format: only the NaNs change
    assert list(bits(got[0])) == [0x7E00, 0xFE00, 0x3C00, 0x7C00]


def test_casts_fuse_into_an_elementwise_chain():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 96)) * 300).astype(ml_dtypes.bfloat16)
    s = np.full((8, 96), 1.5, np.float32)
    f = lambda x, s: op.cast(op.cast(x, "f32") * s - 1.0, "fp8_e4m3", rounding="rtz", overflow="saturate")  # noqa
    got, want, reports, program = lowered(f, x, s)
    assert_same_bits(got, want)
    kernels = [k.attributes["op"] for k in program.func.regions[0].entry if k.name == S.KERNEL]
    assert kernels == ["cast+mul+sub+cast"] and reports[0].findings == []
    assert str(program.tile).count('"tessera.tile.store"') == 1  # the intermediates stay in registers


def test_the_rendered_cast_names_the_rounding_and_overflow():
    x = np.ones((4, 32), np.float32)
    program = lower(t.jit(lambda x: op.cast(x, "fp8_e4m3", rounding="rtz", overflow="saturate")).trace(x))
    text = backends.get("interp").inspect_program(program, "target")
    assert "tsr_cvt<__nv_fp8_e4m3, TSR_RTZ, TSR_SATURATE>(" in text
    program = lower(t.jit(lambda x: op.cast(op.cast(x, "bf16"), "f32")).trace(x))
    text = backends.get("interp").inspect_program(program, "target")
    assert "tsr_cvt<__nv_bfloat16>(" in text and "tsr_widen<float>(" in text


@pytest.mark.parametrize("fn, why", [
    (lambda x: op.cast(x, "index"), "not tensor<4x32xindex>"),
    (lambda x: op.cast(x, "fp4_e2m1"), "not tensor<4x32xfp4_e2m1>"),
])
def test_casts_the_tile_lowering_does_not_take_are_refused_clearly(fn, why):
    x = np.ones((4, 32), np.float32)
    with pytest.raises(LoweringError, match=why) as info:
        lower(t.jit(fn).trace(x))
    assert "test_cast_kernels.py" in str(info.value) and "Graph IR interpreter" in info.value.fix
    with backends.use("interp-tiles"), pytest.raises(BackendError, match="no kernel for cast"):
        fn(t.asarray(x))


@pytest.mark.parametrize("source, target", [("f16", "fp8_e4m3"), ("bf16", "fp8_e5m2"), ("f16", "bf16")])
def test_stochastic_casts_draw_the_graphs_bits(source, target):
    """NUM-CVT-5 in the kernel: the bits are NUM-RNG-4's of RNGKey(seed) at the element's
    row-major index, as in the graph, for every value and any tiling."""
    x = _every_value(source)
    for directives in (WIDE, {"lanes": 64, "vectorize": 2}):
        got, want, _, _ = lowered(lambda x: op.cast(x, target, rounding="stochastic", seed=2 ** 63 + 9), x,
                                  directives=directives, checks=False)
        assert_same_bits(got, want)


def test_an_elementwise_op_with_a_stochastic_policy_rounds_with_its_seed():
    from tessera_ref.numerics import Policy
    pol = Policy("bf16", rounding="stochastic")
    r = np.random.default_rng(8)
    a, b = (t.asarray(r.standard_normal((4, 100)).astype(np.float32).astype(ml_dtypes.bfloat16), policy=pol)
            for _ in range(2))
    got, want, _, program = lowered(lambda a, b: op.mul(op.add(a, b, seed=3), b, seed=4), a, b)
    assert_same_bits(got, want)
    assert [k.attributes["op"] for k in program.func.regions[0].entry if k.name == S.KERNEL] == ["add+mul"]
    text = backends.get("interp").inspect_program(program, "target")
    assert text.count("tsr_cvt_sr<__nv_bfloat16, TSR_NATIVE>(") == 2 and "tsr_random_bits((tsr_u64)(" in text
