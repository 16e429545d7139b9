"""The ``@kernel`` front end: a Python (or Tessera DSL) function body -> Tile IR (TILE-FE clauses).

The body is read from its source (never run by Python) and lowered statement by statement
with :class:`~tessera_ref.ir.tile.KernelBuilder`:

- parameters: ``x: f32[n]`` (a global buffer; ``n`` a symbolic size, usable in the body),
  ``y: mut[f32[n]]`` (a buffer the kernel writes; the DSL spells it ``mut f32[n]``),
  ``alpha: f32`` (a scalar), ``k: index`` (or ``k: int``). Python 3.11–3.13 evaluates
  annotations when the ``def`` runs, before ``@kernel`` is called, so in a Python module the
  sizes must exist as names (``n = symbols("n")``, :func:`~tessera_ref.frontend.tile_api.symbols`)
  unless the module starts with ``from __future__ import annotations`` or quotes the
  annotations; otherwise Python raises ``NameError`` at the ``def`` and no Tessera code runs.
  The DSL (:meth:`_KernelDecorator.from_source`) has no such rule;
- names: SSA values; assigning again rebinds; names assigned in a loop or an ``if`` and
  defined before it are carried out of it (so ``s0, s1 = s1, s0`` swaps buffers);
- other free names (``BM``) are compile-time constants from the function's globals or
  :meth:`Kernel.specialize`; arithmetic on constants folds;
- ``for t in tile.range(n, step=s, prefetch=k)`` / ``for i in range(a, b, s)``: loops with
  uniform bounds; in a ``prefetch=k`` loop that issues ``cp_async`` copies and has no
  explicit ``cp_async.commit()``/``cp_async.wait(n)``, each ``tbarrier()`` after a copy is
  preceded by ``commit; wait(k-1)`` (TILE-FE-3);
- ``if`` on a lane-varying condition is masked execution; on a constant, only the taken
  branch is lowered;
- ``x[i]``, ``x[i, j]`` load, ``y[i] = v`` stores (indices are ``index`` values),
  ``X[t:t+128]`` is a view (the length must be a positive constant; integer indices may come
  before the slices, ``X[r, c:c+64]``, not after one); ``tile.load(Y, index=e)``, ``tile.store(Y, index=e, value=v)``,
  ``tile.load(A, index=(r, c), shape=(BM, BK))`` loads a fragment; storing a fragment
  stores the box at ``index``;
- ``tshared.alloc[f16](BM, BK, swizzle="xor", pad=1)``; a bare ``tshared.alloc`` takes the
  shape and format of the first ``cp_async`` into a bare allocation in the body;
- ``cp_async.shared.global(dst, src)`` (``global_`` in Python, where ``global`` is a keyword),
  ``cp_async.commit()``, ``cp_async.wait(n)``, ``tbarrier()``;
- ``tile.zeros((M, N), f32)``, ``C += tile.mma(a, b, accum=f32)`` (accumulates through
  ``C``), ``tile.mma(a, b, C)``, ``tile.mma_sync(a, b)``;
- ``tile.shfl_xor(v, offset)``: a warp shuffle (TILE-WARP-1, an extension of the seeds).
"""
from __future__ import annotations

import ast
import inspect
import itertools
import os
import textwrap

from .. import context
from ..errors import KernelError, TesseraError, checked_signature
from ..ir import tile as T
from ..ir.launch import Launch
from ..ir.types import IndexType, ScalarType, TensorType
from ..numerics import get_format
from .tile_api import Size

