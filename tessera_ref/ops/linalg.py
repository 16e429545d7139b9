"""Linear algebra ops: ``matmul``/``gemm``, ``cholesky`` and ``svd`` (GRAPH-MATMUL-1,
GRAPH-CHOLESKY-1, GRAPH-SVD-1).

- ``matmul`` is the batched ``[..., M, K] @ [..., K, N]`` (batch axes broadcast as NumPy's)
  with an optional third operand ``C`` it accumulates into (``gemm``). Every output element is
  the canonical dot product of NUM-RED-1 — sequential fused multiply-adds over ascending k in
  the policy's ``accum`` format, from +0 or from ``C`` — rounded once into storage; under
  ``reduction="exact"`` the exact sum rounded once (NUM-RED-4); under a tensor-core policy
  (``accum="tc:sm80"``) the model's block FMAs (NUM-TC-2…4). ``transpose_a``/``transpose_b``
  use an operand transposed in its last two axes (same products, same order); ``tile_shape``
  is recorded for the lowering and changes no bit.
- ``cholesky`` and ``svd`` are each defined by ONE algorithm in the ``accum`` format, with
  every dot product in the NUM-RED-1 order (:func:`~tessera_ref.numerics.reduce.dot_canonical`)
  and every other step a single IEEE operation (:func:`~tessera_ref.numerics.arith.accum_op`):
  Cholesky–Banachiewicz and one-sided Jacobi (Hestenes) with a round-robin pair order.
  Elements whose dependencies are complete are computed together (vectorized); that changes
  no bit, each element's own sequence of operations being fixed.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import OpError, ShapeError
from ..ir import ShardLayout, TensorType
from ..numerics import accum_op, tc
from ..numerics.arith import to_accum
from ..numerics.exactsum import exact_dot
from ..numerics.reduce import dot_canonical
from .adjoint import constant, eye, mT, op, seed_of, sum_terms, unbroadcast
from .values import asarray
from .bind import bind
from .sharding import replicated_rule
from .primitive import Attr, Cost, define
from .sharding import ShardPlan
from .typecheck import (SEED_ATTR, broadcast_shapes, check_bool, check_int_tuple, nbytes, numel,
                        require_float, require_seed, same_element, to_storage)

__all__ = ["matmul", "gemm", "cholesky", "svd"]


def _types(*types) -> str:
    return ", ".join(str(t) for t in types)


def _require_matrix(name: str, t: TensorType, what: str, dims: str) -> None:
    """A ShapeError unless ``t`` has rank >= 2 (a matrix or a batch of matrices)."""
    if t.rank < 2:
        raise ShapeError(f"{name}: {what} must be a matrix or a batch of matrices {dims}, got {t} "
                         f"(rank {t.rank})",
                         fix="give a vector a row or column axis, e.g. op.reshape(x, (1, n)) or "
                             "op.reshape(x, (n, 1))")


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether ``shape`` broadcasts to ``target`` (right-aligned; equal dimensions or 1)."""
    return len(shape) <= len(target) and all(d in (1, t) for d, t in zip(shape[::-1], target[::-1]))


