"""The primitive registry: every Graph IR op, one module per family, each op defined once
with all its rules (DESIGN §5; :mod:`~tessera_ref.ops.primitive`).

Families: :mod:`.constant`, :mod:`.elementwise`, :mod:`.math`, :mod:`.cast`,
:mod:`.reduction`, :mod:`.shape`, :mod:`.gather`, :mod:`.linalg`, :mod:`.sparse`, :mod:`.nn`, :mod:`.loss`,
:mod:`.fused`, :mod:`.fft`,
:mod:`.random`, :mod:`.collective`. The user-facing functions are collected in :mod:`tessera_ref.op`.
"""
from . import cast, collective, constant, elementwise, fft, fused, gather, linalg, loss, math, nn, random, reduction, shape, sparse
from .bind import bind
from .primitive import (NOT_DIFFERENTIABLE, PRIMITIVES, RULES, Attr, Call, Cost, Primitive, define,
                        missing_rules, primitive, primitive_of)
from .values import FUNCTIONS, Array, Trace, Tracer, asarray

FAMILIES = (constant, elementwise, math, cast, reduction, shape, gather, linalg, sparse, nn, loss, fused, fft, random,
            collective)

# Fill the registry through which tensors' operators (values) and derivative rules (adjoint) call the ops.
for _family in FAMILIES:
    for _name in _family.__all__:
        if hasattr(FUNCTIONS, _name):
            raise ImportError(f"op.{_name} is defined by two op families")
        setattr(FUNCTIONS, _name, getattr(_family, _name))
del _family, _name

__all__ = ["PRIMITIVES", "Primitive", "Attr", "Call", "Cost", "define", "primitive", "primitive_of",
           "missing_rules", "NOT_DIFFERENTIABLE", "RULES", "bind", "Array", "Tracer", "Trace", "asarray",
           "FAMILIES"]
