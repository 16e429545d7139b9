"""The format registry (NUM-FMT-1, NUM-FMT-2) and exhaustive decoding (NUM-CVT-7).

Expected numbers are typed in from docs/spec/numerics.md and ../shared/reference/formats.md,
not computed from the registry; decoded values are checked against ml_dtypes and against the
bit-field formula of ``numerics_reference.decode_codes`` (which does not import tessera_ref).
"""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref
from tessera_ref.errors import ConversionError, FormatError, TesseraError
from tessera_ref.numerics import FORMATS, decode, get_format

import numerics_reference as R

ALL = list(R.FORMAT_NAMES)
SMALL = [n for n in ALL if R.SPECS[n].bits <= 8]
SIXTEEN = ["f16", "bf16"]

# name: (bits, exp_bits, man_bits, bias, max, min (most negative / e8m0 smallest),
#        min_normal, min_subnormal, nan_code, inf_code, dtype, code dtype)
FACTS = {
    "f64": (64, 11, 52, 1023, 1.7976931348623157e308, -1.7976931348623157e308,
            2.0 ** -1022, 2.0 ** -1074, 0x7FF8000000000000, 0x7FF0000000000000, np.float64, np.uint64),
    "f32": (32, 8, 23, 127, 3.4028234663852886e38, -3.4028234663852886e38,
            2.0 ** -126, 2.0 ** -149, 0x7FC00000, 0x7F800000, np.float32, np.uint32),
    "f16": (16, 5, 10, 15, 65504.0, -65504.0, 2.0 ** -14, 2.0 ** -24, 0x7E00, 0x7C00, np.float16, np.uint16),
    "bf16": (16, 8, 7, 127, 3.3895313892515355e38, -3.3895313892515355e38,
             2.0 ** -126, 2.0 ** -133, 0x7FC0, 0x7F80, ml_dtypes.bfloat16, np.uint16),
    "fp8_e4m3": (8, 4, 3, 7, 448.0, -448.0, 2.0 ** -6, 2.0 ** -9, 0x7F, None, ml_dtypes.float8_e4m3fn, np.uint8),
    "fp8_e5m2": (8, 5, 2, 15, 57344.0, -57344.0, 2.0 ** -14, 2.0 ** -16, 0x7E, 0x7C, ml_dtypes.float8_e5m2, np.uint8),
    "fp6_e2m3": (6, 2, 3, 1, 7.5, -7.5, 1.0, 0.125, None, None, ml_dtypes.float6_e2m3fn, np.uint8),
    "fp6_e3m2": (6, 3, 2, 3, 28.0, -28.0, 0.25, 0.0625, None, None, ml_dtypes.float6_e3m2fn, np.uint8),
    "fp4_e2m1": (4, 2, 1, 1, 6.0, -6.0, 1.0, 0.5, None, None, ml_dtypes.float4_e2m1fn, np.uint8),
    "e8m0": (8, 8, 0, 127, 2.0 ** 127, 2.0 ** -127, 2.0 ** -127, None, 0xFF, None, ml_dtypes.float8_e8m0fnu, np.uint8),
    "int8": (8, 0, 0, 0, 127.0, -128.0, None, None, None, None, np.int8, np.uint8),
    "int4": (4, 0, 0, 0, 7.0, -8.0, None, None, None, None, ml_dtypes.int4, np.uint8),
}
# Unbiased exponents of the smallest normal and the largest finite binade.
EXPONENTS = {
    "f64": (-1022, 1023), "f32": (-126, 127), "f16": (-14, 15), "bf16": (-126, 127),
    "fp8_e4m3": (-6, 8), "fp8_e5m2": (-14, 15), "fp6_e2m3": (0, 2), "fp6_e3m2": (-2, 4),
    "fp4_e2m1": (0, 2), "e8m0": (-127, 127),
}


def test_registry_holds_exactly_the_spec_formats():
    assert set(FORMATS) == set(FACTS)
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        assert get_format(name) is fmt


@pytest.mark.parametrize("name", ALL)
def test_registry_facts_match_the_spec_table(name):
    (bits, eb, mb, bias, vmax, vmin, min_normal, min_sub, nan, inf, dtype, code_dtype) = FACTS[name]
    f = get_format(name)
    assert (f.bits, f.exp_bits, f.man_bits, f.bias) == (bits, eb, mb, bias)
    assert f.max == vmax and type(f.max) is float
    assert f.min == vmin
    assert f.nan_code == nan
    assert f.inf_code == inf
    assert f.dtype == np.dtype(dtype)
    assert f.code_dtype == np.dtype(code_dtype)
    if min_normal is not None:
        assert f.min_normal == min_normal
    if not f.is_int:
        assert f.min_subnormal == min_sub
    if name in EXPONENTS:
        assert (f.emin, f.emax) == EXPONENTS[name]
    # the reference module's own table agrees with these typed-in facts
    spec = R.SPECS[name]
    assert (spec.bits, spec.exp_bits, spec.man_bits, spec.bias, spec.max) == (bits, eb, mb, bias, vmax)


