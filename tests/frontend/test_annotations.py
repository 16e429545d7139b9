"""Tensor[...] annotations on @jit parameters are checked and applied (GRAPH-ANNOT-1)."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import jit, op
from tessera_ref.errors import DTypeError, ShapeError
from tessera_ref.numerics import accum
from tessera_ref.numerics.annotations import Tensor
from tessera_ref.numerics.formats import get_format

F32, BF16 = get_format("f32"), get_format("bf16")
N = "N"  # a symbolic dimension (a name, so linters do not read "N" as a forward reference)
ROWS, ROWS_4 = Tensor["B", F32], Tensor["B", 4, F32]


def test_a_wrong_dimension_names_the_parameter_and_the_line():
    @jit
    def f(x: ROWS_4, y: ROWS):
        return op.sum(x, axis=1) + y

    assert f(np.ones((3, 4), np.float32), np.ones(3, np.float32)).shape == (3,)
    with pytest.raises(ShapeError) as info:
        f(np.ones((3, 5), np.float32), np.ones(3, np.float32))
    assert "'x'" in str(info.value) and "test_annotations.py" in str(info.value)
    with pytest.raises(ShapeError, match="'y'"):
        f(np.ones((3, 4), np.float32), np.ones(2, np.float32))  # B bound to 3 by x


def test_the_annotated_policy_is_applied():
    @jit
    def f(x: Tensor[N, BF16 @ accum(F32)]):
        return x + x

    out = f(np.array([1.0, 1 + 2 ** -9], np.float64))  # NumPy data: converted into bf16 once
    assert str(out.type) == "tensor<2xbf16>" and np.asarray(out, np.float32).tolist() == [2.0, 2.0]
    pol = BF16 @ accum(get_format("f64"))

    @jit
    def g(x: Tensor[N, pol]):
        return x

    y = g(tr.asarray(np.ones(2), dtype="bf16"))  # same storage: retyped, the bits kept
    assert y.type.policy == pol
    with pytest.raises(DTypeError, match="not converted implicitly"):
        g(tr.asarray(np.ones(2, np.float32)))
