"""Graph IR -> Schedule IR: wrap every op that has a tile lowering in a scheduled kernel.

Each Graph IR op of a kernel *family* becomes one ``tessera.schedule.kernel`` (see
:mod:`tessera_ref.ir.schedule`) whose region applies the op to the block arguments and whose
attributes are the schedule: the family's defaults, overridden by the user's directives
(``schedule.tile((128, 128, 32))`` and friends, :mod:`tessera_ref.frontend.schedule`), then
*fitted* to the op's shapes (SCHED-FIT-1). Other ops are copied unchanged (the Tile lowering
reports them). An op's family is its primitive's ``lower`` rule (the registry, DESIGN §5);
the families (LOWER-FAMILY-1):

- ``matmul`` — ``matmul`` (with or without ``C``; batch axes broadcast, ``transpose_a`` /
  ``transpose_b``), tile (BM, BN, BK) over the output matrix ``M × N`` and the contraction
  ``K`` of :func:`.tile_matmul.matmul_dims` (the transposes applied);
- ``rows`` — ``sum``/``mean``/``max``/``min`` over contiguous axes, ``softmax``,
  ``layernorm_safe``, ``rmsnorm_safe``: one warp (32 lanes) per row, tile (rows per tile,);
- ``elementwise`` — same-shape ``add``/``sub``/``mul``/``div``/``maximum``/``minimum``/
  ``neg``/``abs``, tile (lanes × vectorize,);
- ``attention`` — ``flash_attention``, tile (Br, Bc, D) with ``Bc`` the op's ``block_k``.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..ir import Block, Module, Operation
from ..ir import schedule as S
from ..ir.builtin import FUNC, func_op
from ..ops.primitive import PRIMITIVES, primitive_of
from .tile_matmul import matmul_dims

__all__ = ["DEFAULTS", "family_of", "lowerable_ops", "fit_schedule", "graph_to_schedule"]

#: The default schedule of each family (every attribute of SCHEDULE_ATTRS but ``op``).
DEFAULTS = {
    "matmul": dict(tile=[64, 64, 32], lanes=128, vectorize=1, shared=True, padding=0, swizzle="none",
                   async_copy=True, stages=2),
    "rows": dict(tile=[4], lanes=128, vectorize=1, shared=False, padding=0, swizzle="none",
                 async_copy=False, stages=1),
    "elementwise": dict(tile=[128], lanes=128, vectorize=1, shared=False, padding=0, swizzle="none",
                        async_copy=False, stages=1),
    "attention": dict(tile=[64, 64, 64], lanes=128, vectorize=1, shared=True, padding=0, swizzle="none",
                      async_copy=True, stages=2),
}


#: The directives each family takes; the others keep the family's defaults.
_USES = {
    "matmul": ("tile", "lanes", "shared", "padding", "swizzle", "async_copy", "stages"),
    "attention": ("tile", "lanes", "padding", "async_copy", "stages"),  # always shared, never swizzled
    "rows": ("tile",),
    "elementwise": ("lanes", "vectorize"),
}


def family_of(op: Operation) -> str | None:
    """The kernel family of a Graph IR op — its primitive's ``lower`` rule — or ``None``
    when it has no tile lowering."""
    prim = primitive_of(op)
    return prim.lower if prim is not None else None


def lowerable_ops() -> list:
    """The short names of the primitives with a tile lowering."""
    return sorted(name for name, prim in PRIMITIVES.items() if prim.lower)


def _fit(size: int, want: int) -> int:
    """The largest tile size <= ``want`` that divides ``size`` (SCHED-FIT-1)."""
    want = max(1, min(want, size))
    while size % want:
        want -= 1
    return want


def _rows(op: Operation) -> int:
    """How many independent rows a row-family op reduces or normalizes: the product of the
    sizes of the axes it does not work along (an empty reduced axis still leaves these rows,
    each reduced to the identity)."""
    shape = op.operands[0].type.shape
    axes = op.attributes["axis"]
    axes = {a % len(shape) for a in ((axes,) if isinstance(axes, int) else axes)}
    total = 1
    for i, d in enumerate(shape):
        if i not in axes:
            total *= d
    return total


def fit_schedule(op: Operation, directives: dict | None = None) -> dict:
    """The full schedule of ``op``: family defaults, then ``directives``, fitted to the shapes.

    Fitting (SCHED-FIT-1) shrinks each tile size to the largest divisor of the dimension it
    tiles that is not above the requested size; ``stages`` becomes 1 without ``shared``;
    row kernels get 32 lanes per row. A directive the family does not use (``_USES``) is
    ignored.
    """
    family = family_of(op)
    if family is None:
        raise LoweringError(f"'{op.name}' has no tile lowering", location=op.location,
                            fix=f"kernels exist for {', '.join(lowerable_ops())}")
    s = dict(DEFAULTS[family])
    for key, value in (directives or {}).items():
        if key not in _USES[family]:
            continue  # a directive for another family
        if key == "tile":
            value = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
            if len(value) != len(s["tile"]):
                continue  # a tile shape for another family
        s[key] = value
    if family == "matmul":
        _, m, n, k = matmul_dims(op)
        s["tile"] = [_fit(m, s["tile"][0]), _fit(n, s["tile"][1]), _fit(k, s["tile"][2])]
    elif family == "attention":
        q = op.operands[0].type.shape
        s["tile"] = [_fit(q[-2], s["tile"][0]), op.attributes["block_k"], q[-1]]  # Bc is the op's block_k
    elif family == "rows":
        s["tile"] = [_fit(_rows(op), s["tile"][0])]
        s["lanes"] = 32 * s["tile"][0]
    else:
        s["tile"] = [s["lanes"] * s["vectorize"]]
    if not s["shared"]:
        s["stages"], s["async_copy"] = 1, False
    return {"op": op.name.rsplit(".", 1)[-1], **{k: s[k] for k in S.SCHEDULE_ATTRS if k != "op"}}


def _kernel(op: Operation, mapping: dict, directives: dict | None) -> Operation:
    schedule = fit_schedule(op, directives)
    staged = schedule["shared"] and family_of(op) in ("matmul", "attention")

    def build(block: Block):
        args = list(block.args)
        if staged:
            for i, arg in enumerate(args):
                p = block.append(S.prefetch_op(arg, double_buffer=schedule["stages"] >= 2, location=op.location))
                args[i] = p.results[0]
        inner = block.append(Operation(op.name, args, [r.type for r in op.results], op.attributes, (),
                                       op.location))
        return inner.results

    return S.kernel_op([mapping.get(v, v) for v in op.operands], [r.type for r in op.results], schedule,
                       build, location=op.location)


def graph_to_schedule(program, directives: dict | None = None, *, per_op: dict | None = None) -> Module:
    """The Schedule IR module of a Graph IR module (or one ``tessera.func``).

    ``directives`` apply to every kernel (each family takes the ones it uses); ``per_op``
    maps an op's position in the function body (0-based) to directives for that op only.
    """
    funcs = [program] if isinstance(program, Operation) and program.name == FUNC else \
        [op for op in program.body if op.name == FUNC]
    module = Module()
    for func in funcs:
        sig = func.attributes["function_type"]
        new = func_op(func.attributes["sym_name"], sig.inputs, sig.results, location=func.location)
        mapping = dict(zip(func.regions[0].entry.args, new.regions[0].entry.args))
        body = new.regions[0].entry
        for index, op in enumerate(func.regions[0].entry):
            if family_of(op) is not None:
                extra = {**(directives or {}), **((per_op or {}).get(index, {}))}
                kop = _kernel(op, mapping, extra)
                body.append(kop)
                for old, res in zip(op.results, kop.results):
                    mapping[old] = res
            else:
                body.append(op.clone(mapping))
        module.body.append(new)
    return module

