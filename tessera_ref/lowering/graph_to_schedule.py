"""Graph IR -> Schedule IR: wrap every op that has a tile lowering in a scheduled kernel.

Each Graph IR op of a kernel family (its primitive's ``kernel_family``, :mod:`.family`)
becomes one ``tessera.schedule.kernel`` (see :mod:`tessera_ref.ir.schedule`) whose region
applies the op to the block arguments and whose attributes are the schedule: the family's
defaults, overridden by the user's directives the family honours
(``schedule.tile((128, 128, 32))`` and friends, :mod:`tessera_ref.frontend.schedule`), then
*fitted* to the op's shapes by the family (SCHED-FIT-1). Other ops are copied unchanged (the
Tile lowering reports them). The families (LOWER-FAMILY-1) are :mod:`.matmul`, :mod:`.rows`,
:mod:`.elementwise` and :mod:`.attention`.

Chains of a fusing family's ops (``KernelFamily.fuses``: the elementwise ops) become one
kernel (LOWER-FUSE-1): consecutive ops of the function body, each of the chain's result
shape with static operands that broadcast to it (LOWER-EW-2) (an op that uses nothing the chain computed joins
too: the kernel then has one more result); constants between them are emitted before the
kernel. The kernel's operands are
the values the chain uses from outside, in order of first use; its results the chain's
values used after it (the last op's always). Its schedule is the last op's, with the
directives of the first op's position.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..ir import Block, Module, Operation
from ..ir import schedule as S
from ..ir.builtin import FUNC, func_op
from .collective_matmul import apply_directive
from .family import describe_families, family_of
from .plan import broadcasts_to

__all__ = ["fit_schedule", "graph_to_schedule"]


def fit_schedule(op: Operation, directives: dict | None = None) -> dict:
    """The full schedule of ``op``: family defaults, then ``directives``, fitted to the shapes.

    Fitting (SCHED-FIT-1) is the family's: each tile size becomes the largest divisor of the
    dimension it tiles that is not above the requested size (row kernels also get 32 lanes
    per row); then ``stages`` becomes 1 without ``shared``. A directive the family does not
    honour (``KernelFamily.uses``), or a tile of another length than the family's, is
    ignored.
    """
    family = family_of(op)
    if family is None:
        raise LoweringError(f"'{op.name}' has no tile lowering", location=op.location,
                            fix=f"kernels exist for {describe_families()}")
    s = dict(family.defaults)
    for key, value in (directives or {}).items():
        if key not in family.uses:
            continue  # a directive for another family
        if key == "tile":
            value = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
            if len(value) != len(s["tile"]):
                continue  # a tile shape for another family
        s[key] = value
    s.update(family.fit(op, s))
    if not s["shared"]:
        s["stages"], s["async_copy"] = 1, False
    return {"op": op.name.rsplit(".", 1)[-1], **{k: s[k] for k in S.SCHEDULE_ATTRS if k != "op"}}


def _kernel(op: Operation, mapping: dict, directives: dict | None) -> Operation:
    """The kernel of one op; ``mapping`` is extended with its results."""
    schedule = fit_schedule(op, directives)
    staged = schedule["shared"] and family_of(op).staged

    def build(block: Block):
        args = list(block.args)
        if staged:
            for i, arg in enumerate(args):
                p = block.append(S.prefetch_op(arg, double_buffer=schedule["stages"] >= 2, location=op.location))
                args[i] = p.results[0]
        inner = block.append(Operation(op.name, args, [r.type for r in op.results], op.attributes, (),
                                       op.location))
        return inner.results

    kop = S.kernel_op([mapping.get(v, v) for v in op.operands], [r.type for r in op.results], schedule,
                      build, location=op.location)
    mapping.update(zip(op.results, kop.results))
    return kop


def _chain_shape(op: Operation):
    """The result shape of ``op`` if it can be part of a fused chain (a fusing family's op
    with one non-empty static result and static operands that broadcast to its shape), else None."""
    family = family_of(op)
    if family is None or not family.fuses or len(op.results) != 1:
        return None
    shape = op.results[0].type.shape
    if 0 in shape or not all(broadcasts_to(v.type.shape, shape) for v in (*op.operands, op.results[0])):
        return None
    return shape


def _fused_kernel(chain: list, mapping: dict, directives: dict | None) -> Operation:
    """One kernel computing the ops of ``chain`` (see the module docstring)."""
    members = set(chain)
    inputs = []
    for op in chain:
        for v in op.operands:
            if v.defining_op not in members and v not in inputs:
                inputs.append(v)
    outputs = [op.results[0] for op in chain
               if op is chain[-1] or any(u not in members for u in op.results[0].users)]
    schedule = fit_schedule(chain[-1], directives)
    schedule["op"] = "+".join(op.name.rsplit(".", 1)[-1] for op in chain)

    def build(block: Block):
        inner = dict(zip(inputs, block.args))
        for op in chain:
            block.append(op.clone(inner))
        return [inner[v] for v in outputs]

    kop = S.kernel_op([mapping.get(v, v) for v in inputs], [v.type for v in outputs], schedule, build,
                      location=chain[0].location)
    mapping.update(zip(outputs, kop.results))
    return kop


def graph_to_schedule(program, directives: dict | None = None, *, per_op: dict | None = None) -> Module:
    """The Schedule IR module of a Graph IR module (or one ``tessera.func``).

    ``directives`` apply to every kernel (each family takes the ones it uses); ``per_op``
    maps an op's position in the function body (0-based) to directives for that op only.
    A ``collective_matmul`` directive first rewrites sharded functions (LOWER-CM-1).
    """
    funcs = [program] if isinstance(program, Operation) and program.name == FUNC else \
        [op for op in program.body if op.name == FUNC]
    module = Module()
    for func in funcs:
        func = apply_directive(func, directives)
        sig = func.attributes["function_type"]
        new = func_op(func.attributes["sym_name"], sig.inputs, sig.results, location=func.location)
        mapping = dict(zip(func.regions[0].entry.args, new.regions[0].entry.args))
        body = new.regions[0].entry
        chain, start = [], 0

        def extra(index):
            return {**(directives or {}), **((per_op or {}).get(index, {}))}

        def flush():
            if len(chain) > 1:
                body.append(_fused_kernel(chain, mapping, extra(start)))
            elif chain:
                body.append(_kernel(chain[0], mapping, extra(start)))
            chain.clear()

        for index, op in enumerate(func.regions[0].entry):
            t = _chain_shape(op)
            if chain and t == chain[-1].results[0].type.shape:
                chain.append(op)
            elif chain and not op.operands and family_of(op) is None:
                body.append(op.clone(mapping))  # a constant inside a chain: computed before its kernel
            else:
                flush()
                if t is not None:
                    chain.append(op)
                    start = index
                elif family_of(op) is not None:
                    body.append(_kernel(op, mapping, extra(index)))
                else:
                    body.append(op.clone(mapping))
        flush()
        module.body.append(new)
    return module

