"""A whole function compiled once for one device, and replayed (DESIGN §16; RUNTIME-PROG-1 … 6).

:meth:`Program.compile` takes a Graph IR function, its argument types and a device, once per
(function, signature, device, directives, ``allow_host``): it lowers the WHOLE function
(every op with a kernel family a tile kernel, chains fused), renders ONE library of all its
kernels and compiles it, evaluates its constants once (into device buffers), makes each
``reshape`` a view of its operand's bytes, plans the memory of every other value
(:class:`~.memory.MemoryPlan`: one arena for the intermediates) and captures the launch list
as the device's :class:`~.device.Graph`. An op with no kernel is a BackendError naming it
and the user's line, unless ``allow_host=True``: it then runs on the host as a counted
:class:`~.device.HostStep`. Calling the program binds the arguments (a
:class:`~.memory.DeviceArray` of the device as it is; host data copied in, counted) and fresh
output buffers, and replays the graph; the results are DeviceArrays.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..errors import BackendError, DTypeError, LoweringError, ShapeError, user_location
from ..ir import FUNC, Module, Operation, TensorType
from ..ir import tile as T
from ..ir import schedule as S
from ..lowering import pipeline
from ..lowering.family import family_of
from ..ops.execute import call_of, evaluate
from ..ops.values import Trace, Tracer, asarray
from ..counters import count
from .device import HostStep, Launch, Slot
from .memory import DeviceArray, MemoryPlan, nbytes_of

__all__ = ["Program", "op_function", "DYNAMIC_SMEM", "VIEW_OPS"]

#: The kernel attribute holding its dynamic shared memory in bytes (LOWER-TARGET-2).
DYNAMIC_SMEM = "launch.dynamic_smem"

#: Ops a program runs as a view of their operand's bytes (no kernel, no copy; RUNTIME-PROG-3).
VIEW_OPS = ("tessera.graph.reshape",)
_CONSTANT = "tessera.graph.constant"
_ALIGN = 256

_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # func op -> {key: Program}
_CACHE_LOCK = threading.Lock()


def _func_of(func) -> Operation:
    if isinstance(func, Module):
        func = next((op for op in func.body if op.name == FUNC), None)
    if not isinstance(func, Operation) or func.name != FUNC:
        raise BackendError(f"Program.compile compiles a Graph IR function, got {func!r}",
                           fix="pass jit(f).trace(*args) or its function")
    return func


def _frozen(directives) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in (directives or {}).items()))


def op_function(call, in_types) -> Operation:
    """The Graph IR function applying ``call``'s op (its primitive, attributes and location) to
    parameters of ``in_types``: what an eager op runs as on a device (RUNTIME-BACKEND-1)."""
    prim = call.primitive
    trace = Trace(f"{prim.name}_op", location=call.location)
    params = [p.value for p in trace.arguments(in_types)]
    op = trace.emit(prim.ir_name, params, prim.infer_types(dict(call.attrs), in_types, call.location),
                    dict(call.attrs), call.location)
    return trace.finish([Tracer(r, trace) for r in op.results]).body.first_op


def specialize(func, arg_types) -> Operation:
    """``func`` with parameters of the concrete ``arg_types`` and every result type inferred again
    from them (a function traced with symbolic sizes, ``tensor<[B]x64xf32>``, runs at the sizes of
    its arguments; SCHED-FIT-1 then fits its kernels to them); ``func`` itself when its types
    are the arguments' already. A symbolic size bound to two sizes is a ShapeError."""
    params = func.regions[0].entry.args
    if all(p.type.shape == t.shape for p, t in zip(params, arg_types)) or len(params) != len(arg_types):
        return func
    sizes: dict = {}
    for i, (p, t) in enumerate(zip(params, arg_types)):
        for d, n in zip(p.type.shape, t.shape):
            if isinstance(d, str) and sizes.setdefault(d, n) != n:
                raise ShapeError(f"@{func.attributes['sym_name']} argument {i}: symbolic size {d} is {n} here but "
                                 f"{sizes[d]} in an earlier argument", location=user_location(),
                                 fix="make the sizes agree")
    trace = Trace(func.attributes["sym_name"], location=func.location)
    env = dict(zip(params, (x.value for x in trace.arguments([t.with_layout(p.type.layout)
                                                              for p, t in zip(params, arg_types)]))))
    block = func.regions[0].entry
    for op in block:
        if op is block.last_op:
            break
        call = call_of(op)
        types = tuple(env[v].type for v in op.operands)
        attrs = {k: _sized(v, sizes) for k, v in op.attributes.items()}
        new = trace.emit(op.name, [env[v] for v in op.operands],
                         call.primitive.infer_types(dict(attrs), types, op.location), attrs, op.location)
        env.update(zip(op.results, new.results))
    return trace.finish([Tracer(env[v], trace) for v in block.last_op.operands]).body.first_op


