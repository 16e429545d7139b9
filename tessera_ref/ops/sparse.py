"""Sparse ops: ``spmm``, a CSR matrix times a dense matrix (GRAPH-SPMM-1).

The CSR matrix travels as three operands — ``indptr`` (index, ``[m+1]``), ``indices``
(index, ``[nnz]``) and ``data`` (``[nnz]``, a numeric policy) — and the attribute
``shape = (m, k)``. Each output element is a dot product over the row's stored nonzeros in
their STORED order (not sorted by column; duplicates are separate terms), sequential fused
multiply-adds in the policy's ``accum`` format from +0 (the NUM-RED-1 rule with the stored
order as k), rounded once into storage; under ``reduction="exact"`` the exact sum rounded
once (NUM-RED-4). The CSR structure is checked when the op runs.
"""
from __future__ import annotations

import numpy as np

from ..errors import OpError, ShapeError
from ..ir import TensorType
from ..numerics import accum_op
from ..numerics.arith import to_accum
from ..numerics.exactsum import exact_sum
from .adjoint import op, seed_of, sum_terms
from .bind import bind
from .sharding import replicated_rule
from .primitive import Attr, Cost, define
from .typecheck import (SEED_ATTR, check_int_tuple, nbytes, require_float, require_int, require_seed,
                        same_element, to_storage)

__all__ = ["spmm"]


def _check_shape(value) -> tuple:
    shape = check_int_tuple(value)
    if len(shape) != 2 or min(shape) < 0:
        raise ValueError("expected two non-negative ints (m, k)")
    return shape


def _require_rank(t: TensorType, rank: int, what: str) -> None:
    if t.rank != rank:
        raise ShapeError(f"spmm: {what} must have rank {rank}, got {t}",
                         fix="pass the CSR arrays as vectors and the dense operand as a [k, n] matrix")


def _spmm_infer(attrs, indptr, indices, data, dense):
    m, k = attrs["shape"]
    require_int("spmm (indptr)", indptr)
    require_int("spmm (indices)", indices)
    for t, rank, what in ((indptr, 1, "indptr"), (indices, 1, "indices"), (data, 1, "data"),
                          (dense, 2, "the dense operand")):
        _require_rank(t, rank, what)
    require_float("spmm", data, dense)
    policy = same_element("spmm", data, dense)
    if indices.shape != data.shape:
        raise ShapeError(f"spmm: indices {indices} and data {data} must have one length (nnz)",
                         fix="pass one column index per stored value")
    if indptr.shape[0] != m + 1 and not isinstance(indptr.shape[0], str):
        raise ShapeError(f"spmm: indptr {indptr} must have m + 1 = {m + 1} entries for shape=({m}, {k})",
                         fix="pass the CSR matrix's own indptr and shape")
    if dense.shape[0] != k:
        raise ShapeError(f"spmm: the dense operand {dense} must have k = {k} rows for the CSR matrix "
                         f"of shape ({m}, {k})", fix="the dense matrix's rows must match the sparse columns")
    if policy.reduction == "exact" and policy.storage.bits > 32:
        raise OpError(f"spmm: reduction='exact' needs values of at most 32 bits, got {data}",
                      fix="use the canonical reduction for f64 values")
    out = TensorType((m, dense.shape[1]), policy)
    require_seed("spmm", attrs, out)
    return out


