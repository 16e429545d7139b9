"""Tracing a transform into one Graph IR function, and running it (AD-2).

A transform called with concrete values traces its body — the user's function and the
derivative ops the transform adds — into a fresh ``tessera.func``, then runs it in the exact
interpreter (tensors) or on the simulated mesh (distributed tensors) — on the current backend, like ``jit`` does.
Called inside another trace (``jit(grad(f))``, ``grad(grad(f))``) it records into that trace
instead (:func:`in_trace`), so the derivative ops become part of the enclosing program.

Leaves of the arguments are tensors (Arrays, NumPy data, DistTensors: parameters of the
function) or static Python values (``None``, strings, bools, and numbers that are not
differentiated). Next to distributed arguments, other tensors are replicated on their mesh.
A distributed tensor the function uses without receiving it as an argument (a closure, as
seed 004's ``loss_fn`` uses ``x``) is *captured*: it becomes an extra parameter of the traced
function, so its layout is in the IR and its values are never copied into constants.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import context
from ..dist import DistTensor, tensor
from ..errors import OpError
from ..ir import CommonSubexpressionElimination, DeadCodeElimination, Module, PassManager, verify
from ..ops.sharding import planning_on
from ..ops.values import Array, Trace, Tracer, asarray, current_trace, is_weak_scalar

__all__ = ["ADTrace", "Program", "prepare", "record", "run", "in_trace", "is_dist", "is_static", "ops_after"]


def is_dist(x) -> bool:
    return isinstance(x, DistTensor)


def is_static(x) -> bool:
    return x is None or isinstance(x, (str, bool)) or is_weak_scalar(x)


def in_trace(leaves) -> Trace | None:
    """The trace a transform called on ``leaves`` records into: a tracer's, or the active one."""
    return next((x.trace for x in leaves if isinstance(x, Tracer)), None) or current_trace()


def ops_after(block, start) -> list:
    """The ops of ``block`` after the op ``start`` (all of them when ``start`` is ``None``)."""
    ops, op = [], block.first_op if start is None else start._next
    while op is not None:
        ops.append(op)
        op = op._next
    return ops


class ADTrace(Trace):
    """A trace that captures distributed tensors used inside it as extra parameters
    (``tessera_ref.dist.propagate`` calls :meth:`capture`)."""

    def __init__(self, name: str, location: str | None = None):
        super().__init__(name, location)
        self.captures: list = []

    def capture(self, x) -> Tracer:
        """The parameter standing for the distributed tensor ``x`` (added on first use)."""
        for tensor, value in self.captures:
            if tensor is x:
                return Tracer(value, self)
        value = self.block.add_argument(x.type)
        self.captures.append((x, value))
        return Tracer(value, self)


@dataclass
class Program:
    """One traced transform: the module, the mesh it runs on (or ``None``), the captured
    distributed tensors (passed after the arguments) and the ops the derivative pass emitted."""

    module: Module
    mesh: object
    captures: list
    derivative_ops: frozenset = field(default_factory=frozenset)

    @property
    def func(self):
        return self.module.body.first_op


def prepare(leaves, mesh, name: str) -> list:
    """``None`` for static leaves, else the tensor (replicated on ``mesh`` when there is one)."""
    out = []
    for i, x in enumerate(leaves):
        if is_dist(x):
            out.append(x)
        elif is_static(x):
            out.append(None)
        else:
            try:
                array = asarray(x)
            except Exception as exc:
                raise OpError(f"argument leaf {i} of {name!r} is a {type(x).__name__}, neither a tensor nor a "
                              "static Python value", fix="pass arrays, scalars, strings, or tuples/lists/dicts "
                                                         "of them") from exc
            if mesh is not None:
                array = tensor(array.shape, None, mesh, array.type.policy, data=array.data)
            out.append(array)
    return out


def _trace(body, leaves, mesh, name: str, location: str | None):
    tensors = prepare(leaves, mesh, name)
    trace = ADTrace(name, location)
    params = iter(trace.arguments([t.type for t in tensors if t is not None]))
    call = [next(params) if t is not None else x for x, t in zip(leaves, tensors)]
    with trace, planning_on(mesh):
        results, derivative, structure = body(call)
        results = [trace.capture(r) if is_dist(r) else r for r in results]
    return tensors, trace, results, derivative, structure


def record(body, leaves, name: str, location: str | None) -> tuple[Program, list, object]:
    """Trace ``body(call_leaves) -> (result leaves, derivative op ids, structure)`` on ``leaves``;
    returns the program, the tensors to pass and the results' structure. When only captured
    tensors are distributed, the trace is taken again with the arguments replicated on their mesh."""
    mesh = next((x.mesh for x in leaves if is_dist(x)), None)
    tensors, trace, results, derivative, structure = _trace(body, leaves, mesh, name, location)
    if mesh is None and trace.captures:
        mesh = trace.captures[0][0].mesh
        tensors, trace, results, derivative, structure = _trace(body, leaves, mesh, name, location)
    module = trace.finish(results)
    verify(module)
    PassManager([DeadCodeElimination(), CommonSubexpressionElimination()]).run(module)
    kept = frozenset(id(op) for op in module.body.first_op.regions[0].blocks[0] if id(op) in derivative)
    return Program(module, mesh, list(trace.captures), kept), tensors, structure


def run(program: Program, tensors) -> list:
    """Run ``program`` on the tensors of :func:`record` (and its captures); returns values."""
    args = [t for t in tensors if t is not None] + [x for x, _ in program.captures]
    func = program.func
    backend = context.backend()
    if program.mesh is not None:
        return backend.run_function(func, args)
    values = backend.run_function(func, [a.data for a in args])
    returned = func.regions[0].blocks[0].last_op.operands
    return [Array(v, r.type) for v, r in zip(values, returned)]
