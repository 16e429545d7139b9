"""The backward halves of the fused ops: flash attention's row log-sum-exp and its
FlashAttention-2 backward (GRAPH-FLASHATTENTIONLSE-1, GRAPH-FLASHATTENTIONBWD-1).

``flash_attention``'s vjp (AD-FLASHATTENTION-1) keeps q, k, v and o alive, computes the row
log-sum-exp ``L`` with :func:`flash_attention_lse` (an ``[..., Sq]`` tensor in the
accumulation format — the very ``m`` and ``ℓ`` of the forward's online softmax, so
``L = m ⊕ log ℓ``) and gets ``(q̄, k̄, v̄)`` from one :func:`flash_attention_bwd`: no value of
the backward pass is ``[Sq, Sk]``. The backward walks the same key blocks as the forward and
query blocks of ``block_q``; for each key block ``j`` (ascending) and query block ``i``
(ascending) it recomputes ``P_ij = exp(S_ij ⊖ L_i)`` and adds the block's products into
``dV_j``, ``dK_j`` (over ``i`` in order) and ``dQ_i`` (over ``j`` in order) — fixed orders, no
atomics, so the bits are the same on every run and machine (the spec states each rounding).

Their own derivatives (grad of grad) are written with ops from the decomposed attention
(``softmax(mask(scale·q·kᵀ))``), which does form ``[Sq, Sk]`` values: second derivatives of
attention are not a memory-tuned path.
"""
from __future__ import annotations

import numpy as np

from ..errors import OpError, ShapeError
from ..numerics.exactsum import exact_sum
from ..ir import TensorType
from ..ir.layout import ShardLayout
from ..numerics.arith import to_accum
from ..numerics.reduce import dot_canonical, reduce_canonical
from .adjoint import accum_policy, along, cast_to, constant, materialize, op, unbroadcast
from .bind import bind
from .exact import math_in_accum, reduce_axes
from .nn import (_accum, _along, _attention_type, _attention_probs, _attention_scores, _check_block, _check_float,
                 _causal_mask, _expand, _norm_core, _normalized, _online_step, _op, _scale)
from .reduction import _exact_mean
from .primitive import REQUIRED, Attr, Cost, define
from .sharding import ShardPlan, whole
from .typecheck import SEED_ATTR, check_bool, check_int, nbytes, normalize_axis, numel, require_seed, same_element, to_storage

__all__ = ["flash_attention_lse", "flash_attention_bwd", "norm_safe_bwd"]


def in_wide(fn, values, like):
    """``fn(A, *values)`` with every value cast into the accumulation policy ``A`` of
    ``values[0]``'s policy, each result cast once back into the policy of ``like[i]`` (the
    primal it is the derivative of): :func:`~tessera_ref.ops.adjoint.in_accum` for rules
    whose operands and results are not all of one policy (the row log-sum-exp is in ``A``)."""
    wide = accum_policy(values[0].type.policy)
    out = fn(wide, *(None if x is None else cast_to(x, wide) for x in values))
    return tuple(None if y is None else cast_to(y, t.type.policy) for y, t in zip(out, like))


def _attention_attrs(*, seed: bool, block_q: bool) -> dict:
    attrs = {"causal": Attr(False, check_bool, "mask key t from query i unless t <= i + (Sk - Sq)"),
             "scale": Attr(None, _check_float(nonnegative=False), "the score scale (a finite float); default rsqrt(D)"),
             "block_k": Attr(64, _check_block, "keys per block, as the forward's (changes bits)")}
    if block_q:
        attrs["block_q"] = Attr(64, _check_block, "queries per block of the backward (changes the bits of k̄, v̄)")
    return {**attrs, **(SEED_ATTR if seed else {})}


