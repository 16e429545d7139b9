"""CUDA-HDR-5: the device header's Philox4x32-10 and draws (tsr_philox4x32_10,
tsr_random_bits, tsr_uniform_f32/_f64), compiled as host C++ from the same source as the
device code, give the published Random123 known answers (kat_vectors, "philox4x32 10"
lines) and the bits of ``tessera_ref.numerics.rng`` (NUM-RNG-1…5)."""
import ctypes

import numpy as np
import pytest

from tessera_ref.numerics import rng

from test_device_header import GXX, lib  # noqa: F401 - the compiled header fixture

pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to build the header as host C++")

#: Random123's kat_vectors, "philox4x32 10": counter (4 words), key (2 words) -> output (4 words)
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


def _blocks(lib, ctr, key):
    ctr, key = (np.ascontiguousarray(a, dtype=np.uint32) for a in (ctr, key))
    out = np.empty_like(ctr)
    lib.tsr_philox_blocks(*(a.ctypes.data_as(ctypes.c_void_p) for a in (ctr, key, out)), ctypes.c_long(len(ctr)))
    return out


def _draws(lib, index, words):
    index = np.ascontiguousarray(index, dtype=np.uint64)
    bits, u32, u64 = np.empty(index.size, np.uint32), np.empty(index.size, np.float32), np.empty(index.size)
    lib.tsr_draws(index.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint(int(words[0])), ctypes.c_uint(int(words[1])),
                  *(a.ctypes.data_as(ctypes.c_void_p) for a in (bits, u32, u64)), ctypes.c_long(index.size))
    return bits, u32, u64


def test_the_random123_known_answers(lib):
    ctr, key, want = (np.array([v[j] for v in KAT], np.uint32) for j in range(3))
    assert (_blocks(lib, ctr, key) == want).all()


def test_philox_blocks_are_the_numerics_philox(lib):
    r = np.random.default_rng(17)
    ctr = r.integers(0, 1 << 32, (50_000, 4), dtype=np.uint64).astype(np.uint32)
    key = r.integers(0, 1 << 32, (50_000, 2), dtype=np.uint64).astype(np.uint32)
    assert (_blocks(lib, ctr, key) == rng.philox4x32_10(ctr, key)).all()


@pytest.mark.parametrize("seed, stream", [(42, 0), (0, 1), (2 ** 64 - 1, 2 ** 63 + 5)])
def test_draws_are_the_numerics_draws(lib, seed, stream):
    key = rng.RNGKey(seed, stream)
    index = np.concatenate([np.arange(4096, dtype=np.uint64),
                            np.array([2 ** 32 - 1, 2 ** 32, 2 ** 34 + 3, 2 ** 63, 2 ** 64 - 1], np.uint64)])
    bits, u32, u64 = _draws(lib, index, key.words)
    assert (bits == rng.random_bits(key, index)).all()
    assert (u32.view(np.uint32) == rng.uniform(key, index, np.float32).view(np.uint32)).all()
    assert (u64.view(np.uint64) == rng.uniform(key, index, np.float64).view(np.uint64)).all()
    assert u32.max() < 1.0 and u64.max() < 1.0


def test_the_spec_known_answers_for_key_42(lib):
    """NUM-RNG-8's values for RNGKey(42), i = 0 … 3 (hex from the spec, not from the code)."""
    bits, _, u64 = _draws(lib, np.arange(4), rng.RNGKey(42).words)
    assert list(bits) == [0x184F5EF6, 0xCFF0D82A, 0x2B1A85B9, 0xF438C456]
    assert [float.hex(float(v)) for v in u64] == ["0x1.d1c7c71134f38p-3", "0x1.fba0c203474b2p-2",
                                                  "0x1.4aa2c383823bcp-1", "0x1.c13352a27805dp-1"]
