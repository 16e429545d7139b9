"""Neural-network ops: softmax, layer and RMS normalization, flash attention, conv2d (GRAPH-*-1).

Every op computes in its policy's ``accum`` format (f32 for storage narrower than f32): the
operands are converted exactly into ``accum``, every step below is one IEEE-754 operation
there (``⊕ ⊖ ⊗ ⊘``, :func:`~tessera_ref.numerics.accum_op`), a NUM-MATH function rounded once
into ``accum`` (``exp``, ``rsqrt``: :func:`~tessera_ref.ops.exact.math_in_accum`), a
canonical axis reduction (NUM-RED-2: :func:`~tessera_ref.ops.exact.reduce_axes`) or a
canonical dot product (NUM-RED-1: :func:`~tessera_ref.numerics.reduce.dot_canonical`), and only
the final result is rounded into storage, once, with the policy's rounding and overflow.
There is no implicit contraction: ``y·w + b`` is a multiplication and an addition.
The spec clauses (docs/spec/_graph_nn.md) state each op's sequence of operations.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import OpError, ShapeError
from ..ir import TensorType
from ..numerics import accum_op
from ..numerics.arith import to_accum
from ..numerics.reduce import dot_canonical, reduce_canonical
from .adjoint import along, constant, dilate_axis, in_accum, materialize, op, sum_terms, unbroadcast
from .bind import bind
from .exact import math_in_accum, reduce_axes
from .sharding import batch_rule, keep_whole_rule, replicated_rule
from .primitive import Attr, Cost, define
from .typecheck import (SEED_ATTR, broadcast_shapes, check_bool, check_int, check_int_tuple,
                        check_str_choice, nbytes, normalize_axis, numel, require_float, require_seed,
                        same_element, static_shape, to_storage)
from .values import Array, Tracer, asarray

__all__ = ["softmax", "layernorm_safe", "rmsnorm_safe", "flash_attention", "conv2d"]


# ---------------------------------------------------------------------------------------
# shared pieces

def _accum(call):
    return call.out_types[0].policy.accum


def _op(name: str, *operands, call):
    """One IEEE operation ``name`` in the call's accum format (NUM-EW-1)."""
    return accum_op(name, *operands, accum=_accum(call))


def _attr_constant(value: float, call):
    """A float attribute as an accum value: the f64 attribute rounded to nearest even."""
    return to_accum(np.float64(value), _accum(call))


def _check_float(*, nonnegative: bool):
    def check(value) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError("expected a float")
        value = float(value)
        if not math.isfinite(value) or (nonnegative and value < 0):
            raise ValueError("expected a finite" + (" non-negative" if nonnegative else "") + " float")
        return value
    return check


def _axis_attr(doc: str) -> dict:
    return {"axis": Attr(-1, check_int, doc)}


def _canonical_axis(name: str):
    """The ``canonicalize`` rule of an op with one ``axis``: the axis made non-negative."""
    return lambda attrs, x, *rest: {"axis": normalize_axis(name, attrs["axis"], x)}


def _expand(r: np.ndarray, axis: int) -> np.ndarray:
    """A reduction's result with its axis put back (size 1), to broadcast against the input."""
    return np.expand_dims(r, axis)