def _sized(value, sizes: dict):
    """An attribute with the symbolic sizes in its tuples (a shape, a slice's stops) made concrete."""
    if isinstance(value, tuple):
        return tuple(sizes.get(v, v) if isinstance(v, str) else _sized(v, sizes) for v in value)
    return value


def kernel_smem(func) -> int:
    """The dynamic shared memory of a tile kernel: its attribute, else its shared layout."""
    return int(func.attributes.get(DYNAMIC_SMEM, T.shared_layout(func)[1]))


class Program:
    """A compiled function on a device (see the module docstring); ``memory`` is its plan,
    ``source`` its one library, ``host_steps`` the ``(op, location)`` run on the host."""

    def __init__(self, func, device, arg_types, out_types, graph, memory, slots, outputs, source, host_steps,
                 constants, arena):
        self.func, self.device, self.arg_types, self.out_types = func, device, arg_types, out_types
        self.graph, self.memory, self.source, self.host_steps = graph, memory, source, host_steps
        self._slots, self._outputs, self._constants, self._arena = slots, outputs, constants, arena
        self._lock = threading.Lock()
        owned = [arena] + [graph.fixed[i] for i in constants]
        weakref.finalize(self, lambda: [device.allocator.free(b) for b in owned])

    def __repr__(self) -> str:
        return (f"<Program @{self.func.attributes['sym_name']} on {self.device.name}: {self.graph.launches} launches, "
                f"{len(self.host_steps)} host steps, arena {self.memory.arena_bytes:,} B>")

    # -- compiling ------------------------------------------------------------------------
    @classmethod
    def compile(cls, func, arg_types, device, directives: dict | None = None, *, allow_host: bool = False,
                lowered=None) -> "Program":
        """The program of ``func`` (a Graph IR ``tessera.func`` or its module) for arguments of
        ``arg_types`` on ``device``, made once per signature (RUNTIME-PROG-1); ``lowered``: an
        already lowered program of ``func`` to use."""
        func = _func_of(func) if lowered is None else lowered.func
        arg_types = tuple(arg_types)
        key = (arg_types, id(device), _frozen(directives), bool(allow_host), id(lowered))
        with _CACHE_LOCK:
            hit = _CACHE.setdefault(func, {}).get(key)
        if hit is not None:
            return hit
        program = cls._build(func, arg_types, device, directives, allow_host, lowered)
        with _CACHE_LOCK:
            return _CACHE[func].setdefault(key, program)

    @classmethod
    def _build(cls, func, arg_types, device, directives, allow_host, lowered) -> "Program":
        if lowered is None:
            func = specialize(func, arg_types)
        _check_types(func, arg_types, [p.type for p in func.regions[0].entry.args])
        if lowered is None:
            count(lowerings=1)
            try:
                lowered = pipeline.lower(func, directives, host=True)
            except LoweringError as exc:
                raise BackendError(f"the {device.name!r} device has no kernel for this op: {exc.what}",
                                   location=exc.location, fix="run it on the 'interp' backend") from None
        kernels_ir = [op for op in lowered.tile.body if T.is_kernel(op)]
        source, kernels = None, {}
        if kernels_ir:
            source = device.render(lowered.tile)
            count(renders=1)
            kernels = device.load(device.compiler.compile(source), source, lowered.tile)
        return _Builder(func, lowered, device, kernels, allow_host, arg_types).program(cls, source)

    # -- running --------------------------------------------------------------------------
    def __call__(self, *args) -> list:
        """The results (DeviceArrays) of the function on ``args`` (RUNTIME-PROG-4)."""
        return self.run(args)[0]

    def run(self, args, options: dict | None = None) -> tuple:
        """``(results, reports)``: the results and each launch's report (``options``: what the
        device's kernels take, e.g. the tile interpreter's ``checks``)."""
        if len(args) != len(self.arg_types):
            raise BackendError(f"@{self.func.attributes['sym_name']} takes {len(self.arg_types)} argument(s), "
                               f"got {len(args)}", location=user_location(), fix="pass one value per parameter")
        alloc = self.device.allocator
        bindings, temporary = {}, []
        for i, (x, t) in enumerate(zip(args, self.arg_types)):
            bindings[("arg", i)] = self._bind(i, x, t, temporary)
        outs = {}
        for j, (root, t) in enumerate(self._outputs):
            if root is not None and root not in outs:
                outs[root] = bindings[root] = alloc.alloc(nbytes_of(t))
        with self._lock:
            reports = self.graph.replay(bindings, options=options)
            self.device.synchronize()
        results = []
        for (root, t), (kind, where) in zip(self._outputs, self._slots["returned"]):
            if root is not None and outs.pop(root, None) is not None:
                results.append(DeviceArray(self.device, bindings[root], t))
                continue
            buf = alloc.alloc(nbytes_of(t))  # an argument, a constant or a value returned twice: a copy
            src = bindings.get(where.index) or self._fixed(where.index)
            alloc.copy(buf, src.view(where.offset, nbytes_of(t)))
            results.append(DeviceArray(self.device, buf, t))
        for buf in temporary:
            alloc.free(buf)
        return results, reports

    def _fixed(self, index):
        return self.graph.fixed[index]

    def _bind(self, i: int, x, t: TensorType, temporary: list):
        """The buffer argument ``i`` is read from: a DeviceArray's own, or host data copied in."""
        name = self.func.attributes["sym_name"]
        if isinstance(x, DeviceArray):
            if x.device is not self.device:
                raise BackendError(f"argument {i} of @{name} is a DeviceArray on {x.device.name}, and this program "
                                   f"runs on {self.device.name}", location=user_location(),
                                   fix=f"move it first: tessera_ref.device_put(x, {self.device.name!r})")
            _check_arg(name, i, x.shape, x.dtype, t)
            return x.buffer
        host = np.asarray(x if isinstance(x, np.ndarray) else asarray(x).data, order="C")  # 0-d stays 0-d
        _check_arg(name, i, host.shape, host.dtype, t)
        buf = self.device.allocator.alloc(nbytes_of(t))
        self.device.allocator.copyin(buf, host)
        temporary.append(buf)
        return buf


