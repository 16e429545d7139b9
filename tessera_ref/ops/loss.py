"""``log_softmax`` and ``cross_entropy`` on integer labels (GRAPH-LOGSOFTMAX-1,
GRAPH-CROSSENTROPY-1), with the vocab-parallel rule (MESH-SHARD-CE-1).

Both compute in the policy's ``accum`` format by the common rules of the neural-network ops
(docs/spec/_graph_nn.md): the canonical row max, ``z = x ⊖ m``, the canonical sum of
``exp(z)`` and its ``log``; only the result is rounded into storage. Over a class axis split
across devices a rule expands them into those steps as ops, so the devices all-reduce the row
max and the row sum (and the picked logit), never the logits.
"""
from __future__ import annotations

import numpy as np

from ..errors import OpError, ShapeError
from ..ir import ShardLayout, TensorType
from ..ir.types import INDEX
from ..numerics import accum_op
from ..numerics.arith import to_accum
from .adjoint import accum_policy, cast_to, constant, in_accum, op
from .bind import bind
from .exact import math_in_accum, reduce_axes
from .primitive import Attr, Cost, define
from .sharding import ShardPlan, keep_whole_rule, whole
from .typecheck import (SEED_ATTR, check_int, check_str_choice, nbytes, normalize_axis, numel, require_float,
                        require_int, require_seed, to_storage)
from .values import asarray

__all__ = ["log_softmax", "cross_entropy"]


def _log_sum_exp_parts(X: np.ndarray, axis: int, accum):
    """``(z, l)``: ``z = x ⊖ max_ax(x)`` and ``l = log(sum_ax(exp(z)))`` (``l`` without the axis)."""
    m = reduce_axes(X, (axis,), "max", accum=accum)
    z = accum_op("sub", X, np.expand_dims(m, axis), accum=accum)
    s = reduce_axes(math_in_accum("exp", z, accum=accum), (axis,), "sum", accum=accum)
    return z, math_in_accum("log", s, accum=accum)


def _split_class_axis(x: TensorType, axis: int) -> bool:
    return bool(x.layout.dims[axis]) or (bool(x.layout.partial) and x.layout.partial_op != "sum")


# -- log_softmax --------------------------------------------------------------------------------
def _log_softmax_infer(attrs, x):
    require_float("log_softmax", x)
    require_seed("log_softmax", attrs, x)
    return x


def _log_softmax_impl(call, x):
    axis, accum = call.attrs["axis"], call.out_types[0].policy.accum
    z, l = _log_sum_exp_parts(to_accum(x, accum), axis, accum)
    return to_storage(call, accum_op("sub", z, np.expand_dims(l, axis), accum=accum))


def _log_softmax_vjp(attrs, primals, results, cts):
    """AD-LOGSOFTMAX-1: ``x̄ = ḡ ⊖ exp(y) ⊗ sum_ax(ḡ)`` in accum, rounded once into storage."""
    axis = attrs["axis"]

    def rule(policy, y, g):
        o = op()
        return o.sub(g, o.mul(o.exp(y), o.sum(g, axis=axis, keepdims=True)))
    return (in_accum(rule, results[0], cts[0]),)


def _log_softmax_jvp(attrs, primals, tangents, results):
    """``ẏ = ẋ ⊖ sum_ax(exp(y) ⊗ ẋ)``."""
    if tangents[0] is None:
        return (None,)
    axis = attrs["axis"]

    def rule(policy, y, t):
        o = op()
        return o.sub(t, o.sum(o.mul(o.exp(y), t), axis=axis, keepdims=True))
    return (in_accum(rule, results[0], tangents[0]),)


def _expanded_log_softmax(attrs, x):
    """MESH-SHARD-CE-1: the steps as ops in accum; the row max and row sum are all-reduced."""
    axis = attrs["axis"]

    def steps(policy, x):
        o = op()
        z = o.sub(x, o.stop_gradient(o.max(x, axis=axis, keepdims=True)))
        return o.sub(z, o.log(o.sum(o.exp(z), axis=axis, keepdims=True)))
    return in_accum(steps, x)


def _log_softmax_shard(attrs, x) -> ShardPlan:
    if _split_class_axis(x, attrs["axis"]):
        return ShardPlan((x.layout,), None, expand=_expanded_log_softmax)
    return keep_whole_rule(lambda a, t: (a["axis"],))(attrs, x)