__all__ = ["kernel", "Kernel", "AutotunedKernel", "lower_function"]

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
         "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
         "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def _dotted(node) -> str | None:
    """``"tile.range"`` for the expression ``tile.range``; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _assigned(stmts) -> list:
    """Names assigned anywhere in ``stmts`` (in order of first assignment)."""
    names: dict = {}
    for stmt in stmts:
        for node in ast.walk(stmt):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.For)):
                targets = [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        names.setdefault(n.id, None)
    return list(names)


class _Lower:
    """Lowers one kernel ``FunctionDef`` to a Tile IR module."""

    def __init__(self, fn: ast.FunctionDef, filename: str, line_offset: int, constants: dict):
        self.fn, self.filename, self.offset, self.constants = fn, filename, line_offset, constants
        self.prefetch: list = []  # stack of (depth k, explicit commit/wait?) of enclosing prefetch loops
        self.uncommitted = False

    # -- diagnostics --------------------------------------------------------------------
    def loc(self, node) -> str:
        return f"{self.filename}:{getattr(node, 'lineno', 1) + self.offset}"

    def error(self, node, what: str, fix: str) -> KernelError:
        return KernelError(f"@kernel {self.fn.name}: {what}", location=self.loc(node), fix=fix)

    # -- signature ----------------------------------------------------------------------
    def signature(self):
        params = []
        for arg in self.fn.args.args:
            if arg.annotation is None:
                raise self.error(arg, f"parameter {arg.arg!r} has no type annotation",
                                 fix="annotate it, e.g. x: f32[n], y: mut[f32[n]] or alpha: f32")
            ptype, is_mut = self.annotation(arg.annotation, arg.arg)
            params.append((arg.arg, ptype, is_mut))
        return params

    def annotation(self, node, name):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node = ast.parse(node.value, mode="eval").body
        if isinstance(node, ast.Subscript) and _dotted(node.value) == "mut":
            ptype, _ = self.annotation(node.slice, name)
            if not isinstance(ptype, TensorType):
                raise self.error(node, f"mut parameter {name!r} must be a buffer like f32[n]",
                                 fix="annotate it mut[f32[n]] (or y: mut f32[n] in the DSL): only buffers are written")
            return ptype, True
        if isinstance(node, ast.Name):
            if node.id in ("index", "int"):
                return "index", False
            return self.format_name(node, name).name, False
        if isinstance(node, ast.Subscript):
            fmt = self.format_name(node.value, name)
            dims = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            shape = []
            for d in dims:
                if isinstance(d, ast.Constant) and isinstance(d.value, int):
                    shape.append(d.value)
                elif isinstance(d, ast.Name) and isinstance(self.constants.get(d.id), int):
                    shape.append(self.constants[d.id])
                elif isinstance(d, ast.Name):
                    shape.append(d.id)
                else:
                    raise self.error(d, f"a dimension of {name!r} must be an int or a size name, got "
                                        f"{ast.unparse(d)!r}",
                                     fix="write each dimension as an int or a size name, e.g. f32[n, 64]")
            return T.buffer(shape, fmt), False
        raise self.error(node, f"cannot read the annotation {ast.unparse(node)!r} of {name!r}",
                         fix="write f32[n], mut[f32[n]], f32 or index")

    def format_name(self, node, name):
        try:
            return get_format(node.id if isinstance(node, ast.Name) else ast.unparse(node))
        except (TesseraError, AttributeError):
            raise self.error(node, f"{ast.unparse(node)!r} (in the type of {name!r}) is not a number format",
                             fix="use f32, f16 or f64") from None

    # -- driver -------------------------------------------------------------------------
    def lower(self):
        params = self.signature()
        self.kb = T.KernelBuilder(self.fn.name, params, location=self.loc(self.fn))
        env = {}
        for (name, ptype, _), value in zip(params, self.kb.params):
            env[name] = value
        for size, (pname, axis) in self.kb.func.attributes["tile.sizes"].items():
            env.setdefault(size, self.kb.dim(env[pname], axis))
        self.bare_shape = self.find_bare_shape(env)
        self.body(self.fn.body, env)
        try:
            return self.kb.finish()
        except TesseraError as exc:
            raise KernelError(f"@kernel {self.fn.name}: the lowered Tile IR is malformed: {exc.what}",
                              location=exc.location,
                              fix=exc.fix or "simplify the kernel around that line; if docs/spec/tiles.md allows it, "
                                             "report it as a tessera_ref bug") from None

    def find_bare_shape(self, env):
        bare = {t.id for n in ast.walk(self.fn) if isinstance(n, ast.Assign) and _dotted(n.value) == "tshared.alloc"
                for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(self.fn):
            if (isinstance(node, ast.Call) and _dotted(node.func) in ("cp_async.shared.global_", "cp_async.shared.global")
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in bare):
                src = node.args[1]
                if isinstance(src, ast.Subscript) and isinstance(src.value, ast.Name) and src.value.id in env:
                    buf = env[src.value.id]
                    slices = src.slice.elts if isinstance(src.slice, ast.Tuple) else [src.slice]
                    shape = tuple(self.slice_length(s) for s in slices if isinstance(s, ast.Slice))
                    return shape, buf.type.format.name
        return None

    def body(self, stmts, env) -> None:
        for stmt in stmts:
            self.kb.at(self.loc(stmt))
            self.stmt(stmt, env)

    # -- statements ---------------------------------------------------------------------
    def stmt(self, s, env) -> None:
        if isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant):  # a docstring
                return
            self.expr(s.value, env, statement=True)
        elif isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise self.error(s, "chained assignment a = b = ... is not supported", fix="assign one target")
            self.assign(s.targets[0], s.value, env, s)
        elif isinstance(s, ast.AugAssign):
            self.augassign(s, env)
        elif isinstance(s, ast.For):
            self.for_stmt(s, env)
        elif isinstance(s, ast.If):
            self.if_stmt(s, env)
        elif isinstance(s, ast.Pass):
            return
        elif isinstance(s, ast.Return) and s.value is None and s is self.fn.body[-1]:
            return
        else:
            raise self.error(s, f"{type(s).__name__} statements are not supported in a kernel body",
                             fix="use assignments, for loops over range/tile.range, if, and tile.* calls")

    def assign(self, target, value_node, env, stmt) -> None:
        if isinstance(target, ast.Name):
            value = self.expr(value_node, env)
            if isinstance(value, T.Value) and value.name is None:
                value.name = target.id
            env[target.id] = value
        elif isinstance(target, ast.Tuple):
            if not isinstance(value_node, ast.Tuple) or len(value_node.elts) != len(target.elts):
                raise self.error(stmt, "tuple assignment needs a tuple of the same length on the right",
                                 fix="unpack a tuple of as many values: a, b = x, y")
            values = [self.expr(v, env) for v in value_node.elts]
            for t, v in zip(target.elts, values):
                if not isinstance(t, ast.Name):
                    raise self.error(stmt, "only names can be unpacked into",
                                     fix="unpack into plain names: a, b = x, y")
                env[t.id] = v
        elif isinstance(target, ast.Subscript):
            buf = self.expr(target.value, env)
            self.store(buf, self.indices(target.slice, env), self.expr(value_node, env), stmt)
        else:
            raise self.error(stmt, f"cannot assign to {ast.unparse(target)!r}",
                             fix="assign to a name (v = ...) or store into a buffer element (Y[i] = v)")

    def augassign(self, s, env) -> None:
        if not isinstance(s.target, ast.Name) or s.target.id not in env:
            raise self.error(s, f"{ast.unparse(s.target)!r} must be a defined name to update it",
                             fix="assign the name first (acc = 0.0), then update it (acc += v)")
        call = s.value
        if (isinstance(s.op, ast.Add) and isinstance(call, ast.Call)
                and _dotted(call.func) in ("tile.mma", "tile.mma_sync")):
            env[s.target.id] = self.mma(call, env, acc=env[s.target.id])
            return
        op = _BINOPS.get(type(s.op))
        if op is None:
            raise self.error(s, f"the operator {type(s.op).__name__} is not supported",
                             fix="use +=, -=, *=, /=, //= or %= (or write the update out: a = f(a, b))")
        env[s.target.id] = self.binary(op, env[s.target.id], self.expr(s.value, env), s)

    def carried_names(self, stmts, env) -> list:
        return [n for n in _assigned(stmts) if n in env]

    def materialize(self, value, node, like=None):
        """A Value for a compile-time constant (index for ints, ``like``'s format for floats)."""
        if isinstance(value, T.Value):
            return value
        if isinstance(value, int) and not isinstance(like, ScalarType):  # bools included
            return self.kb.const(int(value))
        if isinstance(value, (int, float)):
            fmt = like.format.name if isinstance(like, ScalarType) else "f32"
            return self.kb.const(value, fmt)
        raise self.error(node, f"{value!r} is not a value a kernel can compute with",
                         fix="compute with ints, floats, index values, lane values and buffer views")

    def for_stmt(self, s, env) -> None:
        it = s.iter
        name = _dotted(it.func) if isinstance(it, ast.Call) else None
        if name not in ("range", "tile.range") or not isinstance(s.target, ast.Name) or s.orelse:
            raise self.error(s, "kernel loops are 'for i in range(...)' or 'for t in tile.range(n, step=, prefetch=)'",
                             fix="loop with for i in range(lo, hi, step) or for t in tile.range(n, step=s, "
                                 "prefetch=k), without an else")
        args = [self.expr(a, env) for a in it.args]
        kw = {k.arg: k.value for k in it.keywords}
        if name == "tile.range":
            if len(args) != 1:
                raise self.error(s, "tile.range(n, step=s, prefetch=k) takes one positional argument",
                                 fix="write tile.range(n, step=s, prefetch=k)")
            lb, ub = 0, args[0]
            step = self.expr(kw.pop("step"), env) if "step" in kw else 1
            prefetch = self.const_of(kw.pop("prefetch"), env, "prefetch") if "prefetch" in kw else 0
        else:
            if not 1 <= len(args) <= 3:
                raise self.error(s, "range takes 1 to 3 arguments",
                                 fix="write range(n), range(lo, hi) or range(lo, hi, step)")
            lb, ub, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
            prefetch = 0
        if kw:
            raise self.error(s, f"unknown argument(s) {sorted(kw)} of {name}",
                             fix=f"{name} takes step= and prefetch= (tile.range) or no keywords (range)")
        carried = self.carried_names(s.body, env)
        init = [self.materialize(env[n], s) for n in carried]
        explicit = any(_dotted(n.func) in ("cp_async.commit", "cp_async.wait")
                       for n in ast.walk(s) if isinstance(n, ast.Call))

        def body(iv, *args):
            inner = dict(env)
            inner[s.target.id] = iv
            inner.update(zip(carried, args))
            if prefetch:
                self.prefetch.append((prefetch, explicit))
            try:
                self.body(s.body, inner)
            finally:
                if prefetch:
                    self.prefetch.pop()
            self.kb.at(self.loc(s))
            return [self.materialize(inner[n], s, a.type) for n, a in zip(carried, args)]
        self.kb.at(self.loc(s))
        results = self.kb.for_(*(self.materialize(v, s) for v in (lb, ub, step)), init=init, body=body,
                               prefetch=prefetch)
        env.update(zip(carried, results))

    def if_stmt(self, s, env) -> None:
        cond = self.expr(s.test, env)
        if not isinstance(cond, T.Value):  # a compile-time condition
            self.body(s.body if cond else s.orelse, env)
            return
        names = [n for n in _assigned(s.body + s.orelse) if n in env]

        def branch(stmts):
            def build():
                inner = dict(env)
                self.body(stmts, inner)
                return [self.materialize(inner[n], s, getattr(env[n], "type", None)) for n in names]
            return build
        self.kb.at(self.loc(s))
        results = self.kb.if_(cond, then=branch(s.body), else_=branch(s.orelse))
        env.update(zip(names, results))

    # -- expressions --------------------------------------------------------------------
    def const_of(self, node, env, what):
        value = self.expr(node, env)
        if isinstance(value, T.Value):
            raise self.error(node, f"{what} must be a compile-time constant, got {ast.unparse(node)!r}",
                             fix="use a literal, a constant bound with kernel.specialize(...), or an "
                                 "expression of those")
        return value

    def expr(self, node, env, statement: bool = False):
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float, str)):
                return node.value
        elif isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if isinstance(self.constants.get(node.id), Size):
                raise self.error(node, f"the size {node.id!r} is used, but no parameter's annotation binds it",
                                 fix=f"annotate a parameter with it, e.g. x: f32[{node.id}]")
            if node.id in self.constants:
                return self.constants[node.id]
            raise self.error(node, f"name {node.id!r} is not defined in the kernel",
                             fix="define it before use, or pass a constant with kernel.specialize(...)")
        elif isinstance(node, ast.Tuple):
            return tuple(self.expr(e, env) for e in node.elts)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return self.binary(_BINOPS[type(node.op)], self.expr(node.left, env), self.expr(node.right, env), node)
        elif isinstance(node, ast.Compare):
            left, out = self.expr(node.left, env), None
            for op, right_node in zip(node.ops, node.comparators):
                if type(op) not in _CMPOPS:
                    raise self.error(node, f"the comparison {type(op).__name__} is not supported",
                                     fix="compare with <, <=, >, >=, == or !=")
                right = self.expr(right_node, env)
                part = self.binary(_CMPOPS[type(op)], left, right, node)
                out = part if out is None else self.binary("and", out, part, node)
                left = right
            return out
        elif isinstance(node, ast.BoolOp):
            values = [self.expr(v, env) for v in node.values]
            fn = "and" if isinstance(node.op, ast.And) else "or"
            out = values[0]
            for v in values[1:]:
                out = self.binary(fn, out, v, node)
            return out
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not, ast.UAdd)):
            value = self.expr(node.operand, env)
            if isinstance(node.op, ast.UAdd):
                return value
            if not isinstance(value, T.Value):
                return -value if isinstance(node.op, ast.USub) else not value
            return self.kb.unary("neg" if isinstance(node.op, ast.USub) else "not", value)
        elif isinstance(node, ast.Subscript):
            return self.subscript(node, env)
        elif isinstance(node, ast.Call):
            return self.call(node, env, statement)
        elif isinstance(node, ast.Attribute) and _dotted(node) == "tshared.alloc":
            return self.bare_alloc(node)
        raise self.error(node, f"the expression {ast.unparse(node)!r} is not supported in a kernel body",
                         fix="see docs/spec/tiles.md for what a kernel body may compute")

    def binary(self, fn, a, b, node):
        if not isinstance(a, T.Value) and not isinstance(b, T.Value):
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and fn in _FOLD:
                try:
                    return _FOLD[fn](a, b)
                except ZeroDivisionError:
                    raise self.error(node, f"{ast.unparse(node)!r} divides the constant {a!r} by zero",
                                     fix="fix the constant divisor") from None
            if fn in ("and", "or"):
                return (a and b) if fn == "and" else (a or b)
            raise self.error(node, f"cannot compute {fn} of {a!r} and {b!r}",
                             fix=f"compute {fn} of numbers (ints or floats) or of lane values")
        like = a.type if isinstance(a, T.Value) else b.type
        a, b = self.materialize(a, node, like), self.materialize(b, node, like)
        if fn in ("and", "or"):
            if a.type != T.MASK_T or b.type != T.MASK_T:
                raise self.error(node, f"'{fn}' combines conditions, got {a.type} and {b.type}",
                                 fix="combine comparisons (a < b and c < d), not numbers")
        elif a.type != b.type:
            raise self.error(node, f"{fn} of {a.type} and {b.type}: both operands need one type",
                             fix="convert one side explicitly, e.g. float(i) or int(x)")
        if fn == "div" and isinstance(a.type, IndexType):
            raise self.error(node, "'/' of integers; integer division is '//'", fix="write a // b")
        if isinstance(a.type, TensorType) and a.type != T.MASK_T:
            raise self.error(node, f"arithmetic on a buffer or fragment ({a.type}) is not supported; "
                                   "index it to get one value per lane",
                             fix="index the buffer (X[i]) or load a fragment first (tile.load(X, index=..., "
                                 "shape=...))")
        return self.kb.binary(fn, a, b)

    def slice_length(self, sl):
        lo, hi = sl.lower, sl.upper
        if sl.step is not None or hi is None:
            raise self.error(sl, "a view is written X[t:t+L] with a constant length L",
                             fix="write X[t:t+L] with a constant L and no step")
        if lo is None:
            lo = ast.Constant(0)
        if isinstance(hi, ast.BinOp) and isinstance(hi.op, ast.Add) and ast.dump(hi.left) == ast.dump(lo):
            length = self.const_of(hi.right, {}, "a slice length")
        else:
            a, b = self.try_const(lo), self.try_const(hi)
            if a is None or b is None:
                raise self.error(sl, f"cannot tell the length of the slice {ast.unparse(sl)!r}",
                                 fix="write it as X[t:t+L] with a constant L")
            length = b - a
        if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
            raise self.error(sl, f"the view {ast.unparse(sl)!r} has length {length!r}; a length is a positive int",
                             fix="write X[t:t+L] with a constant L > 0")
        return length

    def try_const(self, node):
        try:
            value = self.expr(node, {})
        except KernelError:
            return None
        return value if isinstance(value, int) else None

    def indices(self, node, env) -> list:
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return [self.index_value(self.expr(e, env), e) for e in elts]

    def index_value(self, value, node):
        """An ``index`` Value for an index or offset (ints and index values only)."""
        if isinstance(value, bool) or not isinstance(value, (int, T.Value)) or \
                isinstance(value, T.Value) and not isinstance(value.type, IndexType):
            got = value.type if isinstance(value, T.Value) else repr(value)
            raise self.error(node, f"an index must be an integer (index), got {got} in {ast.unparse(node)!r}",
                             fix="convert it explicitly with int(...)")
        return self.materialize(value, node)

    def subscript(self, node, env):
        if _dotted(node.value) == "tshared.alloc":
            raise self.error(node, "tshared.alloc[fmt] needs its shape: tshared.alloc[f16](BM, BK)",
                             fix="write tshared.alloc[f16](BM, BK)")
        buf = self.expr(node.value, env)
        if not isinstance(buf, T.Value) or not isinstance(buf.type, TensorType) or buf.type.rank == 0:
            raise self.error(node, f"{ast.unparse(node.value)!r} is not a buffer that can be indexed",
                             fix="index a buffer parameter, a view of one or a tshared allocation")
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if any(isinstance(e, ast.Slice) for e in elts):
            offsets, shape = [], []
            for e in elts:
                if isinstance(e, ast.Slice):
                    offsets.append(self.index_value(self.expr(e.lower, env) if e.lower else 0, e))
                    shape.append(self.slice_length(e))
                elif shape:  # a view drops leading axes only (the box's axes keep their order)
                    raise self.error(e, f"the view {ast.unparse(node)!r} keeps an integer index after a slice",
                                     fix=f"keep the axis with a length-1 slice, e.g. {ast.unparse(e)}:"
                                         f"{ast.unparse(e)}+1")
                else:
                    offsets.append(self.index_value(self.expr(e, env), e))
            if len(elts) != buf.type.rank:
                raise self.error(node, f"{ast.unparse(node.value)} has {buf.type.rank} dimension(s), viewed "
                                       f"with {len(elts)}",
                                 fix=f"give one index or slice per dimension ({buf.type.rank})")
            return self.kb.subview(buf, offsets, shape)
        if len(elts) != buf.type.rank:
            raise self.error(node, f"{ast.unparse(node.value)} has {buf.type.rank} dimension(s), indexed "
                                   f"with {len(elts)}",
                             fix=f"give one index per dimension ({buf.type.rank})")
        return self.kb.load(buf, self.indices(node.slice, env))

    def store(self, buf, index, value, node) -> None:
        if not isinstance(buf, T.Value) or not isinstance(buf.type, TensorType) or buf.type.rank == 0:
            raise self.error(node, "stores go into a buffer (a mut parameter or a tshared allocation)",
                             fix="store into a mut parameter (y: mut[f32[n]]) or a tshared.alloc buffer")
        if isinstance(value, T.Value) and isinstance(value.type, TensorType) and value.type.rank:
            self.kb.frag_store(self.kb.subview(buf, index, value.type.shape), value)
            return
        if len(index) != buf.type.rank:
            raise self.error(node, f"the buffer has {buf.type.rank} dimension(s), the index has {len(index)}",
                             fix=f"give one index per dimension ({buf.type.rank})")
        value = self.materialize(value, node, ScalarType(buf.type.policy))
        if value.type != ScalarType(buf.type.policy):
            if not isinstance(value.type, ScalarType):
                raise self.error(node, f"stores a {value.type} into a buffer of {buf.type.format.name}",
                                 fix="convert the value to the buffer's format")
            value = self.kb.cast(value, buf.type.format)  # another format converts as a cast (TILE-NUM-2)
        self.kb.store(buf, index, value)

    def bare_alloc(self, node):
        if self.bare_shape is None:
            raise self.error(node, "a bare tshared.alloc takes its shape from a cp_async.shared.global into it, "
                                   "and there is none", fix="write tshared.alloc[f16](BM, BK)")
        shape, fmt = self.bare_shape
        return self.kb.alloc(shape, fmt)

    def positional(self, node, lo: int, hi: int, usage: str) -> list:
        """The positional arguments of a call, between ``lo`` and ``hi`` of them."""
        if not lo <= len(node.args) <= hi:
            raise self.error(node, f"{ast.unparse(node.func)} takes {lo if lo == hi else f'{lo} to {hi}'} "
                                   f"positional argument(s), got {len(node.args)}", fix=f"write {usage}")
        return node.args

    def shape_of(self, node, env, what) -> tuple:
        """A constant shape: a tuple of positive ints."""
        shape = self.const_of(node, env, what)
        if not isinstance(shape, tuple) or not shape or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
            raise self.error(node, f"{what} is a tuple of positive constant ints, got {ast.unparse(node)!r}",
                             fix="e.g. (64, 32)")
        return shape

    def body_format(self, node) -> str:
        """The format named by ``f16`` (or ``"f16"``) in a kernel body."""
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)
        try:
            return get_format(text).name
        except TesseraError:
            raise self.error(node, f"{text!r} is not a number format",
                             fix="use f64, f32, f16, bf16, fp8_e4m3 or fp8_e5m2") from None

    def kwargs(self, node, allowed) -> dict:
        kw = {k.arg: k.value for k in node.keywords}
        extra = set(kw) - set(allowed)
        if extra:
            raise self.error(node, f"unknown argument(s) {sorted(extra)}; {_dotted(node.func)} takes {list(allowed)}",
                             fix=f"use only {list(allowed)}")
        return kw

    def call(self, node, env, statement):
        name = _dotted(node.func)
        if isinstance(node.func, ast.Call) or (isinstance(node.func, ast.Subscript)
                                               and _dotted(node.func.value) == "tshared.alloc"):
            return self.alloc(node, env)
        kb = self.kb
        simple = {"tile.linear_id": kb.linear_id, "tile.lane_id": kb.lane_id, "tile.num_lanes": kb.num_lanes}
        if name in simple:
            return simple[name]()
        if name in ("tile.tile_id", "tile.id", "tile.num_tiles"):
            kw = self.kwargs(node, ("axis",))
            axis = self.const_of(node.args[0] if node.args else kw.get("axis", ast.Constant(0)), env, "axis")
            if isinstance(axis, bool) or axis not in (0, 1, 2):
                raise self.error(node, f"{name}'s axis is 0, 1 or 2 (a grid has at most 3 axes), got {axis!r}",
                                 fix="pass axis=0, 1 or 2")
            return kb.num_tiles(axis) if name == "tile.num_tiles" else kb.tile_id(axis)
        if name == "tbarrier":
            if self.prefetch and not self.prefetch[-1][1] and self.uncommitted:
                kb.commit()
                kb.wait(self.prefetch[-1][0] - 1)
                self.uncommitted = False
            kb.barrier()
            return None
        if name in ("cp_async.shared.global_", "cp_async.shared.global"):
            if len(node.args) != 2:
                raise self.error(node, "cp_async.shared.global(dst, src) takes the shared buffer and a global view",
                                 fix="write cp_async.shared.global(s, X[t:t+128])")
            dst, src = (self.expr(a, env) for a in node.args)
            for what, v in (("destination", dst), ("source", src)):
                if not isinstance(v, T.Value) or not isinstance(v.type, TensorType) or not v.type.rank:
                    raise self.error(node, f"the cp_async {what} must be a buffer or a view like X[t:t+128]",
                                     fix="copy between a shared buffer and a view of a global buffer, e.g. X[t:t+128]")
            if dst.type.shape != src.type.shape or dst.type.format != src.type.format:
                raise self.error(node, f"cp_async copies {src.type} into {dst.type}: shapes and formats must match",
                                 fix="copy a slice of the shared buffer's shape")
            kb.cp_async(dst, src)
            self.uncommitted = True
            return None
        if name == "cp_async.commit":
            kb.commit()
            self.uncommitted = False
            return None
        if name == "cp_async.wait":
            args = self.positional(node, 0, 1, "cp_async.wait(n)")
            pending = self.const_of(args[0], env, "cp_async.wait's count") if args else 0
            if isinstance(pending, bool) or not isinstance(pending, int) or pending < 0:
                raise self.error(node, f"cp_async.wait(n) waits until at most n groups are in flight; n must be "
                                       f"an int >= 0, got {pending!r}", fix="cp_async.wait(0) waits for all")
            kb.wait(pending)
            return None
        if name == "tile.load":
            kw = self.kwargs(node, ("index", "shape"))
            buf = self.expr(self.positional(node, 1, 1, "tile.load(X, index=i)")[0], env)
            index = self.index_arg(kw.get("index"), node, env)
            if "shape" in kw:
                shape = self.shape_of(kw["shape"], env, "a fragment shape")
                return kb.frag_load(kb.subview(buf, index, shape))
            return kb.load(buf, index)
        if name == "tile.store":
            kw = self.kwargs(node, ("index", "value"))
            buf = self.expr(self.positional(node, 1, 1, "tile.store(Y, index=i, value=v)")[0], env)
            if "value" not in kw:
                raise self.error(node, "tile.store needs value=", fix="write tile.store(Y, index=i, value=v)")
            self.store(buf, self.index_arg(kw.get("index"), node, env), self.expr(kw["value"], env), node)
            return None
        if name == "tile.zeros":
            args = self.positional(node, 1, 2, "tile.zeros((M, N), f32)")
            shape = self.shape_of(args[0], env, "a fragment shape")
            return kb.fill(shape, self.body_format(args[1]) if len(args) > 1 else "f32", 0.0)
        if name in ("tile.mma", "tile.mma_sync"):
            return self.mma(node, env)
        if name == "tile.shfl_xor":
            return self.shfl_xor(node, env)
        if name in ("min", "max") and len(node.args) == 2:
            return self.binary(name, self.expr(node.args[0], env), self.expr(node.args[1], env), node)
        if name in ("abs",) and len(node.args) == 1:
            value = self.expr(node.args[0], env)
            return kb.unary("abs", value) if isinstance(value, T.Value) else abs(value)
        if name in ("float", "int") and len(node.args) == 1:
            value = self.expr(node.args[0], env)
            if not isinstance(value, T.Value):
                return float(value) if name == "float" else int(value)
            return kb.cast(value, "f32" if name == "float" else "index")
        raise self.error(node, f"{ast.unparse(node.func)}(...) is not a kernel operation",
                         fix="see docs/spec/tiles.md for the tile.*, tshared, cp_async and tbarrier operations")

    def shfl_xor(self, node, env):
        """``tile.shfl_xor(v, offset)``: ``v`` of lane ``lane xor offset`` of the warp (TILE-WARP-1)."""
        args = self.positional(node, 2, 2, "tile.shfl_xor(v, offset)")
        offset = self.const_of(args[1], env, "tile.shfl_xor's offset")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 1 <= offset < T.WARP:
            raise self.error(node, f"tile.shfl_xor(v, offset) exchanges with lane (lane xor offset) of the same "
                                   f"{T.WARP}-lane warp, so offset is a constant int from 1 to {T.WARP - 1}; got "
                                   f"{offset!r}", fix="e.g. tile.shfl_xor(v, 16)")
        value = self.expr(args[0], env)
        if not isinstance(value, T.Value):
            return value  # a constant is the same in every lane
        if not isinstance(value.type, (ScalarType, IndexType)):
            raise self.error(node, f"tile.shfl_xor exchanges a lane value (a scalar or an index), not {value.type}",
                             fix="shuffle scalar lane values; load fragment elements first")
        return self.kb.shfl_xor(value, offset)

    def index_arg(self, node, call, env) -> list:
        if node is None:
            raise self.error(call, f"{_dotted(call.func)} needs index=",
                             fix=f"write {_dotted(call.func)}(X, index=i, ...)")
        value = self.expr(node, env)
        values = value if isinstance(value, tuple) else (value,)
        return [self.index_value(v, node) for v in values]

    def alloc(self, node, env):
        head = node.func
        if not (isinstance(head, ast.Subscript) and _dotted(head.value) == "tshared.alloc"):
            raise self.error(node, f"{ast.unparse(node.func)!r} cannot be called",
                             fix="only tshared.alloc[fmt](sizes) is called this way: e.g. tshared.alloc[f16](BM, BK)")
        fmt = self.body_format(head.slice)
        kw = self.kwargs(node, ("swizzle", "pad"))
        shape = tuple(self.const_of(a, env, "a shared-memory size") for a in node.args)
        swizzle = self.const_of(kw["swizzle"], env, "swizzle") if "swizzle" in kw else "none"
        pad = self.const_of(kw["pad"], env, "pad") if "pad" in kw else 0
        if swizzle not in T.SWIZZLES:
            raise self.error(node, f"swizzle={swizzle!r} is not one of {list(T.SWIZZLES)}",
                             fix=f"pass swizzle= one of {list(T.SWIZZLES)}")
        if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
            raise self.error(node, f"a shared buffer needs positive constant sizes, got {shape}",
                             fix="pass positive constant ints, e.g. tshared.alloc[f16](64, 32)")
        if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
            raise self.error(node, f"pad must be an int >= 0 (elements added to each row), got {pad!r}",
                             fix="pad=1 (or leave it out)")
        return self.kb.alloc(shape, fmt, swizzle=swizzle, pad=pad)

    def mma(self, node, env, acc=None):
        kw = self.kwargs(node, ("accum",))
        args = self.positional(node, 2, 3, f"{_dotted(node.func)}(a, b) or tile.mma(a, b, C)")
        a, b = self.expr(args[0], env), self.expr(args[1], env)
        accum = self.body_format(kw["accum"]) if "accum" in kw else "f32"
        for v in (a, b):
            if not isinstance(v, T.Value) or not isinstance(v.type, TensorType) or v.type.rank != 2:
                raise self.error(node, "tile.mma multiplies two 2-D shared buffers, views or fragments",
                                 fix="pass 2-D operands: [M, K] and [K, N] shared buffers, views or fragments")
        if len(node.args) > 2:
            acc = self.expr(node.args[2], env)
        if acc is None:
            acc = self.kb.fill((a.type.shape[0], b.type.shape[1]), accum, 0.0)
        if a.type.shape[1] != b.type.shape[0] or acc.type.shape != (a.type.shape[0], b.type.shape[1]):
            raise self.error(node, f"tile.mma of {a.type} and {b.type} into {acc.type}: shapes do not fit",
                             fix="a is [M, K], b is [K, N], the accumulator [M, N]")
        return self.kb.mma(a, b, acc, accum=accum)


