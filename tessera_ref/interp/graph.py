"""Executing a Graph IR function exactly (DESIGN §3: the interpreter's fast path).

Each op of the function body runs its primitive's ``impl`` on the arrays of its operands, in
program order; the values of ``tessera.return`` are the results. Arguments are checked
against the function's parameter types (storage dtype, rank, every static dimension, and one
size per symbolic dimension name), so a mismatch is reported before anything runs.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, OpError, ShapeError
from ..ir import FUNC, RETURN, Module, Operation, TensorType
from ..ops.primitive import Call, primitive_of

__all__ = ["run_function", "run_module", "bind_arguments"]


def bind_arguments(func: Operation, args) -> dict:
    """``{symbol: size}`` for ``args`` against the parameters of ``func`` (errors name both)."""
    name = func.attributes["sym_name"]
    params = func.regions[0].blocks[0].args
    if len(args) != len(params):
        raise OpError(f"@{name} takes {len(params)} argument(s), got {len(args)}",
                      fix="pass one array per parameter")
    sizes: dict = {}
    for i, (param, value) in enumerate(zip(params, args)):
        ty: TensorType = param.type
        value = np.asarray(value)
        if value.dtype != ty.dtype:
            raise DTypeError(f"@{name} argument {i}: expected {ty} (dtype {ty.dtype}), got dtype {value.dtype}",
                             fix="convert with tessera_ref.asarray(x, policy=...) first")
        if value.ndim != ty.rank:
            raise ShapeError(f"@{name} argument {i}: expected {ty}, got shape {value.shape}",
                             fix=f"pass a rank-{ty.rank} array")
        for dim, size in zip(ty.shape, value.shape):
            if isinstance(dim, str):
                if sizes.setdefault(dim, size) != size:
                    raise ShapeError(f"@{name} argument {i}: symbolic dimension {dim} is {size} here but "
                                     f"{sizes[dim]} in an earlier argument", fix="make the sizes agree")
            elif dim != size:
                raise ShapeError(f"@{name} argument {i}: expected {ty}, got shape {value.shape}",
                                 fix="pass an array of the traced shape (or trace again)")
    return sizes


def run_function(func: Operation, *args) -> list[np.ndarray]:
    """Run ``tessera.func`` ``func`` on ``args`` (storage-dtype arrays); returns the results."""
    if func.name != FUNC:
        raise OpError(f"run_function runs a '{FUNC}', got '{func.name}'", fix="pass a function op")
    bind_arguments(func, args)
    block = func.regions[0].blocks[0]
    env = {id(p): np.asarray(a) for p, a in zip(block.args, args)}
    for op in block:
        if op.name == RETURN:
            return [env[id(v)] for v in op.operands]
        prim = primitive_of(op)
        if prim is None:
            raise OpError(f"the interpreter has no rule for op '{op.name}' (at {op.location or 'unknown'})",
                          fix="only tessera.graph.* primitives execute at the Graph level")
        in_types = tuple(v.type for v in op.operands)
        call = Call(prim, op.attributes, in_types, tuple(r.type for r in op.results), op.location)
        for result, value in zip(op.results, prim.run(call, *[env[id(v)] for v in op.operands])):
            env[id(result)] = value
    raise OpError(f"@{func.attributes['sym_name']} has no '{RETURN}'", fix="end the body with a return")


def run_module(module: Module, name: str, *args) -> list[np.ndarray]:
    """Run the function ``@name`` of ``module`` on ``args``."""
    func = module.lookup(name)
    if func is None:
        names = [op.attributes.get("sym_name") for op in module.body]
        raise OpError(f"the module has no function @{name}", fix=f"use one of {names}")
    return run_function(func, *args)