def _along(a: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A vector of the normalized axis' length shaped to broadcast along ``axis``."""
    return a.reshape((-1,) + (1,) * (rank - 1 - axis))


# ---------------------------------------------------------------------------------------
# softmax

def _softmax_infer(attrs, x):
    require_float("softmax", x)
    require_seed("softmax", attrs, x)
    return x


def _softmax_impl(call, x):
    axis, accum = call.attrs["axis"], _accum(call)
    X = to_accum(x, accum)
    m = reduce_axes(X, (axis,), "max", accum=accum)
    e = math_in_accum("exp", _op("sub", X, _expand(m, axis), call=call), accum=accum)
    s = reduce_axes(e, (axis,), "sum", accum=accum)
    return to_storage(call, _op("div", e, _expand(s, axis), call=call))


def _softmax_transpose(o, y, g, axis: int):
    """``y ⊗ (g ⊖ sum(g ⊗ y))`` along ``axis``: the softmax Jacobian (symmetric) applied to
    ``g``, with the op functions ``o`` (:func:`~tessera_ref.ops.adjoint.op`, as every helper here)."""
    return o.mul(y, o.sub(g, o.sum(o.mul(g, y), axis=axis, keepdims=True)))


def _softmax_vjp(attrs, primals, results, cts):
    """AD-SOFTMAX-1: ``x̄ = y ⊗ (ḡ ⊖ Σ ḡ ⊗ y)`` from the result ``y`` (no recomputation), in
    the accumulation format, rounded once into storage."""
    return (in_accum(lambda policy, y, g: _softmax_transpose(op(), y, g, attrs["axis"]), results[0], cts[0]),)


def _softmax_jvp(attrs, primals, tangents, results):
    """The same map on the tangent (the Jacobian is symmetric)."""
    if tangents[0] is None:
        return (None,)
    return _softmax_vjp(attrs, primals, results, tangents)


SOFTMAX = define("softmax", infer=_softmax_infer, impl=_softmax_impl, spec="GRAPH-SOFTMAX-1", shard=keep_whole_rule(lambda attrs, x: (attrs["axis"],)),
                 vjp=_softmax_vjp, jvp=_softmax_jvp,
                 cost=lambda call: Cost(5 * numel(call.out_types[0]),
                                        nbytes(call.in_types[0]) + nbytes(call.out_types[0])),
                 attrs={**_axis_attr("the axis softmax normalizes"), **SEED_ATTR},
                 canonicalize=_canonical_axis("softmax"))


def softmax(x, axis=-1, *, seed=None):
    """The max-subtracted ("safe") softmax of ``x`` along ``axis`` (GRAPH-SOFTMAX-1).

    ``m = max(x)``, ``e = exp(x ⊖ m)``, ``y = e ⊘ sum(e)`` in the accum format, with the
    canonical max and sum (NUM-RED-2); ``-inf`` entries give 0, a row of only ``-inf`` (or with
    a NaN or ``+inf``) gives NaN.
    """
    return bind(SOFTMAX, x, axis=axis, seed=seed)


# ---------------------------------------------------------------------------------------
# layernorm_safe and rmsnorm_safe

def _norm_infer(name: str, what: tuple):
    """``infer`` of a normalization: x and its optional per-feature operands (``what`` names
    them) share a policy; each of those is a vector of the normalized axis' length."""
    def infer(attrs, x, *params):
        require_float(name, x)
        same_element(name, x, *params)
        length = x.shape[attrs["axis"]]
        for label, p in reversed(list(zip(what, params))):
            if p.shape != (length,):
                raise ShapeError(f"{name}: {label} {p} must have shape [{length}], the size of axis "
                                 f"{attrs['axis']} of x {x}",
                                 fix=f"pass a {label} vector with one entry per normalized feature")
        require_seed(name, attrs, x)
        return x
    return infer


def _affine(call, y, params):
    """``y ⊗ weight`` then ``⊕ bias`` (each given one), along the normalized axis."""
    axis, rank = call.attrs["axis"], call.in_types[0].rank
    for step, p in zip(("mul", "add"), params):
        y = _op(step, y, _along(p, axis, rank), call=call)
    return y


def _inverse_rms(call, sq):
    """``rsqrt(mean(sq) ⊕ eps)`` along the axis, put back to broadcast."""
    accum, axis = _accum(call), call.attrs["axis"]
    ms = reduce_axes(sq, (axis,), "mean", accum=accum)
    r = math_in_accum("rsqrt", _op("add", ms, _attr_constant(call.attrs["eps"], call), call=call), accum=accum)
    return _expand(r, axis)


def _layernorm_impl(call, x, *params):
    accum, axis = _accum(call), call.attrs["axis"]
    X = to_accum(x, accum)
    c = _op("sub", X, _expand(reduce_axes(X, (axis,), "mean", accum=accum), axis), call=call)
    y = _op("mul", c, _inverse_rms(call, _op("mul", c, c, call=call)), call=call)
    return to_storage(call, _affine(call, y, params))


def _rmsnorm_impl(call, x, *params):
    X = to_accum(x, _accum(call))
    y = _op("mul", X, _inverse_rms(call, _op("mul", X, X, call=call)), call=call)
    return to_storage(call, _affine(call, y, params))


def _norm_cost(flops_per_element: int):
    """``flops_per_element`` per output element plus one per element for each affine step."""
    def cost(call):
        n = numel(call.out_types[0])
        moved = sum(nbytes(t) for t in call.in_types) + nbytes(call.out_types[0])
        return Cost((flops_per_element + len(call.in_types) - 1) * n, moved)
    return cost


def _norm_attrs(eps: float) -> dict:
    return {**_axis_attr("the normalized axis"),
            "eps": Attr(eps, _check_float(nonnegative=True),
                        "a finite float >= 0 added to the variance inside the rsqrt"),
            **SEED_ATTR}


def _normalized(o, attrs, x, center: bool, policy):
    """``(x̂, r)``: the normalized ``x̂ = c ⊗ r`` and ``r = rsqrt(mean(c ⊗ c) ⊕ eps)`` (kept
    axis), with ``c = x ⊖ mean(x)`` (layernorm) or ``c = x`` (rmsnorm), recomputed with ops
    in ``policy`` (the accumulation policy; ``eps`` rounded into it to nearest even, as the
    forward rounds it into ``A``)."""
    axis = attrs["axis"]
    c = o.sub(x, o.mean(x, axis=axis, keepdims=True)) if center else x
    r = o.rsqrt(o.add(o.mean(o.mul(c, c), axis=axis, keepdims=True), constant(attrs["eps"], policy)))
    return o.mul(c, r), r


def _norm_core(o, xh, r, g, axis: int, center: bool):
    """The Jacobian of ``x ↦ x̂`` applied to ``g`` — symmetric, so it is both the jvp and the
    vjp: ``d = r ⊗ (g ⊖ x̂ ⊗ mean(x̂ ⊗ g))``, then ``d ⊖ mean(d)`` for layernorm (the centering
    projection, which commutes with the rest because ``x̂`` is centered). ``eps`` is inside
    ``r``, so the rule is exact for every ``eps``."""
    d = o.mul(r, o.sub(g, o.mul(xh, o.mean(o.mul(xh, g), axis=axis, keepdims=True))))
    return o.sub(d, o.mean(d, axis=axis, keepdims=True)) if center else d


def _norm_vjp(center: bool):
    """AD-LAYERNORMSAFE-1 / AD-RMSNORMSAFE-1: one ``op.norm_safe_bwd`` (GRAPH-NORMSAFEBWD-1) —
    ``x̄ = core(ḡ ⊗ weight)``, ``weight̄ = Σ ḡ ⊗ x̂``, ``bias̄ = Σ ḡ`` over every axis but the
    normalized one, with the row statistics recomputed inside the op: what the backward keeps
    of the forward is x and the weight, and no full-width value in the accumulation format
    leaves the op."""
    def vjp(attrs, primals, results, cts):
        x, *params = primals
        out = op().norm_safe_bwd(x, cts[0], params[0] if params else None, axis=attrs["axis"], eps=attrs["eps"],
                                 center=center, bias=len(params) == 2)
        return out if isinstance(out, tuple) else (out,)
    return vjp


def _norm_jvp(center: bool):
    """``ẏ = core(ẋ) ⊗ w ⊕ x̂ ⊗ ẇ ⊕ ḃ`` for weight ``w`` and bias ``b`` (absent tangents are
    zero), in the accumulation format, rounded once into storage."""
    def jvp(attrs, primals, tangents, results):
        if all(t is None for t in tangents):
            return (None,)
        axis, n = attrs["axis"], len(primals)

        def tangent(policy, x, *rest):
            o, params, (dx, *dparams) = op(), rest[:n - 1], rest[n - 1:]
            xh, r = _normalized(o, attrs, x, center, policy)
            out = _norm_core(o, xh, r, dx, axis, center)
            if params:
                out = o.mul(out, along(params[0], axis, x.ndim))
                if dparams[0] is not None:
                    out = o.add(out, o.mul(xh, along(dparams[0], axis, x.ndim)))
            if len(params) == 2 and dparams[1] is not None:
                out = o.add(out, along(dparams[1], axis, x.ndim))
            return out
        return (in_accum(tangent, primals[0], *primals[1:], materialize(tangents[0], primals[0]), *tangents[1:]),)
    return jvp


LAYERNORM_SAFE = define("layernorm_safe", infer=_norm_infer("layernorm_safe", ("weight", "bias")),
                        vjp=_norm_vjp(True), jvp=_norm_jvp(True),
                        impl=_layernorm_impl, cost=_norm_cost(7), spec="GRAPH-LAYERNORMSAFE-1", shard=keep_whole_rule(lambda attrs, x: (attrs["axis"],)),
                        attrs=_norm_attrs(1e-5), canonicalize=_canonical_axis("layernorm_safe"), arity=(1, 3))
RMSNORM_SAFE = define("rmsnorm_safe", infer=_norm_infer("rmsnorm_safe", ("weight",)),
                      vjp=_norm_vjp(False), jvp=_norm_jvp(False),
                      impl=_rmsnorm_impl, cost=_norm_cost(4), spec="GRAPH-RMSNORMSAFE-1", shard=keep_whole_rule(lambda attrs, x: (attrs["axis"],)),
                      attrs=_norm_attrs(1e-6), canonicalize=_canonical_axis("rmsnorm_safe"), arity=(1, 2))


def layernorm_safe(x, weight=None, bias=None, *, axis=-1, eps=1e-5, seed=None):
    """Layer normalization of ``x`` along ``axis`` (GRAPH-LAYERNORMSAFE-1).

    Two-pass in the accum format: ``μ = mean(x)``, ``c = x ⊖ μ``, ``var = mean(c ⊗ c)``,
    ``y = c ⊗ rsqrt(var ⊕ eps)``, then ``y ⊗ weight`` and ``⊕ bias`` when given (vectors of
    the axis' length, x's policy). ``bias`` without ``weight`` uses a weight of ones (exact).
    """
    if bias is not None and weight is None:
        weight = _ones_like(bias)
    params = [p for p in (weight, bias) if p is not None]
    return bind(LAYERNORM_SAFE, x, *params, axis=axis, eps=eps, seed=seed)


def _ones_like(ref):
    """Ones of ``ref``'s shape and policy (an Array, Tracer or array-like)."""
    t = ref.type if isinstance(ref, (Array, Tracer)) else asarray(ref).type
    return asarray(np.ones(t.shape), policy=t.policy)


def rmsnorm_safe(x, weight=None, *, axis=-1, eps=1e-6, seed=None):
    """RMS normalization of ``x`` along ``axis`` (GRAPH-RMSNORMSAFE-1).

    In the accum format: ``ms = mean(x ⊗ x)``, ``y = x ⊗ rsqrt(ms ⊕ eps)``, then ``y ⊗ weight``
    when given (a vector of the axis' length, x's policy).
    """
    params = [weight] if weight is not None else []
    return bind(RMSNORM_SAFE, x, *params, axis=axis, eps=eps, seed=seed)


# ---------------------------------------------------------------------------------------
# flash_attention

def _attention_infer(attrs, q, k, v):
    out = _attention_type(q, k, v)
    require_seed("flash_attention", attrs, out)
    return out


def _attention_type(q, k, v):
    """The result type of attention over ``q``, ``k``, ``v`` (shapes and policies checked)."""
    name = "flash_attention"
    element = same_element(name, q, k, v)
    require_float(name, q)
    if min(q.rank, k.rank, v.rank) < 2 or not q.rank == k.rank == v.rank:
        raise ShapeError(f"{name}: q, k, v must be [..., Sq, D], [..., Sk, D], [..., Sk, Dv] of one "
                         f"rank >= 2, got {q}, {k}, {v}", fix="reshape them to [batch..., seq, head_dim]")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{name}: q {q} and k {k} must share D (last axis) and k and v {v} must share "
                         f"Sk (second-to-last axis)", fix="check the head dimension and the key length")
    batch = broadcast_shapes(name, *(TensorType(t.shape[:-2], element) for t in (q, k, v)))
    return TensorType(batch + (q.shape[-2], v.shape[-1]), element)


