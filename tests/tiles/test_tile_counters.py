"""Bank-conflict wavefronts and global sectors by hardware.md's rules (TILE-COUNT-*)."""
import numpy as np
import pytest
from tile_dsl import TRANSPOSE
from tile_kernels import matmul

from tessera_ref import kernel
from tessera_ref.interp.tile import sectors, wavefronts
from tessera_ref.interp.tile.memory import swizzle_bytes

LANES = np.arange(32)
ONE_REQUEST = np.zeros(32, dtype=np.int64)


def test_hardware_md_test_vectors():
    assert wavefronts(LANES * 128, ONE_REQUEST, 4)[1:] == (32, 1)  # f32 32x32 column read
    assert wavefronts(LANES * 132, ONE_REQUEST, 4)[1:] == (1, 1)  # rows padded to 33 words
    assert wavefronts(LANES * 128, ONE_REQUEST, 16)[1:] == (32, 4)  # 16-byte column, 128 B rows
    assert wavefronts(swizzle_bytes(LANES * 128), ONE_REQUEST, 16)[1] == 4  # with Swizzle<3,4,3>
    assert wavefronts(LANES * 8, ONE_REQUEST, 8)[1] == 2  # 8-byte consecutive
    assert wavefronts(np.zeros(32, dtype=np.int64), ONE_REQUEST, 4)[1] == 1  # broadcast


def test_sectors_coalesced_and_strided():
    assert sectors(LANES * 4, ONE_REQUEST, 4) == (1, 4)
    assert sectors(LANES * 128, ONE_REQUEST, 4) == (1, 32)


@pytest.mark.parametrize("pad, swizzle, reads", [(0, "none", 32 * 32), (1, "none", 32 * 1), (0, "xor", 32 * 4)])
def test_unpadded_column_access_conflicts(pad, swizzle, reads):
    k = kernel.from_source(TRANSPOSE, constants={"PAD": pad, "SWIZZLE": swizzle})
    X = np.arange(1024, dtype=np.float32).reshape(32, 32)
    Y = np.zeros_like(X)
    c = k(X, Y, grid=1, lanes=32).counters
    assert np.array_equal(Y, X.T)
    assert c.smem_requests == 64
    assert c.smem_wavefronts == 32 * 1 + reads  # row writes are conflict-free in every layout
    assert c.smem_ideal_wavefronts == 64
    assert c.global_sectors == 64 * 4 and c.hbm_bytes == 2 * 4096


def test_mma_operand_reads_with_padding_and_swizzle():
    """The matmul kernel's A tile (64x32 f32) is read a column at a time (TILE-COUNT-3)."""
    src = '''
@kernel
def mm(A: f32[64, 32], B: f32[32, 64], C: mut f32[64, 64]):
    sA = tshared.alloc[f32](64, 32, pad=PAD, swizzle=SWIZZLE)
    sB = tshared.alloc[f32](32, 64)
    cp_async.shared.global(sA, A[0:64, 0:32])
    cp_async.shared.global(sB, B[0:32, 0:64])
    cp_async.commit()
    cp_async.wait(0)
    tbarrier()
    acc = tile.zeros((64, 64), f32)
    acc += tile.mma(sA, sB, accum=f32)
    tile.store(C, index=(0, 0), value=acc)
'''
    waves = {}
    for pad, swizzle in ((0, "none"), (1, "none"), (0, "xor")):
        k = kernel.from_source(src, constants={"PAD": pad, "SWIZZLE": swizzle})
        A = np.ones((64, 32), np.float32)
        B = np.ones((32, 64), np.float32)
        C = np.zeros((64, 64), np.float32)
        report = k(A, B, C, grid=1, lanes=128)
        assert (C == 32).all()
        waves[pad, swizzle] = report.counters.smem_wavefronts
    # the two copies (64 wavefronts each) and B's row reads (64), all conflict-free, plus A's
    # column reads: 32 columns x 2 requests; plain: 32 wavefronts each, padded: 1, xor: 4
    # (the derivation is in test_matmul_wavefronts_quoted_in_the_spec)
    assert waves == {(0, "none"): 192 + 64 * 32, (1, "none"): 192 + 64 * 1, (0, "xor"): 192 + 64 * 4}


