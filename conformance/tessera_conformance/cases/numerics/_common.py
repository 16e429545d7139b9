"""Helpers shared by the numerics cases."""
from __future__ import annotations

import numpy as np

from tessera_conformance import ORACLE, not_applicable

__all__ = ["oracle_only", "sample", "as_f32", "f64_bits", "same_values"]


def oracle_only(backend, what: str) -> None:
    """Skip as n/a on every backend but the oracle: ``what`` is a library function of the
    oracle's numerics (no backend executes it), checked here against the case's reference."""
    if backend != ORACLE:
        not_applicable(f"{what} has no backend entry point; the case checks the oracle's numerics library")


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