def _scale(call, head_dim: int):
    """The score scale in accum: the ``scale`` attribute rounded to nearest, or ``rsqrt(D)``."""
    if "scale" in call.attrs:
        return _attr_constant(call.attrs["scale"], call)
    return math_in_accum("rsqrt", np.float64(head_dim), accum=_accum(call))


def _attention_scores(call, q, k):
    """The blocks of the online softmax (GRAPH-FLASHATTENTION-1): for each key block in
    ascending order, ``(t0, s)`` with ``s = (q·k_blockᵀ) ⊗ scale``, masked keys ``-inf``."""
    accum = _accum(call)
    Sq, D = q.shape[-2:]
    Sk = k.shape[-2]
    scale = _scale(call, D)
    rows = np.arange(Sq)[:, None]
    bk = call.attrs["block_k"]
    for t0 in range(0, Sk, bk):
        kb = k[..., t0:t0 + bk, :]
        s = _op("mul", dot_canonical(q, np.swapaxes(kb, -1, -2), accum=accum), scale, call=call)
        if call.attrs["causal"]:
            keys = t0 + np.arange(kb.shape[-2])[None, :]
            s = np.where(keys <= rows + (Sk - Sq), s, np.array(-np.inf, dtype=accum.dtype))
        yield t0, s


def _online_step(call, m, ell, s):
    """One block of the online softmax: ``(m_new, ell_new, p, alpha)`` from the running row
    max ``m`` and sum ``ell`` and the block's scores ``s``."""
    accum = _accum(call)
    m_new = reduce_canonical(np.concatenate([m[..., None], s], axis=-1), -1, "max", accum=accum)
    shift = np.where(m_new == -np.inf, np.array(0.0, dtype=accum.dtype), m_new)
    p = math_in_accum("exp", _op("sub", s, shift[..., None], call=call), accum=accum)
    alpha = math_in_accum("exp", _op("sub", m, shift, call=call), accum=accum)
    ell = _op("add", _op("mul", alpha, ell, call=call), reduce_canonical(p, -1, "sum", accum=accum), call=call)
    return m_new, ell, p, alpha


