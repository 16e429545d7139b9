"""spmm: CSR × dense (GRAPH-SPMM-1).

The bit-level reference re-implements the clause with exact rational arithmetic
(``fractions.Fraction``): per output element, fused multiply-adds over the row's stored
entries in stored order, each rounded once to f32. Accuracy is checked against SciPy in f64.
"""
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

from numerics_reference import round_f32

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_ref.interp import run_function
from tessera_ref.ir import TensorType, parse_module
from tessera_ref.numerics import Policy
from tessera_ref.ops import Call, primitive

U32 = 2.0 ** -24
HERE = "test_sparse.py:"


def bits(x):
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)



def ref_spmm(indptr, indices, data, dense):
    """The clause in f32: acc = +0, acc = fma(data[p], dense[indices[p], j], acc), stored order."""
    m, n = len(indptr) - 1, dense.shape[1]
    out = np.zeros((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            acc = Fraction(0)
            for p in range(indptr[i], indptr[i + 1]):
                acc = Fraction(float(round_f32(acc + Fraction(float(data[p])) * Fraction(float(dense[indices[p], j])))))
            out[i, j] = np.float32(float(acc))
    return out


def _unsorted_csr(rng, m=6, k=9, n=4, per_row=12):
    """A CSR matrix with long rows, unsorted column indices and repeated columns."""
    lengths = rng.integers(0, per_row + 1, size=m)
    lengths[2] = 0  # an empty row
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = rng.integers(0, k, size=indptr[-1]).astype(np.int64)
    data = (rng.standard_normal(indptr[-1]) * 10.0 ** rng.integers(-3, 4, size=indptr[-1])).astype(np.float32)
    dense = rng.standard_normal((k, n)).astype(np.float32)
    return indptr, indices, data, dense


def test_spmm_bits_follow_stored_order():
    rng = np.random.default_rng(1)
    indptr, indices, data, dense = _unsorted_csr(rng)
    got = op.spmm((indptr, indices, data, (6, 9)), dense)
    ref = ref_spmm(indptr, indices, data, dense)
    assert np.array_equal(bits(got), bits(ref))
    assert (np.asarray(got)[2] == 0).all() and not np.signbit(np.asarray(got)[2]).any()
    # the stored order matters: sorting each row by column (SciPy's canonical form) changes bits
    csr = sp.csr_matrix((data, indices, indptr), shape=(6, 9))
    csr.sum_duplicates()
    csr.sort_indices()
    assert not np.array_equal(bits(ref_spmm(csr.indptr, csr.indices, csr.data, dense)), bits(ref))


@pytest.mark.parametrize("dtype, u", [(np.float32, U32), (ml_dtypes.bfloat16, 2.0 ** -8), (np.float16, 2.0 ** -11)])
def test_spmm_agrees_with_scipy_float64(dtype, u):
    rng = np.random.default_rng(2)
    csr = sp.random(30, 20, density=0.3, random_state=3, format="csr", dtype=np.float64)
    data = csr.data.astype(dtype)
    dense = rng.standard_normal((20, 7)).astype(dtype)
    got = np.asarray(op.spmm((csr.indptr, csr.indices, data, csr.shape), dense)).astype(np.float64)
    a64 = sp.csr_matrix((data.astype(np.float64), csr.indices, csr.indptr), shape=csr.shape)
    exact = a64 @ dense.astype(np.float64)
    row_len = np.diff(csr.indptr)[:, None]
    # row_len fma roundings in f32 (γ_L·Σ|a||b|), then one rounding into storage (u·|exact|)
    bound = (1 + u) * row_len * U32 * (abs(a64) @ np.abs(dense.astype(np.float64))) + u * np.abs(exact)
    assert (np.abs(got - exact) <= bound).all()


def test_spmm_accepts_scipy_csr():
    rng = np.random.default_rng(4)
    csr = sp.random(5, 6, density=0.5, random_state=5, format="csr", dtype=np.float32)
    dense = rng.standard_normal((6, 3)).astype(np.float32)
    from_tuple = op.spmm((csr.indptr, csr.indices, csr.data, csr.shape), dense)
    assert np.array_equal(bits(op.spmm(csr, dense)), bits(from_tuple))
    assert np.array_equal(bits(op.spmm(sp.csr_array(csr), dense)), bits(from_tuple))


def test_spmm_exact_reduction():
    pol = Policy("f32", reduction="exact")
    data = tr.asarray(np.array([1e8, 1.0, -1e8], np.float32), policy=pol)
    dense = tr.asarray(np.array([[1.0], [1.0]], np.float32), policy=pol)
    csr = (np.array([0, 3]), np.array([0, 1, 0]), data, (1, 2))
    assert float(np.asarray(op.spmm(csr, dense))[0, 0]) == 1.0  # exact 1e8 + 1 − 1e8
    canonical = (np.array([0, 3]), np.array([0, 1, 0]), np.asarray(data), (1, 2))
    assert float(np.asarray(op.spmm(canonical, np.asarray(dense)))[0, 0]) == 0.0  # 1e8 ⊕ 1 = 1e8


def test_spmm_cost():
    prim = primitive("spmm")
    types = (TensorType((5,), "index"), TensorType((7,), "index"), TensorType((7,), "f32"),
             TensorType((3, 6), "f32"))
    cost = prim.cost(Call(prim, {"shape": (4, 3)}, types, (TensorType((4, 6), "f32"),)))
    assert cost.flops == 2 * 7 * 6
    assert cost.bytes == 8 * 5 + 8 * 7 + 4 * 7 + 4 * 18 + 4 * 24


def _csr():
    return np.array([0, 2, 3]), np.array([0, 2, 1]), np.ones(3, np.float32), (2, 3)


@pytest.mark.parametrize("make, err, words", [
    (lambda: op.spmm((np.array([0, 2, 1, 3]), np.array([0, 1, 2]), np.ones(3, np.float32), (3, 3)),
                     np.ones((3, 2), np.float32)), OpError, ["row 1", "decreases"]),
    (lambda: op.spmm((np.array([0, 1, 3]), np.array([0, 1, 5]), np.ones(3, np.float32), (2, 3)),
                     np.ones((3, 2), np.float32)), OpError, ["row 1", "column index 5"]),
    (lambda: op.spmm((np.array([0, 1, 2]), np.array([0, 1, 2]), np.ones(3, np.float32), (2, 3)),
                     np.ones((3, 2), np.float32)), OpError, ["nnz = 3"]),
    (lambda: op.spmm(_csr(), np.ones((4, 2), np.float32)), ShapeError, ["tensor<4x2xf32>", "k = 3"]),
    (lambda: op.spmm(_csr(), np.ones((3, 2), np.float16)), DTypeError, ["tensor<3xf32>", "tensor<3x2xf16>"]),
    (lambda: op.spmm(_csr()[:3] + ((3, 3),), np.ones((3, 2), np.float32)), ShapeError, ["indptr", "tensor<3xindex>"]),
    (lambda: op.spmm(sp.random(3, 3, density=0.5, format="csc", dtype=np.float32), np.ones((3, 2), np.float32)),
     OpError, ["'csc'", "tocsr"]),
    (lambda: op.spmm(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)), OpError, ["CSR"]),
    (lambda: tr.ops.bind(primitive("spmm"), *_csr()[:3], np.ones((3, 2), np.float32), shape=(2, 3), sorted=True),
     OpError, ["sorted"]),
])
def test_spmm_errors_name_the_problem_and_line(make, err, words):
    with pytest.raises(err) as info:
        make()
    text = str(info.value)
    assert HERE in text
    for w in words:
        assert w in text


def test_spmm_traced_and_round_trip():
    rng = np.random.default_rng(6)
    indptr, indices, data, dense = _unsorted_csr(rng)

    def f(indptr, indices, data, dense):
        return op.spmm((indptr, indices, data, (6, 9)), dense)
    eager = f(indptr, indices, data, dense)
    jitted = tr.jit(f)
    assert np.array_equal(bits(jitted(indptr, indices, data, dense)), bits(eager))
    m = jitted.trace(indptr, indices, data, dense)
    parsed = parse_module(str(m))
    assert str(parsed) == str(m)
    again = run_function(parsed.body.first_op, indptr, indices, data, dense)[0]
    assert np.array_equal(bits(again), bits(eager))