def lower_function(fn: ast.FunctionDef, filename: str, line_offset: int, constants: dict):
    """The Tile IR module of kernel ``fn`` (an ``ast.FunctionDef``)."""
    return _Lower(fn, filename, line_offset, constants).lower()


class Kernel:
    """A tile kernel: its Tile IR module and how to launch it (TILE-FE-1).

    ``k(*args, grid=..., lanes=128, checks=True, counters=True, preset="H100",
    on_error="raise")`` launches it on the current backend (the tile interpreter on ``interp``) on NumPy arrays (``mut`` buffers
    are updated in place) and returns the :class:`~tessera_ref.interp.tile.TileReport`.
    """

    #: Extra IR views by name (``"target"``, registered by the lowering): ``view(kernel) -> str``.
    _ir_views: dict = {}

    def __init__(self, fn: ast.FunctionDef, filename: str, line_offset: int, constants: dict):
        self._ast, self.filename, self._offset = fn, filename, line_offset
        self.constants = dict(constants)
        self.name = fn.name
        self.module = lower_function(fn, filename, line_offset, self.constants)

    def specialize(self, **constants) -> "Kernel":
        """The same kernel with the free names ``constants`` bound (e.g. ``BM=128``)."""
        return Kernel(self._ast, self.filename, self._offset, {**self.constants, **constants})

    def inspect_ir(self, level: str = "tile") -> str:
        """The kernel's IR text at ``level``: ``"tile"``, or ``"target"`` (the CUDA C text
        that :mod:`tessera_ref.backends.cuda` registers and compiles). A ``@kernel``
        is written at the tile level, so it has no ``"graph"`` or ``"schedule"`` IR."""
        if level == "tile":
            return str(self.module)
        view = self._ir_views.get(level)
        if view is None:
            raise KernelError(f"inspect_ir({level!r}): a @kernel is written at the tile level and has no "
                              f"{level!r} IR here", fix="use inspect_ir('tile')")
        return view(self)

    def __call__(self, *args, grid=1, lanes=128, checks=True, counters=True, preset="H100",
                 on_error="raise", **kwargs):
        if kwargs:
            names = list(self.module.body.first_op.attributes["tile.params"])
            args = dict(zip(names, args))
            args.update(kwargs)
        return context.backend().launch(Launch(self.module, None, grid, lanes, args, checks, counters, preset,
                                               on_error))

    def __repr__(self) -> str:
        return f"<tessera kernel {self.name} from {self.filename}:{self._offset + self._ast.lineno}>"