@pytest.mark.parametrize("name", [n for n in ALL if not R.SPECS[n].kind == "int"])
def test_registry_limits_match_ml_dtypes_finfo(name):
    """A second, independent source for the limits: ml_dtypes / numpy finfo."""
    f = get_format(name)
    fi = ml_dtypes.finfo(f.dtype)
    assert f.max == float(fi.max)
    assert f.min_normal == float(fi.smallest_normal)
    if f.min_subnormal is not None:
        assert f.min_subnormal == float(fi.smallest_subnormal)


@pytest.mark.parametrize("name", ["int8", "int4"])
def test_registry_int_limits_match_iinfo(name):
    f = get_format(name)
    ii = ml_dtypes.iinfo(f.dtype)
    assert (f.min, f.max) == (float(ii.min), float(ii.max))


@pytest.mark.parametrize("name", ALL)
def test_inf_and_nan_codes_decode_as_such(name):
    f = get_format(name)
    if f.inf_code is not None:
        assert decode(np.array([f.inf_code], f.code_dtype), f)[0] == np.inf
        assert decode(np.array([f.inf_code | (1 << (f.bits - 1))], f.code_dtype), f)[0] == -np.inf
    if f.nan_code is not None:
        v = decode(np.array([f.nan_code], f.code_dtype), f)
        assert np.isnan(v[0]) and not np.signbit(v[0])