def _attention_impl(call, q, k, v):
    accum = _accum(call)
    out_shape = call.out_types[0].shape
    m = np.full(out_shape[:-1], -np.inf, dtype=accum.dtype)
    ell = np.zeros(out_shape[:-1], dtype=accum.dtype)
    acc = np.zeros(out_shape, dtype=accum.dtype)
    bk = call.attrs["block_k"]
    for t0, s in _attention_scores(call, q, k):
        m, ell, p, alpha = _online_step(call, m, ell, s)
        acc = _op("add", _op("mul", alpha[..., None], acc, call=call),
                  dot_canonical(p, v[..., t0:t0 + bk, :], accum=accum), call=call)
    return to_storage(call, _op("div", acc, ell[..., None], call=call))


def _attention_cost(call):
    q, k, v = (static_shape("flash_attention", t) for t in call.in_types)
    out = call.out_types[0]
    heads = numel(out) // (q[-2] * v[-1]) if numel(out) else 0
    scores = heads * q[-2] * k[-2]
    flops = 2 * scores * q[-1] + 2 * scores * v[-1] + 5 * scores
    return Cost(flops, sum(nbytes(t) for t in call.in_types) + nbytes(out))


def _check_block(value) -> int:
    value = check_int(value)
    if value < 1:
        raise ValueError("expected a block size >= 1")
    return value


