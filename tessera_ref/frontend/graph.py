"""Tracing Python functions into Graph IR: ``@graph.module("name")`` and ``@jit``.

A :class:`GraphFunction` traces its Python function once per *signature* — the type of every
tensor argument (shape and policy) plus the value of every static argument (Python scalars,
strings, ``None``) — into a module with one ``tessera.func``, runs the graph rewrites
(:mod:`tessera_ref.ops.rewrites`), and caches the result. Calling it runs the cached module
in the exact interpreter and returns :class:`~tessera_ref.Array` values in the pytree the function returns (tuples, lists,
dicts, NamedTuples, dataclasses: AD-1). Inside another traced function it is inlined: its ops join the
caller's trace.

``f.inspect_ir("graph")`` prints the module of the most recent signature (after rewrites;
``optimized=False`` shows the trace as recorded); ``"schedule"``, ``"tile"`` and ``"target"``
print that module lowered with the default schedules (:mod:`tessera_ref.lowering`);
``f.trace(*args)`` traces without running.

Called with distributed tensors (:mod:`tessera_ref.dist`), the trace carries their layouts:
each op's sharding rule gives its results' layouts and the collectives it needs are recorded
before it (MESH-SHARD-1), so ``inspect_ir`` shows the communication; the mesh interpreter
runs it and returns distributed tensors. The mesh is part of the signature. Rewrites other
than dead-code elimination and CSE are not applied to sharded traces (they would have to
re-derive layouts).
"""
from __future__ import annotations

import functools
import inspect

from .. import context
from ..dist import DistTensor, tensor
from ..errors import DTypeError, OpError, PolicyError, ShapeError, TraceError, user_location
from ..ir import TensorType
from ..numerics.annotations import TensorAnnotation
from ..ir import CommonSubexpressionElimination, DeadCodeElimination, Module, PassManager, verify
from ..ir.levels import LEVELS
from ..ops.rewrites import optimize
from ..ops.sharding import planning_on
from ..ops.values import Array, Trace, Tracer, asarray, current_trace, is_weak_scalar
from .pytree import flatten

__all__ = ["GraphFunction", "module", "jit", "TracedModule", "RESIDENT"]

#: Types of values that live on a device (the runtime's DeviceArray registers itself here: it
#: lies above the front end). jit passes them to the backend as they are, and the backend's
#: results for them come back as they are (RUNTIME-MEM-1).
RESIDENT: list = []

class TracedModule:
    """One cached trace: the module as recorded and after the rewrites, the report, and the
    pytree structure of the function's result (its leaves are the module's results)."""

    def __init__(self, traced: Module, optimized: Module, report, structure):
        self.traced = traced
        self.optimized = optimized
        self.report = report
        self.structure = structure

    @property
    def func(self):
        return self.optimized.body.first_op


