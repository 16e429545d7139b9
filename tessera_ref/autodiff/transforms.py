"""The transforms: ``grad``, ``value_and_grad``, ``vjp``, ``jvp`` and ``autodiff`` (AD-1 … AD-4).

Every transform records the function into Graph IR and appends the derivative ops to the
same function (:mod:`.reverse`, :mod:`.forward`): called with concrete values it traces and
runs one program (:mod:`.tracing`); called inside a trace (``jit(grad(f))``, ``grad(grad(f))``)
it records into that trace. ``argnums`` picks the positional arguments to differentiate; each
may be a pytree (tuples, lists, dicts) of tensors, and the derivative has the same structure.
Tensors are Arrays, NumPy data or DistTensors; a gradient has its primal's shape and policy
and, on a mesh, its primal's layout without a pending reduction (AD-MESH-2).
"""
from __future__ import annotations

from ..errors import AutodiffError, user_location
from ..frontend.graph import GraphFunction
from ..frontend.graph import jit as jit_decorator
from ..ops.adjoint import constant
from ..ir.types import COMPLEX64
from ..ops import fft
from ..ops.collective import to_layout
from ..ops.elementwise import mul
from ..ops.values import Tracer, asarray, current_trace, is_weak_scalar
from . import effects
from .forward import tangents as forward_tangents
from ..frontend.pytree import flatten
from .reverse import backward, check_effects, differentiable, zeros_of
from .tracing import in_trace, is_dist, is_static, ops_after, record, run, prepare

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "autodiff", "AutodiffFunction", "Transformed"]


# ---------------------------------------------------------------------------------------------
# recording the function to differentiate

class _Forward:
    """A function recorded for differentiation: its trace, ops, inputs and outputs."""

    def __init__(self, trace, ops, inputs, arg_trees, outputs, out_tree, end):
        self.trace, self.ops, self.inputs, self.arg_trees = trace, ops, inputs, arg_trees
        self.outputs, self.out_tree, self.end = outputs, out_tree, end

    @property
    def out(self):
        return self.out_tree.unflatten(self.outputs)


def _as_value(x, trace, what: str) -> Tracer:
    """``x`` as a tracer of ``trace`` (constants recorded, distributed tensors captured)."""
    if isinstance(x, Tracer):
        return x
    if is_dist(x):
        capture = getattr(trace, "capture", None)
        if capture is None:
            raise AutodiffError(f"{what} is a distributed tensor from outside the traced function",
                                fix="pass it as an argument of the traced function")
        return capture(x)
    return Tracer(trace.value_of(x, None), trace)


def _fresh(x) -> Tracer:
    """A new value equal to ``x`` (``x · 1``, exact), so that uses of the differentiated argument
    are told apart from uses of the same value closed over by the function (AD-NEST-1)."""
    if x.type.policy is COMPLEX64:
        return fft.complex(fft.real(x), fft.imag(x))
    return mul(x, constant(1.0, x.type.policy), **({"seed": 0} if x.type.policy.rounding == "stochastic" else {}))


def _argnums(argnums, nargs: int, name: str) -> tuple:
    """``argnums`` (an int, or a tuple or list of ints) as a tuple of distinct positions."""
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        nums = (argnums,)
    elif isinstance(argnums, (tuple, list)):
        nums = tuple(argnums)
    else:
        raise AutodiffError(f"{name}: argnums={argnums!r} is not an int or a tuple of ints",
                            fix="pass argnums=0 or argnums=(0, 1)")
    for n in nums:
        if isinstance(n, bool) or not isinstance(n, int) or not -nargs <= n < nargs:
            raise AutodiffError(f"{name}: argnums={argnums!r} does not name positional arguments of a call with "
                                f"{nargs}", fix=f"use ints in 0..{nargs - 1}")
    nums = tuple(n % nargs for n in nums)
    if len(set(nums)) != len(nums):
        raise AutodiffError(f"{name}: argnums={argnums!r} names an argument twice", fix="list each position once")
    return nums


