"""A misuse probe of the verifier: every registered op applied to 0-3 operands of several
types, with no result and with one result, and no attributes.

Nearly all of these modules are ill-formed; the verifier must say so with a
:class:`~tessera_ref.errors.TesseraError` (a :class:`~tessera_ref.ir.VerifyError` naming the
op), never with a raw Python exception. :func:`raw_errors` lists the cases that break that.
"""
from __future__ import annotations

import itertools

from tessera_ref.errors import TesseraError
from tessera_ref.ir import OPS, Builder, IndexType, Module, Operation, ScalarType, TensorType, func_op, return_op, verify
from tessera_ref.ir.types import FunctionType
from tessera_ref.ops import primitive_of

#: The operand types the probe tries: a tensor of numbers (static, other rank and format,
#: symbolic), a boolean tensor, a scalar, an index, and a function type.
PROBE_TYPES = (
    TensorType((4,), "f32"),
    TensorType((2, 3), "bf16"),
    TensorType(("B", 4), "f32"),
    TensorType((4,), "i1"),
    ScalarType("f32"),
    IndexType(),
    FunctionType((), ()),
)
_RESULTS = ((), (TensorType((4,), "f32"),))
#: Attributes that tile ops read (so the probe reaches the checks after the attributes).
_TILE_ATTRS = {"fn": "add", "axis": 0, "accum": "f32", "pending": 0, "swizzle": "none", "pad": 0,
               "prefetch": 0}


def _attribute_sets(name: str) -> list:
    """No attributes, and attributes an op of ``name`` accepts (a primitive's defaults)."""
    prim = primitive_of(Operation(name))
    if prim is None:
        return [{}, dict(_TILE_ATTRS)] if name.startswith("tessera.tile.") else [{}]
    try:
        return [{}, prim.check_attrs({})]
    except TesseraError:  # a required attribute: the probe leaves it out
        return [{}]


def cases(names=None, max_operands: int = 3):
    """``(op name, operand types, result types, attributes)`` for every probe case of ``names``."""
    for name in sorted(OPS if names is None else names):
        for attributes in _attribute_sets(name):
            for n in range(max_operands + 1):
                for operand_types in itertools.product(PROBE_TYPES, repeat=n):
                    for result_types in _RESULTS:
                        yield name, operand_types, result_types, attributes


def module_of(name: str, operand_types, result_types, attributes=None) -> Module:
    """A module whose one function applies op ``name`` to arguments of ``operand_types``."""
    module = Module()
    func = module.body.append(func_op("f", operand_types, (), location="probe.py:1"))
    body = func.regions[0].entry
    builder = Builder(body)
    builder.insert(Operation(name, body.args, result_types, attributes, location="probe.py:2"))
    builder.insert(return_op(location="probe.py:3"))
    return module


def raw_errors(names=None, max_operands: int = 3, limit: int | None = None) -> list:
    """The probe cases on which :func:`verify` raised something other than a TesseraError,
    as ``(op name, operand types, result types, attributes, exception)``."""
    found = []
    for name, operand_types, result_types, attributes in cases(names, max_operands):
        module = module_of(name, operand_types, result_types, attributes)
        try:
            verify(module)
        except TesseraError:
            pass
        except Exception as exc:  # noqa: BLE001 - collecting what the verifier must never raise
            found.append((name, operand_types, result_types, attributes, exc))
            if limit is not None and len(found) >= limit:
                break
    return found
