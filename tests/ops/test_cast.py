"""``op.cast`` (GRAPH-CAST-1).

References: ``numerics_reference`` (NUM-CVT re-derived independently of ``tessera_ref``),
ml_dtypes' own round-to-nearest-even casts, and hand-computed values.
"""
import ml_dtypes
import numpy as np
import pytest

import numerics_reference as R
import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError
from tessera_ref.interp import run_function
from tessera_ref.ir import ScalarType, parse_module
from tessera_ref.numerics import Policy, accum, fp8, get_format
from tessera_ref.numerics.rng import as_key, random_bits
from tessera_ref.ops import bind, primitive

F32 = np.float32


def _bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


def _codes(x, name):
    """The raw codes of a storage-dtype array (uint64, like ``R.ref_encode``)."""
    fmt = get_format(name)
    return np.asarray(x).view(fmt.code_dtype).astype(np.uint64)


def _sample(n=400, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))
    return np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e9, -1e9]]).astype(F32)


@pytest.mark.parametrize("name", ["bf16", "f16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2",
                                  "fp4_e2m1", "int8"])
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rup", "rdown"])
@pytest.mark.parametrize("overflow", ["native", "saturate"])
def test_float_to_format_matches_reference(name, rounding, overflow):
    x = _sample()
    got = op.cast(tr.asarray(x), name, rounding=rounding, overflow=overflow)
    assert got.type.policy == Policy(name, rounding=rounding, overflow=overflow)
    want = R.ref_encode(x.astype(np.float64), name, rounding, overflow)
    assert np.array_equal(_codes(got, name), want)


def test_rne_matches_ml_dtypes_and_known_values():
    x = _sample(seed=1)[:-7]  # finite values: ml_dtypes' fp8 e4m3 cast agrees there
    for name, dtype in (("bf16", ml_dtypes.bfloat16), ("fp8_e5m2", ml_dtypes.float8_e5m2)):
        assert np.array_equal(_bits(op.cast(tr.asarray(x), name)), _bits(x.astype(dtype)))
    # subnormals are real: fp4 0.74 -> 0.5, 0.76 -> 1.0 (NUM-CVT-2)
    assert np.asarray(op.cast(tr.asarray(F32([0.74, 0.76, -0.74])), "fp4")).astype(F32).tolist() == [0.5, 1.0, -0.5]
    # directed modes on bf16: 1 + 2^-10 lies between 1 and 1 + 2^-7
    v = tr.asarray(F32([1 + 2 ** -10, -(1 + 2 ** -10)]))
    as_f32 = lambda r: np.asarray(r).astype(F32).tolist()  # noqa: E731
    assert as_f32(op.cast(v, "bf16", rounding="rtz")) == [1.0, -1.0]
    assert as_f32(op.cast(v, "bf16", rounding="rup")) == [1 + 2 ** -7, -1.0]
    assert as_f32(op.cast(v, "bf16", rounding="rdown")) == [1.0, -(1 + 2 ** -7)]
    # overflow: e4m3 has no inf (NaN), saturate clamps to 448
    big = tr.asarray(F32([1e6, -1e6]))
    assert np.isnan(np.asarray(op.cast(big, "fp8")).astype(F32)).all()
    assert as_f32(op.cast(big, "fp8", overflow="saturate")) == [448.0, -448.0]


def test_narrow_sources_convert_exactly():
    # fp8 -> bf16 -> f32 is exact for every fp8 value (both targets hold them all)
    codes = np.arange(256, dtype=np.uint8)
    x = codes.view(ml_dtypes.float8_e4m3fn)
    want = R.ref_decode(codes.astype(np.uint64), "fp8_e4m3")
    got = np.asarray(op.cast(op.cast(tr.asarray(x), "bf16"), "f32")).astype(np.float64)
    fin = ~np.isnan(want)
    assert np.array_equal(got[fin], want[fin]) and np.isnan(got[~fin]).all()
    # f64 -> f32 is one rounding (not via anything narrower)
    d = np.float64(1.0) + 2.0 ** -24 + 2.0 ** -40  # just above an f32 midpoint: rounds up
    assert float(np.asarray(op.cast(tr.asarray(np.float64([d])), "f32"))[0]) == 1 + 2.0 ** -23


def test_stochastic_rounding():
    x = np.linspace(-3, 3, 300).astype(F32)
    pol = Policy("bf16", rounding="stochastic")
    with pytest.raises(OpError, match=r"seed.*"):
        op.cast(tr.asarray(x), pol)
    a, b = op.cast(tr.asarray(x), pol, seed=7), op.cast(tr.asarray(x), "bf16", rounding="stochastic", seed=7)
    assert np.array_equal(_bits(a), _bits(b))
    c = op.cast(tr.asarray(x), pol, seed=8)
    assert not np.array_equal(_bits(a), _bits(c))
    u = random_bits(as_key(7), np.arange(x.size, dtype=np.uint64))  # NUM-CVT-5: row-major index
    want = R.ref_encode(x.astype(np.float64), "bf16", "stochastic", "native", u=u)
    assert np.array_equal(_codes(a, "bf16"), want)