def _swap_last(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


# ---------------------------------------------------------------------------------------
# matmul / gemm

def _check_tile_shape(value) -> tuple:
    tile = check_int_tuple(value)
    if len(tile) != 3 or any(t < 1 for t in tile):
        raise ValueError("expected three positive ints (BM, BN, BK)")
    return tile


def _matmul_infer(attrs, a, b, c=None):
    _require_matrix("matmul", a, "a", "[..., M, K]")
    _require_matrix("matmul", b, "b", "[..., K, N]")
    require_float("matmul", a, b)
    policy = same_element("matmul", a, b)
    m, ka = a.shape[-1:-3:-1] if attrs["transpose_a"] else a.shape[-2:]
    kb, n = b.shape[-1:-3:-1] if attrs["transpose_b"] else b.shape[-2:]
    if ka != kb:
        raise ShapeError(f"matmul: contraction sizes differ ({_types(a, b)}): a has K={ka}, b has K={kb}"
                         f" (transpose_a={attrs['transpose_a']}, transpose_b={attrs['transpose_b']})",
                         fix="the last axis of a (its second-to-last with transpose_a) must match the "
                             "second-to-last axis of b (its last with transpose_b)")
    try:
        batch = broadcast_shapes("matmul", TensorType(a.shape[:-2], policy), TensorType(b.shape[:-2], policy))
    except ShapeError:
        raise ShapeError(f"matmul: the batch axes of {_types(a, b)} do not broadcast",
                         fix="make the leading (batch) axes equal, or size 1 where they differ") from None
    out = TensorType(batch + (m, n), policy)
    if c is not None:
        same_element("matmul", a, b, c)
        if not _broadcasts_to(c.shape, out.shape):
            raise ShapeError(f"matmul: C {c} does not broadcast to the result shape {list(out.shape)} of "
                             f"{_types(a, b)}", fix="pass C with the shape of a @ b (or one that broadcasts to it)")
    if policy.reduction == "exact" and policy.storage.bits > 32:
        raise OpError(f"matmul: reduction='exact' needs operands of at most 32 bits, got {_types(a, b)}",
                      fix="use the canonical reduction for f64, or f32 and narrower operands")
    require_seed("matmul", attrs, out)
    return out


def _matmul_impl(call, a, b, c=None):
    a = _swap_last(a) if call.attrs["transpose_a"] else a
    b = _swap_last(b) if call.attrs["transpose_b"] else b
    policy = call.out_types[0].policy
    if policy.reduction == "exact":
        key = call.attrs.get("seed") if policy.rounding == "stochastic" else None
        return exact_dot(a, b, c=c, out_fmt=policy.storage, rounding=policy.rounding,
                         overflow=policy.overflow, key=key)
    if policy.tc is not None:  # NUM-TC-6: C (storage values) enters exactly as f32
        c32 = 0.0 if c is None else to_accum(c, policy.accum)
        return to_storage(call, tc.mma(a, b, c32, tc.model(policy.tc), fmt=policy.storage))
    return to_storage(call, dot_canonical(a, b, accum=policy.accum, c=c))


def _matmul_cost(call) -> Cost:
    a = call.in_types[0]
    k = a.shape[-2] if call.attrs["transpose_a"] else a.shape[-1]
    moved = sum(nbytes(t) for t in call.in_types) + nbytes(call.out_types[0])
    return Cost(2 * numel(call.out_types[0]) * k, moved)


def _matmul_shard(attrs, a, b, c=None):
    """MESH-SHARD-4: M follows ``a``'s split, N ``b``'s, batch dimensions ``a``'s. When K is split
    over the same axes in both operands (or in one, the other then sliced to match, which
    costs no communication) each device multiplies its K block and the result is a pending
    sum over those axes — the K order then becomes: each block in the canonical order, then
    the blocks folded in rank order (NUM-RED-3). With ``C`` (gemm) K is made whole: adding
    ``C`` to every rank's partial would count it once per rank."""
    la, lb = a.layout, b.layout
    ka, ma = (a.rank - 2, a.rank - 1) if attrs["transpose_a"] else (a.rank - 1, a.rank - 2)
    kb, nb = (b.rank - 1, b.rank - 2) if attrs["transpose_b"] else (b.rank - 2, b.rank - 1)
    k_axes = la.dims[ka] if la.dims[ka] else lb.dims[kb]
    if (la.dims[ka] and lb.dims[kb] and la.dims[ka] != lb.dims[kb]) or c is not None or la.padded or lb.padded:
        k_axes = ()
    m_axes = tuple(x for x in la.dims[ma] if x not in k_axes)
    n_axes = tuple(x for x in lb.dims[nb] if x not in k_axes and x not in m_axes)
    m_axes = m_axes if len(m_axes) == len(la.dims[ma]) else ()
    n_axes = n_axes if len(n_axes) == len(lb.dims[nb]) else ()
    used = set(k_axes) | set(m_axes) | set(n_axes)
    out_batch = max(a.rank, b.rank) - 2
    batch = [()] * out_batch  # a's batch splits, right-aligned onto the output's batch dims
    for i in range(a.rank - 2):
        d = la.dims[i]
        if a.shape[i] != 1 and not set(d) & used:
            batch[out_batch - (a.rank - 2) + i] = d
            used |= set(d)

    padded = la.padded or lb.padded  # padded M, N or batch blocks stay padded (K is then whole)

    def operand(t, kdim, mdim, mn_axes):
        dims = [batch[out_batch - (t.rank - 2) + i] if t.shape[i] != 1 else () for i in range(t.rank - 2)]
        dims += [(), ()]
        dims[kdim], dims[mdim] = k_axes, mn_axes
        return ShardLayout(tuple(dims), padded=padded)
    operands = (operand(a, ka, ma, m_axes), operand(b, kb, nb, n_axes))
    result = ShardLayout(tuple(batch) + (m_axes, n_axes), k_axes, padded=padded)
    if c is not None:  # C is split like the result (right-aligned; its size-1 dimensions broadcast)
        off = result.rank - c.rank
        operands += (ShardLayout(tuple(result.dims[off + d] if c.shape[d] != 1 else () for d in range(c.rank)),
                                 padded=padded),)
    return ShardPlan(operands, (result,), stacked=True)


def _matmul_vjp(attrs, primals, results, cts):
    """AD-MATMUL-1: ``Ā = ḡ·op(B)ᵀ`` and ``B̄ = op(A)ᵀ·ḡ`` (each put into its operand's
    orientation by the transpose flags, never by a transpose op), summed over broadcast batch
    axes; ``C̄ = ḡ`` summed to C's shape."""
    a, b = primals[:2]
    g, ta, tb, seed = cts[0], attrs["transpose_a"], attrs["transpose_b"], seed_of(attrs)
    da = (matmul(b, g, transpose_a=tb, transpose_b=True, **seed) if ta
          else matmul(g, b, transpose_b=not tb, **seed))
    db = (matmul(g, a, transpose_a=True, transpose_b=ta, **seed) if tb
          else matmul(a, g, transpose_a=not ta, **seed))
    out = (unbroadcast(da, a.shape, attrs), unbroadcast(db, b.shape, attrs))
    return out + ((unbroadcast(g, primals[2].shape, attrs),) if len(primals) == 3 else ())


def _matmul_jvp(attrs, primals, tangents, results):
    """``Ȧ·op(B) + op(A)·Ḃ + Ċ`` with the call's transpose flags."""
    a, b = primals[:2]
    flags = dict(transpose_a=attrs["transpose_a"], transpose_b=attrs["transpose_b"], **seed_of(attrs))
    terms = [matmul(tangents[0], b, **flags) if tangents[0] is not None else None,
             matmul(a, tangents[1], **flags) if tangents[1] is not None else None]
    if len(primals) == 3 and tangents[2] is not None:
        terms.append(op().broadcast_to(tangents[2], results[0].shape))
    return sum_terms(terms, attrs)


MATMUL = define("matmul", infer=_matmul_infer, impl=_matmul_impl, cost=_matmul_cost, spec="GRAPH-MATMUL-1",
                shard=_matmul_shard, vjp=_matmul_vjp, jvp=_matmul_jvp,
                attrs={"transpose_a": Attr(False, check_bool, "use a transposed in its last two axes"),
                       "transpose_b": Attr(False, check_bool, "use b transposed in its last two axes"),
                       "tile_shape": Attr(None, _check_tile_shape, "(BM, BN, BK) for the lowering; "
                                                                   "changes no bit (NUM-RED-1)"),
                       **SEED_ATTR})


def matmul(a, b, *, transpose_a=False, transpose_b=False, tile_shape=None, seed=None):
    """Batched ``a @ b`` (GRAPH-MATMUL-1): ``[..., M, K] @ [..., K, N] -> [..., M, N]``.

    Batch axes broadcast (NumPy rules); rank-1 operands are rejected (reshape vectors to
    matrices). Both operands have one policy. Each output element is
    ``acc = fma(a[m, k], b[k, n], acc)`` for k ascending from +0 in the policy's ``accum``
    format (NUM-RED-1), rounded once into storage; ``reduction="exact"`` gives the exact sum
    rounded once (NUM-RED-4); ``accum="tc:sm80"`` (and the other ``tc:`` models) the tensor-core
    block FMAs of NUM-TC-2…4. ``transpose_a``/``transpose_b`` use an operand transposed in its
    last two axes — bit-identical to ``matmul(op.transpose(...), ...)``. ``tile_shape=(BM, BN,
    BK)`` is recorded for the lowering and does not change any bit. ``seed`` keys stochastic
    rounding into storage.
    """
    return bind(MATMUL, a, b, transpose_a=transpose_a, transpose_b=transpose_b, tile_shape=tile_shape,
                seed=seed)


def gemm(a, b, c=None, *, transpose_a=False, transpose_b=False, tile_shape=None, seed=None):
    """``a @ b + C`` accumulated into ``C`` (GRAPH-MATMUL-1): each output element's dot product
    starts from its element of ``C`` (broadcast to the result shape) instead of +0, so there
    is one rounding into storage, not two. ``gemm(a, b)`` is :func:`matmul`. There is no
    ``alpha``/``beta``: scale the operands with ``op.mul`` (each a rounding of its own)."""
    operands = (a, b) if c is None else (a, b, c)
    return bind(MATMUL, *operands, transpose_a=transpose_a, transpose_b=transpose_b,
                tile_shape=tile_shape, seed=seed)


# ---------------------------------------------------------------------------------------
# shared by cholesky and svd

def _check_matrix_operand(name: str, t: TensorType, attrs, square: bool) -> None:
    _require_matrix(name, t, "the operand", "[..., n, n]" if square else "[..., m, n]")
    require_float(name, t)
    if square and t.shape[-1] != t.shape[-2]:
        raise ShapeError(f"{name}: the operand must be square in its last two axes, got {t}",
                         fix="pass [..., n, n] matrices")
    require_seed(name, attrs, t)


def _column_dots(x: np.ndarray, y: np.ndarray, accum) -> np.ndarray:
    """Canonical dots (NUM-RED-1) of the columns of ``x`` and ``y`` ([..., R, C] each):
    ``[..., C]`` with element j the dot of ``x[..., :, j]`` and ``y[..., :, j]``, rows ascending."""
    xt, yt = _swap_last(x), _swap_last(y)
    return dot_canonical(xt[..., None, :], yt[..., :, None], accum=accum)[..., 0, 0]


# ---------------------------------------------------------------------------------------
# cholesky

def _cholesky_infer(attrs, a):
    _check_matrix_operand("cholesky", a, attrs, square=True)
    return a


def _cholesky_impl(call, a):
    """Cholesky–Banachiewicz (GRAPH-CHOLESKY-1), computed column by column: column j's
    elements depend only on columns < j, so they are computed together; each element's own
    operation sequence is the clause's."""
    accum = call.out_types[0].policy.accum
    A = to_accum(a, accum)
    n = A.shape[-1]
    L = np.zeros(A.shape, dtype=accum.dtype)
    nan = accum.dtype.type(np.nan)
    for j in range(n):
        # acc_i = A[i, j]; acc_i = fma(-L[i, k], L[j, k], acc_i) for k = 0 … j-1, for i >= j
        acc = dot_canonical(-L[..., j:, :j], L[..., j, :j, None], accum=accum, c=A[..., j:, j, None])[..., 0]
        pivot = acc[..., 0]
        with np.errstate(invalid="ignore"):
            diag = np.where(pivot > 0, accum_op("sqrt", pivot, accum=accum), nan)
        L[..., j, j] = diag
        L[..., j + 1:, j] = accum_op("div", acc[..., 1:], diag[..., None], accum=accum)
    return to_storage(call, L)


def _cholesky_cost(call) -> Cost:
    t = call.in_types[0]
    n = t.shape[-1]
    batch = numel(t) // max(1, n * n)
    return Cost(batch * (n ** 3 // 3 + n * n), nbytes(t) + nbytes(call.out_types[0]))


def _diagonal(o, x):
    """The diagonals ``[..., n]`` of square matrices ``x`` (``x ⊗ I`` summed along the rows),
    with the op functions ``o`` (:func:`~tessera_ref.ops.adjoint.op`, as every helper here)."""
    return o.sum(o.mul(x, eye(x.shape[-1], x.type.policy)), axis=-1)


def _tri_inverse(o, L):
    """``L⁻¹`` of lower-triangular ``L`` with a nonzero diagonal ``D``, with matmuls only:
    ``D⁻¹L = I + N`` with ``N`` strictly lower, so nilpotent, and ``(I + N)⁻¹ =
    (I − N)(I + N²)(I + N⁴)…`` up to the first power ``2^j ≥ n`` (a finite, exact identity);
    then ``L⁻¹ = (I + N)⁻¹·D⁻¹``. ``2·⌈log2 n⌉`` matmuls; accurate for well-conditioned ``L``."""
    n, policy = L.shape[-1], L.type.policy
    inv_d = o.div(constant(1.0, policy), _diagonal(o, L))
    identity = eye(n, policy)
    nil = o.sub(o.mul(o.reshape(inv_d, inv_d.shape + (1,)), L), identity)
    out, power, span = o.sub(identity, nil), nil, 2
    while span < n:
        power = o.matmul(power, power)
        out = o.matmul(out, o.add(identity, power))
        span *= 2
    return o.mul(out, o.reshape(inv_d, inv_d.shape[:-1] + (1, n)))


def _phi(o, x):
    """Φ: the lower triangle of ``x`` with the diagonal halved; +0 above it (a mask multiply
    would leave -0 where ``x`` is negative)."""
    n = x.shape[-1]
    halved = o.mul(x, constant(np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n), x.type.policy))
    return o.where(asarray(np.tril(np.ones((n, n), bool))), halved, constant(np.zeros((n, n)), x.type.policy))


def _cholesky_vjp(attrs, primals, results, cts):
    """AD-CHOLESKY-1: with ``L̄`` restricted to the lower triangle (the upper one of ``L`` is
    constant +0), ``S = L⁻ᵀ·Φ(Lᵀ·L̄)·L⁻¹`` and ``Ā = Φ(S + Sᵀ)``: the gradient with respect to
    the lower triangle of ``A``, the entries the op reads (upper entries get +0; an
    off-diagonal entry counts for both of its positions in the symmetric matrix)."""
    o, L = op(attrs), results[0]
    n = L.shape[-1]
    g = o.mul(cts[0], constant(np.tril(np.ones((n, n))), L.type.policy))
    inv = _tri_inverse(o, L)
    s = o.matmul(o.matmul(inv, _phi(o, o.matmul(L, g, transpose_a=True)), transpose_a=True), inv)
    return (_phi(o, o.add(s, mT(s))),)


def _cholesky_jvp(attrs, primals, tangents, results):
    """``L̇ = L·Φ(L⁻¹·Ȧ_s·L⁻ᵀ)`` with ``Ȧ_s`` the symmetric matrix of ``Ȧ``'s lower triangle."""
    if tangents[0] is None:
        return (None,)
    o, L = op(attrs), results[0]
    n = L.shape[-1]
    lower = o.mul(tangents[0], constant(np.tril(np.ones((n, n)), -1), L.type.policy))
    diag = o.mul(tangents[0], eye(n, L.type.policy))
    sym = o.add(o.add(lower, mT(lower)), diag)
    inv = _tri_inverse(o, L)
    return (o.matmul(L, _phi(o, o.matmul(o.matmul(inv, sym), inv, transpose_b=True))),)


CHOLESKY = define("cholesky", infer=_cholesky_infer, impl=_cholesky_impl, cost=_cholesky_cost,
                  spec="GRAPH-CHOLESKY-1", shard=replicated_rule, attrs=dict(SEED_ATTR),
                  vjp=_cholesky_vjp, jvp=_cholesky_jvp)


def cholesky(a, *, seed=None):
    """The lower-triangular Cholesky factor ``L`` of symmetric positive definite ``[..., n, n]``
    matrices, ``A = L·Lᵀ`` (GRAPH-CHOLESKY-1).

    Cholesky–Banachiewicz in the ``accum`` format: ``acc = A[i, j]``, then
    ``acc = fma(−L[i, k], L[j, k], acc)`` for k = 0 … j−1; ``L[j, j] = sqrt(acc)`` when
    ``acc > 0`` and NaN otherwise, ``L[i, j] = acc / L[j, j]`` below the diagonal. Only the
    lower triangle of ``A`` is read; the upper triangle of ``L`` is +0. A non-positive pivot
    makes that pivot NaN and so everything that depends on it.
    """
    return bind(CHOLESKY, a, seed=seed)


# ---------------------------------------------------------------------------------------
# svd

#: Sweeps after which one-sided Jacobi stops even if some pair still rotates.
MAX_SWEEPS = 30
#: Sweeps the cost model assumes (a typical count for well-scaled f32 matrices).
_COST_SWEEPS = 8


def _svd_dims(t: TensorType) -> tuple:
    m, n = t.shape[-2:]
    if m == n:
        return m, n, m
    if isinstance(m, str) or isinstance(n, str):
        raise OpError(f"svd: the number of singular values min(m, n) of {t} is not known",
                      fix="trace with concrete sizes, or use one symbolic size for both axes")
    return m, n, min(m, n)


def _svd_infer(attrs, a):
    _check_matrix_operand("svd", a, attrs, square=False)
    m, n, k = _svd_dims(a)
    batch = a.shape[:-2]
    return (TensorType(batch + (m, k), a.policy), TensorType(batch + (k,), a.policy),
            TensorType(batch + (k, n), a.policy))


def _round_robin_pairs(n: int) -> list:
    """The rounds of one sweep over ``n`` columns (GRAPH-SVD-1): a list of ``(P, Q)`` int
    arrays, the disjoint pairs ``(P[i], Q[i])``, ``P[i] < Q[i]``, of one round.

    With ``s = 2·ceil(n/2) − 1`` (``n − 1`` for even ``n``, ``n`` for odd), round
    ``r = 0 … s−1`` pairs ``(r − i) mod s`` with ``(r + i) mod s`` for ``i = 1 … (s−1)/2``,
    then ``r`` with ``s``; pairs holding an index ``≥ n`` are left out. Every pair of columns
    meets exactly once per sweep.
    """
    s = 2 * ((n + 1) // 2) - 1
    rounds = []
    for r in range(max(s, 0)):
        pairs = [((r - i) % s, (r + i) % s) for i in range(1, (s - 1) // 2 + 1)] + [(r, s)]
        pairs = [(min(p, q), max(p, q)) for p, q in pairs if max(p, q) < n]
        if pairs:
            rounds.append(tuple(np.array(v, dtype=np.int64) for v in zip(*pairs)))
    return rounds


def _in_format(accum):
    """``ieee(name, *operands)``: one IEEE operation ``name`` in ``accum`` (NUM-EW-1)."""
    return lambda name, *operands: accum_op(name, *operands, accum=accum)


def _rotation(alpha, beta, gamma, accum):
    """Rutishauser's rotation ``(c, s)`` zeroing the off-diagonal ``gamma`` of the Gram matrix
    ``[[alpha, gamma], [gamma, beta]]``, each step one IEEE operation in ``accum``."""
    ieee, one = _in_format(accum), accum.dtype.type(1)
    zeta = ieee("div", ieee("sub", beta, alpha), ieee("add", gamma, gamma))
    sign = np.where(zeta < 0, -one, one)  # sign(±0) = sign(NaN) = +1
    root = ieee("sqrt", ieee("add", one, ieee("mul", zeta, zeta)))
    t = ieee("div", sign, ieee("add", np.abs(zeta), root))
    c = ieee("div", one, ieee("sqrt", ieee("add", one, ieee("mul", t, t))))
    return c, ieee("mul", c, t)


def _rotate(X, P, Q, c, s, rot, accum) -> None:
    """Columns ``P``, ``Q`` of ``X`` become ``c·x_p − s·x_q`` and ``s·x_p + c·x_q`` where ``rot``."""
    ieee = _in_format(accum)
    xp, xq = X[..., :, P], X[..., :, Q]
    c, s, rot = c[..., None, :], s[..., None, :], rot[..., None, :]
    new_p = ieee("sub", ieee("mul", c, xp), ieee("mul", s, xq))
    new_q = ieee("add", ieee("mul", s, xp), ieee("mul", c, xq))
    X[..., :, P] = np.where(rot, new_p, xp)
    X[..., :, Q] = np.where(rot, new_q, xq)


def _one_sided_jacobi(W: np.ndarray, accum):
    """Hestenes' one-sided Jacobi on the columns of ``W`` ([..., m, n], m >= n), in place:
    returns ``(W, V)`` with ``W = A·V`` having (numerically) orthogonal columns."""
    m, n = W.shape[-2:]
    V = np.broadcast_to(np.eye(n, dtype=accum.dtype), W.shape[:-2] + (n, n)).copy()
    tol = accum.dtype.type(math.ceil(math.sqrt(m)) * accum.epsilon)
    rounds, ieee = _round_robin_pairs(n), _in_format(accum)
    for _ in range(MAX_SWEEPS):
        rotated = False
        for P, Q in rounds:
            xp, xq = W[..., :, P], W[..., :, Q]
            gram = _column_dots(np.stack([xp, xp, xq]), np.stack([xp, xq, xq]), accum)
            alpha, gamma, beta = gram[0], gram[1], gram[2]
            bound = ieee("mul", tol, ieee("mul", ieee("sqrt", alpha), ieee("sqrt", beta)))
            rot = np.abs(gamma) > bound
            if not rot.any():
                continue
            rotated = True
            with np.errstate(all="ignore"):
                c, s = _rotation(alpha, beta, gamma, accum)
            _rotate(W, P, Q, c, s, rot, accum)
            _rotate(V, P, Q, c, s, rot, accum)
        if not rotated:
            break
    return W, V


def _svd_impl(call, a):
    """One-sided Jacobi SVD (GRAPH-SVD-1)."""
    accum = call.out_types[0].policy.accum
    A = to_accum(a, accum)
    wide = A.shape[-2] < A.shape[-1]
    W, V = _one_sided_jacobi((_swap_last(A) if wide else A).copy(), accum)
    sigma = accum_op("sqrt", _column_dots(W, W, accum), accum=accum)
    order = np.argsort(-sigma, axis=-1, kind="stable")
    sigma = np.take_along_axis(sigma, order, -1)
    W = np.take_along_axis(W, order[..., None, :], -1)
    V = np.take_along_axis(V, order[..., None, :], -1)
    with np.errstate(all="ignore"):
        U = np.where(sigma[..., None, :] > 0, accum_op("div", W, sigma[..., None, :], accum=accum),
                     accum.dtype.type(0))
    U, Vt = (V, _swap_last(U)) if wide else (U, _swap_last(V))
    if Vt.size:  # sign: the first largest-magnitude component of each row of Vt is made positive
        lead = np.take_along_axis(Vt, np.argmax(np.abs(Vt), axis=-1)[..., None], -1)[..., 0]
        flip = lead < 0
        Vt = np.where(flip[..., :, None], -Vt, Vt)
        U = np.where(flip[..., None, :], -U, U)
    return tuple(to_storage(call, x, t) for x, t in zip((U, sigma, Vt), call.out_types))


def _svd_cost(call) -> Cost:
    t = call.in_types[0]
    m, n = sorted(t.shape[-2:], reverse=True)
    batch = numel(t) // max(1, m * n)
    pairs = n * (n - 1) // 2
    flops = batch * (_COST_SWEEPS * pairs * (12 * m + 6 * n) + 4 * m * n)
    return Cost(flops, nbytes(t) + sum(nbytes(o) for o in call.out_types))


def _diag_matrix(o, v):
    """Diagonal matrices ``[..., k, k]`` holding vectors ``v [..., k]`` (``I ⊗ v`` as rows)."""
    k = v.shape[-1]
    return o.mul(eye(k, v.type.policy), o.reshape(v, v.shape[:-1] + (1, k)))


def _reciprocal_or_zero(o, x):
    """``1 ⊘ x`` where ``x ≠ 0``, and +0 where ``x = 0`` (no division by zero is evaluated)."""
    zero, one = constant(0.0, x.type.policy), constant(1.0, x.type.policy)
    is_zero = o.equal(x, zero)
    return o.where(is_zero, zero, o.div(one, o.where(is_zero, one, x)))


def _svd_parts(o, s):
    """``(S, S⁺, F)`` of singular values ``s [..., k]``: ``S = diag(s)``, ``S⁺`` the diagonal of
    ``1/s`` with 0 for a zero singular value, and ``F_ij = 1/(s_j² − s_i²)`` with 0 on the
    diagonal and wherever two singular values are equal (AD-SVD-1)."""
    k = s.shape[-1]
    row = o.reshape(s, s.shape[:-1] + (1, k))
    sq = o.mul(row, row)
    f = _reciprocal_or_zero(o, o.sub(sq, mT(sq)))
    return _diag_matrix(o, s), _diag_matrix(o, _reciprocal_or_zero(o, s)), f


def _projector(o, u):
    """``I − U·Uᵀ`` for ``U [..., m, k]``."""
    return o.sub(eye(u.shape[-2], u.type.policy), o.matmul(u, u, transpose_b=True))


def _svd_vjp(attrs, primals, results, cts):
    """AD-SVD-1 (real thin SVD; exact for distinct nonzero singular values): with ``V = Vtᵀ``, ``V̄ = V̄tᵀ``,
    ``J = F∘(UᵀŪ − ŪᵀU)``, ``K = F∘(VᵀV̄ − V̄ᵀV)``:
    ``Ā = U·(J·S + diag(S̄) + S·K)·Vᵀ + (I − UUᵀ)·Ū·S⁻¹·Vᵀ + U·S⁻¹·V̄ᵀ·(I − VVᵀ)``.
    The sign convention of the op (each row of Vt's first largest component positive) is
    locally constant, so this is the derivative of the op as defined."""
    o = op(attrs)
    (u, s, vt), (gu, gs, gvt) = results, cts
    S, S_inv, F = _svd_parts(o, s)
    utgu = o.matmul(u, gu, transpose_a=True)
    vtgv = o.matmul(vt, gvt, transpose_b=True)  # Vᵀ·V̄
    J, K = o.mul(F, o.sub(utgu, mT(utgu))), o.mul(F, o.sub(vtgv, mT(vtgv)))
    core = o.add(o.add(o.matmul(J, S), _diag_matrix(o, gs)), o.matmul(S, K))
    out = o.matmul(o.matmul(u, core), vt)
    out = o.add(out, o.matmul(o.matmul(_projector(o, u), o.matmul(gu, S_inv)), vt))
    out = o.add(out, o.matmul(o.matmul(u, o.matmul(S_inv, gvt)), _projector(o, mT(vt))))
    return (out,)


def _svd_jvp(attrs, primals, tangents, results):
    """With ``P = Uᵀ·Ȧ·V``: ``Ṡ = diag(P)``, ``U̇ = U·(F∘(P·S + S·Pᵀ)) + (I − UUᵀ)·Ȧ·V·S⁻¹``,
    ``V̇ = V·(F∘(S·P + Pᵀ·S)) + (I − VVᵀ)·Ȧᵀ·U·S⁻¹``, ``V̇t = V̇ᵀ``."""
    if tangents[0] is None:
        return (None, None, None)
    o, da = op(attrs), tangents[0]
    u, s, vt = results
    S, S_inv, F = _svd_parts(o, s)
    p = o.matmul(o.matmul(u, da, transpose_a=True), vt, transpose_b=True)
    ds = _diagonal(o, p)
    du = o.add(o.matmul(u, o.mul(F, o.add(o.matmul(p, S), o.matmul(S, p, transpose_b=True)))),
               o.matmul(o.matmul(_projector(o, u), da), o.matmul(vt, S_inv, transpose_a=True)))
    dv = o.add(o.matmul(vt, o.mul(F, o.add(o.matmul(S, p), o.matmul(p, S, transpose_a=True))), transpose_a=True),
               o.matmul(o.matmul(_projector(o, mT(vt)), da, transpose_b=True), o.matmul(u, S_inv)))
    return du, ds, mT(dv)


SVD = define("svd", infer=_svd_infer, impl=_svd_impl, cost=_svd_cost, spec="GRAPH-SVD-1", shard=replicated_rule,
             attrs=dict(SEED_ATTR), vjp=_svd_vjp, jvp=_svd_jvp)


def svd(a, *, seed=None):
    """The thin singular value decomposition ``A = U·diag(S)·Vt`` of ``[..., m, n]``
    (GRAPH-SVD-1): ``U [..., m, k]``, ``S [..., k]`` descending, ``Vt [..., k, n]``,
    ``k = min(m, n)``.

    Defined by one algorithm in the ``accum`` format: one-sided Jacobi (Hestenes) on the
    columns (of ``Aᵀ`` when ``m < n``) with a round-robin pair order, Rutishauser's rotation
    and a fixed stopping rule; singular values sorted descending (stable), and each row of
    ``Vt`` signed so that its first largest-magnitude component is positive. Returns
    ``(U, S, Vt)``.
    """
    return bind(SVD, a, seed=seed)