def _lead_rule(trailing: tuple, results: tuple):
    """A sharding rule for ops on the trailing dimensions of each operand (``trailing[i]`` of
    operand ``i``) whose leading (batch, head) dimensions take the first operand's splits;
    result ``r`` has the layout of ``results[r]`` — an operand index, or ``"rows"`` for a
    ``[..., Sq]`` result (the first operand's batch splits, the row dimension whole)."""
    def rule(attrs, *types) -> ShardPlan:
        first = types[0]
        lead = tuple(first.layout.dims[:first.rank - trailing[0]])

        def layout(rank, n):
            return ShardLayout(lead[len(lead) - (rank - n):] + ((),) * n, padded=first.layout.padded)
        operands = tuple(layout(t.rank, n) for t, n in zip(types, trailing))
        outs = tuple(layout(first.rank - 1, 1) if r == "rows" else operands[r] for r in results)
        return ShardPlan(operands, outs)
    return rule


# ---------------------------------------------------------------------------------------
# flash_attention_lse

def _lse_infer(attrs, q, k):
    o = _attention_type(q, k, k)
    return TensorType(o.shape[:-1], accum_policy(q.policy))


def _lse_impl(call, q, k):
    accum = _accum(call)
    rows = call.out_types[0].shape
    m = np.full(rows, -np.inf, dtype=accum.dtype)
    ell = np.zeros(rows, dtype=accum.dtype)
    for _, s in _attention_scores(call, q, k):
        m, ell, _, _ = _online_step(call, m, ell, s)
    return _op("add", m, math_in_accum("log", ell, accum=accum), call=call)


def _lse_cost(call):
    q, k = call.in_types
    out = call.out_types[0]
    scores = numel(out) * k.shape[-2]
    return Cost(2 * scores * q.shape[-1] + 4 * scores, nbytes(q) + nbytes(k) + nbytes(out))


def _lse_vjp(attrs, primals, results, cts):
    """``∂L/∂S = P``: ``S̄ = P ⊗ L̄``, ``q̄ = scale ⊗ S̄·k``, ``k̄ = scale ⊗ S̄ᵀ·q`` (decomposed, in
    the accumulation format of q; ``L̄`` is already there)."""
    def bars(policy, q, k, g):
        o = op()
        p, scale = _attention_probs(o, attrs, q, k, policy)
        ds = o.mul(o.mul(p, o.reshape(g, tuple(g.shape) + (1,))), scale)
        return unbroadcast(o.matmul(ds, k), q.shape), unbroadcast(o.matmul(ds, q, transpose_a=True), k.shape)
    return in_wide(bars, tuple(primals) + tuple(cts), primals)


def _lse_jvp(attrs, primals, tangents, results):
    """``L̇ = Σ_j P ⊗ Ṡ`` with ``Ṡ = scale ⊗ (q̇·kᵀ + q·k̇ᵀ)``."""
    if all(t is None for t in tangents):
        return (None,)

    def tangent(policy, q, k, dq, dk):
        o = op()
        p, scale = _attention_probs(o, attrs, q, k, policy)
        ds = o.mul(o.add(o.matmul(dq, k, transpose_b=True), o.matmul(q, dk, transpose_b=True)), scale)
        return o.sum(o.mul(p, ds), axis=-1)
    q, k = primals
    return in_wide(lambda policy, *xs: (tangent(policy, *xs),), tuple(primals) + tuple(map(materialize, tangents, primals)),
                   results)


FLASH_ATTENTION_LSE = define(
    "flash_attention_lse", infer=_lse_infer, impl=_lse_impl, cost=_lse_cost, vjp=_lse_vjp, jvp=_lse_jvp,
    spec="GRAPH-FLASHATTENTIONLSE-1", shard=_lead_rule((2, 2), ("rows",)),
    attrs=_attention_attrs(seed=False, block_q=False))


def flash_attention_lse(q, k, *, causal=False, scale=None, block_k=64):
    """The row log-sum-exp ``L = m ⊕ log ℓ`` of ``flash_attention(q, k, ·)``'s online softmax
    (GRAPH-FLASHATTENTIONLSE-1): ``[..., Sq]`` in the accumulation format (f32 for bf16
    operands); the statistic FlashAttention-2's backward needs. ``-inf`` for a row with every
    key masked."""
    return bind(FLASH_ATTENTION_LSE, q, k, causal=causal, scale=scale, block_k=block_k)


# ---------------------------------------------------------------------------------------
# flash_attention_bwd

