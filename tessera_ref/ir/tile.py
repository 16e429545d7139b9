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
fma                 x, y, z -> like x                                 -
reduce              fragment -> fragment (the axis kept, size 1)      ``fn``, ``axis``, ``accum``
cast                x (, element index) -> index or scalar            ``seed`` (stochastic rounding)
select              mask, a, b -> like a                              -
shfl_xor            x (a lane value) -> like x                        ``offset``
uniform             element index -> f32 or f64                       ``seed``, ``stream``
load                buffer, index per dim -> scalar                   -
store               buffer, index per dim, value                      -
alloc               -> shared buffer                                  ``swizzle``, ``pad``
subview             buffer, offset per dim -> view                    -
cp_async            dst view, src view                                ``bytes``?, ``transpose``?
cp_async_commit     -                                                 -
cp_async_wait       -                                                 ``pending``
barrier             -                                                 -
fill                -> fragment                                       ``value``, ``layout``?
frag_load           view -> fragment                                  ``layout``?
frag_store          view, fragment                                    ``layout``?
mma                 a, b, acc -> fragment                             ``accum``, ``layout``?, ``transpose_a``?
for                 lb, ub, step, init... -> carried...               ``prefetch``; 1 region
if                  cond -> results...                                2 regions
yield               values (terminator of for/if regions)             -
==================  ================================================  ===========================

Optional attributes (``?``; absent, the op means what it meant before they existed):
``layout`` is the fragment's lane ownership (:mod:`.fragment`, TILE-FRAG-1; absent: cyclic);
``transpose_a = true`` gives ``mma`` its ``a`` operand as ``[K, M]`` (staged k-major);
``bytes`` (4, 8 or 16) is the size of each cp.async piece and ``transpose = true`` makes
``cp_async`` copy a ``[R, C]`` source into a ``[C, R]`` destination, element by element
(TILE-VIS-2).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..numerics import Policy, get_format
from .builtin import func_op, return_op
from .core import Block, Module, Operation, Region, Value
from .errors import IRError
from .fragment import layout_of
from .registry import close_dialect, register_op
from .types import BOOL, INDEX, IndexType, ScalarType, TensorType
from .verifier import verify

__all__ = ["DIALECT", "KernelBuilder", "buffer", "INDEX_T", "MASK_T", "BINARY_FNS", "UNARY_FNS",
           "REDUCE_FNS", "MATH_FNS", "MATH2_FNS", "COMPARE_FNS", "WARP", "is_kernel", "shared_layout", "CAST_ROUNDING"]

DIALECT = "tessera.tile"
INDEX_T = IndexType()
MASK_T = TensorType((), BOOL)

#: The rounding modes of a ``cast`` into a float policy (TILE-NUM-3); a stochastic cast also
#: takes the element's index and a ``seed``.
CAST_ROUNDING = ("rne", "rtz", "rup", "rdown", "stochastic")
COMPARE_FNS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGIC_FNS = ("and", "or")
#: Unary functions of the NUM-MATH algorithms, computed as the graph's ops compute them.
MATH_FNS = ("exp", "expm1", "log", "sin", "cos", "tanh", "erf", "erfc", "sigmoid", "silu", "gelu",
            "gelu_tanh", "rsqrt")
#: Binary functions of the NUM-MATH algorithms (``pow``, NUM-MATH-12), likewise.
MATH2_FNS = ("pow",)
BINARY_FNS = ("add", "sub", "mul", "div", "floordiv", "mod", "min", "max") + COMPARE_FNS + LOGIC_FNS + MATH2_FNS
UNARY_FNS = ("neg", "not", "sqrt", "abs") + MATH_FNS
REDUCE_FNS = ("sum", "mean", "max", "min")
SWIZZLES = ("none", "xor")
#: The lanes of a warp: ``shfl_xor`` exchanges values within one (TILE-WARP-1).
WARP = 32


def buffer(shape, fmt) -> TensorType:
    """The type of a global buffer parameter: ``shape`` of ints and symbol names."""
    return TensorType(tuple(shape), fmt)


def is_kernel(op: Operation) -> bool:
    """True for a ``tessera.func`` that is a tile kernel."""
    return op.attributes.get("tile.kernel") is True


#: Each shared allocation starts at a multiple of this many bytes (TILE-MEM-2).
SMEM_BOUNDARY = 128


