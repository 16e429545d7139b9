"""AD-SVD-1 at repeated and zero singular values: the rule's zeros keep every term finite."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op


@pytest.mark.parametrize("a", [np.eye(3), np.diag([2.0, 2.0, 1.0]), np.diag([3.0, 1.0, 0.0]),
                               np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]]),
                               np.array([[3.0, 1, 0], [1, 2, 1], [0.5, 1, 1.5]])],
                         ids=["identity", "repeated", "zero", "rank-2", "distinct"])
def test_functions_of_the_singular_values_alone_get_finite_true_gradients(a):
    u, s, vt = (np.asarray(t) for t in op.svd(a))
    w = np.array([1.0, 0.5, 0.25])
    g = np.asarray(tr.grad(lambda a: op.sum(op.mul(op.svd(a)[1], w)))(a))
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, u @ np.diag(w) @ vt, atol=1e-12)  # d(w·s) = U·diag(w)·Vᵀ (s̄ = w)
    if len(set(np.round(s, 8))) == len(s) and s.min() > 1e-8:  # distinct and nonzero: differentiable
        h = 1e-6
        fd = np.array([[(np.dot(w, np.linalg.svd(a + h * e)[1]) - np.dot(w, np.linalg.svd(a - h * e)[1])) / (2 * h)
                        for e in np.eye(9)[k].reshape(1, 3, 3)] for k in range(9)]).reshape(3, 3)
        np.testing.assert_allclose(g, fd, atol=1e-6)


def test_singular_vectors_at_a_repeated_value_are_finite_where_they_were_nan():
    a = np.diag([2.0, 2.0, 1.0])
    g = np.asarray(tr.grad(lambda a: op.sum(op.svd(a)[0]))(a))
    assert np.isfinite(g).all()