def _bwd_infer(attrs, q, k, v, o, lse, do):
    name = "flash_attention_bwd"
    out = _attention_type(q, k, v)
    want_lse = TensorType(out.shape[:-1], accum_policy(q.policy))
    for label, t, want in (("o", o, out), ("do", do, out), ("lse", lse, want_lse)):
        if t != want:
            raise ShapeError(f"{name}: {label} is {t}, but flash_attention({q}, {k}, {v}) needs {want}",
                             fix="pass the forward's output, its cotangent and flash_attention_lse(q, k)")
    for t in (q, k, v):
        require_seed(name, attrs, t)
    return q, k, v


def _unbroadcast_sum(x, shape: tuple, accum):
    """``x`` summed (NUM-RED-2) over the axes broadcasting added or stretched to reach ``shape``."""
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
    return reduce_axes(x, axes, "sum", accum=accum).reshape(shape) if axes else x


def _bwd_impl(call, q, k, v, o, lse, do):
    accum = _accum(call)
    batch = o.shape[:-2]
    Q, K, V = (np.broadcast_to(to_accum(x, accum), batch + x.shape[-2:]) for x in (q, k, v))
    O, dO = to_accum(o, accum), to_accum(do, accum)
    Sq, D = q.shape[-2:]
    Sk = k.shape[-2]
    scale = _scale(call, D)
    delta = reduce_canonical(_op("mul", dO, O, call=call), -1, "sum", accum=accum)
    dQ = np.zeros(batch + (Sq, D), dtype=accum.dtype)
    dK = np.zeros(batch + (Sk, D), dtype=accum.dtype)
    dV = np.zeros(batch + (Sk, V.shape[-1]), dtype=accum.dtype)
    bk, bq = call.attrs["block_k"], call.attrs["block_q"]
    neg_inf = np.array(-np.inf, dtype=accum.dtype)
    for t0 in range(0, Sk, bk):
        kj, vj = slice(t0, t0 + bk), slice(t0, t0 + bk)
        Kj, Vj = K[..., kj, :], V[..., vj, :]
        keys = t0 + np.arange(Kj.shape[-2])[None, :]
        for r0 in range(0, Sq, bq):
            i = slice(r0, r0 + bq)
            Qi, dOi = Q[..., i, :], dO[..., i, :]
            s = _op("mul", dot_canonical(Qi, np.swapaxes(Kj, -1, -2), accum=accum), scale, call=call)
            if call.attrs["causal"]:
                rows = r0 + np.arange(Qi.shape[-2])[:, None]
                s = np.where(keys <= rows + (Sk - Sq), s, neg_inf)
            p = math_in_accum("exp", _op("sub", s, lse[..., i, None], call=call), accum=accum)
            dV[..., vj, :] = _op("add", dV[..., vj, :], dot_canonical(np.swapaxes(p, -1, -2), dOi, accum=accum),
                                 call=call)
            dp = dot_canonical(dOi, np.swapaxes(Vj, -1, -2), accum=accum)
            ds = _op("mul", p, _op("sub", dp, delta[..., i, None], call=call), call=call)
            dK[..., kj, :] = _op("add", dK[..., kj, :], dot_canonical(np.swapaxes(ds, -1, -2), Qi, accum=accum),
                                 call=call)
            dQ[..., i, :] = _op("add", dQ[..., i, :], dot_canonical(ds, Kj, accum=accum), call=call)
    bars = (_op("mul", dQ, scale, call=call), _op("mul", dK, scale, call=call), dV)
    return tuple(to_storage(call, _unbroadcast_sum(b, x.shape, accum), t)
                 for b, x, t in zip(bars, (q, k, v), call.out_types))


def _bwd_cost(call):
    q, k, v = call.in_types[:3]
    rows = numel(call.in_types[3]) // max(v.shape[-1], 1) if v.shape[-1] else 0
    scores = rows * k.shape[-2]
    flops = 2 * scores * (3 * q.shape[-1] + 2 * v.shape[-1]) + 6 * scores
    return Cost(flops, sum(nbytes(t) for t in call.in_types) + sum(nbytes(t) for t in call.out_types))