class AutotunedKernel:
    """``@kernel.autotune(space=...)``: the kernel specialized to each configuration of the
    space; :meth:`tune` hands them to the autotuner (:mod:`tessera_ref.lowering.autotune`)."""

    def __init__(self, base: Kernel, space: dict):
        if not isinstance(space, dict) or not space or not all(isinstance(v, (list, tuple)) and v
                                                               for v in space.values()):
            raise KernelError(f"autotune space must be a dict of non-empty lists, got {space!r}",
                              fix="e.g. space=dict(BM=[128, 256], stages=[2, 3])")
        self.base, self.space = base, dict(space)
        self.name = base.name
        keys = list(space)
        self.configs = [dict(zip(keys, values)) for values in itertools.product(*space.values())]

    def variants(self) -> list:
        """``[(config, Kernel)]`` for every configuration of the space."""
        return [(config, self.base.specialize(**config)) for config in self.configs]

    def tune(self, problem: dict, preset="H100", **options):
        """Sweep the space with the cost model: ``autotune_kernel(variants, problem, preset,
        **options)`` (``problem = dict(args=..., grid=..., lanes=...)``)."""
        return context.backend().autotune(self.variants(), problem, preset, **options)

    def inspect_ir(self, level: str = "tile") -> str:
        """The IR of the space's first configuration."""
        return self.variants()[0][1].inspect_ir(level)

    def __call__(self, *args, **kwargs):
        """Run the space's first configuration (tune first to pick the best one)."""
        return self.variants()[0][1](*args, **kwargs)