def test_element_kinds():
    x = tr.asarray(F32([0.0, -0.0, np.nan, 2.5, -1.7, np.inf, -np.inf, 1e20, -1e20]))
    assert np.asarray(op.cast(x, "i1")).tolist() == [False, False, True, True, True, True, True, True, True]
    imax, imin = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    assert np.asarray(op.cast(x, "index")).tolist() == [0, 0, 0, 2, -1, imax, imin, imax, imin]
    assert op.cast(x, "index").type.policy.name == "index"
    mask = tr.asarray(np.array([True, False]))
    assert np.asarray(op.cast(mask, "f32")).tolist() == [1.0, 0.0]
    assert np.asarray(op.cast(mask, "index")).tolist() == [1, 0]
    idx = tr.asarray(np.array([257, 259, -3, 0], dtype=np.int64))
    # 257 is a bf16 tie between 256 and 258 -> even (256); 259 -> 260
    assert np.asarray(op.cast(idx, "bf16")).astype(F32).tolist() == [256.0, 260.0, -3.0, 0.0]
    assert np.asarray(op.cast(idx, "bf16", rounding="rup")).astype(F32).tolist() == [258.0, 260.0, -3.0, 0.0]
    assert np.asarray(op.cast(idx, "i1")).tolist() == [True, True, True, False]
    with pytest.raises(OpError, match=r"2\^53.*test_cast\.py:"):
        op.cast(tr.asarray(np.array([2 ** 60 + 1])), "f32")


def test_target_spellings_and_astype():
    x = tr.asarray(F32([1.0, 2.5]))
    pol = fp8 @ accum("f32", rounding="rtz")
    for to in (pol, ScalarType(pol)):
        assert op.cast(x, to).type.policy == pol
    assert x.astype("bf16", rounding="rtz").type.policy == Policy("bf16", rounding="rtz")
    assert x.astype(np.float16).type.format.name == "f16"
    assert op.cast(x, get_format("f64")).dtype == np.float64


def test_errors():
    x = tr.asarray(F32([1.0]))
    with pytest.raises(DTypeError, match=r"complex<f32>.*test_cast\.py:"):
        op.cast(tr.asarray(np.array([1 + 2j], dtype=np.complex64)), "f32")
    with pytest.raises(OpError, match="complex"):
        op.cast(x, "complex<f32>")
    with pytest.raises(OpError, match=r"quantize_mx"):
        op.cast(x, Policy("fp8_e4m3", scaling="mx"))
    with pytest.raises(OpError, match=r"'to'.*test_cast\.py:"):
        op.cast(x, "float7")
    with pytest.raises(OpError, match="rounding"):
        op.cast(x, "i1", rounding="rtz")
    with pytest.raises(OpError, match="rounding"):
        op.cast(x, "bf16", rounding="nearest")
    with pytest.raises(OpError, match="unknown attribute"):
        bind(primitive("cast"), x, to="f32", mode=1)


@pytest.mark.parametrize("to", ["bf16", "fp4", "i1", "index", Policy("f16", rounding="rup", overflow="saturate")])
def test_eager_equals_jit_and_round_trip(to):
    x = tr.asarray(_sample(64, seed=3))
    f = tr.jit(lambda a: op.cast(a, to))
    assert np.array_equal(_bits(f(x)), _bits(op.cast(x, to)))
    text = str(f.trace(x))
    assert str(parse_module(text)) == text
    rerun = run_function(parse_module(text).body.first_op, np.asarray(x))
    assert np.array_equal(_bits(rerun[0]), _bits(op.cast(x, to)))


def test_stochastic_cast_round_trips():
    x = tr.asarray(_sample(64, seed=4))
    f = tr.jit(lambda a: op.cast(a, "fp8_e5m2", rounding="stochastic", seed=3))
    text = str(f.trace(x))
    assert "seed = 3" in text and str(parse_module(text)) == text
    rerun = run_function(parse_module(text).body.first_op, np.asarray(x))
    assert np.array_equal(_bits(rerun[0]), _bits(f(x)))


def test_a_0d_stochastic_result_is_a_0d_tensor():
    import ml_dtypes
    from tessera_ref import op as _op
    from tessera_ref.numerics import Policy as _Policy
    p = _Policy("bf16", rounding="stochastic")
    x = _op.cast(np.float32(1.5), p, seed=1)   # 1.5 is exact in bf16: no rounding happens
    y = _op.mul(x, x, seed=2)                 # 2.25 is exact too
    assert np.asarray(y).shape == () and float(np.asarray(y).astype(ml_dtypes.bfloat16)) == 2.25