def _bwd_parts(o, attrs, q, k, v, out, lse, do, policy):
    """``(P, dP, D, dS, scale)`` of the backward recomputed with ops in ``policy`` (decomposed:
    ``[Sq, Sk]`` values), for the rules of the backward op itself."""
    scale = (constant([attrs["scale"]], policy) if "scale" in attrs
             else o.rsqrt(constant([float(q.shape[-1])], policy)))
    s = o.mul(o.matmul(q, k, transpose_b=True), scale)
    if attrs["causal"]:
        s = o.where(_causal_mask(o, q.shape[-2], k.shape[-2]), s, constant(-np.inf, policy))
    p = o.exp(o.sub(s, _col(o, lse)))
    dp = o.matmul(do, v, transpose_b=True)
    d = o.sum(o.mul(do, out), axis=-1, keepdims=True)
    return p, dp, d, o.mul(p, o.sub(dp, d)), scale


def _col(o, x):
    """``[..., S]`` as ``[..., S, 1]``."""
    return o.reshape(x, tuple(x.shape) + (1,))


def _bwd_jvp(attrs, primals, tangents, results):
    """The tangent of ``(q̄, k̄, v̄)``: with ``Ṡ = scale ⊗ (q̇·kᵀ + q·k̇ᵀ)``, ``Ṗ = P ⊗ (Ṡ ⊖ L̇)``,
    ``dṖ = ḋo·vᵀ + do·v̇ᵀ``, ``Ḋ = Σ (ḋo ⊗ o + do ⊗ ȯ)``, ``dṠ = Ṗ ⊗ (dP ⊖ D) + P ⊗ (dṖ ⊖ Ḋ)``:
    ``scale ⊗ (dṠ·k + dS·k̇)``, ``scale ⊗ (dṠᵀ·q + dSᵀ·q̇)``, ``Ṗᵀ·do + Pᵀ·ḋo``."""
    if all(t is None for t in tangents):
        return (None,) * 3

    def tangent(policy, q, k, v, out, lse, do, tq, tk, tv, tout, tlse, tdo):
        o = op()
        p, dp, d, ds, scale = _bwd_parts(o, attrs, q, k, v, out, lse, do, policy)
        sdot = o.mul(o.add(o.matmul(tq, k, transpose_b=True), o.matmul(q, tk, transpose_b=True)), scale)
        pdot = o.mul(p, o.sub(sdot, _col(o, tlse)))
        dpdot = o.add(o.matmul(tdo, v, transpose_b=True), o.matmul(do, tv, transpose_b=True))
        ddot = o.sum(o.add(o.mul(tdo, out), o.mul(do, tout)), axis=-1, keepdims=True)
        dsdot = o.add(o.mul(pdot, o.sub(dp, d)), o.mul(p, o.sub(dpdot, ddot)))
        dq = o.mul(o.add(o.matmul(dsdot, k), o.matmul(ds, tk)), scale)
        dk = o.mul(o.add(o.matmul(dsdot, q, transpose_a=True), o.matmul(ds, tq, transpose_a=True)), scale)
        dv = o.add(o.matmul(pdot, do, transpose_a=True), o.matmul(p, tdo, transpose_a=True))
        return tuple(unbroadcast(b, x.shape) for b, x in zip((dq, dk, dv), (q, k, v)))
    return in_wide(tangent, tuple(primals) + tuple(map(materialize, tangents, primals)), results)