def _causal_mask(o, sq: int, sk: int):
    """The ``i1`` mask ``[Sq, Sk]`` of allowed scores, ``t ≤ i + (Sk − Sq)``, as a comparison of
    an ``index`` column ``[Sq, 1]`` with a row ``[1, Sk]``: O(Sq + Sk) constants in the IR."""
    rows = np.arange(sq, dtype=np.int64)[:, None] + (sk - sq)
    return o.less_equal(np.arange(sk, dtype=np.int64)[None, :], rows)


def _attention_probs(o, attrs, q, k, policy):
    """``(P, scale)``: the attention probabilities ``softmax(mask(scale ⊗ q·kᵀ))`` recomputed
    with ops (matmul, mul, where, softmax) in ``policy`` (the accumulation policy) and the
    scale as a ``[1]`` tensor there: the attribute rounded to nearest even, or ``rsqrt(D)`` —
    the forward's scale (:func:`_scale`)."""
    scale = (constant([attrs["scale"]], policy) if "scale" in attrs
             else o.rsqrt(constant([float(q.shape[-1])], policy)))
    s = o.mul(o.matmul(q, k, transpose_b=True), scale)
    if attrs["causal"]:
        s = o.where(_causal_mask(o, q.shape[-2], k.shape[-2]), s, constant(-np.inf, policy))
    return o.softmax(s, axis=-1), scale