def _promote(args, nums) -> tuple:
    """The arguments with Python numbers among the differentiated leaves made f32 tensors."""
    out = list(args)
    for n in nums:
        leaves, tree = flatten(args[n])
        out[n] = tree.unflatten([asarray(x) if is_weak_scalar(x) and not isinstance(x, bool) else x for x in leaves])
    return tuple(out)


def _record_forward(fn, args, nums, transform: str, fresh: bool) -> _Forward:
    """Call ``fn(*args)`` in the active trace, differentiating the leaves of ``args[nums]``."""
    trace = current_trace()
    call, inputs, trees = list(args), [], []
    for n in nums:
        leaves, tree = flatten(args[n])
        values = []
        for i, x in enumerate(leaves):
            if is_static(x):
                raise AutodiffError(f"{transform}: leaf {i} of argument {n} is {x!r}, which is not a tensor",
                                    fix="differentiate tensors; pass other values in positions not in argnums")
            v = _as_value(x, trace, f"leaf {i} of argument {n}")
            if not differentiable(v.type):
                raise AutodiffError(f"{transform}: leaf {i} of argument {n} is {v.type}, which has no derivative "
                                    "(only float and complex tensors do)",
                                    fix="leave integer and boolean arguments out of argnums")
            values.append(_fresh(v) if fresh else v)
        inputs += [v.value for v in values]
        trees.append(tree)
        call[n] = tree.unflatten(values)
    start = trace.block.last_op
    with effects.differentiating(transform):
        out = fn(*call)
    leaves, out_tree = flatten(out)
    for i, x in enumerate(leaves):
        if x is None or isinstance(x, (str, bool)):
            raise AutodiffError(f"{transform}: output leaf {i} of the function is {x!r}, not a tensor",
                                fix="return the tensors to differentiate (op.sum(...) for a loss)")
    outputs = [_as_value(x, trace, f"output leaf {i}") for i, x in enumerate(leaves)]
    ops = ops_after(trace.block, start)
    check_effects(ops, transform)
    return _Forward(trace, ops, inputs, trees, outputs, out_tree, trace.block.last_op)


def _gradients(fwd: _Forward, cotangents) -> list:
    """The backward pass for ``cotangents`` of the outputs: one pytree per differentiated argument."""
    def finish(v, ct):
        ct = zeros_of(v.type) if ct is None else ct
        layout = v.type.layout
        if layout is not None and getattr(ct.type, "layout", None) != layout.replace(partial=()):
            ct = to_layout(ct, layout.replace(partial=()))  # AD-MESH-2, as soon as ct is final (AD-MESH-4)
        return ct

    grads = backward(fwd.trace, fwd.ops, fwd.inputs, [(o.value, c) for o, c in zip(fwd.outputs, cotangents)],
                     finish)
    it = iter(grads)
    return [tree.unflatten([next(it) for _ in range(tree.num_leaves)]) for tree in fwd.arg_trees]


def _check_like(what: str, given, want) -> None:
    t = given.type.with_layout(None) if hasattr(given, "type") else asarray(given).type
    if t != want.type.with_layout(None):
        raise AutodiffError(f"{what} has type {t}, but its primal has type {want.type.with_layout(None)}",
                            fix="pass one value of the primal's shape and policy for each")


def _structured(tree_value, template_tree, what: str) -> list:
    leaves, tree = flatten(tree_value)
    if tree != template_tree:
        raise AutodiffError(f"{what} has structure {tree}, expected {template_tree}",
                            fix="pass the same nesting of tuples/lists/dicts as the primal")
    return leaves


# ---------------------------------------------------------------------------------------------
# the bodies (they run inside a trace)

def _grad_body(fn, nums, single, with_value, name):
    def body(args, fresh):
        fwd = _record_forward(fn, args, nums, name, fresh)
        out = fwd.outputs[0].type if len(fwd.outputs) == 1 else None
        if out is None or out.shape != () or not differentiable(out) or out.policy is COMPLEX64:
            got = ", ".join(str(o.type) for o in fwd.outputs)
            raise AutodiffError(f"{name} needs a function returning one real scalar, got ({got})",
                                fix="reduce the output (op.sum / op.mean), or use tessera_ref.vjp for other outputs")
        seed = constant(1.0, fwd.outputs[0].type.policy)
        grads = _gradients(fwd, [seed])
        g = grads[0] if single else tuple(grads)
        return ((fwd.out, g) if with_value else g), fwd
    return body