def _bwd_vjp(attrs, primals, results, cts):
    """The transpose of :func:`_bwd_jvp`: with ``dS̄ = scale ⊗ (ā_q·kᵀ + q·ā_kᵀ)``,
    ``P̄ = do·ā_vᵀ + dS̄ ⊗ (dP ⊖ D)``, ``S̄ = P̄ ⊗ P``, ``D̄ = −Σ dS̄ ⊗ P``:
    ``q̄ = scale ⊗ (dS·ā_k + S̄·k)``, ``k̄ = scale ⊗ (dSᵀ·ā_q + S̄ᵀ·q)``, ``v̄ = (dS̄ ⊗ P)ᵀ·do``,
    ``ō = D̄ ⊗ do``, ``L̄ = −Σ S̄``, ``dō = P·ā_v + (dS̄ ⊗ P)·v + D̄ ⊗ o``."""
    def bars(policy, q, k, v, out, lse, do, aq, ak, av):
        o = op()
        p, dp, d, ds, scale = _bwd_parts(o, attrs, q, k, v, out, lse, do, policy)
        dsbar = o.mul(o.add(o.matmul(aq, k, transpose_b=True), o.matmul(q, ak, transpose_b=True)), scale)
        pbar = o.add(o.matmul(do, av, transpose_b=True), o.mul(dsbar, o.sub(dp, d)))
        dpbar = o.mul(dsbar, p)
        dbar = o.neg(o.sum(dpbar, axis=-1, keepdims=True))
        sbar = o.mul(pbar, p)
        qbar = o.mul(o.add(o.matmul(ds, ak), o.matmul(sbar, k)), scale)
        kbar = o.mul(o.add(o.matmul(ds, aq, transpose_a=True), o.matmul(sbar, q, transpose_a=True)), scale)
        vbar = o.matmul(dpbar, do, transpose_a=True)
        obar = o.mul(dbar, do)
        lbar = o.neg(o.sum(sbar, axis=-1))
        dobar = o.add(o.add(o.matmul(p, av), o.matmul(dpbar, v)), o.mul(dbar, out))
        return (unbroadcast(qbar, q.shape), unbroadcast(kbar, k.shape), unbroadcast(vbar, v.shape),
                obar, lbar, dobar)
    return in_wide(bars, tuple(primals) + tuple(cts), primals)


FLASH_ATTENTION_BWD = define(
    "flash_attention_bwd", infer=_bwd_infer, impl=_bwd_impl, cost=_bwd_cost, vjp=_bwd_vjp, jvp=_bwd_jvp,
    spec="GRAPH-FLASHATTENTIONBWD-1", shard=_lead_rule((2, 2, 2, 2, 1, 2), (0, 1, 2)),
    attrs=_attention_attrs(seed=True, block_q=True))


def flash_attention_bwd(q, k, v, o, lse, do, *, causal=False, scale=None, block_k=64, block_q=64, seed=None):
    """FlashAttention-2's backward of ``o = flash_attention(q, k, v)`` (GRAPH-FLASHATTENTIONBWD-1):
    ``(q̄, k̄, v̄)`` from q, k, v, the output ``o``, its row log-sum-exp ``lse``
    (:func:`flash_attention_lse`) and the cotangent ``do``, block by block, never forming an
    ``[Sq, Sk]`` value; k̄ and v̄ sum over query blocks in ascending order, q̄ over key blocks in
    ascending order (no atomics). ``block_q`` changes the bits of k̄ and v̄, ``block_k`` those
    of q̄; each result is rounded once into its operand's storage."""
    return bind(FLASH_ATTENTION_BWD, q, k, v, o, lse, do, causal=causal, scale=scale, block_k=block_k,
                block_q=block_q, seed=seed)


# ---------------------------------------------------------------------------------------
# norm_safe_bwd

def _norm_bwd_infer(attrs, x, g, *weight):
    name = "norm_safe_bwd"
    same_element(name, x, g, *weight)
    if g != x:
        raise ShapeError(f"{name}: the cotangent g {g} must have x's type {x}", fix="pass the cotangent of the norm's result")
    if attrs["bias"] and not weight:
        raise OpError(f"{name}: bias=True needs the weight operand", fix="pass the weight (ones for none)")
    length = x.shape[attrs["axis"]]
    if weight and weight[0].shape != (length,):
        raise ShapeError(f"{name}: weight {weight[0]} must have shape [{length}] (axis {attrs['axis']} of x {x})",
                         fix="pass the norm's weight vector")
    require_seed(name, attrs, x)
    return (x,) + tuple(weight) * (1 + attrs["bias"])


def _reduce(policy, t, axes: tuple, name: str):
    """``sum``/``mean`` over ``axes`` of accum values as the reduction ops compute them in the
    accumulation policy ``policy`` (NUM-RED-2, or NUM-RED-4 when its reduction is exact)."""
    if policy.reduction == "exact":
        return exact_sum(t, axis=axes, out_fmt=policy) if name == "sum" else _exact_mean(t, axes, policy, None)
    return reduce_axes(t, axes, name, accum=policy.accum)