def shared_layout(func: Operation) -> tuple:
    """``({alloc op: byte offset}, total bytes)`` of a kernel's shared memory (TILE-MEM-2):
    the ``alloc`` ops in program order, each at the next 128-byte boundary, each taking its
    rows padded by ``pad`` elements. The tile interpreter places buffers so and the CUDA text
    carves them out of its dynamic shared memory so (LOWER-TARGET-2)."""
    offsets, top = {}, 0
    for op in func.walk():
        if op.name == _name("alloc"):
            t = op.results[0].type
            offsets[op] = top
            rows = int(np.prod(t.shape[:-1], dtype=np.int64))
            size = rows * (t.shape[-1] + op.attributes["pad"]) * t.dtype.itemsize
            top += -(-size // SMEM_BOUNDARY) * SMEM_BOUNDARY
    return offsets, top


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


def _verify_shfl(op):
    _n_operands(1)(op)
    _attr(op, "offset", int)
    if not 1 <= op.attributes["offset"] < WARP:
        raise op.emit_error(f"offset must be 1 to {WARP - 1} (a partner in the same {WARP}-lane warp), is "
                            f"{op.attributes['offset']}")
    t = op.operands[0].type
    if not isinstance(t, (ScalarType, IndexType)):
        raise op.emit_error(f"exchanges a lane value (a scalar or an index), not {t}")
    if len(op.results) != 1 or op.results[0].type != t:
        raise op.emit_error(f"gives one value of the exchanged type {t}")


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
    transpose = op.attributes.get("transpose", False)
    if not isinstance(transpose, bool):
        raise op.emit_error(f"attribute 'transpose' is a bool, is {transpose!r}")
    want = tuple(reversed(src.shape)) if transpose else src.shape
    if dst.shape != want or dst.format != src.format or transpose and src.rank != 2:
        raise op.emit_error(f"copies {src} into {dst}: the shapes{' (transposed, rank 2)' if transpose else ''} "
                            f"and formats must match")
    if "bytes" not in op.attributes:
        return
    nbytes, item = op.attributes["bytes"], src.dtype.itemsize
    _attr(op, "bytes", int, (4, 8, 16))
    row = (1 if transpose else src.shape[-1]) * item
    if nbytes < item or nbytes % item or row % nbytes:
        raise op.emit_error(f"copies {src} in pieces of {nbytes} bytes: a piece holds whole {item}-byte elements "
                            f"of one row ({row} bytes{', one element when transposing' if transpose else ''}); "
                            f"cp.async copies 4, 8 or 16 bytes (hardware.md)")


def _verify_layout(op, frag: TensorType) -> None:
    """TILE-FRAG-1: a ``layout`` is a bijection onto ``frag``'s elements for the kernel's
    lanes, and a fragment operand produced under a layout is used under the same one."""
    try:
        layout = layout_of(op.attributes)
    except ValueError as error:
        raise op.emit_error(str(error)) from None
    if layout is not None:
        problem = layout.problem(frag.shape)
        if problem:
            raise op.emit_error(f"layout {layout.attr()} {problem}")
        func = op.parent_op
        while func is not None and not is_kernel(func):
            func = func.parent_op
        lanes = func.attributes.get("launch.lanes") if func is not None else None
        if lanes is not None and lanes != layout.lanes:
            raise op.emit_error(f"layout {layout.attr()} is for {layout.lanes} lanes, the kernel has {lanes}")
    for v in op.operands:
        producer = _fragment_producer(v)
        if producer is not None and producer is not op and layout_of(producer.attributes) != layout:
            raise op.emit_error(f"uses a fragment made with layout {producer.attributes.get('layout')} under "
                                f"layout {op.attributes.get('layout')}: they must be the same")


def _fragment_producer(v: Value):
    """The fill/frag_load/mma op that made fragment ``v`` (through loop-carried values), or None."""
    for _ in range(64):
        op = v.defining_op
        if op is not None and op.name in _FRAGMENT_OPS:
            return op
        if op is not None and op.name == FOR:  # a loop result: its initial value
            v = op.operands[3 + v.index]
        elif op is None and v.block.parent_op is not None and v.block.parent_op.name == FOR and v.index > 0:
            v = v.block.parent_op.operands[2 + v.index]  # a carried block argument: its initial value
        else:
            return None
    return None


def _fragment_result(op) -> TensorType:
    if len(op.results) != 1:
        raise op.emit_error(f"makes one fragment, has {len(op.results)} result(s)")
    return _static_tensor(op, op.results[0], "its result")


def _verify_fill(op):
    _n_operands(0)(op)
    _verify_layout(op, _fragment_result(op))


def _verify_frag_load(op):
    _n_operands(1)(op)
    _verify_layout(op, _fragment_result(op))


def _verify_frag_store(op):
    _n_operands(2)(op)
    view, frag = (_static_tensor(op, v, w) for v, w in zip(op.operands, ("the view", "the fragment")))
    if view.shape != frag.shape:
        raise op.emit_error(f"stores a fragment {frag} into a view {view}: the shapes must match")
    _verify_layout(op, frag)


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
    kmajor = op.attributes.get("transpose_a", False)
    if not isinstance(kmajor, bool):
        raise op.emit_error(f"attribute 'transpose_a' is a bool, is {kmajor!r}")
    M, K = (a.shape[::-1] if kmajor else a.shape) if a.rank == 2 else (None, None)
    if a.rank != 2 or b.rank != 2 or K != b.shape[0] or c.shape != (M, b.shape[1]):
        raise op.emit_error(f"needs a {'[K, M]' if kmajor else '[M, K]'}, b [K, N], acc [M, N]; got {a}, {b}, {c}")
    _attr(op, "accum", str)
    _verify_layout(op, c)


def _verify_cast(op):
    t = op.results[0].type if len(op.results) == 1 else None
    if isinstance(t, ScalarType) and t.policy.rounding == "stochastic":
        _n_operands(2)(op)
        if not isinstance(op.operands[1].type, IndexType):
            raise op.emit_error(f"a stochastic cast takes the element's index (index) second, got {op.operands[1].type}")
        _attr(op, "seed", int)
        if not 0 <= op.attributes["seed"] < 2 ** 64:
            raise op.emit_error(f"attribute 'seed' must lie in [0, 2**64), is {op.attributes['seed']}")
    else:
        _n_operands(1)(op)


def _verify_uniform(op):
    _n_operands(1)(op)
    if not isinstance(op.operands[0].type, IndexType):
        raise op.emit_error(f"takes an element index (index), got {op.operands[0].type}")
    t = op.results[0].type if len(op.results) == 1 else None
    if not (isinstance(t, ScalarType) and t.format.name in ("f32", "f64")):
        raise op.emit_error(f"draws f32 or f64 values (NUM-RNG-5), its result is {t}")
    for name in ("seed", "stream"):
        _attr(op, name, int)
        if not 0 <= op.attributes[name] < 2 ** 64:
            raise op.emit_error(f"attribute '{name}' must lie in [0, 2**64), is {op.attributes[name]}")


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
_FRAGMENT_OPS = {_name(short) for short in ("fill", "frag_load", "mma")}

_OPS = {
    "lane_id": (_n_operands(0), False), "linear_id": (_n_operands(0), False),
    "num_lanes": (_n_operands(0), False), "tile_id": (_verify_axis, False),
    "num_tiles": (_verify_axis, False), "dim": (_n_operands(1), False),
    "constant": (_n_operands(0), False), "binary": (_verify_binary, False),
    "unary": (_verify_unary, False), "reduce": (_verify_reduce, False), "cast": (_verify_cast, False), "select": (_n_operands(3), False),
    "fma": (_n_operands(3), False),
    "shfl_xor": (_verify_shfl, True), "uniform": (_verify_uniform, False),
    "load": (lambda op: _verify_memory(op, 0), True), "store": (lambda op: _verify_memory(op, 1), True),
    "alloc": (_verify_alloc, True), "subview": (_verify_subview, False),
    "cp_async": (_verify_copy, True), "cp_async_commit": (_n_operands(0), True),
    "cp_async_wait": (_verify_wait, True), "barrier": (_n_operands(0), True),
    "fill": (_verify_fill, False), "frag_load": (_verify_frag_load, True),
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
    """``index``, or the scalar type of a format (its default policy) or of a policy (its
    rounding and overflow are what a ``cast`` into it uses)."""
    if fmt == "index":
        return INDEX_T
    if isinstance(fmt, ScalarType):
        return fmt
    return ScalarType(fmt if isinstance(fmt, Policy) else get_format(fmt))


def _layout_attr(layout) -> dict:
    """The ``layout`` attribute of a :class:`~.fragment.TVLayout` (none for cyclic)."""
    return {} if layout is None else {"layout": layout.attr()}


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

    def fma(self, x: Value, y: Value, z: Value) -> Value:
        """``x·y + z`` rounded once in the values' format (TILE-NUM-1, NUM-EW-2)."""
        return self._one("fma", (x, y, z), x.type)

    def reduce(self, x: Value, fn: str, axis: int, *, accum: str = "f32") -> Value:
        """NUM-RED-2 ``fn`` of fragment ``x`` along ``axis`` in ``accum``, rounded once into
        ``x``'s format; the axis is kept with size 1."""
        shape = list(x.type.shape)
        shape[axis] = 1
        return self._one("reduce", (x,), TensorType(tuple(shape), x.type.policy),
                         {"fn": fn, "axis": int(axis), "accum": accum})

    def cast(self, x: Value, fmt, *, index: Value | None = None, seed: int | None = None) -> Value:
        """``x`` converted into ``fmt`` (a format name, policy or ``"index"``) by TILE-NUM-3:
        GRAPH-CAST-1's rules, with the policy's rounding and overflow; a stochastic policy
        takes the element's row-major ``index`` and the ``seed`` of its random bits."""
        if index is None:
            return self._one("cast", (x,), _scalar_type(fmt))
        return self._one("cast", (x, index), _scalar_type(fmt), {"seed": int(seed)})

    def select(self, mask: Value, a: Value, b: Value) -> Value:
        return self._one("select", (mask, a, b), a.type)

    def shfl_xor(self, x: Value, offset: int) -> Value:
        """Lane ``l`` gets ``x`` of lane ``l xor offset`` of its warp (TILE-WARP-1); every
        lane of the warp must execute it."""
        return self._one("shfl_xor", (x,), x.type, {"offset": int(offset)})

    def uniform(self, index: Value, fmt: str, *, seed: int, stream: int = 0) -> Value:
        """NUM-RNG-5's uniform in ``[0, 1)`` (``fmt`` f32 or f64) of element ``index`` under
        ``RNGKey(seed, stream)`` (TILE-RNG-1)."""
        return self._one("uniform", (index,), _scalar_type(fmt), {"seed": int(seed), "stream": int(stream)})

    # memory
    def load(self, buf: Value, index) -> Value:
        """An element of ``buf``: a scalar of its format, a mask of an ``i1`` buffer, an index
        of an ``index`` buffer."""
        t = buf.type
        kind = MASK_T if t.policy is BOOL else INDEX_T if t.policy is INDEX else ScalarType(t.policy)
        return self._one("load", (buf, *map(self._index, index)), kind)

    def store(self, buf: Value, index, value: Value) -> None:
        self.op("store", (buf, *map(self._index, index), value))

    def alloc(self, shape, fmt, *, swizzle: str = "none", pad: int = 0) -> Value:
        return self._one("alloc", (), TensorType(tuple(shape), get_format(fmt)),
                         {"swizzle": swizzle, "pad": int(pad)})

    def subview(self, buf: Value, offsets, shape) -> Value:
        return self._one("subview", (buf, *map(self._index, offsets)), TensorType(tuple(shape), buf.type.policy))

    def cp_async(self, dst: Value, src: Value, *, nbytes: int | None = None, transpose: bool = False) -> None:
        """Copy ``src`` into ``dst`` asynchronously, in pieces of ``nbytes`` (default: the
        interpreter picks the largest aligned size), transposed with ``transpose``."""
        attrs = {} if nbytes is None else {"bytes": int(nbytes)}
        if transpose:
            attrs["transpose"] = True
        self.op("cp_async", (dst, src), attributes=attrs)

    def commit(self) -> None:
        self.op("cp_async_commit")

    def wait(self, pending: int = 0) -> None:
        self.op("cp_async_wait", attributes={"pending": int(pending)})

    def barrier(self) -> None:
        self.op("barrier")

    # fragments
    def fill(self, shape, fmt="f32", value: float = 0.0, *, layout=None) -> Value:
        return self._one("fill", (), TensorType(tuple(shape), get_format(fmt)),
                         {"value": float(value), **_layout_attr(layout)})

    def frag_load(self, view: Value, *, layout=None) -> Value:
        return self._one("frag_load", (view,), view.type, _layout_attr(layout))

    def frag_store(self, view: Value, frag: Value, *, layout=None) -> None:
        self.op("frag_store", (view, frag), attributes=_layout_attr(layout))

    def mma(self, a: Value, b: Value, acc: Value, *, accum: str = "f32", layout=None,
            transpose_a: bool = False) -> Value:
        """``acc + a·b`` (NUM-RED-1); with ``transpose_a``, ``a`` is given as ``[K, M]``."""
        attrs = {"accum": accum, **_layout_attr(layout)}
        if transpose_a:
            attrs["transpose_a"] = True
        return self._one("mma", (a, b, acc), acc.type, attrs)

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