def _check_csr(indptr: np.ndarray, indices: np.ndarray, m: int, k: int) -> None:
    """An OpError naming the first bad row unless the CSR structure is valid."""
    nnz = indices.shape[0]
    if indptr.shape[0] != m + 1:
        raise OpError(f"spmm: indptr has {indptr.shape[0]} entries, the CSR shape ({m}, {k}) needs {m + 1}",
                      fix="pass the CSR matrix's own indptr and shape")
    if indptr[0] != 0:
        raise OpError(f"spmm: row 0 starts at indptr[0] = {indptr[0]}, not 0",
                      fix="pass a valid CSR matrix (scipy: .tocsr())")
    if indptr[-1] != nnz:
        raise OpError(f"spmm: row {m - 1} ends at indptr[{m}] = {indptr[-1]}, not at nnz = {nnz} (the length of "
                      "indices and data)", fix="pass a valid CSR matrix (scipy: .tocsr())")
    bad = np.flatnonzero(np.diff(indptr) < 0)
    if bad.size:
        i = int(bad[0])
        raise OpError(f"spmm: indptr decreases at row {i} (indptr[{i}] = {indptr[i]}, indptr[{i + 1}] = "
                      f"{indptr[i + 1]})", fix="indptr must be non-decreasing")
    out_of_range = np.flatnonzero((indices < 0) | (indices >= k))
    if out_of_range.size:
        p = int(out_of_range[0])
        row = int(np.searchsorted(indptr, p, side="right")) - 1
        raise OpError(f"spmm: row {row} stores column index {indices[p]} (entry {p}), outside [0, {k})",
                      fix="column indices must be less than the matrix's column count k")


def _spmm_impl(call, indptr, indices, data, dense):
    m, k = call.attrs["shape"]
    _check_csr(indptr, indices, m, k)
    policy = call.out_types[0].policy
    lengths = np.diff(indptr)
    steps = int(lengths.max(initial=0))
    n = dense.shape[1]
    if policy.reduction == "exact":
        # the exact products (at most 32-bit operands: exact in f64), padded with exact zeros
        terms = np.zeros((m, steps, n))
        for s in range(steps):
            rows = np.flatnonzero(lengths > s)
            p = indptr[rows] + s
            terms[rows, s] = data[p].astype(np.float64)[:, None] * dense[indices[p]].astype(np.float64)
        key = call.attrs.get("seed") if policy.rounding == "stochastic" else None
        return exact_sum(terms, axis=1, out_fmt=policy.storage, rounding=policy.rounding,
                         overflow=policy.overflow, key=key)
    accum = policy.accum
    values, matrix = to_accum(data, accum), to_accum(dense, accum)
    acc = np.zeros((m, n), dtype=accum.dtype)
    for s in range(steps):  # step s: the s-th stored entry of every row that has one
        rows = np.flatnonzero(lengths > s)
        p = indptr[rows] + s
        acc[rows] = accum_op("fma", values[p][:, None], matrix[indices[p]], acc[rows], accum=accum)
    return to_storage(call, acc)


def _spmm_cost(call) -> Cost:
    nnz, n = call.in_types[2].shape[0], call.in_types[3].shape[1]
    moved = sum(nbytes(t) for t in call.in_types) + nbytes(call.out_types[0])
    return Cost(2 * nnz * n, moved)


def _one_hots(attrs, indptr, indices, policy):
    """``(R, Cm)``: ``R [nnz, m]`` is 1 at (p, row of entry p), ``Cm [nnz, k]`` 1 at
    (p, indices[p]); 0/1 in ``policy``, built with comparisons, so they trace."""
    o, (m, k), nnz = op(attrs), attrs["shape"], indices.shape[0]
    pos = np.arange(nnz, dtype=np.int64)[:, None]
    lo = o.reshape(o.slice(indptr, [0], [m]), (1, m))
    hi = o.reshape(o.slice(indptr, [1], [m + 1]), (1, m))
    rows = o.logical_and(o.less_equal(lo, pos), o.less(pos, hi))
    cols = o.equal(o.reshape(indices, (nnz, 1)), np.arange(k, dtype=np.int64)[None, :])
    return o.cast(rows, policy, **seed_of(attrs)), o.cast(cols, policy, **seed_of(attrs))


