"""``tessera.graph.constant``: a tensor value written into the IR (GRAPH-CONSTANT-1), and the
creation functions ``zeros``, ``ones``, ``full`` and ``arange`` (GRAPH-INIT-1).

Attributes: ``value``, a :class:`~tessera_ref.ir.DenseAttr` holding the exact element codes,
and ``type``, the result type, present only when it is not ``tensor<shape x format>`` with the
format's default policy. Traced functions get one for every concrete array they use.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, OpError
from ..ir import DenseAttr, TensorType
from ..ir.types import element_arg
from .sharding import replicated_rule
from .primitive import NOT_DIFFERENTIABLE, Attr, Cost, define
from .typecheck import nbytes
from .values import FUNCTIONS, asarray

__all__ = ["zeros", "ones", "full", "arange"]  # no op.constant: concrete arrays become constants when traced


def constant_attrs(array) -> dict:
    """The attributes of a constant op holding an :class:`~tessera_ref.ops.values.Array`."""
    attrs = {"value": DenseAttr.from_array(array.data)}
    if array.type != TensorType(array.data.shape, attrs["value"].format):
        attrs["type"] = array.type
    return attrs


def _check_value(value) -> DenseAttr:
    if not isinstance(value, DenseAttr):
        raise TypeError("expected a DenseAttr")
    return value


def _check_type(value) -> TensorType:
    if not isinstance(value, TensorType):
        raise TypeError("expected a tensor type")
    return value


def _infer(attrs):
    value = attrs["value"]
    default = TensorType(value.shape, value.format)
    ty = attrs.get("type", default)
    if ty.shape != value.shape or ty.format is not value.format:
        raise DTypeError(f"constant: type {ty} does not fit its value {value}",
                         fix="give the value's shape and storage format")
    if ty == default and "type" in attrs:
        raise DTypeError(f"constant: type {ty} is the default one and must be left out",
                         fix="drop the 'type' attribute")
    return ty


def _impl(call):
    return call.attrs["value"].to_array()


def _cost(call):
    return Cost(0, nbytes(call.out_types[0]))


CONSTANT = define("constant", infer=_infer, impl=_impl, cost=_cost, spec="GRAPH-CONSTANT-1", shard=replicated_rule,
                  vjp=NOT_DIFFERENTIABLE, jvp=NOT_DIFFERENTIABLE,  # no operands: nothing to differentiate
                  attrs={"value": Attr(check=_check_value, doc="the element codes, a DenseAttr"),
                         "type": Attr(None, _check_type, "the result type when its policy is not the default")})


# -- creation (GRAPH-INIT-1) ----------------------------------------------------------------------
def _shape(shape) -> tuple:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in shape):
        raise OpError(f"a shape of non-negative ints is needed, got {shape}", fix="pass sizes as ints, e.g. (4, 8)")
    return tuple(int(n) for n in shape)


def full(shape, value, dtype="f32"):
    """A tensor of ``shape`` whose every element is ``value`` converted once into ``dtype`` (a
    format, policy or element kind; NUM-CVT, round to nearest even) — a 0-d constant broadcast
    (one small constant in a traced function) (GRAPH-INIT-1)."""
    element = element_arg(dtype, "full's dtype")
    one = asarray(np.asarray(value), dtype=element) if not hasattr(element, "storage") else \
        asarray(np.asarray(value, dtype=np.float64), policy=element)
    shape = _shape(shape)
    return one if shape == () else FUNCTIONS.broadcast_to(one, shape)


def zeros(shape, dtype="f32"):
    """``full(shape, 0, dtype)``: +0 (GRAPH-INIT-1)."""
    return full(shape, 0, dtype)


def ones(shape, dtype="f32"):
    """``full(shape, 1, dtype)`` (GRAPH-INIT-1)."""
    return full(shape, 1, dtype)


def arange(start, stop=None, step=1, dtype="index"):
    """``start, start + step, …`` below ``stop`` (``arange(n)``: ``0 … n−1``) as exact integers,
    converted once into ``dtype`` (GRAPH-INIT-1); the arguments must be integers."""
    start, stop = (0, start) if stop is None else (start, stop)
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise OpError(f"arange takes integer bounds and step, got {name}={v!r}",
                          fix="use integers and scale afterwards, e.g. op.arange(n, dtype='f32') * 0.5")
    if step == 0:
        raise OpError("arange with step 0", fix="use a non-zero step")
    values = np.array([int(start) + i * int(step) for i in range(len(range(start, stop, step)))], dtype=object)
    element = element_arg(dtype, "arange's dtype")
    if hasattr(element, "storage"):
        return asarray(values.astype(np.float64), policy=element) if all(abs(v) <= 2 ** 53 for v in values) else \
            _inexact(values)
    return asarray(values.astype(np.int64) if values.size else np.zeros(0, np.int64), dtype=element)


def _inexact(values):
    raise OpError(f"arange into a float format reaches {max(values, key=abs)}, beyond 2^53 where f64 holds every integer",
                  fix="use an integer dtype ('index') and op.cast it")
