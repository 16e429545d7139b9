"""Random tensors and dropout (GRAPH-RAND-1, GRAPH-RANDN-1, GRAPH-POISSON-1, GRAPH-DROPOUT-1).

Every op is keyed by ``key = RNGKey(seed, stream)`` (NUM-RNG-2) and element ``i`` of its result
(the row-major flat index over the result's shape) depends only on ``(key, i)`` (NUM-RNG): so
``randn((4, 8), seed=s)[1]`` equals ``randn((32,), seed=s)[8:16]`` bit for bit, and a shard
that passes its global indices gets the same slice of the unsharded tensor. The ops are pure
(the same attributes give the same bits), so common-subexpression elimination may merge two
identical calls: use different ``stream`` (or ``seed``) values for independent draws.

Values are drawn in f64 (NUM-RNG-5/6, 53-bit uniforms) when the result's storage is f64 and in
f32 otherwise, then converted once into storage with the result policy's rounding and
overflow (NUM-CVT). Rounding to nearest into a narrow format can turn a uniform just below 1
into 1.0 (``bf16``: any ``u ≥ 1 − 2^-9``); a policy with ``rounding="rtz"`` keeps ``[0, 1)``.
Stochastic rounding into storage uses the key ``RNGKey(seed, stream).fold(1)`` (not the draw's
own key, whose bits would correlate with the values rounded).
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, OpError, TesseraError
from ..ir import TensorType
from ..ir.types import INDEX, ScalarType
from ..numerics import accum_op, cast, rng
from ..numerics.arith import round_f64_into
from .adjoint import linear_jvp
from .bind import bind
from .sharding import replicated_rule
from .primitive import NOT_DIFFERENTIABLE, Attr, Cost, define
from .typecheck import check_int, check_int_tuple, elementwise_cost, is_float, nbytes, numel

__all__ = ["rand", "randn", "poisson", "dropout"]

#: The fold of the op's key that keys stochastic rounding of its results into storage.
ROUNDING_FOLD = 1


# ---------------------------------------------------------------------------------------
# attribute checks

def _check_u64(value) -> int:
    value = check_int(value)
    if not 0 <= value < 2**64:
        raise ValueError("expected an integer in [0, 2**64)")
    return value


def _check_shape(value) -> tuple:
    shape = check_int_tuple(value)
    if any(d < 0 for d in shape):
        raise ValueError("dimensions must be >= 0")
    return shape


def _check_dtype(value) -> ScalarType:
    if isinstance(value, ScalarType):
        return value
    try:
        return ScalarType(value)
    except TesseraError as exc:
        raise ValueError(exc.what) from None


def _check_float_in(name: str, low: float, high: float, closed: bool):
    def check(value) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError("expected a number")
        value = float(value)
        if not (low <= value <= high if closed else low <= value < high):
            raise ValueError(f"{name} must lie in [{low}, {high}{']' if closed else ')'}")
        return value
    return check


_KEY_ATTRS = {
    "seed": Attr(None, _check_u64, "the RNG seed, an int in [0, 2**64) (required)"),
    "stream": Attr(0, _check_u64, "the RNG stream id, an int in [0, 2**64); key = RNGKey(seed, stream)"),
}
_SHAPE_ATTR = {"shape": Attr(check=_check_shape, doc="the result shape, a tuple of ints >= 0")}
_DTYPE_ATTR = {"dtype": Attr("f32", _check_dtype, "the result's float format or policy (default f32)")}


# ---------------------------------------------------------------------------------------
# shared rules

def _require_key(name: str, attrs: dict) -> None:
    if "seed" not in attrs:
        raise OpError(f"{name} needs a seed: its values are a function of RNGKey(seed, stream) and the "
                      "element index", fix=f"pass seed=<int> to {name} (and stream=<int> for independent draws)")


def _key(call) -> rng.RNGKey:
    return rng.RNGKey(call.attrs["seed"], call.attrs["stream"])


def _indices(shape) -> np.ndarray:
    """The row-major flat indices of a result of ``shape`` (NUM-RNG-8)."""
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64).reshape(shape)


def _into_storage(call, values: np.ndarray) -> np.ndarray:
    """Drawn (or computed) ``values`` converted once into the result's storage (NUM-CVT) with
    its policy's rounding and overflow; stochastic rounding keyed by ``_key(call).fold(1)``."""
    policy = call.out_types[0].policy
    key = _key(call).fold(ROUNDING_FOLD) if policy.rounding == "stochastic" else None
    return cast(values, policy.storage, rounding=policy.rounding, overflow=policy.overflow, key=key)


def _draw_infer(name: str):
    def infer(attrs):
        _require_key(name, attrs)
        out = TensorType(attrs["shape"], attrs["dtype"].policy)
        if not is_float(out):
            raise DTypeError(f"{name} draws floating-point values, got dtype {attrs['dtype']} ({out})",
                             fix="pass a float format or policy, e.g. dtype='f32' or 'bf16'")
        return out
    return infer


def _draw_impl(draw):
    def impl(call):
        out = call.out_types[0]
        wide = np.float64 if out.format.name == "f64" else np.float32
        return _into_storage(call, draw(_key(call), _indices(out.shape), wide))
    return impl


