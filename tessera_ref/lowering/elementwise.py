"""The elementwise kernel family: ``add`` ``sub`` ``mul`` ``div`` ``fma`` ``maximum``
``minimum`` ``neg`` ``abs``, the NUM-MATH functions (``exp`` ``expm1`` ``log`` ``sqrt``
``rsqrt`` ``tanh`` ``erf`` ``erfc`` ``sigmoid`` ``silu`` ``gelu`` ``sin`` ``cos`` ``pow``), the
comparisons, ``logical_and`` ``logical_or`` ``logical_not``, ``where`` and ``cast`` on
broadcast operands, vectorized.

Its schedule is the tile (lanes × vectorize,), from the ``lanes`` and ``vectorize``
directives (the only ones it honours); default 128 lanes, vectorize 1.

The result is viewed as a flat vector of ``n`` elements (row-major; one for a 0-d result),
each operand as the flat vector of its own elements: operands broadcast NumPy-style to the
result (LOWER-EW-2) — a 0-d scalar such as the ``2.0`` of ``x * 2.0``, a ``[E]`` bias, a
``[B, S, 1]`` row statistic, size-1 axes anywhere — and element ``i`` reads each operand at
its broadcast position (:func:`~.plan.broadcast_index`: ``i // V`` for the row statistic,
``i mod E`` for the bias, 0 for a scalar), computed once per element and operand shape. A tile of
``lanes`` lanes covers ``lanes · vectorize`` consecutive elements; lane ``t`` of tile ``g``
handles elements ``g·lanes·v + j·lanes + t`` for ``j = 0 … v−1`` (LOWER-EW-1). Each of the
``v`` accesses is coalesced (consecutive lanes, consecutive elements): Tile IR has no vector
types, so ``schedule.vectorize(v)`` is lowered as ``v`` elements per lane — the CUDA
emitter's concern is the 16-byte instruction. Each element is loaded, converted into accum,
combined by one IEEE operation — or given to the Tile IR's NUM-MATH ``unary``/``binary``
function (LOWER-EW-3), f64 inside rounded once into accum, the one definition the Graph IR,
the row kernels' ``exp`` and the device header share — rounded once into storage and stored:
the Graph IR's bits.

Comparisons, masks and ``where`` (LOWER-EW-4): a comparison converts its operands exactly into
accum (``index`` values compare as loaded) and gives a mask (``binary`` ``eq`` … ``ge``); ``logical_*`` combine masks; ``i1``
operands and results are buffers of masks; ``where`` is a ``select`` of the stored values (no
rounding, NaN payloads kept); ``fma`` is the Tile IR ``fma`` in accum (one rounding, NUM-EW-2).

A fused chain (LOWER-FUSE-1, built by :mod:`.graph_to_schedule`) is one kernel: per
element the chain's outside operands are loaded once, each op is its one IEEE operation in
accum rounded once into storage (with its policy's rounding — ``rne`` ``rtz`` ``rup``
``rdown`` ``stochastic`` — and overflow) — the value the unfused kernel would have stored — and
converted back into accum (exactly) for the ops that use it, in registers; the results the
program uses after the chain are stored. So the bits are the unfused kernels' (no
contraction, no skipped rounding), and the HBM traffic of the intermediates is gone.

A ``cast`` between the tile formats (f64 f32 f16 bf16 fp8_e4m3 fp8_e5m2; LOWER-CAST-1) is one
tile ``cast`` of the loaded source value into the target policy — GRAPH-CAST-1's one
conversion with its rounding (``rne`` ``rtz`` ``rup`` ``rdown``, or ``stochastic`` with the
op's ``seed`` and the element's flat index, the graph's key and index) and overflow, no
accum step — alone or in a chain. Casts to or from ``i1``/``index`` are not lowered (a
LoweringError: the op runs in the Graph IR interpreter).

Cost (LOWER-COST-1): no shared memory; HBM every operand element read (one per result
element, the kernel's operands) and every result element written, each in its format; a
nominal 1 FLOP per result element and op.
"""
from __future__ import annotations

import math

from ..errors import LoweringError
from ..ir import schedule as S
from ..ir import tile as T
from ..ir.types import BOOL, INDEX, ElementKind
from ..ops import primitive
from .family import KernelCost, KernelFamily, kernel_seconds, register_family
from .plan import SUPPORTED_STORAGE, KernelPlan, broadcast_index, broadcasts_to, check_nonempty, check_policy

__all__ = ["FAMILY", "lower_elementwise"]

#: Graph IR op -> its Tile IR ``binary`` / ``unary`` fn in accum: one IEEE operation
#: (GRAPH-EW-1, ``sqrt``) or a NUM-MATH function (LOWER-EW-3; ``gelu`` by its ``approximate``)
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "max", "minimum": "min",
           "pow": "pow"}
