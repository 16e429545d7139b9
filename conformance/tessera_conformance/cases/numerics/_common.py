"""Helpers shared by the numerics cases."""
from __future__ import annotations

import numpy as np

__all__ = ["sample", "as_f32", "f64_bits", "same_values", "fp8_structure_rows"]


def sample(values, count: int, seed: int) -> list:
    """``count`` of ``values`` chosen without replacement by a fixed generator, in order."""
    values = list(values)
    if len(values) <= count:
        return values
    pick = np.sort(np.random.default_rng(seed).choice(len(values), count, replace=False))
    return [values[i] for i in pick]


def as_f32(values) -> np.ndarray:
    """Python floats (exact in f32; NaN signs kept) as an f32 array."""
    return np.array([np.float32(v) for v in values], dtype=np.float32).reshape(np.shape(values))


def same_values(got, want) -> bool:
    """Equal values, NaN where NaN (for the oracle's library functions that give values)."""
    with np.errstate(invalid="ignore"):  # signalling NaNs widen to quiet ones
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return got.shape == want.shape and bool(np.all((got == want) | (np.isnan(got) & np.isnan(want))))


def f64_bits(values) -> np.ndarray:
    """The f64 array of ``values`` with every NaN the canonical quiet +NaN (NUM-EW-1)."""
    a = np.array(values, dtype=np.float64)
    a[np.isnan(a)] = np.uint64(0x7FF8000000000000).view(np.float64)
    return a


def fp8_structure_rows(a, b, c) -> None:
    """Plant in e5m2 operands (``a`` [M ≥ 3, K ≥ 20], ``b`` [K, N ≥ 3], ``c`` [M, N]) outputs whose
    e5m2 bits show sm_90's fp8 structure (NUM-TC-1). (0, 0): 128·128 = 2^14 and 32·64 = 2^11
    (an e5m2 tie) at k = 2, 3 plus eight products 1.5·2^-12 at k mod 4 in {0, 1}: summed in the
    first block (3·2^-10), kept by the second (grid 2^-11): above the tie, 20480. (1, 1): the
    eight at k mod 4 in {2, 3}, in the 2^14's block: each 0.75 of the grid, cut; the tie, to even:
    16384. (2, 2): 1024 − 1024 and C = 2^-16, added after the blocks: 2^-16."""
    a[:3], b[:, :3], c[:3, :3] = 0, 0, 0
    for row, smalls, mid in ((0, [0, 1, 4, 5, 8, 9, 12, 13], 3), (1, [3, 6, 7, 10, 11, 14, 15, 18], 19)):
        a[row, smalls], b[smalls, row] = 1.5 * 2.0 ** -6, 2.0 ** -6
        a[row, 2], b[2, row], a[row, mid], b[mid, row] = 128, 128, 32, 64
    a[2, :2], b[:2, 2], c[2, 2] = (32, -32), 32, 2.0 ** -16