LOG_SOFTMAX = define("log_softmax", infer=_log_softmax_infer, impl=_log_softmax_impl, spec="GRAPH-LOGSOFTMAX-1",
                     shard=_log_softmax_shard, vjp=_log_softmax_vjp, jvp=_log_softmax_jvp,
                     cost=lambda call: Cost(5 * numel(call.out_types[0]),
                                            nbytes(call.in_types[0]) + nbytes(call.out_types[0])),
                     attrs={"axis": Attr(-1, check_int, "the axis log_softmax normalizes"), **SEED_ATTR},
                     canonicalize=lambda attrs, x: {"axis": normalize_axis("log_softmax", attrs["axis"], x)})


def log_softmax(x, axis=-1, *, seed=None):
    """``x − logsumexp(x)`` along ``axis``, the max subtracted first, in the accum format
    (GRAPH-LOGSOFTMAX-1)."""
    return bind(LOG_SOFTMAX, x, axis=axis, seed=seed)


# -- cross_entropy ------------------------------------------------------------------------------
_REDUCTIONS = ("mean", "sum", "none")


def _ce_infer(attrs, logits, labels):
    require_float("cross_entropy (logits)", logits)
    require_int("cross_entropy (labels)", labels)
    if logits.rank < 1 or tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ShapeError(f"cross_entropy: labels {labels} must have the logits' shape without the class axis "
                         f"(logits {logits}: classes along the last axis)",
                         fix="pass logits [..., V] and labels [...]; move the class axis last with op.transpose")
    out = TensorType(labels.shape if attrs["reduction"] == "none" else (), logits.policy)
    require_seed("cross_entropy", attrs, out)
    return out


def _ce_impl(call, logits, labels):
    accum, v = call.out_types[0].policy.accum, logits.shape[-1]
    idx = labels.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= v):
        bad = int(idx.max()) if idx.max() >= v else int(idx.min())
        raise OpError(f"cross_entropy: label {bad} is out of range for {v} classes (logits {call.in_types[0]}); "
                      f"the largest label is {int(idx.max())}", location=call.location,
                      fix=f"labels must lie in [0, {v}) (there is no ignore index)")
    z, l = _log_sum_exp_parts(to_accum(logits, accum), logits.ndim - 1, accum)
    picked = np.take_along_axis(z, idx[..., None], axis=-1)[..., 0]
    loss = accum_op("sub", l, picked, accum=accum).reshape(idx.shape)
    if call.attrs["reduction"] != "none":
        loss = reduce_axes(loss.reshape(-1), (0,), call.attrs["reduction"], accum=accum)
    return to_storage(call, loss)


def _one_hot(labels, v: int, like):
    """1 at each row's label, 0 elsewhere, in ``like``'s policy (``equal`` with an ``arange``)."""
    o = op()
    hot = o.equal(o.expand_dims(_as_index(labels), -1), _arange(v))
    return o.where(hot, constant(1.0, like.type.policy), constant(0.0, like.type.policy))


def _as_index(labels):
    return labels if labels.type.format is INDEX else op().cast(labels, "index")


def _arange(v: int):
    """``0 … v−1`` as an ``index`` constant."""
    return asarray(np.arange(v, dtype=np.int64))


def _row_scale(o, g, attrs, n: int):
    """The cotangent of each row's loss: ``ḡ`` itself, broadcast, or ``ḡ ⊘ N`` for the mean."""
    if attrs["reduction"] == "none":
        return o.expand_dims(g, -1)
    return g if attrs["reduction"] == "sum" else o.div(g, constant(float(n), g.type.policy))


def _ce_vjp(attrs, primals, results, cts):
    """AD-CROSSENTROPY-1: ``x̄ = (softmax(x) ⊖ onehot(labels)) ⊗ ḡ`` (``ḡ ⊘ N`` for the mean)
    in accum, rounded once into storage; the labels get none. Computed as the vocab-parallel
    expansion's derivative is (MESH-SHARD-CE-1), so the bits do not depend on the mesh:
    ``r = ḡ ⊗ (1 ⊘ Σ exp(z))``, ``x̄ = r ⊗ exp(z) ⊕ where(onehot, −ḡ, 0)`` with ``z = x ⊖ max(x)``."""
    logits, labels = primals
    n = int(np.prod(labels.shape))

    def rule(policy, x, g):
        o = op()
        e = o.exp(o.sub(x, o.max(x, axis=-1, keepdims=True)))
        gr = _row_scale(o, g, attrs, n)
        gr = gr if attrs["reduction"] == "none" else o.broadcast_to(o.reshape(gr, (1,) * len(x.shape)), tuple(x.shape[:-1]) + (1,))
        r = o.mul(gr, o.div(constant(1.0, policy), o.sum(e, axis=-1, keepdims=True)))
        hot = o.equal(o.expand_dims(_as_index(labels), -1), _arange(x.shape[-1]))
        return o.add(o.mul(r, e), o.where(hot, o.neg(gr), constant(0.0, policy)))
    return in_accum(rule, logits, cts[0]), None


