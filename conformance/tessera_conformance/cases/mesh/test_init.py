"""MESH-TENSOR-INIT-1 and MESH-TENSOR-SCALAR-1: filled distributed tensors, and Python numbers
from 0-d distributed tensors (a pending sum folded first)."""
import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_ref.errors import AbstractValueError, LayoutError, ShapeError
from tessera_conformance import assert_bits, clause, eager

from ._reference import AXES, largest_axis, mesh_of

S = dist.ShardSpec


@clause("MESH-TENSOR-INIT-1")
def test_filled_tensors_in_any_layout(backend, mesh_shape):
    mesh, big = mesh_of(mesh_shape), largest_axis(mesh_shape)
    n = mesh.axis_size(big)
    z = eager(backend, lambda: dist.zeros((3, 2 * n), S((1,), (big,)), mesh))
    assert_bits(z, np.zeros((3, 2 * n), np.float32))
    o = eager(backend, lambda: dist.tensor((2 * n + 1, 2), S((0,), (big,), pad=True), mesh, "i32", init="ones"))
    assert_bits(o, np.ones((2 * n + 1, 2), np.int32))
    a = eager(backend, lambda: dist.arange(3 * n, S((0,), (big,)), mesh))
    assert_bits(a, np.arange(3 * n, dtype=np.int64))
    ab = dist.full((10 ** 6, 10 ** 6), 1.0, S((0,), (big,), pad=True), mesh, "bf16", abstract=True)
    assert ab.is_abstract and ab.nbytes_per_device == -(-10 ** 6 // n) * 10 ** 6 * 2
    with pytest.raises(LayoutError):
        dist.zeros((2,), S(None, (big,), reduce="sum"), mesh)


@clause("MESH-TENSOR-SCALAR-1")
def test_python_numbers_of_0d_tensors_fold_pending_sums(backend, mesh_shape):
    mesh = mesh_of(mesh_shape)
    dims = tuple(AXES[:len(mesh_shape)])
    shape = tuple(2 * mesh.axis_size(a) for a in dims)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    X = dist.tensor(shape, S(tuple(range(len(dims))), dims), mesh, data=x)
    total = eager(backend, lambda: float(op.sum(X)))
    assert total == float(x.sum()) and eager(backend, lambda: int(op.sum(X))) == int(x.sum())
    with pytest.raises(ShapeError):
        float(X)
    with pytest.raises(AbstractValueError):
        float(dist.tensor((), None, mesh))
