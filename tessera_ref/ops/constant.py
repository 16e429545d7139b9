"""``tessera.graph.constant``: a tensor value written into the IR (GRAPH-CONSTANT-1).

Attributes: ``value``, a :class:`~tessera_ref.ir.DenseAttr` holding the exact element codes,
and ``type``, the result type, present only when it is not ``tensor<shape x format>`` with the
format's default policy. Traced functions get one for every concrete array they use.
"""
from __future__ import annotations

from ..errors import DTypeError
from ..ir import DenseAttr, TensorType
from .sharding import replicated_rule
from .primitive import NOT_DIFFERENTIABLE, Attr, Cost, define
from .typecheck import nbytes

__all__: list = []  # no op.* function: concrete arrays become constants when traced


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