def _attention_vjp(attrs, primals, results, cts):
    """AD-FLASHATTENTION-1: FlashAttention-2's backward — the row log-sum-exp
    ``L = op.flash_attention_lse(q, k)`` and ``(q̄, k̄, v̄) = op.flash_attention_bwd(q, k, v, o,
    L, ḡ)`` (GRAPH-FLASHATTENTIONLSE-1, GRAPH-FLASHATTENTIONBWD-1): what the backward keeps of
    the forward is q, k, v and o, and no value of it is ``[Sq, Sk]``."""
    o = op()
    lse = o.flash_attention_lse(*primals[:2], **{k: attrs[k] for k in ("causal", "scale", "block_k") if k in attrs})
    return o.flash_attention_bwd(*primals, results[0], lse, cts[0], **{k: v for k, v in attrs.items() if k != "seed"})


def _attention_jvp(attrs, primals, tangents, results):
    """``ẏ = Ṗ·v + P·v̇`` with ``Ṗ = P ⊗ (Ṡ ⊖ Σ Ṡ ⊗ P)``, ``Ṡ = scale ⊗ (q̇·kᵀ + q·k̇ᵀ)``, in the
    accumulation format, rounded once into storage."""
    if all(t is None for t in tangents):
        return (None,)

    def tangent(policy, q, k, v, dq, dk, dv):
        o = op()
        p, scale = _attention_probs(o, attrs, q, k, policy)
        ds = o.mul(o.add(o.matmul(dq, k, transpose_b=True), o.matmul(q, dk, transpose_b=True)), scale)
        return o.add(o.matmul(_softmax_transpose(o, p, ds, -1), v), o.matmul(p, dv))
    return (in_accum(tangent, *primals, *(materialize(t, x) for t, x in zip(tangents, primals))),)


FLASH_ATTENTION = define(
    "flash_attention", infer=_attention_infer, impl=_attention_impl, cost=_attention_cost,
    vjp=_attention_vjp, jvp=_attention_jvp,
    spec="GRAPH-FLASHATTENTION-1", shard=batch_rule(2),
    attrs={"causal": Attr(False, check_bool, "mask key t from query i unless t <= i + (Sk - Sq)"),
           "scale": Attr(None, _check_float(nonnegative=False),
                         "the score scale (a finite float); default rsqrt(D)"),
           "block_k": Attr(64, _check_block, "keys per block of the online softmax (changes bits)"),
           "block_q": Attr(64, _check_block, "queries per block (scheduling only: same bits)"),
           **SEED_ATTR})


def flash_attention(q, k, v, *, causal=False, scale=None, block_k=64, block_q=64, seed=None):
    """Attention ``softmax(q·kᵀ·scale)·v`` by the blocked online softmax (GRAPH-FLASHATTENTION-1).

    ``q`` ``[..., Sq, D]``, ``k`` ``[..., Sk, D]``, ``v`` ``[..., Sk, Dv]`` (batch axes
    broadcast) give ``[..., Sq, Dv]``. The result is *defined* by the algorithm walking keys in
    blocks of ``block_k``, so ``block_k`` changes bits; ``block_q`` does not. ``scale``
    defaults to ``rsqrt(D)``; ``causal`` masks key ``t`` from query ``i`` unless
    ``t ≤ i + (Sk − Sq)`` (bottom-right aligned). A row with every key masked is NaN.
    """
    return bind(FLASH_ATTENTION, q, k, v, causal=causal, scale=scale, block_k=block_k,
                block_q=block_q, seed=seed)


# ---------------------------------------------------------------------------------------
# conv2d

def _check_pair(value) -> tuple:
    pair = check_int_tuple(value)
    pair = pair * 2 if len(pair) == 1 else pair
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError("expected a positive int or a pair of positive ints")
    return pair


def _check_padding(value):
    if isinstance(value, str):
        return check_str_choice("valid", "same")(value)
    pads = check_int_tuple(value)
    if len(pads) not in (1, 2, 4) or min(pads) < 0:
        raise ValueError("expected an int >= 0, (pad_h, pad_w), (top, bottom, left, right), 'valid' or 'same'")
    if len(pads) == 1:
        return pads * 4
    return (pads[0], pads[0], pads[1], pads[1]) if len(pads) == 2 else pads