def _norm_bwd_impl(call, x, g, *weight):
    axis, center = call.attrs["axis"], call.attrs["center"]
    policy = accum_policy(call.in_types[0].policy)
    X, G = to_accum(x, policy.accum), to_accum(g, policy.accum)
    others = tuple(i for i in range(x.ndim) if i != axis)

    def mean(t):
        return _expand(np.asarray(_reduce(policy, t, (axis,), "mean")), axis)

    def sub(a, b):
        return _op("sub", a, b, call=call)

    def mul(a, b):
        return _op("mul", a, b, call=call)
    c = sub(X, mean(X)) if center else X
    eps = to_accum(np.float64(call.attrs["eps"]), policy.accum)
    r = math_in_accum("rsqrt", _op("add", mean(mul(c, c)), eps, call=call), accum=policy.accum)
    xh = mul(c, r)
    gw = mul(G, _along(to_accum(weight[0], policy.accum), axis, x.ndim)) if weight else G
    d = mul(r, sub(gw, mul(xh, mean(mul(xh, gw)))))
    bars = [sub(d, mean(d)) if center else d]
    if weight:
        bars.append(np.asarray(_reduce(policy, mul(G, xh), others, "sum")) if others else mul(G, xh))
    if call.attrs["bias"]:
        bars.append(np.asarray(_reduce(policy, G, others, "sum")) if others else G)
    return tuple(to_storage(call, b.reshape(t.shape), t) for b, t in zip(bars, call.out_types))


def _norm_bwd_cost(call):
    n = numel(call.in_types[0])
    return Cost((10 + 2 * len(call.out_types)) * n,
                sum(nbytes(t) for t in call.in_types) + sum(nbytes(t) for t in call.out_types))


def _norm_bwd_shard(attrs, x, g, *weight) -> ShardPlan:
    """x and g keep their splits but along the normalized axis; the weight whole; x̄ in x's
    layout, w̄ and b̄ pending sums over the mesh axes splitting x's other dimensions."""
    lay = whole(x.layout, (attrs["axis"],))
    pending = tuple(a for d, axes in enumerate(lay.dims) if d != attrs["axis"] for a in axes)
    vector = ShardLayout(((),), pending)
    return ShardPlan((lay, lay) + tuple(whole(w.layout) for w in weight), (lay,) + (vector,) * (len(weight) + attrs["bias"]))


def _norm_bwd_tangents(attrs, policy, x, g, w, dx, dg, dw):
    """The tangents of ``(x̄, w̄, b̄)`` (present ones) for tangents ``ẋ``, ``ġ``, ``ẇ`` (``None``:
    zero) — see AD-NORMSAFEBWD-1."""
    o, axis, center = op(), attrs["axis"], attrs["center"]
    others = tuple(i for i in range(x.ndim) if i != axis)

    def mean(t):
        return o.mean(t, axis=axis, keepdims=True)

    def per_feature(t):
        return o.sum(t, axis=others) if others else t
    xh, r = _normalized(o, attrs, x, center, policy)
    gw = o.mul(g, along(w, axis, x.ndim)) if w is not None else g
    dxh = _norm_core(o, xh, r, dx, axis, center)
    # ∂/∂x of core(x; gw) along ẋ
    m = mean(o.mul(xh, gw))
    d0 = o.mul(r, o.sub(gw, o.mul(xh, m)))
    rdot = o.neg(o.mul(o.mul(r, r), mean(o.mul(xh, dx))))
    dd = o.sub(o.mul(o.div(rdot, r), d0), o.mul(r, o.add(o.mul(dxh, m), o.mul(xh, mean(o.mul(dxh, gw))))))
    xbar = o.sub(dd, mean(dd)) if center else dd
    g_dot = None if dg is None else (o.mul(dg, along(w, axis, x.ndim)) if w is not None else dg)
    if w is not None and dw is not None:
        g_dot = o.mul(g, along(dw, axis, x.ndim)) if g_dot is None else o.add(g_dot, o.mul(g, along(dw, axis, x.ndim)))
    if g_dot is not None:
        xbar = o.add(xbar, _norm_core(o, xh, r, g_dot, axis, center))
    out = [xbar]
    if w is not None:
        wbar = o.mul(g, dxh)
        out.append(per_feature(wbar if dg is None else o.add(o.mul(dg, xh), wbar)))
    if attrs["bias"]:
        out.append(None if dg is None else per_feature(dg))
    return tuple(out)