def test_matmul_counters():
    a = np.ones((256, 256), np.float32)
    c = np.zeros((256, 256), np.float32)
    report = matmul(a, a, c, grid=(4, 4), lanes=128)
    counters = report.counters
    assert counters.flops == 2 * 256**3
    # each of 16 tiles reads 8 A tiles and 8 B tiles of 64x32 floats, and writes its 64x64 C tile
    assert counters.hbm_read_bytes == 16 * 8 * 2 * 64 * 32 * 4
    assert counters.hbm_write_bytes == 256 * 256 * 4
    assert counters.sector_efficiency == 1.0
    assert report.roofline.bound == "memory"


@pytest.mark.parametrize("fmt, per_read, sectors_per_access", [("bf16", 16, 2), ("fp8_e4m3", 8, 1)])
def test_narrow_elements_count_their_own_size(fmt, per_read, sectors_per_access):
    """The transpose with 2-byte (bf16) and 1-byte (fp8) elements. Hand-derived: lane l's
    column read of s[l, j] is byte 64·l + 2j (bf16) or 32·l + j (fp8), so 32 / itemsize
    lanes share a bank row and the 32 lanes hit 16 (8) distinct words in one bank: 16 (8)
    wavefronts per read, against 32 for f32. A row of 32 elements is 64 (32) bytes: one
    wavefront per write, and 2 sectors (1) per global request."""
    from tessera_ref.numerics import get_format

    k = kernel.from_source(TRANSPOSE.replace("f32", fmt), constants={"PAD": 0, "SWIZZLE": "none"})
    dtype = get_format(fmt).dtype
    X = np.arange(1024).reshape(32, 32).astype(dtype)
    Y = np.zeros_like(X)
    c = k(X, Y, grid=1, lanes=32).counters
    assert np.array_equal(Y.view(np.uint8), np.ascontiguousarray(X.T).view(np.uint8))
    assert c.smem_wavefronts == 32 * 1 + 32 * per_read and c.smem_ideal_wavefronts == 64
    assert c.global_sectors == 64 * sectors_per_access and c.hbm_bytes == 2 * X.nbytes
    assert c.smem_read_bytes == c.smem_write_bytes == X.nbytes


@pytest.mark.parametrize("pad, swizzle, waves, requests", [
    (0, "none", 286_720, 6_144), (1, "none", 32_768, 12_288), (0, "xor", 57_344, 6_144)])
def test_matmul_wavefronts_quoted_in_the_spec(pad, swizzle, waves, requests):
    """docs/spec/tiles.md's 256³ numbers, derived by hand. 16 tiles x 8 k-steps; per k-step:

    - the sB copy (32x64 f32, 256-byte rows): 512 16-byte pieces, 16 requests of 32 pieces,
      4 phases of 8 pieces = 128 contiguous bytes each: 64 wavefronts, 16 global requests;
    - the sA copy (64x32 f32): the same unpadded and swizzled (the swizzle permutes 16-byte
      chunks within a 128-byte row): 64 wavefronts, 16 requests; padded, rows are 132 bytes,
      so 4-byte pieces: 2048 of them, 64 requests of one row (33r + j: 32 banks), 64
      wavefronts and 64 global requests;
    - mma's a reads: 32 columns x 2 requests of 32 rows; lane m reads word 32m + k (bank k
      for all: 32 wavefronts), padded 33m + k (32 banks: 1), swizzled
      32m + 4((k // 4) ^ (m % 8)) + k % 4 (8 banks, 4 words each: 4): 64 x {32, 1, 4};
    - mma's b reads: 2048 elements row-major, 32 consecutive words per request: 64.

    Wavefronts: 128 x (64 + 64 + 64·{32, 1, 4} + 64) = 286,720 / 32,768 / 57,344. Global
    requests: 128 x (16 + {16, 64}) for the copies + 16 x 128 for C's 64x64 store (4096
    elements, 32 per request) = 6,144 / 12,288."""
    k = matmul.specialize(PAD=pad, SWIZZLE=swizzle)
    a = np.ones((256, 256), np.float32)
    counters = k(a, a, np.zeros((256, 256), np.float32), grid=(4, 4), lanes=128, checks=False).counters
    assert counters.smem_wavefronts == waves
    assert counters.smem_ideal_wavefronts == 32_768
    assert counters.global_requests == requests