_UNARY = {"neg": "neg", "abs": "abs", "sqrt": "sqrt", "exp": "exp", "expm1": "expm1", "log": "log", "sin": "sin",
          "cos": "cos", "tanh": "tanh", "erf": "erf", "erfc": "erfc", "sigmoid": "sigmoid", "silu": "silu",
          "rsqrt": "rsqrt", "gelu": "gelu"}
#: Graph IR comparisons (GRAPH-EW-4) and logic (GRAPH-EW-5) -> the Tile IR fn giving a mask (LOWER-EW-4)
_COMPARE = {"equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le", "greater": "gt",
            "greater_equal": "ge"}
_LOGIC = {"logical_and": "and", "logical_or": "or", "logical_not": "not"}


def _compute(kb, op, short: str, vals: list):
    """The Tile IR value of ``op`` on its operands ``vals`` in accum (rounded once into accum)."""
    if short in _BINARY:
        return kb.binary(_BINARY[short], *vals)
    if short == "fma":
        return kb.fma(*vals)
    fn = "gelu_tanh" if short == "gelu" and op.attributes["approximate"] == "tanh" else _UNARY[short]
    return kb.unary(fn, vals[0])


def _accum(op):
    """The accum format name an elementwise op computes in (its operands' for a comparison),
    ``None`` for the ops that compute nothing (``cast``, ``where``, logic): a LoweringError
    unless the tile lowering takes the op (static operands that broadcast to the result's
    shape, LOWER-EW-2; one plain policy, or ``i1`` masks; a cast by :func:`_cast_target`)."""
    short = op.name.rsplit(".", 1)[-1]
    out = op.results[0].type
    if not all(broadcasts_to(v.type.shape, out.shape) for v in (*op.operands, *op.results)):
        raise LoweringError(f"{short}: the tile lowering takes static shapes that broadcast to the result's "
                            f"{list(out.shape)}, got {', '.join(str(v.type) for v in op.operands)}",
                            location=op.location, fix="give the operands static shapes (or run the op in the "
                                                      "Graph IR interpreter)")
    check_nonempty(op)
    if short == "cast":
        _cast_target(op)
        return None
    if short in _LOGIC:
        return None
    values = op.operands[1:] if short == "where" else op.operands
    if short in _COMPARE and all(v.type.policy is INDEX for v in values):
        return "index"  # index values compare as they are
    kinds = [v.type for v in values if isinstance(v.type.policy, ElementKind) and v.type.policy is not BOOL]
    if kinds or short != "where" and any(v.type.policy is BOOL for v in values):
        raise LoweringError(f"{short}: the tile lowering takes {'/'.join(SUPPORTED_STORAGE)} values"
                            f"{' or i1 masks' if short == 'where' else ''}, not {(kinds or [values[0].type])[0]}",
                            location=op.location, fix="run this op in the Graph IR interpreter")
    if short == "where":
        if values[0].type.policy is not BOOL:
            check_policy(op, *(v.type for v in values), rounding=T.CAST_ROUNDING, overflow=("native", "saturate"))
        return None
    types = tuple(v.type for v in op.operands) if short in _COMPARE else ()
    return check_policy(op, *types, rounding=T.CAST_ROUNDING, overflow=("native", "saturate"))[1]


def _cast_target(op):
    """The target policy of a cast the tile lowering takes (LOWER-CAST-1), else a LoweringError."""
    src, dst = op.operands[0].type, op.results[0].type
    kinds = [t for t in (src, dst) if isinstance(t.policy, ElementKind) or t.policy.storage.name not in SUPPORTED_STORAGE]
    if kinds:
        raise LoweringError(f"cast {src} -> {dst}: the tile lowering casts between "
                            f"{'/'.join(SUPPORTED_STORAGE)} values, not {kinds[0]}", location=op.location,
                            fix="run this cast in the Graph IR interpreter")
    return dst.policy


def _storage(v) -> str:
    """The format name of ``v``'s elements in memory (``"i1"`` for a mask, ``"index"``)."""
    policy = v.type.policy
    return policy.name if isinstance(policy, ElementKind) else policy.storage.name


