"""Shared helpers of the lowering tests: trace, lower, run and compare bits."""
import numpy as np

import tessera_ref as t
from tessera_ref.lowering import lower


def bits(x: np.ndarray) -> np.ndarray:
    x = np.atleast_1d(np.asarray(x))
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def lowered(fn, *args, directives=None, checks=True):
    """``(tile results, graph results, reports, program)`` for ``fn`` traced on ``args``."""
    g = t.jit(fn)
    out = g(*args)
    want = [np.asarray(o.data) for o in (out if isinstance(out, tuple) else (out,))]
    program = lower(g.trace(*args), directives)
    got, reports = program.run(*args, checks=checks)
    return got, want, reports, program


def assert_same_bits(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert np.array_equal(bits(g), bits(w)), f"max |diff| {np.max(np.abs(g.astype(np.float64) - w))}"