def _ce_jvp(attrs, primals, tangents, results):
    """``ℓ̇ = sum_ax(softmax(x) ⊗ ẋ) ⊖ ẋ[label]``, reduced as the loss is."""
    if tangents[0] is None:
        return (None,)
    logits, labels = primals

    def rule(policy, x, t):
        o = op()
        row = o.sub(o.sum(o.mul(o.softmax(x, axis=-1), t), axis=-1),
                    o.sum(o.mul(_one_hot(labels, x.shape[-1], x), t), axis=-1))
        return row if attrs["reduction"] == "none" else getattr(o, attrs["reduction"])(row)
    return (in_accum(rule, logits, tangents[0]),)


def _expanded_cross_entropy(attrs, logits, labels):
    """MESH-SHARD-CE-1: the steps as ops in accum — the row max, the row sum of exp and the
    picked logit are all-reduced over the split class axis, the logits never gathered."""
    wide = accum_policy(logits.type.policy)
    o = op()
    x = cast_to(logits, wide)
    z = o.sub(x, o.stop_gradient(o.max(x, axis=-1, keepdims=True)))
    lse = o.log(o.sum(o.exp(z), axis=-1))
    hot = o.equal(o.expand_dims(_as_index(labels), -1), _arange(x.shape[-1]))
    picked = o.sum(o.where(hot, z, constant(0.0, wide)), axis=-1)
    loss = o.sub(lse, picked)
    if attrs["reduction"] != "none":
        loss = o.sum(loss)
        if attrs["reduction"] == "mean":
            loss = o.div(loss, constant(float(np.prod(labels.shape)), wide))
    return cast_to(loss, logits.type.policy)


def _ce_shard(attrs, logits, labels) -> ShardPlan:
    """Class axis split → the expansion; otherwise the rows keep their splits (labels follow),
    a ``sum`` over split rows is a pending sum, and a ``mean`` over split rows expands."""
    lay = logits.layout
    rows = tuple(lay.dims[:-1])
    split_rows = any(rows)
    if _split_class_axis(logits, logits.rank - 1) or (split_rows and attrs["reduction"] == "mean") \
            or labels.layout.partial:
        return ShardPlan((lay, labels.layout), None, expand=_expanded_cross_entropy)
    x_lay = whole(lay, (logits.rank - 1,))  # the class axis whole, the rows keep their splits
    lab = ShardLayout(rows, padded=lay.padded)
    if attrs["reduction"] == "none":
        return ShardPlan((x_lay, lab), (ShardLayout(rows),))
    return ShardPlan((x_lay, lab), (ShardLayout((), tuple(a for d in rows for a in d)),))


CROSS_ENTROPY = define("cross_entropy", infer=_ce_infer, impl=_ce_impl, spec="GRAPH-CROSSENTROPY-1",
                       shard=_ce_shard, vjp=_ce_vjp, jvp=_ce_jvp,
                       cost=lambda call: Cost(5 * numel(call.in_types[0]), sum(nbytes(t) for t in call.in_types)
                                              + nbytes(call.out_types[0])),
                       attrs={"reduction": Attr("mean", check_str_choice(*_REDUCTIONS),
                                                "how the per-row losses combine: mean, sum or none"),
                              **SEED_ATTR})


def cross_entropy(logits, labels, reduction: str = "mean", *, seed=None):
    """The negative log-likelihood of integer ``labels`` under ``softmax(logits)`` (classes along
    the last axis): per row ``logsumexp(x) − x[label]``, combined by ``reduction`` — ``"mean"``
    (default, as PyTorch), ``"sum"`` or ``"none"`` (GRAPH-CROSSENTROPY-1)."""
    return bind(CROSS_ENTROPY, logits, labels, reduction=reduction, seed=seed)