def _vjp_body(fn, nums):
    def body(args, fresh):
        primals, cts = args[:-1], args[-1]
        fwd = _record_forward(fn, primals, nums, "vjp", fresh)
        return tuple(_gradients(fwd, _cts_for(fwd, cts))), fwd
    return body


def _jvp_body(fn):
    def body(args, fresh):
        primals, tans = args
        nums = tuple(range(len(primals)))
        fwd = _record_forward(fn, primals, nums, "jvp", fresh)
        leaves = _structured(tuple(tans), flatten(tuple(primals))[1], "the tangents")
        given = []
        for i, (t, p) in enumerate(zip(leaves, flatten(tuple(primals))[0])):
            _check_like(f"tangent leaf {i}", t, p if hasattr(p, "type") else asarray(p))
            given.append(_as_value(t, fwd.trace, f"tangent leaf {i}"))
        outs = forward_tangents(fwd.trace, fwd.ops, fwd.inputs, given, [o.value for o in fwd.outputs])
        outs = [zeros_of(o.type) if t is None else t for t, o in zip(outs, fwd.outputs)]
        return (fwd.out, fwd.out_tree.unflatten(outs)), fwd
    return body


# ---------------------------------------------------------------------------------------------
# running a body: inline in a trace, or traced and run (cached per signature when jitted)

def _key(leaves, tree) -> tuple:
    key = [tree]
    for x in leaves:
        if is_dist(x):
            key.append(("dist", x.type, x.mesh))
        elif is_static(x):
            key.append(("static", type(x).__name__, repr(x)))
        else:
            key.append(("tensor", asarray(x).type))
    return tuple(key)


class Transformed:
    """A transformed function: calling it traces the body with its arguments and runs it (or,
    inside a trace, records it there). With ``jit=True`` each signature is traced once.
    ``inspect_ir()`` prints the most recent program; :func:`~tessera_ref.autodiff.communication_plan`
    lists the collectives of its derivative ops."""

    __slots__ = ("name", "body", "jit", "location", "cache", "program")

    def __init__(self, name: str, body, *, jit: bool = False, location: str | None = None):
        self.name, self.body, self.jit, self.location = name, body, jit, location
        self.cache: dict = {}
        self.program = None

    @property
    def __name__(self) -> str:  # jit(grad(f)) names its trace after it
        return self.name

    def __repr__(self) -> str:
        return f"<{self.name}: {len(self.cache)} cached signature(s)>" if self.jit else f"<{self.name}>"

    def run(self, args):
        leaves, tree = flatten(args)
        if in_trace(leaves) is not None:
            return self.body(args, True)[0]
        key = _key(leaves, tree) if self.jit else None
        entry = self.cache.get(key) if self.jit else None
        if entry is None:
            def traced(call):
                out, fwd = self.body(tree.unflatten(call), False)
                derivative = {id(op) for op in ops_after(fwd.trace.block, fwd.end)}
                flat, structure = flatten(out)
                return flat, derivative, structure
            program, tensors, structure = record(traced, leaves, self.name, self.location)
            entry = (program, structure)
            if self.jit:
                self.cache[key] = entry
        else:
            tensors = prepare(leaves, entry[0].mesh, self.name)
        self.program = entry[0]
        return entry[1].unflatten(run(entry[0], tensors))

    def inspect_ir(self, level: str = "graph") -> str:
        """The Graph IR of the most recent program (forward and derivative ops)."""
        if level != "graph":
            raise AutodiffError(f"inspect_ir: level {level!r} is not available for transformed functions",
                                fix="use 'graph'")
        if self.program is None:
            raise AutodiffError(f"{self.name} has not run yet", fix="call it once first")
        return str(self.program.module)


