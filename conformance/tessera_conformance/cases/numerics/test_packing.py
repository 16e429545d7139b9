"""NUM-PACK-1 and the packed accounting of NUM-FMT-3.

The expected bytes are built here from the clause's words (nibbles low first; four 6-bit
codes as one little-endian 24-bit word; wider codes as their little-endian bytes; a trailing
partial group padded with zero codes). Packing is a library function of the oracle's
numerics (no backend op packs), so these cases run on the oracle only.
"""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref import numerics
from tessera_ref.errors import TesseraError
from tessera_conformance import clause, oracle_only

from . import _ref_convert as R


pytestmark = oracle_only("numerics.pack / unpack / packed_nbytes has no backend entry point; the case checks the "
                         "oracle's numerics library")


def packed(codes, bits: int) -> bytes:
    codes = [int(c) for c in codes]
    out = bytearray()
    if bits == 4:
        codes += [0] * (len(codes) % 2)
        for j in range(0, len(codes), 2):
            out.append(codes[j] | codes[j + 1] << 4)
    elif bits == 6:
        codes += [0] * (-len(codes) % 4)
        for j in range(0, len(codes), 4):
            word = codes[j] | codes[j + 1] << 6 | codes[j + 2] << 12 | codes[j + 3] << 18
            out += word.to_bytes(3, "little")
    else:
        for c in codes:
            out += c.to_bytes(bits // 8, "little")
    return bytes(out)


@clause("NUM-PACK-1")
@pytest.mark.parametrize("name", R.NARROW + ("f32",))
@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 7, 8, 33])
def test_pack_layout_and_round_trip(name, count):
    s = R.SPECS[name]
    rng = np.random.default_rng(count)
    codes = rng.integers(0, 1 << s.bits, count, dtype=np.uint64).astype(s.code_dtype)
    data = numerics.pack(codes, name)
    assert data.dtype == np.uint8 and data.ndim == 1
    assert data.tobytes() == packed(codes, s.bits), (name, count)
    assert numerics.packed_nbytes(count, name) == len(packed(codes, s.bits))
    assert np.array_equal(numerics.unpack(data, name, (count,)), codes)


@clause("NUM-PACK-1")
def test_pack_takes_c_order_and_known_bytes():
    codes = np.array([[0x1, 0x2, 0x3], [0x4, 0x5, 0xF]], np.uint8)
    assert numerics.pack(codes, "fp4_e2m1").tobytes() == bytes([0x21, 0x43, 0xF5])
    assert numerics.pack(codes.T, "int4").tobytes() == bytes([0x41, 0x52, 0xF3])
    six = np.array([0x3F, 0x00, 0x15, 0x2A, 0x01], np.uint8)
    word = 0x3F | 0x00 << 6 | 0x15 << 12 | 0x2A << 18
    assert numerics.pack(six, "fp6_e3m2").tobytes() == word.to_bytes(3, "little") + bytes([0x01, 0x00, 0x00])
    assert numerics.packed_nbytes(1000, "fp4_e2m1") == 500 and numerics.packed_nbytes(1001, "fp4") == 501
    assert numerics.packed_nbytes(1001, "fp6") == 3 * 251 and numerics.packed_nbytes(10, "bf16") == 20
    assert np.array_equal(numerics.unpack(numerics.pack(codes, "fp4"), "fp4", (2, 3)), codes)


@clause("NUM-PACK-1")
def test_codes_out_of_range_are_refused():
    for name, bad in (("fp4_e2m1", 16), ("fp6_e2m3", 64), ("int4", 0x10)):
        with pytest.raises(TesseraError):
            numerics.pack(np.array([bad], np.uint8), name)


@clause("NUM-FMT-3")
def test_memory_is_accounted_in_packed_bytes():
    """Scaled tensors count their elements packed (NUM-SCALE-3 builds on this)."""
    x = np.linspace(-3, 3, 96).astype(np.float32)
    assert numerics.quantize_mx(x, "fp4_e2m1").nbytes == 48 + 3
    assert numerics.quantize_mx(x, "fp6_e3m2").nbytes == 72 + 3
    assert numerics.quantize_per_tensor(x, "int4").nbytes == 48 + 4
