"""GRAPH-ANNOT-1: Tensor[...] annotations on traced functions' parameters are checked and applied."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import jit, op
from tessera_ref.errors import DTypeError, ShapeError
from tessera_ref.numerics import accum, get_format
from tessera_ref.numerics.annotations import Tensor
from tessera_conformance import assert_bits, clause

BF16, F32, F64 = (get_format(n) for n in ("bf16", "f32", "f64"))
N = "N"  # a symbolic dimension (a name, so linters do not read "N" as a forward reference)
ROWS, ROWS_2 = Tensor["B", F32], Tensor["B", 2, F32]


@clause("GRAPH-ANNOT-1")
def test_shapes_are_checked_with_symbols_bound_across_parameters(backend):
    def f(x: ROWS_2, y: ROWS):
        return op.sum(x, axis=1) + y

    jf = jit(f, backend=backend)
    assert_bits(jf(np.ones((3, 2), np.float32), np.ones(3, np.float32)), np.full(3, 3.0, np.float32))
    for x, y in ((np.ones((3, 3), np.float32), np.ones(3, np.float32)),
                 (np.ones((3, 2), np.float32), np.ones(4, np.float32)),
                 (np.ones((3, 2, 1), np.float32), np.ones(3, np.float32))):
        with pytest.raises(ShapeError):
            jf(x, y)


@clause("GRAPH-ANNOT-1")
def test_policies_are_applied(backend):
    def f(x: Tensor[N, BF16 @ accum(F32)]):
        return x + x

    x = np.array([1.0, 1 + 2.0 ** -9, 3.0 + 2.0 ** -7], np.float64)
    got = jit(f, backend=backend)(x)
    want = (np.asarray(x.astype(ml_dtypes.bfloat16), np.float32) * 2).astype(ml_dtypes.bfloat16)
    assert_bits(np.asarray(got), want)
    pol = BF16 @ accum(F64)

    def g(x: Tensor[N, pol]):
        return x

    assert jit(g, backend=backend)(tr.asarray(x, dtype="bf16")).type.policy == pol
    with pytest.raises(DTypeError):
        jit(g, backend=backend)(tr.asarray(x, dtype="f32"))
