"""The Tile IR dialect (``tessera.tile``) and :class:`KernelBuilder`, which builds it.

A tile kernel is a ``tessera.func`` carrying ``tile.kernel = true``, ``tile.params`` (the
parameter names in order), ``tile.mut`` (the names of the global buffers it may write) and
``tile.sizes`` (symbolic size name -> ``[param, axis]``); its body is Tile IR ending in
``tessera.return()``. The dialect uses the shared IR types only (docs/spec/tiles.md,
TILE-IR-1):

- global buffers are the tensor parameters (``tensor<[n]xf32>``);
- lane values (one per lane) are ``index``, a scalar format (``f32``) or a mask
  ``tensor<i1>``;
- shared buffers, views of buffers and register fragments are static tensors
  (``tensor<64x32xf16>``).

Ops (operands -> results, attributes):

==================  ================================================  ===========================
op                  operands -> results                               attributes
==================  ================================================  ===========================
lane_id, linear_id  -> index                                          -
num_lanes           -> index                                          -
tile_id, num_tiles  -> index                                          ``axis``
dim                 global buffer -> index                            ``axis``
constant            -> index or scalar                                ``value``
binary              x, y -> like x (compare, and/or: ``tensor<i1>``)  ``fn``
unary               x -> like x                                       ``fn``
reduce              fragment -> fragment (the axis kept, size 1)      ``fn``, ``axis``, ``accum``
cast                x -> index or scalar                              -
select              mask, a, b -> like a                              -
load                buffer, index per dim -> scalar                   -
store               buffer, index per dim, value                      -
alloc               -> shared buffer                                  ``swizzle``, ``pad``
subview             buffer, offset per dim -> view                    -
cp_async            dst view, src view                                -
cp_async_commit     -                                                 -
cp_async_wait       -                                                 ``pending``
barrier             -                                                 -
fill                -> fragment                                       ``value``
frag_load           view -> fragment                                  -
frag_store          view, fragment                                    -
mma                 a, b, acc -> fragment                             ``accum``
for                 lb, ub, step, init... -> carried...               ``prefetch``; 1 region
if                  cond -> results...                                2 regions
yield               values (terminator of for/if regions)             -
==================  ================================================  ===========================
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..numerics import get_format
from .builtin import func_op, return_op
from .core import Block, Module, Operation, Region, Value
from .errors import IRError
from .registry import close_dialect, register_op
from .types import BOOL, IndexType, ScalarType, TensorType
from .verifier import verify

__all__ = ["DIALECT", "KernelBuilder", "buffer", "INDEX_T", "MASK_T", "BINARY_FNS", "UNARY_FNS",
           "REDUCE_FNS", "MATH_FNS", "COMPARE_FNS", "is_kernel"]

DIALECT = "tessera.tile"
INDEX_T = IndexType()
MASK_T = TensorType((), BOOL)

COMPARE_FNS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGIC_FNS = ("and", "or")
BINARY_FNS = ("add", "sub", "mul", "div", "floordiv", "mod", "min", "max") + COMPARE_FNS + LOGIC_FNS
#: Unary functions of the NUM-MATH algorithms, computed as the graph's ops compute them.
MATH_FNS = ("exp", "expm1", "log", "sin", "cos", "tanh", "erf", "erfc", "sigmoid", "silu", "gelu",
            "gelu_tanh", "rsqrt")
UNARY_FNS = ("neg", "not", "sqrt", "abs") + MATH_FNS
REDUCE_FNS = ("sum", "mean", "max", "min")
SWIZZLES = ("none", "xor")


def buffer(shape, fmt) -> TensorType:
    """The type of a global buffer parameter: ``shape`` of ints and symbol names."""
    return TensorType(tuple(shape), fmt)


def is_kernel(op: Operation) -> bool:
    """True for a ``tessera.func`` that is a tile kernel."""
    return op.attributes.get("tile.kernel") is True


# ---------------------------------------------------------------------------------------
# verification hooks

def _n_operands(n: int):
    def check(op):
        if len(op.operands) != n:
            raise op.emit_error(f"takes {n} operand(s), has {len(op.operands)}")
    return check


def _attr(op, name, kinds, allowed=None):
    value = op.attributes.get(name)
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple)
                                                                                else (kinds,)):
        raise op.emit_error(f"needs attribute {name!r}, has {value!r}")
    if allowed is not None and value not in allowed:
        raise op.emit_error(f"attribute {name!r} is {value!r}, not one of {list(allowed)}")


def _static_tensor(op, value: Value | None, what: str) -> TensorType:
    if value is None:
        raise op.emit_error(f"needs {what} as its first operand, has no operands")
    t = value.type
    if not isinstance(t, TensorType) or t.rank == 0:
        raise op.emit_error(f"{what} must be a buffer, view or fragment (a tensor), is {t}")
    return t


def _verify_binary(op):
    _n_operands(2)(op)
    _attr(op, "fn", str, BINARY_FNS)


def _verify_unary(op):
    _n_operands(1)(op)
    _attr(op, "fn", str, UNARY_FNS)


def _verify_reduce(op):
    _n_operands(1)(op)
    _attr(op, "fn", str, REDUCE_FNS)
    _attr(op, "axis", int)
    _attr(op, "accum", str)
    t = _static_tensor(op, op.operands[0], "the reduced fragment")
    if not 0 <= op.attributes["axis"] < t.rank:
        raise op.emit_error(f"axis {op.attributes['axis']} is not an axis of {t}")


def _verify_memory(op, value_operands: int):
    buf = _static_tensor(op, op.operands[0] if op.operands else None, "the buffer")
    if len(op.operands) != 1 + buf.rank + value_operands:
        raise op.emit_error(f"needs the buffer, {buf.rank} index operand(s)"
                            f"{' and the value' if value_operands else ''}; has {len(op.operands)} operand(s)")


def _verify_alloc(op):
    _n_operands(0)(op)
    _attr(op, "swizzle", str, SWIZZLES)
    _attr(op, "pad", int)
    if op.attributes["pad"] < 0:
        raise op.emit_error(f"pad must be >= 0, is {op.attributes['pad']}")
    t = op.results[0].type if len(op.results) == 1 else None
    if not isinstance(t, TensorType) or not t.is_static or t.rank == 0:
        raise op.emit_error(f"allocates a static shared buffer (tensor<...> of ints), result is {t}")


def _verify_subview(op):
    base = _static_tensor(op, op.operands[0] if op.operands else None, "the viewed buffer")
    if len(op.operands) != 1 + base.rank:
        raise op.emit_error(f"needs one offset per dimension of {base} ({base.rank}), has {len(op.operands) - 1}")
    view = op.results[0].type if len(op.results) == 1 else None
    if not isinstance(view, TensorType) or not view.is_static or view.rank > base.rank:
        raise op.emit_error(f"the view {view} must be a static tensor of rank <= {base.rank}")


def _verify_copy(op):
    _n_operands(2)(op)
    dst, src = (_static_tensor(op, v, w) for v, w in zip(op.operands, ("the destination", "the source")))
    if dst.shape != src.shape or dst.format != src.format:
        raise op.emit_error(f"copies {src} into {dst}: shapes and formats must match")


def _verify_frag_store(op):
    _n_operands(2)(op)
    view, frag = (_static_tensor(op, v, w) for v, w in zip(op.operands, ("the view", "the fragment")))
    if view.shape != frag.shape:
        raise op.emit_error(f"stores a fragment {frag} into a view {view}: the shapes must match")


def _verify_axis(op):
    _n_operands(0)(op)
    _attr(op, "axis", int)
    if not 0 <= op.attributes["axis"] < 3:
        raise op.emit_error(f"axis must be 0, 1 or 2 (a grid has at most 3 axes), is {op.attributes['axis']}")


def _verify_wait(op):
    _n_operands(0)(op)
    _attr(op, "pending", int)
    if op.attributes["pending"] < 0:
        raise op.emit_error(f"waits until at most 'pending' groups are in flight, so pending >= 0; is "
                            f"{op.attributes['pending']}")


def _verify_mma(op):
    _n_operands(3)(op)
    a, b, c = (_static_tensor(op, v, w) for v, w in zip(op.operands, ("a", "b", "acc")))
    if a.rank != 2 or b.rank != 2 or a.shape[1] != b.shape[0] or c.shape != (a.shape[0], b.shape[1]):
        raise op.emit_error(f"needs a [M, K], b [K, N], acc [M, N]; got {a}, {b}, {c}")
    _attr(op, "accum", str)


def _verify_for(op):
    if len(op.operands) < 3 or len(op.regions) != 1:
        raise op.emit_error("needs lb, ub, step (and the initial carried values) and one region")
    _attr(op, "prefetch", int)
    block = op.regions[0].entry
    if len(block.args) != len(op.operands) - 2:
        raise op.emit_error(f"its body takes the induction variable and {len(op.operands) - 3} carried "
                            f"value(s), has {len(block.args)} argument(s)")


def _verify_if(op):
    _n_operands(1)(op)
    if len(op.regions) != 2:
        raise op.emit_error("needs a then region and an else region")


def _verify_yield(op):
    parent = op.parent_op
    if parent is None or parent.name not in (FOR, IF):
        raise op.emit_error("must end the region of a tessera.tile.for or tessera.tile.if")
    if len(op.operands) != len(parent.results):
        raise op.emit_error(f"yields {len(op.operands)} value(s), '{parent.name}' has {len(parent.results)} result(s)")
    for i, (v, r) in enumerate(zip(op.operands, parent.results)):
        if v.type != r.type:
            raise op.emit_error(f"yields {v.type} as value {i}, '{parent.name}' result {i} is {r.type}")


def _name(short):
    return f"{DIALECT}.{short}"


FOR, IF, YIELD = _name("for"), _name("if"), _name("yield")

_OPS = {
    "lane_id": (_n_operands(0), False), "linear_id": (_n_operands(0), False),
    "num_lanes": (_n_operands(0), False), "tile_id": (_verify_axis, False),
    "num_tiles": (_verify_axis, False), "dim": (_n_operands(1), False),
    "constant": (_n_operands(0), False), "binary": (_verify_binary, False),
    "unary": (_verify_unary, False), "reduce": (_verify_reduce, False), "cast": (_n_operands(1), False), "select": (_n_operands(3), False),
    "load": (lambda op: _verify_memory(op, 0), True), "store": (lambda op: _verify_memory(op, 1), True),
    "alloc": (_verify_alloc, True), "subview": (_verify_subview, False),
    "cp_async": (_verify_copy, True), "cp_async_commit": (_n_operands(0), True),
    "cp_async_wait": (_verify_wait, True), "barrier": (_n_operands(0), True),
    "fill": (_n_operands(0), False), "frag_load": (_n_operands(1), True),
    "frag_store": (_verify_frag_store, True), "mma": (_verify_mma, True),
    "for": (_verify_for, False), "if": (_verify_if, False),
}
for _short, (_hook, _effects) in _OPS.items():
    register_op(_name(_short), verify=_hook, side_effects=_effects)
register_op(YIELD, verify=_verify_yield, terminator=True)
close_dialect(DIALECT)


# ---------------------------------------------------------------------------------------
# building

def _scalar_type(fmt):
    if fmt == "index":
        return INDEX_T
    return ScalarType(get_format(fmt))


class KernelBuilder:
    """Builds one tile kernel op by op (see the contract in docs/spec/tiles.md, TILE-IR-1).

    ``params`` is a list of ``(name, type)`` or ``(name, type, mut)``: ``type`` is a
    :func:`buffer` type for global buffers, a format name (``"f32"``) or ``"index"`` for
    scalars. ``kb.params`` are the parameter values; each method creates one op at the end
    of the current block and returns its result (or nothing). ``location`` is stamped on
    every op (change it with :meth:`at`).
    """

    def __init__(self, name: str, params, *, location: str | None = None, sizes: dict | None = None):
        names, types, mut = [], [], []
        for entry in params:
            pname, ptype, *flag = entry
            ptype = ptype if isinstance(ptype, TensorType) else _scalar_type(ptype)
            names.append(pname)
            types.append(ptype)
            if flag and flag[0]:
                if not isinstance(ptype, TensorType):
                    raise IRError(f"kernel parameter {pname!r} is a scalar and cannot be mut",
                                  fix="only global buffers (tensors) are mutable")
                mut.append(pname)
        if sizes is None:
            sizes = {}
            for i, t in enumerate(types):
                if isinstance(t, TensorType):
                    for axis, d in enumerate(t.shape):
                        if isinstance(d, str) and d not in sizes:
                            sizes[d] = [names[i], axis]
        self.location = location
        self.func = func_op(name, types, (), location=location)
        self.func.attributes.update({"tile.kernel": True, "tile.params": list(names), "tile.mut": mut,
                                     "tile.sizes": {k: list(v) for k, v in sizes.items()}})
        self.block = self.func.regions[0].entry
        for arg, pname in zip(self.block.args, names):
            arg.name = pname
        self.params = self.block.args

    def at(self, location: str | None) -> "KernelBuilder":
        """Stamp ``location`` on the ops created from now on; returns the builder."""
        self.location = location
        return self

    def op(self, short: str, operands=(), result_types=(), attributes=None, regions=()) -> Operation:
        """Create op ``tessera.tile.<short>`` at the end of the current block."""
        for v in operands:
            if not isinstance(v, Value):
                raise IRError(f"operand of tessera.tile.{short} is not a Value: {v!r}",
                              fix="pass values built with this builder (use kb.const for numbers)")
        return self.block.append(Operation(_name(short), operands, result_types, attributes, regions,
                                           self.location))

    def _one(self, short, operands=(), result_type=INDEX_T, attributes=None) -> Value:
        return self.op(short, operands, (result_type,), attributes).results[0]

    def _index(self, v) -> Value:
        return self.const(v) if isinstance(v, int) else v

    # ids and sizes
    def lane_id(self) -> Value:
        return self._one("lane_id")

    def linear_id(self) -> Value:
        return self._one("linear_id")

    def num_lanes(self) -> Value:
        return self._one("num_lanes")

    def tile_id(self, axis: int = 0) -> Value:
        return self._one("tile_id", attributes={"axis": axis})

    def num_tiles(self, axis: int = 0) -> Value:
        return self._one("num_tiles", attributes={"axis": axis})

    def dim(self, buf: Value, axis: int) -> Value:
        return self._one("dim", (buf,), attributes={"axis": axis})

    # arithmetic
    def const(self, value, fmt="index") -> Value:
        """An ``index`` constant (an int) or a scalar constant of format ``fmt``."""
        t = _scalar_type(fmt)
        value = int(value) if t is INDEX_T else float(value)
        return self._one("constant", (), t, {"value": value})

    def binary(self, fn: str, x: Value, y: Value) -> Value:
        """``fn`` of two lane values, or of two fragments (NumPy broadcasting of their shapes)."""
        x, y = self._index(x), self._index(y)
        t = x.type
        if isinstance(t, TensorType) and isinstance(y.type, TensorType) and t.rank and y.type.rank:
            t = TensorType(np.broadcast_shapes(t.shape, y.type.shape), t.policy)
        if fn in COMPARE_FNS or fn in LOGIC_FNS:
            t = MASK_T
        return self._one("binary", (x, y), t, {"fn": fn})

    def unary(self, fn: str, x: Value) -> Value:
        return self._one("unary", (x,), x.type, {"fn": fn})

    def reduce(self, x: Value, fn: str, axis: int, *, accum: str = "f32") -> Value:
        """NUM-RED-2 ``fn`` of fragment ``x`` along ``axis`` in ``accum``, rounded once into
        ``x``'s format; the axis is kept with size 1."""
        shape = list(x.type.shape)
        shape[axis] = 1
        return self._one("reduce", (x,), TensorType(tuple(shape), x.type.policy),
                         {"fn": fn, "axis": int(axis), "accum": accum})

    def cast(self, x: Value, fmt) -> Value:
        return self._one("cast", (x,), _scalar_type(fmt))

    def select(self, mask: Value, a: Value, b: Value) -> Value:
        return self._one("select", (mask, a, b), a.type)

    # memory
    def load(self, buf: Value, index) -> Value:
        t = buf.type
        return self._one("load", (buf, *map(self._index, index)), ScalarType(t.policy))

    def store(self, buf: Value, index, value: Value) -> None:
        self.op("store", (buf, *map(self._index, index), value))

    def alloc(self, shape, fmt, *, swizzle: str = "none", pad: int = 0) -> Value:
        return self._one("alloc", (), TensorType(tuple(shape), get_format(fmt)),
                         {"swizzle": swizzle, "pad": int(pad)})

    def subview(self, buf: Value, offsets, shape) -> Value:
        return self._one("subview", (buf, *map(self._index, offsets)), TensorType(tuple(shape), buf.type.policy))

    def cp_async(self, dst: Value, src: Value) -> None:
        self.op("cp_async", (dst, src))

    def commit(self) -> None:
        self.op("cp_async_commit")

    def wait(self, pending: int = 0) -> None:
        self.op("cp_async_wait", attributes={"pending": int(pending)})

    def barrier(self) -> None:
        self.op("barrier")

    # fragments
    def fill(self, shape, fmt="f32", value: float = 0.0) -> Value:
        return self._one("fill", (), TensorType(tuple(shape), get_format(fmt)), {"value": float(value)})

    def frag_load(self, view: Value) -> Value:
        return self._one("frag_load", (view,), view.type)

    def frag_store(self, view: Value, frag: Value) -> None:
        self.op("frag_store", (view, frag))

    def mma(self, a: Value, b: Value, acc: Value, *, accum: str = "f32") -> Value:
        return self._one("mma", (a, b, acc), acc.type, {"accum": accum})

    # structured control flow
    def for_(self, lb, ub, step, *, init=(), body: Callable, prefetch: int = 0) -> list:
        """A loop ``for iv in range(lb, ub, step)`` carrying ``init``; ``body(iv, *carried)``
        builds the body and returns the next carried values. Returns the final values."""
        init = list(init)
        block = Block([INDEX_T] + [v.type for v in init])
        op = self.op("for", (self._index(lb), self._index(ub), self._index(step), *init),
                     [v.type for v in init], {"prefetch": int(prefetch)}, [Region([block])])
        self._build_region(block, lambda: body(*block.args), op)
        return list(op.results)

    def if_(self, cond: Value, *, then: Callable, else_: Callable | None = None, result_types=None) -> list:
        """``if cond`` with regions built by ``then()`` and ``else_()``, each returning the
        values of the results (their types from the then branch unless given)."""
        then_block, else_block = Block(), Block()
        location = self.location  # the if's own line, not that of its regions' last op
        values = self._build_region(then_block, then, None)
        types = result_types if result_types is not None else [v.type for v in values]
        op = self.op("if", (cond,), types, None, [Region([then_block]), Region([else_block])])
        op.location = location
        self._terminate(then_block, values)
        self._build_region(else_block, else_ or (lambda: []), op)
        return list(op.results)

    def _build_region(self, block: Block, build: Callable, op) -> list:
        outer = self.block
        self.block = block
        try:
            values = list(build() or [])
        finally:
            self.block = outer
        if op is not None:
            self._terminate(block, values)
        return values

    def _terminate(self, block: Block, values) -> None:
        block.append(Operation(YIELD, values, (), None, (), self.location))

    def finish(self, *, check: bool = True) -> Module:
        """Append ``tessera.return()``, wrap the kernel in a module and verify it."""
        self.block.append(return_op(location=self.location))
        module = Module()
        module.body.append(self.func)
        if check:
            verify(module)
        return module
