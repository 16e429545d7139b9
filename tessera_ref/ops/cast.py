"""Conversion between element types: ``cast`` (GRAPH-CAST-1).

The target is the attribute ``to``: a :class:`~tessera_ref.ir.ScalarType` (a format with its
policy: rounding, overflow, accum, reduction) or the name of an element kind, ``"i1"`` or
``"index"``. Rules, by source → target:

- number → format: the exact source value converted once into the target storage by
  NUM-CVT with the target policy's rounding and overflow (stochastic rounding keyed by
  ``seed`` and the row-major element index, NUM-CVT-5). No accum step: nothing is rounded
  before that one conversion. ``i1`` sources are 0/1; ``index`` sources are exact integers,
  and an index of magnitude above 2^53 that f64 cannot hold is a runtime
  :class:`~tessera_ref.errors.OpError` (NUM-CVT-1 rejects such sources).
- number → ``i1``: ``x != 0`` (NaN is true, ±0 false).
- number → an integer kind (``index`` = int64, ``i32``, ``ui8``; GRAPH-TYPE-4): truncation
  toward zero; NaN gives 0; values beyond the kind's range (±inf included) saturate to its
  least or greatest value (GRAPH-CAST-2).
- integer kind → integer kind: wrapping modulo 2^bits (two's complement, as C and PTX
  ``cvt``); ``i1`` → integer: 0/1; integer → ``i1``: ``x != 0``; a kind to itself is the identity.

Complex tensors are not castable (use ``op.real``/``op.imag``), and a target policy with
block or tensor scaling is an error: scaled quantization is not a Graph op yet.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, OpError, TesseraError
from ..ir import ScalarType, TensorType
from ..ir.types import BOOL, COMPLEX64, INDEX, INT_KINDS, ElementKind, element_arg
from ..numerics import Policy, as_policy, get_format
from .adjoint import seed_of
from .bind import bind
from .primitive import Attr, define
from .sharding import elementwise_rule
from .typecheck import SEED_ATTR, elementwise_cost, require_seed, to_storage

__all__ = ["cast"]

_KINDS = {k.name: k for k in (BOOL,) + INT_KINDS}
_EXACT_INT = 2 ** 53


def _element(value):
    """An ElementKind or a Policy for a ``to`` given in any accepted spelling."""
    if isinstance(value, ScalarType):
        return value.policy
    if isinstance(value, Policy):
        return value
    try:
        return element_arg(value, "cast's target")
    except TesseraError:
        pass
    try:
        return as_policy(get_format(value))
    except TesseraError:
        raise ValueError("expected a format name, Format, Policy, ScalarType, 'i1' or 'index'") from None


def _check_to(value):
    """The canonical ``to`` attribute: a ScalarType, or an element kind's name (``"i1"``, ``"index"``, ``"i32"``, ``"ui8"``)."""
    element = _element(value)
    if element is COMPLEX64:
        raise OpError("cast cannot produce complex<f32> tensors",
                      fix="build complex values with the FFT ops; cast real parts with op.real/op.imag")
    if isinstance(element, ElementKind):
        return element.name
    if element.scaling != "none":
        raise OpError(f"cast to {element} with scaling={element.scaling!r}: block/tensor-scaled "
                      "quantization is not a Graph op yet",
                      fix="cast to the unscaled format (policy.with_(scaling='none')) or quantize the "
                          "values with tessera_ref.numerics.quantize_mx / quantize_nvfp4 / quantize_per_tensor")
    return ScalarType(element)


def _target(to) -> "Policy | ElementKind":
    return _KINDS[to] if isinstance(to, str) else to.policy


def _infer(attrs, x):
    if x.policy is COMPLEX64:
        raise DTypeError(f"cast: complex tensors are not castable, got {x}",
                         fix="take op.real(x) / op.imag(x) first")
    out = TensorType(x.shape, _target(attrs["to"]))
    require_seed("cast", attrs, out)
    return out