def _conv_canonicalize(attrs, x, w):
    """String paddings resolved into ``(top, bottom, left, right)``: ``valid`` = 0; ``same``
    (stride 1 only) pads ``dilation·(K−1)`` in total, ``floor`` of half before."""
    padding = attrs["padding"]
    if padding == "valid":
        return {"padding": (0, 0, 0, 0)}
    if padding != "same" or w.rank != 4 or not w.is_static:
        return {}  # a 4-tuple already, or a weight that infer rejects
    if attrs["stride"] != (1, 1):
        raise OpError(f"conv2d: padding='same' needs stride 1, got stride={attrs['stride']} for x {x}, w {w}",
                      fix="pass explicit padding=(top, bottom, left, right)")
    pads = []
    for kernel, dil in zip(w.shape[2:], attrs["dilation"]):
        total = dil * (kernel - 1)
        pads += [total // 2, total - total // 2]
    return {"padding": tuple(pads)}


def _conv_geometry(attrs, x_nchw: tuple, w: tuple) -> tuple:
    """``(OH, OW)`` for an NCHW input shape and an OIHW weight shape."""
    (sh, sw), (dh, dw), (pt, pb, pl, pr) = attrs["stride"], attrs["dilation"], attrs["padding"]
    oh = (x_nchw[2] + pt + pb - dh * (w[2] - 1) - 1) // sh + 1
    ow = (x_nchw[3] + pl + pr - dw * (w[3] - 1) - 1) // sw + 1
    return oh, ow


def _nchw(shape: tuple, layout: str) -> tuple:
    return shape if layout == "NCHW" else (shape[0], shape[3], shape[1], shape[2])


def _conv_infer(attrs, x, w):
    name = "conv2d"
    element = same_element(name, x, w)
    require_float(name, x)
    layout = attrs["layout"]
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"{name}: x must be rank 4 ({layout}) and w rank 4 (OIHW), got x {x}, w {w}",
                         fix="reshape x to [N, C, H, W] (or [N, H, W, C] with layout='NHWC'), w to [O, C, KH, KW]")
    xs = _nchw(static_shape(name, x), layout)
    ws = static_shape(name, w)
    if xs[1] != ws[1]:
        raise ShapeError(f"{name}: x {x} ({layout}) has {xs[1]} channels but w {w} (OIHW) expects {ws[1]}",
                         fix="make w's second axis the input channel count (groups are not supported)")
    oh, ow = _conv_geometry(attrs, xs, ws)
    if oh < 1 or ow < 1:
        raise ShapeError(f"{name}: the dilated kernel of w {w} does not fit the padded input x {x} "
                         f"(output {oh}x{ow})", fix="pad more, or use a smaller kernel or dilation")
    out = (xs[0], ws[0], oh, ow) if layout == "NCHW" else (xs[0], oh, ow, ws[0])
    t = TensorType(out, element)
    require_seed(name, attrs, t)
    return t