def _check_arg(name: str, i: int, shape, dtype, want: TensorType) -> None:
    """A DTypeError or ShapeError naming the user's line when argument ``i`` is not of ``want``."""
    if dtype != want.dtype:
        raise DTypeError(f"@{name} argument {i}: expected {want} (dtype {want.dtype}), got dtype {dtype}",
                         location=user_location(), fix="convert with tessera_ref.asarray(x, policy=...) first")
    if tuple(shape) != tuple(want.shape):
        raise ShapeError(f"@{name} argument {i}: expected {want}, got shape {tuple(shape)}", location=user_location(),
                         fix="pass an array of the compiled shape (jit compiles again for a new signature)")


def _check_types(func, got, want) -> None:
    """A ShapeError/DTypeError unless the types ``got`` are the function's parameter types ``want``."""
    name = func.attributes["sym_name"]
    if len(got) != len(want):
        raise BackendError(f"@{name} takes {len(want)} argument(s), got {len(got)}", location=user_location(),
                           fix="pass one type per parameter")
    for i, (g, w) in enumerate(zip(got, want)):
        _check_arg(name, i, g.shape, g.dtype, w.with_layout(None) if w.layout is not None else w)


class _Builder:
    """The capture of one lowered program for a device (Program.compile's second half)."""

    def __init__(self, func, lowered, device, kernels, allow_host, arg_types):
        self.func, self.lowered, self.device, self.kernels = func, lowered, device, kernels
        self.allow_host, self.arg_types = allow_host, arg_types
        self.slot = {}      # schedule value -> Slot
        self.first = {}     # root index -> step of definition
        self.last = {}      # root index -> step of last use
        self.kind = {}      # root index -> argument | constant | intermediate
        self.size = {}      # root index -> bytes
        self.constants = {}  # root index -> host value
        self.items, self.host_steps = [], []

    def _root(self, index, t: TensorType, kind: str, step: int) -> Slot:
        self.kind[index], self.size[index], self.first[index], self.last[index] = kind, nbytes_of(t), step, step
        return Slot(index, t.dtype, t.shape)

    def _use(self, value, step: int, shape=None) -> Slot:
        s = self.slot[value]
        self.last[s.index] = max(self.last[s.index], step)
        return s if shape is None or tuple(shape) == s.shape else Slot(s.index, s.dtype, tuple(shape), s.offset)

    def program(self, cls, source) -> Program:
        block = self.lowered.func.regions[0].entry
        for i, (arg, t) in enumerate(zip(block.args, self.arg_types)):
            self.slot[arg] = self._root(("arg", i), t, "argument", 0)
        steps = self.lowered.steps
        for step, (op, plan) in enumerate(steps):
            if plan is not None:
                self._kernel(step, op, plan)
            elif op.name == _CONSTANT:
                (value,) = call_of(op).primitive.run(call_of(op))
                self.slot[op.results[0]] = self._root(("const", step), op.results[0].type, "constant", step)
                self.constants[("const", step)] = value
            elif op.name in VIEW_OPS:
                src = self._use(op.operands[0], step)
                self.slot[op.results[0]] = Slot(src.index, src.dtype, op.results[0].type.shape, src.offset)
            else:
                self._host(step, op)
        end = len(steps)
        returned = [self._use(v, end) for v in block.last_op.operands]
        for i in range(len(block.args)):
            self.last[("arg", i)] = end  # the caller holds the arguments throughout
        outputs, seen = [], set()
        for v, s in zip(block.last_op.operands, returned):
            own = self.kind[s.index] == "intermediate" and s.index not in seen and s.offset == 0 \
                and nbytes_of(v.type) == self.size[s.index]
            seen.add(s.index)
            outputs.append((s.index if own else None, v.type))
            if own:
                self.kind[s.index] = "output"
        memory = MemoryPlan.of([(_name(i), self.kind[i], self.size[i], self.first[i], self.last[i])
                                for i in self.kind], end)
        memory.check(self.device)
        fixed, arena = self._place(memory)
        graph = self.device.graph(self.items, fixed, tuple(i for i in self.kind if self.kind[i] == "argument"),
                                  tuple(i for i in self.kind if self.kind[i] == "output"))
        out_types = tuple(v.type for v in block.last_op.operands)
        slots = {"returned": [(self.kind[s.index], s) for s in returned]}
        return cls(self.func, self.device, self.arg_types, out_types, graph, memory, slots, outputs, source,
                   self.host_steps, self.constants, arena)

    def _place(self, memory: MemoryPlan) -> tuple:
        """Fixed buffers: the arena (intermediates at their offsets) and one per constant."""
        alloc = self.device.allocator
        arena = alloc.alloc(max(memory.arena_bytes, 1))
        fixed = {}
        for index, entry in zip(self.kind, memory.entries):
            if entry.kind == "intermediate":
                fixed[index] = arena.view(entry.offset, entry.nbytes)
            elif entry.kind == "constant":
                buf = fixed[index] = alloc.alloc(entry.nbytes)
                alloc.copyin(buf, self.constants[index])
        return fixed, arena

    def _kernel(self, step: int, op, plan) -> None:
        name = plan.func.attributes["sym_name"]
        args = [self._use(v, step, shape) for v, shape in zip(op.operands, plan.in_shapes)]
        for r, shape in zip(op.results, plan.out_shapes):
            self.slot[r] = self._root(("value", step, len(args)), r.type, "intermediate", step)
            args.append(Slot(self.slot[r].index, r.type.dtype, tuple(shape)))
        grid = tuple(plan.grid) if np.ndim(plan.grid) else (plan.grid,)
        where = f"{name} (Tile IR at {plan.func.location or op.location})"
        self.items.append(Launch(self.kernels[name], tuple(args), grid, (plan.lanes, 1, 1), kernel_smem(plan.func),
                                 where))

    def _host(self, step: int, op) -> None:
        if op.name == S.KERNEL:  # a scheduled kernel its family's template refuses
            name, run = op.attributes["op"], _region_runner(op)
            why = _refusal(op)
        else:
            call = call_of(op)
            name, run, why = call.primitive.name, lambda arrays, call=call: call.primitive.run(call, *arrays), ""
        if not self.allow_host:
            raise BackendError(f"the {self.device.name!r} device has no kernel for {name} "
                               f"({', '.join(str(v.type) for v in op.operands)} -> "
                               f"{', '.join(str(r.type) for r in op.results)}){why}", location=op.location,
                               fix="pass allow_host=True to run it on the host (each host step counted), or run "
                                   "the program on the 'interp' backend")
        ins = tuple(self._use(v, step) for v in op.operands)
        outs = []
        for k, r in enumerate(op.results):
            self.slot[r] = self._root(("value", step, k), r.type, "intermediate", step)
            outs.append(self.slot[r])
        self.items.append(HostStep(run, ins, tuple(outs), name))
        self.host_steps.append((name, op.location))


def _region_runner(kop):
    """The Graph IR semantics of a scheduled kernel (SCHED-IR-2): its region's ops on the host."""
    inner = kop.regions[0].entry

    def step(op, values):
        return values if op.name == S.PREFETCH else call_of(op).primitive.run(call_of(op), *values)
    return lambda arrays: evaluate(inner, dict(zip(inner.args, arrays)), step)


def _refusal(kop) -> str:
    """Why the kernel family's template refuses ``kop`` (its LoweringError), for messages."""
    try:
        family_of(S.body_ops(kop)[-1]).template(kop, "probe")
    except LoweringError as exc:
        return f": {exc.what}"
    return ""


def _name(index) -> str:
    kind, *rest = index
    return {"arg": "%arg", "const": "%const", "value": "%step"}[kind] + str(rest[0])