class GraphFunction:
    """A Python function traced to Graph IR on first call per signature (see the module docstring)."""

    def __init__(self, fn, name: str | None = None, *, rewrite: bool = True, backend=None):
        if not callable(fn):
            raise OpError(f"graph.module / jit decorate a function, got {fn!r}",
                          fix="put the decorator on a def")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", type(fn).__name__)  # callable objects too
        self.rewrite = rewrite
        self.backend = backend
        self.cache: dict = {}
        self._last: TracedModule | None = None
        self.annotations = _tensor_annotations(fn)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<GraphFunction {self.name!r}: {len(self.cache)} traced signature(s)>"

    # -- signatures -----------------------------------------------------------------------
    def _signature(self, args):
        """The cache key of ``args`` (their pytree structure, each leaf's type or static value)
        and per leaf its tensor (``None`` for a static leaf)."""
        leaves, tree = flatten(args)
        mesh = next((x.mesh for x in leaves if _is_dist(x)), None)
        key, tensors = [tree], []
        for i, x in enumerate(leaves):
            if isinstance(x, Tracer):
                raise TraceError("a traced value reached a cached call", fix="report this as a bug")
            if _is_dist(x):
                key.append(("dist", x.type, x.mesh))
                tensors.append(x)
                continue
            if x is None or isinstance(x, (str, bool)) or is_weak_scalar(x):
                key.append(("static", type(x).__name__, repr(x)))
                tensors.append(None)
                continue
            if mesh is None and isinstance(x, tuple(RESIDENT)):
                key.append(("tensor", x.type))
                tensors.append(x)
                continue
            try:
                array = asarray(x)
            except Exception as exc:
                raise OpError(f"argument leaf {i} of {self.name!r} is a {type(x).__name__}, which is neither a "
                              f"tensor nor a static Python value",
                              fix="pass arrays, scalars, strings, or tuples/lists/dicts/NamedTuples/dataclasses "
                                  "of them") from exc
            if mesh is not None:  # next to distributed arguments, data is replicated on their mesh
                array = tensor(array.shape, None, mesh, array.type.policy, data=array.data)
                key.append(("dist", array.type, mesh))
            else:
                key.append(("tensor", array.type))
            tensors.append(array)
        return tuple(key), tensors

    def _annotated(self, args) -> tuple:
        """``args`` checked against the parameters' ``Tensor[...]`` annotations and given their
        policies (GRAPH-ANNOT-1)."""
        if not self.annotations:
            return args
        out, env = list(args), {}
        for i, (name, ann) in self.annotations.items():
            if i < len(out):
                out[i], env = _apply_annotation(self.name, name, ann, out[i], env)
        return tuple(out)

    def trace(self, *args) -> Module:
        """Trace (or fetch from the cache) the module for ``args``; returns the optimized module."""
        args = self._annotated(args)
        key, tensors = self._signature(args)
        return self._traced(key, args, tensors).optimized

    def _traced(self, key, args, tensors) -> TracedModule:
        entry = self.cache.get(key)
        if entry is None:
            entry = self._record(args, tensors)
            self.cache[key] = entry
        self._last = entry
        return entry

    def _record(self, args, tensors) -> TracedModule:
        code = getattr(self.fn, "__code__", None)
        trace = Trace(self.name, location=f"{code.co_filename}:{code.co_firstlineno}" if code else user_location())
        params = trace.arguments([t.type for t in tensors if t is not None])
        it = iter(params)
        leaves, tree = flatten(args)
        call_args = tree.unflatten(next(it) if t is not None else x for x, t in zip(leaves, tensors))
        mesh = next((t.mesh for t in tensors if _is_dist(t)), None)
        with trace, planning_on(mesh):
            out = self.fn(*call_args)
        results, structure = flatten(out)
        module = trace.finish(results)
        verify(module)
        sharded = any(_is_dist(t) for t in tensors)
        traced = module.clone() if self.rewrite else module
        if sharded:
            report = PassManager([DeadCodeElimination(), CommonSubexpressionElimination()]).run(module)
        else:
            report = optimize(module) if self.rewrite else None
        return TracedModule(traced, module, report, structure)

    # -- calling --------------------------------------------------------------------------
    def __call__(self, *args):
        if current_trace() is not None or any(isinstance(x, Tracer) for x in flatten(args)[0]):
            return self.fn(*args)  # inlined into the caller's trace
        args = self._annotated(args)
        key, tensors = self._signature(args)
        entry = self._traced(key, args, tensors)
        present = [t for t in tensors if t is not None]
        backend = context.backend(self.backend)
        if any(_is_dist(t) for t in present):
            results = backend.run_function(entry.func, present)
        else:
            resident = tuple(RESIDENT)
            values = backend.run_function(entry.func, [t if isinstance(t, resident) else t.data for t in present])
            results = [v if isinstance(v, resident) else Array(v, r.type)
                       for v, r in zip(values, entry.func.regions[0].blocks[0].last_op.operands)]
        return entry.structure.unflatten(results)

    def inspect_ir(self, level: str = "graph", *, optimized: bool = True) -> str:
        """The IR text of the most recent trace at ``level``.

        ``"graph"``: the Graph IR module (after the rewrites; ``optimized=False``: as traced).
        ``"schedule"``, ``"tile"``, ``"target"``: the optimized module lowered with the default
        schedules and the thread's top-level ``schedule`` directives
        (:func:`tessera_ref.lowering.pipeline.inspect_graph`); ``"target"`` is the CUDA C text
        (:mod:`tessera_ref.backends.cuda` compiles it). At ``"tile"`` and ``"target"`` an op without a tile
        lowering is a :class:`~tessera_ref.errors.LoweringError` naming the op and its source line.
        """
        if level != "graph" and level not in LEVELS:
            raise OpError(f"inspect_ir: unknown IR level {level!r}", fix=f"use one of graph, {', '.join(LEVELS)}")
        if level != "graph" and not optimized:
            raise OpError(f"inspect_ir({level!r}, optimized=False): only the graph level shows the trace as "
                          "recorded; the lower levels lower the optimized module", fix=f"inspect_ir({level!r})")
        if self._last is None:
            raise TraceError(f"{self.name!r} has not been traced yet",
                             fix=f"call it once, or call {self.name}.trace(*example_args)")
        if level == "graph":
            return str(self._last.optimized if optimized else self._last.traced)
        from .schedule import schedule
        return context.backend(self.backend).inspect(self._last.optimized, level, schedule.defaults())