def _spmm_vjp(attrs, primals, results, cts):
    """AD-SPMM-1: ``data̅[p] = Σ_j ḡ[row(p), j]·dense[indices[p], j]`` and
    ``dense̅ = Aᵀ·ḡ`` (duplicates summed in stored order), by one-hot matmuls: ``Ḡ_p = R·ḡ``
    and ``D_p = Cm·dense`` gather rows exactly (one nonzero term per dot; an inf or NaN in a
    gathered matrix makes its 0 products NaN), ``data̅ = Σ_j Ḡ_p ⊗ D_p``,
    ``dense̅ = Cmᵀ·(data ⊗ Ḡ_p)``. indptr and indices get none.

    Cost: the one-hot matrices take O(nnz·(m + k)) memory and the matmuls O(nnz·(m + k)·n)
    operations, against the O(nnz·n) of the op. The registry has no gather or scatter-add
    primitive on index operands (and a CSR transpose needs a sort), so this rule — meant for
    the exact reference, not for large sparse matrices — keeps the one-hot form."""
    o, (indptr, indices, data, dense), g = op(attrs), primals, cts[0]
    rows, cols = _one_hots(attrs, indptr, indices, data.type.policy)
    g_rows = o.matmul(rows, g)
    data_bar = o.sum(o.mul(g_rows, o.matmul(cols, dense)), axis=1)
    dense_bar = o.matmul(cols, o.mul(o.reshape(data, (data.shape[0], 1)), g_rows), transpose_a=True)
    return None, None, data_bar, dense_bar


def _spmm_jvp(attrs, primals, tangents, results):
    """``spmm(Ȧ, dense) + spmm(A, ḋense)`` (bilinear in data and dense)."""
    (indptr, indices, data, dense), (d_data, d_dense) = primals, tangents[2:]
    return sum_terms([None if d_data is None else bind(SPMM, indptr, indices, d_data, dense, **attrs),
                      None if d_dense is None else bind(SPMM, indptr, indices, data, d_dense, **attrs)], attrs)


SPMM = define("spmm", infer=_spmm_infer, impl=_spmm_impl, cost=_spmm_cost, spec="GRAPH-SPMM-1", shard=replicated_rule,
              vjp=_spmm_vjp, jvp=_spmm_jvp,
              attrs={"shape": Attr(doc="(m, k), the CSR matrix's shape", check=_check_shape), **SEED_ATTR})


def _csr_parts(csr):
    """``(indptr, indices, data, shape)`` of a SciPy CSR matrix/array or such a tuple."""
    if isinstance(csr, tuple) and len(csr) == 4:
        return csr
    fmt = getattr(csr, "format", None)
    if fmt == "csr":
        return csr.indptr, csr.indices, csr.data, csr.shape
    if fmt is not None:
        raise OpError(f"spmm takes a CSR matrix, got a SciPy {fmt!r} matrix", fix="convert it with .tocsr()")
    raise OpError(f"spmm takes a CSR matrix (scipy.sparse csr_matrix/csr_array or a tuple (indptr, indices, "
                  f"data, shape)), got {type(csr).__name__}", fix="pass scipy.sparse.csr_matrix(x)")


def spmm(csr, dense, *, seed=None):
    """``csr @ dense`` for a CSR matrix ``[m, k]`` and a dense ``[k, n]`` (GRAPH-SPMM-1).

    ``csr`` is a SciPy CSR matrix/array or a tuple ``(indptr, indices, data, shape)``;
    ``data`` and ``dense`` have one policy. Output element ``(i, j)``: ``acc = +0``, then
    ``acc = fma(data[p], dense[indices[p], j], acc)`` for ``p = indptr[i] … indptr[i+1]−1``
    in stored order, in the ``accum`` format, rounded once into storage. An invalid CSR
    structure (indptr not starting at 0, decreasing, not ending at nnz; a column index out
    of range) is an OpError naming the row.
    """
    indptr, indices, data, shape = _csr_parts(csr)
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise OpError(f"spmm: the CSR shape must be two ints (m, k), got {shape!r}",
                      fix="pass (indptr, indices, data, (m, k))") from None
    return bind(SPMM, indptr, indices, data, dense, shape=shape, seed=seed)