def _from_function(fn) -> tuple:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise KernelError(f"@kernel needs the source of {getattr(fn, '__name__', fn)!r}, which Python does not have",
                          fix="define kernels in a file, or use kernel.from_source(text)") from None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    fndef = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fndef is None:
        raise KernelError(f"@kernel needs a function defined with def, got {getattr(fn, '__name__', fn)!r}",
                          fix="write the kernel as a def function (a lambda has no kernel body)")
    constants = {k: v for k, v in fn.__globals__.items() if isinstance(v, (int, float, str)) and not k.startswith("__")}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            value = cell.cell_contents
            if isinstance(value, (int, float, str)):
                constants[name] = value
    return fndef, fn.__code__.co_filename, fn.__code__.co_firstlineno - 1, constants


def _check_source_args(text, name, filename, constants) -> None:
    """kernel.from_source's arguments have its signature's types (TILE-FE-2)."""
    for arg, value, want, fix in (
            ("text", text, str, "pass the kernel's source as a str; kernel.load(path) reads a .tsr file"),
            ("name", name, (str, type(None)), "pass the kernel's function name as a str, or leave it out"),
            ("filename", filename, str, "pass the name to show in messages as a str, e.g. 'attention.tsr'")):
        if not isinstance(value, want):
            raise KernelError(f"kernel.from_source: {arg} must be a str, got {type(value).__name__}", fix=fix)
    if constants is not None and (not isinstance(constants, dict) or not all(isinstance(k, str) for k in constants)):
        raise KernelError(f"kernel.from_source: constants must be a dict of names to values, got {constants!r}",
                          fix="pass e.g. constants={'BM': 64}")