def _is_dist(x) -> bool:
    return isinstance(x, DistTensor)


def _tensor_annotations(fn) -> dict:
    """``{position: (name, TensorAnnotation)}`` of ``fn``'s positional parameters annotated
    ``Tensor[...]``/``f32[n]`` (string annotations are evaluated; ones that fail are not tensors)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return {}
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:  # noqa: BLE001 - an annotation that does not evaluate is not a Tensor[...]
        hints = dict(getattr(fn, "__annotations__", None) or {})
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return {i: (p.name, hints[p.name]) for i, p in enumerate(params)
            if p.kind in positional and isinstance(hints.get(p.name), TensorAnnotation)}


def _apply_annotation(fname: str, name: str, ann: TensorAnnotation, x, env: dict) -> tuple:
    """``(value, env)``: ``x`` as a tensor of ``ann``'s shape (symbols bound in ``env``) and
    policy — data converted into it (NUM-CVT), a tensor of its storage format retyped (same
    bits) — or a ShapeError/DTypeError naming the parameter (GRAPH-ANNOT-1)."""
    where = f"{fname}: parameter {name!r} is annotated {ann}"
    value = x if isinstance(x, (Array, DistTensor)) or hasattr(x, "type") else \
        asarray(x, policy=ann.policy) if ann.policy is not None else asarray(x)
    try:
        env = ann.bind(value.shape, env)
    except PolicyError as exc:
        raise ShapeError(f"{where}, but {exc.what}", fix=exc.fix, location=user_location()) from None
    policy = ann.policy
    if policy is None or value.type.policy == policy:
        return value, env
    if getattr(value.type.policy, "storage", None) is not policy.storage or not isinstance(value, (Array, DistTensor)):
        raise DTypeError(f"{where}, but the argument is a {value.type}: tensors are not converted implicitly",
                         fix=f"cast it first, op.cast(x, {policy.storage.name!r}), or pass NumPy data",
                         location=user_location())
    if isinstance(value, DistTensor):
        return DistTensor(TensorType(value.shape, policy, value.layout), value.mesh, value.local, value.name), env
    return Array(value.data, TensorType(value.shape, policy)), env


def module(name: str | None = None, *, rewrite: bool = True, backend=None):
    """``@graph.module("attention")``: trace the function into a Graph IR module called ``name``
    (``backend=``: run it there rather than on the current backend)."""
    if callable(name):
        return GraphFunction(name, rewrite=rewrite, backend=backend)
    return lambda fn: GraphFunction(fn, name, rewrite=rewrite, backend=backend)


def jit(fn=None, *, rewrite: bool = True, backend=None):
    """``@jit``: trace the function once per signature and run the cached Graph IR on
    ``backend`` (a name or Backend object), or on the current backend when None."""
    if fn is None:
        return lambda f: GraphFunction(f, rewrite=rewrite, backend=backend)
    return GraphFunction(fn, rewrite=rewrite, backend=backend)