def _to_int(x: np.ndarray, kind: ElementKind) -> np.ndarray:
    """Truncation toward zero; NaN → 0; saturation to the kind's range (GRAPH-CAST-2)."""
    v = x.astype(np.float64)
    info = np.iinfo(kind.dtype)
    with np.errstate(invalid="ignore"):
        t = np.trunc(np.where(np.isnan(v), 0.0, v))
        big, small = t >= float(info.max) + 1.0, t < float(info.min)  # both bounds exact in f64
        r = np.where(big | small, 0.0, t).astype(kind.dtype)
    r[big] = info.max
    r[small] = info.min
    return r


def _impl(call, x):
    src, dst = call.in_types[0].policy, call.out_types[0].policy
    if dst is BOOL:
        return np.asarray(x != 0) if isinstance(src, ElementKind) else np.asarray(x.astype(np.float64) != 0)
    if isinstance(dst, ElementKind):  # an integer kind: wrapping from kinds, saturating from numbers
        return x.astype(dst.dtype) if isinstance(src, ElementKind) else _to_int(x, dst)
    inexact = (x > _EXACT_INT) | (x < -_EXACT_INT) if src is INDEX else None
    if inexact is not None and inexact.any():
        bad = x[inexact].reshape(-1)[0]
        raise OpError(f"cast of an index tensor ({call.in_types[0]}) to {call.out_types[0]}: the value "
                      f"{bad} is beyond 2^53, where f64 cannot hold every integer (NUM-CVT-1)",
                      fix="keep index values within ±2^53 before converting them to a float format",
                      location=call.location)
    return to_storage(call, x)


def _real_float(t) -> bool:
    return not isinstance(t.policy, ElementKind) and t.format.is_float


def _cast_vjp(attrs, primals, results, cts):
    """AD-CAST-1: the cotangent converted back into the operand's policy (NUM-CVT); none
    when either side is an element kind (i1, index)."""
    x = primals[0]
    if not (_real_float(x.type) and _real_float(results[0].type)):
        return (None,)
    return (bind(CAST, cts[0], to=x.type.policy, **seed_of(attrs)),)


def _cast_jvp(attrs, primals, tangents, results):
    """The tangent converted like the value; none into i1/index."""
    t = tangents[0]
    if t is None or not (_real_float(primals[0].type) and _real_float(results[0].type)):
        return (None,)
    return (bind(CAST, t, **attrs),)


CAST = define("cast", infer=_infer, impl=_impl, cost=elementwise_cost, spec="GRAPH-CAST-1", shard=elementwise_rule,
              vjp=_cast_vjp, jvp=_cast_jvp,
              attrs={"to": Attr(check=_check_to, doc="the target: a format name, Format, Policy or "
                                                     "ScalarType, or 'i1' / 'index' / 'i32' / 'ui8'"),
                     **SEED_ATTR})


def cast(x, to, *, rounding=None, overflow=None, seed=None):
    """``x`` converted to ``to`` (GRAPH-CAST-1; see the module docstring for every rule).

    ``to`` is a format name (``"bf16"``), a :class:`~tessera_ref.numerics.Format`, a
    :class:`~tessera_ref.numerics.Policy` (``fp8 @accum(f32)``), a ScalarType, or ``"i1"`` /
    ``"index"`` (``"int64"``) / ``"i32"`` (``"int32"``) / ``"ui8"`` (``"uint8"``) (GRAPH-CAST-2). ``rounding`` and ``overflow`` override the target policy's (NUM-CVT-2/3);
    ``seed`` keys stochastic rounding.
    """
    if rounding is not None or overflow is not None:
        element = _element(to)
        if isinstance(element, ElementKind):
            raise OpError(f"cast to {element.name} takes no rounding/overflow (got rounding={rounding!r}, "
                          f"overflow={overflow!r})",
                          fix="leave them out: conversions to i1/index have fixed rules (GRAPH-CAST-1)")
        changes = {k: v for k, v in (("rounding", rounding), ("overflow", overflow)) if v is not None}
        try:
            to = element.with_(**changes)
        except TesseraError as exc:
            raise OpError(f"cast: {exc.what}", fix=exc.fix) from None
    return bind(CAST, x, to=to, seed=seed)