def _decorators(fndef) -> list:
    """The kernel decorators of a DSL function: ``[("kernel", None) | ("autotune", space_node)]``."""
    out = []
    for d in fndef.decorator_list:
        name = _dotted(d.func) if isinstance(d, ast.Call) else _dotted(d)
        if name == "kernel":
            out.append(("kernel", None))
        elif name == "kernel.autotune" and isinstance(d, ast.Call):
            space = {k.arg: k.value for k in d.keywords}.get("space")
            out.append(("autotune", space))
    return out


class _KernelDecorator:
    """``kernel``: ``@kernel``, ``@kernel.autotune(space=...)``, ``kernel.from_source(text)``,
    ``kernel.load(path)``."""

    def __call__(self, fn=None, **constants):
        """``@kernel`` / ``@kernel(BM=64)``: the :class:`Kernel` of a Python function, read from
        its source. Its annotations were already evaluated by Python when the ``def`` ran
        (3.11–3.13): define the sizes with ``symbols`` or use ``from __future__ import
        annotations`` (see the module docstring)."""
        if fn is None:
            return lambda f: self(f, **constants)
        fndef, filename, offset, found = _from_function(fn)
        return Kernel(fndef, filename, offset, {**found, **constants})

    def autotune(self, *, space: dict):
        """``@kernel.autotune(space=dict(BM=[128, 256], stages=[2, 3]))``."""
        def wrap(fn):
            fndef, filename, offset, found = _from_function(fn)
            found = {**found, **{k: v[0] for k, v in space.items() if isinstance(v, (list, tuple)) and v}}
            return AutotunedKernel(Kernel(fndef, filename, offset, found), space)
        return wrap

    def inspect_ir(self, level: str = "tile"):
        """Refused with a pointer: the IR belongs to a kernel, not to the decorator (seed 004
        §2.9 writes ``kernel.inspect_ir`` for a kernel *named* ``kernel``)."""
        raise KernelError(f"kernel.inspect_ir({level!r}) was called on the @kernel decorator itself, which has "
                          "no IR", fix=f"call it on a kernel you defined: @kernel def my_kernel(...): ...; then "
                          f"my_kernel.inspect_ir({level!r})")

    @checked_signature
    def from_source(self, text: str, *, name: str | None = None, filename: str = "<tessera>",
                    constants: dict | None = None):
        """The kernel defined in Tessera DSL ``text`` (seed 004's syntax; Python kernels parse too).

        With several kernels in the text, ``name`` picks one; a kernel under
        ``@kernel.autotune(space=...)`` gives an :class:`AutotunedKernel`.
        """
        from .dsl import to_python

        _check_source_args(text, name, filename, constants)
        try:
            tree = ast.parse(to_python(text), filename=filename)
        except SyntaxError as exc:
            raise KernelError(f"the kernel source does not parse: {exc.msg}",
                              location=f"{filename}:{exc.lineno or 1}",
                              fix="check the line against docs/spec/tiles.md") from None
        except ValueError as exc:  # a NUL character, a lone surrogate
            raise KernelError(f"the kernel source is not text Python can read: {exc}", location=f"{filename}:1",
                              fix="pass the kernel's source as plain text (no NUL characters or lone surrogates)") \
                from None
        kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and _decorators(n)]
        found = kernels if name is None else [n for n in kernels if n.name == name]
        if len(found) != 1:
            names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
            fix = ("write a kernel: a def decorated with @kernel (see docs/spec/tiles.md)" if not kernels else
                   f"pass name= one of {[n.name for n in kernels]}")
            raise KernelError(f"the source holds {len(found)} @kernel function(s) matching {name!r} (functions: {names})",
                              location=f"{filename}:1", fix=fix)
        fndef = found[0]
        constants = dict(constants or {})
        kind, space_node = _decorators(fndef)[0]
        if kind == "autotune":
            try:
                space = ast.literal_eval(space_node) if not isinstance(space_node, ast.Call) else {
                    k.arg: ast.literal_eval(k.value) for k in space_node.keywords}
            except ValueError:
                raise KernelError("kernel.autotune's space must be literal lists",
                                  location=f"{filename}:{fndef.lineno}",
                                  fix="e.g. @kernel.autotune(space=dict(BM=[128, 256], stages=[2, 3]))") from None
            if not isinstance(space, dict) or not space or not all(isinstance(v, (list, tuple)) and v
                                                                   for v in space.values()):
                raise KernelError(f"autotune space must be a dict of non-empty lists, got {space!r}",
                                  location=f"{filename}:{fndef.lineno}",
                                  fix="e.g. space=dict(BM=[128, 256], stages=[2, 3])")
            base = Kernel(fndef, filename, 0, {**{k: v[0] for k, v in space.items()}, **constants})
            return AutotunedKernel(base, space)
        return Kernel(fndef, filename, 0, constants)

    @checked_signature
    def load(self, path, *, name: str | None = None, constants: dict | None = None):
        """The kernel of a ``.tsr`` file (Tessera DSL text, UTF-8)."""
        try:
            path = os.fspath(path)
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except TypeError:
            raise KernelError(f"kernel.load(path) takes a file path (str or os.PathLike), got {type(path).__name__}",
                              fix="pass the path of a .tsr file; kernel.from_source(text) takes the text itself") \
                from None
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise KernelError(f"kernel.load cannot read {path!r}: {reason}",
                              fix="pass the path of a readable .tsr file of UTF-8 text") from None
        return self.from_source(text, name=name, filename=path, constants=constants)

    def __repr__(self) -> str:
        return "<tessera kernel decorator>"


#: ``@kernel`` (see :class:`_KernelDecorator`).
kernel = _KernelDecorator()