def _im2col(x: np.ndarray, attrs, w_shape: tuple, oh: int, ow: int) -> np.ndarray:
    """The taps of every output position, ``[N, OH, OW, C·KH·KW]`` in (c, kh, kw) row-major
    order, padded positions holding +0 (in x's storage format)."""
    (sh, sw), (dh, dw), (pt, pb, pl, pr) = attrs["stride"], attrs["dilation"], attrs["padding"]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    kh, kw = w_shape[2:]
    taps = np.empty(x.shape[:2] + (kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            taps[:, :, i, j] = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
    return taps.transpose(0, 4, 5, 1, 2, 3).reshape(x.shape[0], oh, ow, -1)


def _conv_impl(call, x, w):
    layout = call.attrs["layout"]
    x = x if layout == "NCHW" else x.transpose(0, 3, 1, 2)
    oh, ow = _conv_geometry(call.attrs, x.shape, w.shape)
    cols = _im2col(x, call.attrs, w.shape, oh, ow)
    y = dot_canonical(cols, w.reshape(w.shape[0], -1).T, accum=_accum(call))  # [N, OH, OW, O]
    y = y.transpose(0, 3, 1, 2) if layout == "NCHW" else y
    return to_storage(call, np.ascontiguousarray(y))


def _conv_cost(call):
    out = call.out_types[0]
    o, c, kh, kw = static_shape("conv2d", call.in_types[1])
    return Cost(2 * numel(out) * c * kh * kw, sum(nbytes(t) for t in call.in_types) + nbytes(out))


def _conv_transposes(attrs, x, w, g):
    """``(x̄, w̄)`` of an NCHW convolution, each itself a ``conv2d``:

    - ``w̄``: ``x`` with N and C swapped convolved with ``ḡ`` (N and O swapped) as the kernel,
      stride and dilation exchanged, the same padding; cropped to ``KH×KW``, O and C swapped.
    - ``x̄``: ``ḡ`` zero-dilated by the stride, fully convolved (padding ``d·(K−1)``, plus the
      rows/columns of the padded input the strided windows never reach) with the flipped
      kernel (C and O swapped), then cropped to the unpadded input."""
    o = op(attrs)
    (sh, sw), (dh, dw), (pt, pb, pl, pr) = attrs["stride"], attrs["dilation"], attrs["padding"]
    (n, c, h, wd), (kh, kw) = x.shape, w.shape[2:]
    swap = (1, 0, 2, 3)
    wbar = o.conv2d(o.transpose(x, swap), o.transpose(g, swap), stride=(dh, dw), dilation=(sh, sw),
                    padding=(pt, pb, pl, pr))
    wbar = o.transpose(o.slice(wbar, [0, 0, 0, 0], [c, w.shape[0], kh, kw]), swap)
    gd = dilate_axis(dilate_axis(g, 2, sh), 3, sw)
    flipped = o.transpose(o.slice(w, [None] * 4, [None] * 4, [None, None, -1, -1]), swap)
    extra_h = (h + pt + pb) - (gd.shape[2] + dh * (kh - 1))
    extra_w = (wd + pl + pr) - (gd.shape[3] + dw * (kw - 1))
    full = o.conv2d(gd, flipped, dilation=(dh, dw), padding=(dh * (kh - 1), dh * (kh - 1) + extra_h,
                                                              dw * (kw - 1), dw * (kw - 1) + extra_w))
    return o.slice(full, [0, 0, pt, pl], [n, c, pt + h, pl + wd]), wbar


def _conv_vjp(attrs, primals, results, cts):
    """AD-CONV2D-1: :func:`_conv_transposes`; NHWC operands are transposed to NCHW and back."""
    o, (x, w), g = op(), primals, cts[0]
    if attrs["layout"] == "NHWC":
        x, g = o.transpose(x, (0, 3, 1, 2)), o.transpose(g, (0, 3, 1, 2))
    xbar, wbar = _conv_transposes({**attrs, "layout": "NCHW"}, x, w, g)
    return (o.transpose(xbar, (0, 2, 3, 1)) if attrs["layout"] == "NHWC" else xbar), wbar


def _conv_jvp(attrs, primals, tangents, results):
    """``conv(ẋ, w) + conv(x, ẇ)`` (bilinear)."""
    (x, w), (dx, dw) = primals, tangents
    return sum_terms([None if dx is None else bind(CONV2D, dx, w, **attrs),
                      None if dw is None else bind(CONV2D, x, dw, **attrs)], attrs)


CONV2D = define(
    "conv2d", infer=_conv_infer, impl=_conv_impl, cost=_conv_cost, spec="GRAPH-CONV2D-1", shard=replicated_rule,
    vjp=_conv_vjp, jvp=_conv_jvp,
    canonicalize=_conv_canonicalize,
    attrs={"stride": Attr(1, _check_pair, "a positive int or (stride_h, stride_w)"),
           "padding": Attr(0, _check_padding, "an int, (pad_h, pad_w), (top, bottom, left, right), "
                                              "'valid' or 'same' (stride 1)"),
           "dilation": Attr(1, _check_pair, "a positive int or (dilation_h, dilation_w)"),
           "layout": Attr("NCHW", check_str_choice("NCHW", "NHWC"), "x's layout: 'NCHW' or 'NHWC'"),
           **SEED_ATTR})


def conv2d(x, w, *, stride=1, padding=0, dilation=1, layout="NCHW", groups=1, seed=None):
    """2-D convolution (cross-correlation) of ``x`` with weights ``w`` (GRAPH-CONV2D-1).

    ``x`` is ``[N, C, H, W]`` (``layout="NCHW"``) or ``[N, H, W, C]`` (``"NHWC"``); ``w`` is
    always ``[O, C, KH, KW]``. Each output is the canonical dot (NUM-RED-1) over
    ``(c, kh, kw)`` in row-major order, zero-padded taps included as +0 inputs.
    Only ``groups=1`` is supported.
    """
    if groups != 1:
        raise OpError(f"conv2d: groups={groups!r} is not supported (only groups=1)",
                      fix="split the channels and call conv2d per group, then concatenate")
    return bind(CONV2D, x, w, stride=stride, padding=padding, dilation=dilation, layout=layout, seed=seed)
