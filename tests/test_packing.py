import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tessera_ref.errors import ConversionError
from tessera_ref.numerics import pack, packed_nbytes, unpack, get_format


def test_fp4_layout_first_value_in_low_nibble():
    # hand-packed: codes 1,2 -> 0x21; trailing 3 padded with a zero code -> 0x03
    assert pack(np.array([1, 2, 3], dtype=np.uint8), "fp4").tolist() == [0x21, 0x03]


def test_fp6_layout_four_codes_in_three_bytes():
    # 1 | 2<<6 | 3<<12 | 4<<18 = 0x103081, little-endian bytes
    assert pack(np.array([1, 2, 3, 4], dtype=np.uint8), "fp6").tolist() == [0x81, 0x30, 0x10]
    # all-ones codes fill all 24 bits
    assert pack(np.full(4, 63, dtype=np.uint8), "fp6_e3m2").tolist() == [0xFF, 0xFF, 0xFF]


def test_wide_formats_are_little_endian_code_bytes():
    assert pack(np.array([0x1234], dtype=np.uint16), "bf16").tolist() == [0x34, 0x12]


@pytest.mark.parametrize("name, count, expected", [
    ("fp4", 1024, 512), ("fp4", 3, 2), ("int4", 5, 3), ("fp6", 1024, 768), ("fp6", 5, 6),
    ("fp6_e3m2", 4, 3), ("fp8", 10, 10), ("bf16", 10, 20), ("f32", 3, 12), ("f64", 2, 16),
    ("e8m0", 7, 7), ("int8", 9, 9),
])
def test_packed_nbytes(name, count, expected):
    assert packed_nbytes(count, name) == expected


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["fp4_e2m1", "int4", "fp6_e2m3", "fp6_e3m2", "fp8_e4m3", "f16"]),
       shape=st.lists(st.integers(0, 7), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1))
def test_round_trip(name, shape, seed):
    fmt = get_format(name)
    codes = np.random.default_rng(seed).integers(0, 1 << fmt.bits, size=shape).astype(fmt.code_dtype)
    packed = pack(codes, fmt)
    assert packed.dtype == np.uint8 and packed.size == packed_nbytes(codes.size, fmt)
    back = unpack(packed, fmt, codes.shape)
    assert back.shape == codes.shape and np.array_equal(back, codes)


def test_pack_rejects_out_of_range_and_non_integer_codes():
    with pytest.raises(ConversionError, match=r"\[0, 16\)"):
        pack(np.array([16], dtype=np.uint8), "fp4")
    with pytest.raises(ConversionError, match="integer codes"):
        pack(np.array([0.5]), "fp4")


def test_unpack_checks_the_byte_count():
    with pytest.raises(ConversionError, match="needs a 1-D uint8 array of 3 bytes"):
        unpack(np.zeros(2, dtype=np.uint8), "fp6", (4,))