def test_special_code_layouts_from_the_spec():
    # e4m3: NaN = S.1111.111, no inf; 0x7E = S.1111.110 = 448
    assert get_format("fp8_e4m3").nan_code == 0b0_1111_111
    assert decode(np.array([0b0_1111_110, 0b1_1111_111, 0b0_1111_000], np.uint8), "fp8_e4m3").tolist()[0::2] == [448.0, 256.0]
    # e8m0: 0xFF NaN, code c = 2**(c-127)
    v = decode(np.array([0, 1, 127, 254, 255], np.uint8), "e8m0")
    assert v[:4].tolist() == [2.0 ** -127, 2.0 ** -126, 1.0, 2.0 ** 127] and np.isnan(v[4])
    # fp4 values are +-{0, .5, 1, 1.5, 2, 3, 4, 6}
    v = decode(np.arange(16, dtype=np.uint8), "fp4")
    assert v[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert v[8:].tolist() == [-0.0, -0.5, -1, -1.5, -2, -3, -4, -6] and np.signbit(v[8])


@pytest.mark.parametrize("name", ALL)
def test_is_nan_code_matches_the_bit_field_rule(name):
    f = get_format(name)
    if f.bits <= 16:
        codes = np.arange(1 << f.bits, dtype=np.uint64)
    else:
        rng = np.random.default_rng(5)
        codes = rng.integers(0, 1 << min(f.bits, 63), 100_000, dtype=np.uint64)
        if f.bits == 64:
            codes |= rng.integers(0, 2, codes.size, dtype=np.uint64) << np.uint64(63)
        top = f.inf_code
        codes = np.concatenate([codes, np.array([top, top + 1, top | (1 << (f.bits - 1)), (1 << f.bits) - 1], np.uint64)])
    expected = np.isnan(R.decode_codes(codes, name))
    np.testing.assert_array_equal(f.is_nan_code(codes), expected)


# ---------------------------------------------------------------------------------------
# names (NUM-FMT-2)

@pytest.mark.parametrize("alias,name", [
    ("fp8", "fp8_e4m3"), ("fp6", "fp6_e2m3"), ("fp4", "fp4_e2m1"),
    ("fp32", "f32"), ("fp16", "f16"), ("fp64", "f64"), ("bfloat16", "bf16"),
])
def test_aliases_resolve_to_the_registry_objects(alias, name):
    assert get_format(alias) is FORMATS[name]


def test_module_level_names_are_the_registry_objects():
    assert tessera_ref.fp8 is FORMATS["fp8_e4m3"]
    assert tessera_ref.fp6 is FORMATS["fp6_e2m3"]
    assert tessera_ref.fp4 is FORMATS["fp4_e2m1"]
    assert tessera_ref.fp32 is tessera_ref.f32 is FORMATS["f32"]
    assert tessera_ref.bf16 is FORMATS["bf16"]
    assert tessera_ref.e8m0 is FORMATS["e8m0"]


def test_get_format_accepts_formats_and_dtypes():
    for name, fmt in FORMATS.items():
        assert get_format(fmt) is fmt
        assert get_format(fmt.dtype) is fmt


@pytest.mark.parametrize("bad", ["fp7", "fp8_e3m4", "float8", "", "int2", "bf8"])
def test_unknown_names_raise_format_error_naming_the_known_ones(bad):
    with pytest.raises(FormatError) as info:
        get_format(bad)
    err = info.value
    assert isinstance(err, TesseraError) and isinstance(err, ValueError)
    msg = str(err)
    assert repr(bad) in msg
    assert "Fix" in msg
    for known in ("fp8_e4m3", "fp6_e2m3", "fp4_e2m1", "bf16", "e8m0", "int4"):
        assert known in msg


def test_unknown_dtype_raises_format_error():
    for bad in (np.complex64, np.dtype("U3"), object):
        with pytest.raises(FormatError):
            get_format(bad)


def test_format_errors_are_not_conversion_errors():
    assert not issubclass(FormatError, ConversionError)
    assert issubclass(ConversionError, ValueError) and issubclass(ConversionError, TesseraError)


# ---------------------------------------------------------------------------------------
# exhaustive decoding (NUM-CVT-7)

def _assert_same_values(got, want, what):
    """Equal as values, NaN == NaN, and the sign of zero counts."""
    with np.errstate(invalid="ignore"):  # signalling NaNs widen quietly
        got = np.asarray(got, np.float64)
        want = np.asarray(want, np.float64)
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    bad = (nan_g != nan_w) | (~nan_w & ((got != want) | (np.signbit(got) != np.signbit(want))))
    idx = np.nonzero(bad)[0]
    assert idx.size == 0, f"{what}: {idx.size} mismatches, first at {idx[:8].tolist()}: got {got[idx[:8]]}, want {want[idx[:8]]}"


@pytest.mark.parametrize("name", SMALL + SIXTEEN)
def test_decode_every_code_matches_ml_dtypes_and_the_bit_field_formula(name):
    f = get_format(name)
    codes = np.arange(1 << f.bits, dtype=f.code_dtype)
    got = decode(codes, name)
    assert got.dtype == np.float32
    with np.errstate(invalid="ignore"):
        via_ml = codes.view(f.dtype).astype(np.float32)
    _assert_same_values(got, via_ml, f"{name} vs ml_dtypes")
    _assert_same_values(got, R.decode_codes(codes, name), f"{name} vs bit-field formula")


@pytest.mark.parametrize("name", SMALL + SIXTEEN)
def test_decode_every_code_from_other_integer_dtypes(name):
    """Codes held in wider/signed integer arrays decode the same."""
    f = get_format(name)
    codes = np.arange(1 << f.bits)
    want = R.decode_codes(codes, name)
    for dt in (np.int32, np.int64, np.uint32, np.uint16):
        _assert_same_values(decode(codes.astype(dt), name), want, f"{name} from {np.dtype(dt)}")


def test_decode_bit_field_formula_spot_values():
    """The reference formula itself, on values typed in from the spec."""
    assert R.decode_codes([0x3C00, 0x0001, 0x7BFF, 0x8000], "f16").tolist() == [1.0, 2.0 ** -24, 65504.0, -0.0]
    assert R.decode_codes([0x01, 0x08, 0x7E], "fp8_e4m3").tolist() == [2.0 ** -9, 2.0 ** -6, 448.0]
    assert R.decode_codes([0x01, 0x7B], "fp8_e5m2").tolist() == [2.0 ** -16, 57344.0]
    assert R.decode_codes([0x01, 0x08, 0x1F], "fp6_e2m3").tolist() == [0.125, 1.0, 7.5]
    assert R.decode_codes([0x01, 0x04, 0x1F], "fp6_e3m2").tolist() == [0.0625, 0.25, 28.0]
    assert R.decode_codes([0x8, 0xF], "int4").tolist() == [-8.0, -1.0]
    assert np.signbit(R.decode_codes([0x20], "fp6_e2m3")[0])


@pytest.mark.parametrize("name", ["f32", "f64"])
def test_decode_random_wide_codes_is_the_bit_reinterpretation(name):
    rng = np.random.default_rng(11)
    raw = rng.integers(0, 2 ** 63, 1_000_000, dtype=np.uint64)
    if name == "f32":
        codes = raw.astype(np.uint32)
        with np.errstate(invalid="ignore"):
            want = codes.view(np.float32).astype(np.float64)
    else:
        codes = raw | (rng.integers(0, 2, raw.size, dtype=np.uint64) << np.uint64(63))
        want = codes.view(np.float64)
    got = decode(codes, name)
    assert got.dtype == (np.float64 if name == "f64" else np.float32)
    _assert_same_values(got, want, name)
    _assert_same_values(got[:50_000], R.decode_codes(codes[:50_000], name), name + " vs formula")


def test_e8m0_smallest_value_decodes_exactly_as_an_f32_subnormal():
    v = decode(np.array([0], np.uint8), "e8m0")
    assert v.dtype == np.float32 and float(v[0]) == 2.0 ** -127 and v.view(np.uint32)[0] == 0x00400000