def lower_elementwise(kop, name: str) -> KernelPlan:
    """The tile kernel of an elementwise schedule kernel — one op or a fused chain (see the
    module docstring)."""
    ops = S.body_ops(kop)
    accums = [_accum(op) for op in ops]
    block = kop.regions[0].entry
    inputs, outputs = list(block.args), list(block.last_op.operands)
    shape = ops[-1].results[0].type.shape
    n = math.prod(shape)
    lanes, v = kop.attributes["lanes"], kop.attributes["vectorize"]
    sizes = [math.prod(x.type.shape) for x in inputs]  # a 0-d scalar is a buffer of one element
    names = [chr(ord("a") + i) if i < 24 else f"in{i}" for i in range(len(inputs))]
    params = [(p, T.buffer((m,), _storage(x))) for p, m, x in zip(names, sizes, inputs)]
    params += [(f"y{i or ''}", T.buffer((n,), _storage(x)), True) for i, x in enumerate(outputs)]
    kb = T.KernelBuilder(name, params, location=kop.location)
    ins, ys = kb.params[:len(inputs)], kb.params[len(inputs):]
    base = kb.binary("add", kb.binary("mul", kb.tile_id(0), lanes * v), kb.lane_id())

    def element(idx):
        at = {}  # operand shape -> its flat index (LOWER-EW-2), computed once per element

        def index(x):
            key = tuple(x.type.shape)
            if key not in at:
                at[key] = broadcast_index(kb, idx, shape, key)
            return at[key]
        stored = {x: kb.load(b, [index(x)]) for x, b in zip(inputs, ins)}  # storage values
        exact = {}  # (value, accum) -> the value in accum (converting a storage value into accum is exact)

        def value(x, accum):
            if (x, accum) not in exact:
                exact[x, accum] = stored[x] if _storage(x) == accum else kb.cast(stored[x], accum)
            return exact[x, accum]
        for op, accum in zip(ops, accums):
            kb.at(op.location)
            short, result = op.name.rsplit(".", 1)[-1], op.results[0]
            if short in _LOGIC:  # masks in, a mask out (LOWER-EW-4)
                masks = [stored[x] for x in op.operands]
                fn = _LOGIC[short]
                stored[result] = kb.unary(fn, *masks) if fn == "not" else kb.binary(fn, *masks)
                continue
            if short == "where":  # the stored value of a or b, bit for bit (LOWER-EW-4)
                stored[result] = kb.select(*(stored[x] for x in op.operands))
                continue
            if short in _COMPARE:  # the operands in accum (exact), compared (LOWER-EW-4)
                stored[result] = kb.binary(_COMPARE[short], *(value(x, accum) for x in op.operands))
                continue
            policy = result.type.policy  # rounded once with its rounding and overflow, as if stored
            keyed = {"index": idx, "seed": op.attributes["seed"]} if policy.rounding == "stochastic" else {}
            if short == "cast":  # one conversion of the stored source into the target policy
                stored[result] = kb.cast(stored[op.operands[0]], policy, **keyed)
                continue
            r = _compute(kb, op, short, [value(x, accum) for x in op.operands])
            as_is = _storage(result) == accum and policy.overflow == "native"  # the accum value is the stored one
            stored[result] = r if as_is else kb.cast(r, policy, **keyed)
        kb.at(kop.location)
        for y, x in zip(ys, outputs):
            kb.store(y, [idx], stored[x])
        return []

    for j in range(v):
        idx = kb.binary("add", base, j * lanes) if j else base
        kb.if_(kb.binary("lt", idx, n), then=lambda idx=idx: element(idx))
    func = kb.finish().body.first_op
    return KernelPlan(func.detach(), (-(-n // (lanes * v)),), lanes, [(m,) for m in sizes], [(n,)] * len(outputs))


def _fit(op, s: dict) -> dict:
    return {"tile": [s["lanes"] * s["vectorize"]]}


def _cost(kop, s: dict, preset) -> KernelCost:
    t = kop.results[0].type
    n_out = math.prod(t.shape)
    hbm = sum(n_out * v.type.dtype.itemsize for v in (*kop.operands, *kop.results))
    flops = len(S.body_ops(kop)) * n_out
    tiles = -(-n_out // (s["lanes"] * s["vectorize"]))
    fmt = next((_storage(v) for v in (*kop.results, *kop.operands) if not isinstance(v.type.policy, ElementKind)),
               "f32")
    return KernelCost(0, hbm, flops, tiles, kernel_seconds(flops, hbm, tiles, False, fmt, preset))


FAMILY = KernelFamily(
    "elementwise",
    defaults=dict(tile=[128], lanes=128, vectorize=1, shared=False, padding=0, swizzle="none",
                  async_copy=False, stages=1),
    uses=("lanes", "vectorize"), fit=_fit, template=lower_elementwise, cost=_cost, staged=False,
    scope="tile formats, i1 masks, index comparisons; static operands that broadcast to the result's shape", fuses=True)
register_family(FAMILY, [primitive(name) for name in (*_BINARY, *_UNARY, "fma", *_COMPARE, *_LOGIC, "where",
                                                      "cast")])