def _norm_bwd_jvp(attrs, primals, tangents, results):
    """AD-NORMSAFEBWD-1: the tangents of the norm's gradients (a Hessian-vector product)."""
    if all(t is None for t in tangents):
        return (None,) * len(results)
    x, g, *w = primals
    dx, dg, *dw = tangents

    def fn(policy, x, g, w, dx, dg, dw):
        return _norm_bwd_tangents(attrs, policy, x, g, w, materialize(dx, x), dg, dw)
    return in_wide(lambda policy, *v: fn(policy, *v), (x, g, w[0] if w else None, dx, dg, dw[0] if dw else None),
                   results)


def _norm_bwd_vjp(attrs, primals, results, cts):
    """AD-NORMSAFEBWD-1: ``(x̄, w̄)`` is the gradient of ``⟨g, y(x, w, b)⟩``, so its transpose in
    ``(x, w)`` is its tangent in the direction of the cotangents (the Hessian is symmetric),
    and in ``g`` the forward's tangent ``core(ā_x) ⊗ w ⊕ x̂ ⊗ ā_w ⊕ ā_b``."""
    x, g, *w = primals
    ax = materialize(cts[0], x)
    aw = materialize(cts[1], w[0]) if w else None
    ab = materialize(cts[2], w[0]) if attrs["bias"] else None

    def fn(policy, x, g, w, ax, aw, ab):
        o, axis = op(), attrs["axis"]
        bars = _norm_bwd_tangents({**attrs, "bias": False}, policy, x, g, w, ax, None, aw)
        xh, r = _normalized(o, attrs, x, attrs["center"], policy)
        gbar = _norm_core(o, xh, r, ax, axis, attrs["center"])
        if w is not None:
            gbar = o.add(o.mul(gbar, along(w, axis, x.ndim)), o.mul(xh, along(aw, axis, x.ndim)))
        if ab is not None:
            gbar = o.add(gbar, along(ab, axis, x.ndim))
        return (bars[0], gbar) + tuple(bars[1:])
    return in_wide(fn, (x, g, w[0] if w else None, ax, aw, ab), primals)


NORM_SAFE_BWD = define(
    "norm_safe_bwd", infer=_norm_bwd_infer, impl=_norm_bwd_impl, cost=_norm_bwd_cost, vjp=_norm_bwd_vjp,
    jvp=_norm_bwd_jvp, spec="GRAPH-NORMSAFEBWD-1", shard=_norm_bwd_shard, arity=(2, 3),
    attrs={"axis": Attr(-1, check_int, "the normalized axis"),
           "eps": Attr(REQUIRED, _check_float(nonnegative=True), "the forward's eps"),
           "center": Attr(REQUIRED, check_bool, "true for layernorm_safe (x centered), false for rmsnorm_safe"),
           "bias": Attr(False, check_bool, "also return the bias' cotangent Σ g (needs the weight)"),
           **SEED_ATTR},
    canonicalize=lambda attrs, x, *rest: {"axis": normalize_axis("norm_safe_bwd", attrs["axis"], x)})


def norm_safe_bwd(x, g, weight=None, *, axis=-1, eps, center, bias=False, seed=None):
    """The backward of ``layernorm_safe`` (``center=True``) or ``rmsnorm_safe`` (GRAPH-NORMSAFEBWD-1):
    ``(x̄[, weight̄[, bias̄]])`` from the input ``x``, the cotangent ``g`` and the weight, the row
    statistics recomputed inside (no full-width intermediate leaves the op)."""
    weights = [weight] if weight is not None else []
    return bind(NORM_SAFE_BWD, x, g, *weights, axis=axis, eps=eps, center=center, bias=bias, seed=seed)
