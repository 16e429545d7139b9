"""GRAPH-INIT-1: zeros, ones, full and arange — values converted once into the element type."""
import ml_dtypes
import numpy as np
import pytest

from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError
from tessera_conformance import assert_bits, clause, run


@clause("GRAPH-INIT-1")
def test_full_zeros_ones_convert_once(backend):
    assert_bits(run(backend, lambda: op.full((2, 3), 0.1, "bf16")), np.full((2, 3), 0.1).astype(ml_dtypes.bfloat16))
    assert_bits(run(backend, lambda: op.zeros((4,))), np.zeros(4, np.float32))
    assert not np.signbit(run(backend, lambda: op.zeros((4,)))).any()
    assert_bits(run(backend, lambda: op.ones((2, 2), "i32")), np.ones((2, 2), np.int32))
    assert_bits(run(backend, lambda x: x + op.ones(x.shape), np.arange(3, dtype=np.float32)),
                np.arange(1, 4, dtype=np.float32))
    with pytest.raises(DTypeError):
        op.full((2,), 256, "ui8")


@clause("GRAPH-INIT-1")
def test_arange_is_exact_integers(backend):
    assert_bits(run(backend, lambda: op.arange(5)), np.arange(5, dtype=np.int64))
    assert_bits(run(backend, lambda: op.arange(7, -3, -4, dtype="i32")), np.array([7, 3, -1], np.int32))
    assert_bits(run(backend, lambda: op.arange(2 ** 24, 2 ** 24 + 3, dtype="f32")),
                np.array([2 ** 24, 2 ** 24, 2 ** 24 + 2], np.float32))  # each exact integer rounded once
    for bad in (lambda: op.arange(0.5), lambda: op.arange(0, 4, 0), lambda: op.arange(2 ** 60, 2 ** 60 + 1, dtype="f32")):
        with pytest.raises(OpError):
            bad()
