"""The one Graph IR execution loop (DESIGN §13, BACKEND-RUN-1).

:func:`evaluate` runs the ops of a block in program order: ``step(op, operand_values)``
gives each op's results, and the values of the block's terminator (``tessera.return``, a
Schedule IR ``yield``) are the block's results. Every executor runs Graph IR through it — the
interpreter on arrays, the simulated mesh on distributed tensors, Schedule IR kernels (whose
``step`` evaluates the kernel's region) — and only ``step`` differs.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..counters import count
from ..errors import DTypeError, OpError, ShapeError
from ..ir import Block, Operation, TensorType
from ..ir.registry import op_info
from .primitive import Call, primitive_of

__all__ = ["evaluate", "call_of", "bind_arguments", "Replay", "replay_of"]


def call_of(op: Operation) -> Call:
    """The :class:`Call` of a Graph IR op (its primitive, attributes, types and location); an
    :class:`~tessera_ref.errors.OpError` for an op that is not a Graph IR primitive."""
    prim = primitive_of(op)
    if prim is None:
        raise OpError(f"no executor rule for op '{op.name}' (at {op.location or 'unknown'})",
                      fix="only tessera.graph.* primitives execute at the Graph level")
    return Call(prim, op.attributes, tuple(v.type for v in op.operands), tuple(r.type for r in op.results),
                op.location)


def evaluate(block: Block, env: dict, step) -> list:
    """Run ``block`` with ``env`` (``{Value: value}``, holding its arguments); returns the
    terminator's operand values. ``step(op, values)`` returns the op's results in order."""
    for op in block:
        if op_info(op.name).terminator:
            return [env[v] for v in op.operands]
        env.update(zip(op.results, step(op, [env[v] for v in op.operands])))
    last = block.last_op
    raise OpError(f"a block ends without a terminator (last op: {last.name if last is not None else 'none'})",
                  fix="end the body with a return")


class Replay:
    """A function's ops resolved once for replay (BACKEND-RUN-2): each op's :class:`Call`, its
    operands and results as slots of a list, and the slots whose last use it is (freed after
    it, so a value lives no longer than the program needs it). :meth:`run` is :func:`evaluate`
    on that form — the same steps in the same order, without re-resolving anything."""

    __slots__ = ("ops", "steps", "nargs", "returned", "__weakref__")

    def __init__(self, func: Operation):
        block = func.regions[0].entry
        index = {a: i for i, a in enumerate(block.args)}
        body = [op for op in block]
        ops = body[:-1] if body and op_info(body[-1].name).terminator else None
        if ops is None:
            raise OpError("a block ends without a terminator", fix="end the body with a return")
        returned = set(body[-1].operands)
        last = {}
        for s, op in enumerate(ops):
            for v in op.operands:
                last[v] = s
        self.ops, self.steps, self.nargs = ops, [], len(block.args)
        for s, op in enumerate(ops):
            outs = []
            for r in op.results:
                index[r] = len(index)
                outs.append(index[r])
            dead = [v for v in op.operands if last[v] == s and v not in returned] + \
                [r for r in op.results if r not in last and r not in returned]
            call = call_of(op) if op.name.startswith("tessera.graph.") else None
            self.steps.append((op, call, tuple(index[v] for v in op.operands), tuple(outs),
                               tuple(dict.fromkeys(index[v] for v in dead))))
        self.returned = tuple(index[v] for v in body[-1].operands)

    def run(self, args, step) -> list:
        """The function's results on ``args``; ``step(op, call, values)`` gives an op's results."""
        count(replays=1)
        env = list(args) + [None] * sum(len(s[3]) for s in self.steps)
        for op, call, ins, outs, frees in self.steps:
            results = step(op, call, [env[i] for i in ins])
            for i, r in zip(outs, results):
                env[i] = r
            for i in frees:
                env[i] = None
        return [env[i] for i in self.returned]


_REPLAYS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def replay_of(func: Operation) -> Replay:
    """The :class:`Replay` of ``func``, made once per function."""
    with _LOCK:
        plan = _REPLAYS.get(func)
    if plan is None:
        plan = Replay(func)
        with _LOCK:
            plan = _REPLAYS.setdefault(func, plan)
    return plan


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
        value = value if hasattr(value, "dtype") and hasattr(value, "shape") else np.asarray(value)  # device values too
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