def _output_cost(call) -> Cost:
    """One FLOP per element; bytes: the result only (there are no tensor operands)."""
    out = call.out_types[0]
    return Cost(numel(out), nbytes(out))


def _define_draw(name: str, draw, spec: str):
    return define(name, infer=_draw_infer(name), impl=_draw_impl(draw), cost=_output_cost, spec=spec,
                  shard=replicated_rule,
                  attrs={**_SHAPE_ATTR, **_KEY_ATTRS, **_DTYPE_ATTR},
                  vjp=NOT_DIFFERENTIABLE, jvp=NOT_DIFFERENTIABLE)


RAND = _define_draw("rand", rng.uniform, "GRAPH-RAND-1")
RANDN = _define_draw("randn", rng.normal, "GRAPH-RANDN-1")


def rand(shape, *, seed=None, stream=0, dtype="f32"):
    """Uniform values in ``[0, 1)`` (GRAPH-RAND-1): element ``i`` (row-major) is
    ``uniform(RNGKey(seed, stream), i)`` (NUM-RNG-5) — 24-bit f32, or 53-bit for f64 storage —
    converted into ``dtype`` (a float format or policy)."""
    return bind(RAND, shape=shape, seed=seed, stream=stream, dtype=dtype)


def randn(shape, *, seed=None, stream=0, dtype="f32"):
    """Standard normal values (GRAPH-RANDN-1): element ``i`` is the Box–Muller
    ``normal(RNGKey(seed, stream), i)`` (NUM-RNG-6), converted into ``dtype``."""
    return bind(RANDN, shape=shape, seed=seed, stream=stream, dtype=dtype)


# ---------------------------------------------------------------------------------------
# poisson

def _poisson_infer(attrs):
    _require_key("poisson", attrs)
    return TensorType(attrs["shape"], INDEX)


def _poisson_impl(call):
    return rng.poisson(_key(call), _indices(call.out_types[0].shape), call.attrs["lam"])


POISSON = define("poisson", infer=_poisson_infer, impl=_poisson_impl, cost=_output_cost, spec="GRAPH-POISSON-1", shard=replicated_rule,
                 attrs={**_SHAPE_ATTR,
                        "lam": Attr(check=_check_float_in("lam", 0.0, rng.POISSON_LAM_MAX, True),
                                    doc="the rate, a number in [0, 2**52]"),
                        **_KEY_ATTRS},
                 vjp=NOT_DIFFERENTIABLE, jvp=NOT_DIFFERENTIABLE)


def poisson(shape, lam, *, seed=None, stream=0):
    """Poisson counts with rate ``lam`` as an ``index`` (int64) tensor (GRAPH-POISSON-1):
    element ``i`` is ``poisson(RNGKey(seed, stream), i, lam)`` (NUM-RNG-7). Cast the counts
    (exact in f32 up to 2**24) for arithmetic."""
    return bind(POISSON, shape=shape, lam=lam, seed=seed, stream=stream)


# ---------------------------------------------------------------------------------------
# dropout

def _dropout_infer(attrs, x):
    _require_key("dropout", attrs)
    if not is_float(x):
        raise DTypeError(f"dropout takes a floating-point tensor, got {x}",
                         fix="cast it first, e.g. op.cast(x, 'f32')")
    return x


def _dropout_impl(call, x):
    rate = call.attrs["rate"]
    if rate == 0.0:
        return x.copy()
    u = rng.uniform(_key(call), _indices(x.shape), np.float32)
    keep = u.astype(np.float64) >= rate
    accum = call.out_types[0].policy.accum
    scale = round_f64_into(np.asarray(1.0 - rate, dtype=np.float64), accum)
    kept = accum_op("div", x, scale, accum=accum)
    return _into_storage(call, np.where(keep, kept, kept.dtype.type(0.0)))


def _dropout_vjp(attrs, primals, results, cts):
    """AD-DROPOUT-1: dropout is linear in ``x`` for a fixed key — keep mask and scale depend only
    on ``(seed, stream)`` and the element index — so its transpose is the same op with the same
    attributes on the cotangent: the backward pass replays the forward key and its mask."""
    return (bind(DROPOUT, cts[0], **attrs),)


DROPOUT = define("dropout", infer=_dropout_infer, impl=_dropout_impl, cost=elementwise_cost,
                 spec="GRAPH-DROPOUT-1", shard=replicated_rule, vjp=_dropout_vjp, jvp=linear_jvp("dropout"),
                 attrs={"rate": Attr(check=_check_float_in("rate", 0.0, 1.0, False),
                                     doc="the probability of dropping an element, in [0, 1)"),
                        **_KEY_ATTRS})


def dropout(x, rate, *, seed=None, stream=0):
    """Inverted dropout (GRAPH-DROPOUT-1): element ``i`` is kept iff
    ``uniform(RNGKey(seed, stream), i) ≥ rate`` (24-bit f32 uniform, compared exactly), a kept
    value becomes ``x ⊘ RN(1 − rate)`` in the accum format, a dropped one +0; ``rate = 0``
    returns ``x`` unchanged."""
    return bind(DROPOUT, x, rate=rate, seed=seed, stream=stream)