class _ArgsTransform(Transformed):
    """``grad``/``value_and_grad``: called with the function's own arguments."""

    __slots__ = ("fn", "argnums", "with_value")

    def __init__(self, name, fn, argnums, with_value, jit):
        super().__init__(name, None, jit=jit)
        self.fn, self.argnums, self.with_value = fn, argnums, with_value

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise AutodiffError(f"{self.name} was called with keyword arguments {sorted(kwargs)}",
                                fix="pass them positionally (outside argnums), or close over them")
        nums = _argnums(self.argnums, len(args), self.name)
        self.body = _grad_body(self.fn, nums, isinstance(self.argnums, int), self.with_value, self.name)
        self.location = self.location or _fn_location(self.fn)
        return self.run(_promote(args, nums))


def _require_callable(fn, transform: str) -> None:
    if not callable(fn):
        raise AutodiffError(f"{transform} differentiates a function, got {fn!r} ({type(fn).__name__})",
                            fix=f"pass the function itself: tr.{transform}(loss_fn)(x), not a value")


def _fn_location(fn) -> str | None:
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else user_location()


def _name(prefix: str, fn) -> str:
    return f"{prefix}_{getattr(fn, '__name__', 'fn')}".replace("<", "").replace(">", "")


def grad(fn, argnums=0, *, jit: bool = False) -> Transformed:
    """``tessera.grad(loss_fn)(W)``: the gradient of a function returning one real scalar, with
    respect to argument ``argnums`` (an int: that argument's gradient; a tuple: a tuple of them).
    Each gradient has its argument's pytree structure, shapes, policies and layouts (AD-1)."""
    _require_callable(fn, "grad")
    return _ArgsTransform(_name("grad", fn), fn, argnums, False, jit)


def value_and_grad(fn, argnums=0, *, jit: bool = False) -> Transformed:
    """Like :func:`grad`, returning ``(value, gradient)`` from one program."""
    _require_callable(fn, "value_and_grad")
    return _ArgsTransform(_name("value_and_grad", fn), fn, argnums, True, jit)


def vjp(fn, *primals, argnums=None):
    """``(out, pullback)``: ``out = fn(*primals)`` and ``pullback(cotangent)`` the tuple of
    ``Jᵀ·cotangent`` for each argument in ``argnums`` (default: all). The cotangent has the
    output's structure, shapes and policies (AD-1). Outside a trace the pullback runs one
    program that recomputes the forward ops; inside one it reuses them."""
    _require_callable(fn, "vjp")
    nums = _argnums(tuple(range(len(primals))) if argnums is None else argnums, len(primals), "vjp")
    primals = _promote(primals, nums)
    body = _vjp_body(fn, nums)
    leaves, _ = flatten(primals)
    if in_trace(leaves) is not None:
        fwd = _record_forward(fn, primals, nums, "vjp", True)
        return fwd.out, lambda ct: tuple(_gradients(fwd, _cts_for(fwd, ct)))
    out = Transformed(_name("forward", fn), lambda args, fresh: _plain(fn, args)).run(primals)
    pullback = _Pullback(_name("vjp", fn), body, primals)
    return out, pullback


def _cts_for(fwd: _Forward, ct) -> list:
    leaves = _structured(ct, fwd.out_tree, "the cotangent")
    for i, (c, o) in enumerate(zip(leaves, fwd.outputs)):
        _check_like(f"cotangent leaf {i}", c, o)
    return [_as_value(c, fwd.trace, f"cotangent leaf {i}") for i, c in enumerate(leaves)]


def _plain(fn, args):
    """Record ``fn(*args)`` with nothing differentiated (the forward value of :func:`vjp`)."""
    fwd = _record_forward(fn, args, (), "vjp", False)
    return fwd.out, fwd


class _Pullback(Transformed):
    """The ``pullback`` of :func:`vjp` outside a trace: ``pullback(cotangent)`` runs the
    program that recomputes the forward ops and the backward pass for ``cotangent``."""

    __slots__ = ("primals",)

    def __init__(self, name, body, primals):
        super().__init__(name, body)
        self.primals = primals

    def __call__(self, cotangent):
        return self.run(self.primals + (cotangent,))


