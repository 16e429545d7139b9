"""The builtin ops every IR level shares: the module, functions and return.

``"tessera.module"`` (:class:`~tessera_ref.ir.core.Module`)
    No operands or results, one region of one block; isolated from above; the ``sym_name``
    attributes of the ops in its body are distinct. It is only ever the top-level op.

``"tessera.func"``
    A function definition: no operands or results; attributes ``sym_name`` (str) and
    ``function_type`` (a :class:`~tessera_ref.ir.types.FunctionType`); one region of one
    block whose arguments have the function's input types and whose last op is
    ``"tessera.return"``. Isolated from above. Text::

        "tessera.func"() ({
        ^bb0(%x: tensor<4xf32>):
          "tessera.return"(%x) : (tensor<4xf32>) -> ()
        }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "identity"} : () -> ()

``"tessera.return"``
    The terminator of a function body; its operand types are the function's result types.
"""
from __future__ import annotations

from .core import MODULE, Block, Operation, Region
from .registry import register_op
from .types import FunctionType

__all__ = ["FUNC", "RETURN", "func_op", "return_op"]

FUNC = "tessera.func"
RETURN = "tessera.return"


def func_op(sym_name: str, input_types, result_types, *, location: str | None = None) -> Operation:
    """A new ``tessera.func`` with an empty entry block whose arguments have ``input_types``."""
    signature = FunctionType(input_types, result_types)
    body = Region([Block(signature.inputs)])
    return Operation(FUNC, (), (), {"sym_name": sym_name, "function_type": signature}, [body], location)


def return_op(values=(), *, location: str | None = None) -> Operation:
    """A new ``tessera.return`` of ``values``."""
    return Operation(RETURN, values, (), None, (), location)


def _types(values) -> str:
    return "(" + ", ".join(str(v) for v in values) + ")"


def _single_block(op: Operation) -> Block:
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        raise op.emit_error(f"needs exactly one region of one block, has {len(op.regions)} region(s) with "
                            f"{[len(r.blocks) for r in op.regions]} block(s)")
    return op.regions[0].blocks[0]


def _no_operands_or_results(op: Operation) -> None:
    if op.operands or op.results:
        raise op.emit_error(f"takes no operands and has no results, has {len(op.operands)} operand(s) "
                            f"and {len(op.results)} result(s)")


def _verify_module(op: Operation) -> None:
    if op.parent is not None:
        raise op.emit_error("is nested in another op; a module is only the top-level op")
    _no_operands_or_results(op)
    seen: dict = {}
    for nested in _single_block(op):
        name = nested.attributes.get("sym_name")
        if name is None:
            continue
        if name in seen:
            raise nested.emit_error(f"redefines symbol {name!r} (first defined at "
                                    f"{seen[name].where})",
                                    fix="give every function of a module its own name")
        seen[name] = nested


def _verify_func(op: Operation) -> None:
    _no_operands_or_results(op)
    name = op.attributes.get("sym_name")
    if not isinstance(name, str) or not name:
        raise op.emit_error(f"needs a non-empty str attribute 'sym_name', has {name!r}")
    signature = op.attributes.get("function_type")
    if not isinstance(signature, FunctionType):
        raise op.emit_error(f"needs a FunctionType attribute 'function_type', has {signature!r}")
    body = _single_block(op)
    arg_types = tuple(a.type for a in body.args)
    if arg_types != signature.inputs:
        raise op.emit_error(f"@{name}: entry block argument types {_types(arg_types)} differ from the "
                            f"function's input types {_types(signature.inputs)}")
    last = body.last_op
    if last is None or last.name != RETURN:
        raise op.emit_error(f"@{name}: the body must end with '{RETURN}', ends with "
                            f"{'nothing' if last is None else repr(last.name)}",
                            fix=f"append a '{RETURN}' of the function's results")


def _verify_return(op: Operation) -> None:
    func = op.parent_op
    if func is None or func.name != FUNC:
        raise op.emit_error(f"must be in the body of a '{FUNC}', is in "
                            f"{'nothing' if func is None else repr(func.name)}")
    signature = func.attributes.get("function_type")
    returned = tuple(v.type for v in op.operands)
    if isinstance(signature, FunctionType) and returned != signature.results:
        raise op.emit_error(f"returns {_types(returned)} but @{func.attributes.get('sym_name')} is declared "
                            f"to return {_types(signature.results)}",
                            fix="return values of the declared result types")


register_op(MODULE, verify=_verify_module, isolated=True)
register_op(FUNC, verify=_verify_func, isolated=True)
register_op(RETURN, verify=_verify_return, terminator=True)