def jvp(fn, primals, tangents):
    """``(out, tangent_out)``: ``fn(*primals)`` and its directional derivative along ``tangents``
    (one per primal leaf, same structure, shapes and policies), by forward mode (AD-FWD-1).
    ``primals`` and ``tangents`` are tuples (or lists): one entry per argument of ``fn``."""
    _require_callable(fn, "jvp")
    for what, value in (("primals", primals), ("tangents", tangents)):
        if not isinstance(value, (tuple, list)):
            raise AutodiffError(f"jvp: {what} is a {type(value).__name__}, not a tuple of the function's arguments",
                                fix="pass jvp(f, (x,), (v,)) — one entry per argument, even for one")
    primals = _promote(tuple(primals), tuple(range(len(primals))))
    return Transformed(_name("jvp", fn), _jvp_body(fn)).run((primals, tuple(tangents)))


# ---------------------------------------------------------------------------------------------
# the decorator

class AutodiffFunction:
    """A function marked differentiable by ``@autodiff`` (seed 004's ``@jit @autodiff``).

    Calling it runs the function (through ``jit`` when composed with it). ``f.grad(argnums)``,
    ``f.value_and_grad(argnums)``, ``f.vjp(*primals)`` and ``f.jvp(primals, tangents)`` are the
    transforms of it; when jitted, grad and value_and_grad trace each signature once.
    ``f.inspect_ir()`` prints the jitted forward program."""

    __slots__ = ("fn", "jit", "forward", "_transforms", "__name__", "__wrapped__")

    def __init__(self, fn, *, jit: bool = False):
        if not callable(fn):
            raise AutodiffError(f"autodiff decorates a function, got {fn!r}", fix="put @autodiff on a def")
        self.fn = fn
        self.jit = jit
        self.forward = GraphFunction(fn) if jit else None
        self._transforms: dict = {}
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<autodiff{' jit' if self.jit else ''} function {self.__name__!r}>"

    def __call__(self, *args):
        return (self.forward or self.fn)(*args)

    def _transform(self, kind, argnums, maker):
        argnums = tuple(argnums) if isinstance(argnums, list) else argnums
        key = (kind, argnums)
        if key not in self._transforms:
            self._transforms[key] = maker(self.fn, argnums, jit=self.jit)
        return self._transforms[key]

    def grad(self, argnums=0) -> Transformed:
        """:func:`grad` of the function (one transform per ``argnums``, jitted with it)."""
        return self._transform("grad", argnums, grad)

    def value_and_grad(self, argnums=0) -> Transformed:
        """:func:`value_and_grad` of the function (one transform per ``argnums``)."""
        return self._transform("value_and_grad", argnums, value_and_grad)

    def vjp(self, *primals, argnums=None):
        """:func:`vjp` of the function at ``primals``."""
        return vjp(self.fn, *primals, argnums=argnums)

    def jvp(self, primals, tangents):
        """:func:`jvp` of the function at ``primals`` along ``tangents``."""
        return jvp(self.fn, primals, tangents)

    def inspect_ir(self, level: str = "graph", *, optimized: bool = True) -> str:
        """The jitted forward program's IR at ``level`` (see ``GraphFunction.inspect_ir``)."""
        if self.forward is None:
            raise AutodiffError(f"{self.__name__!r} is not jitted, so it has no cached forward program",
                                fix="decorate it with @jit @autodiff, or inspect f.grad(...).inspect_ir()")
        return self.forward.inspect_ir(level, optimized=optimized)


class _Autodiff:
    """``@autodiff`` and the decorator expression ``@jit @autodiff`` (``jit @ autodiff``)."""

    def __call__(self, fn) -> AutodiffFunction:
        return AutodiffFunction(fn)

    def __rmatmul__(self, other):
        if other is not jit_decorator:
            return NotImplemented
        return lambda fn: AutodiffFunction(fn, jit=True)


#: The decorator: ``@autodiff`` alone, or ``@jit @autodiff``.
autodiff = _Autodiff()

