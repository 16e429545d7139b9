"""The Schedule IR dialect (``tessera.schedule``): *what* a kernel computes plus *how* it is tiled.

Schedule IR sits between Graph IR and Tile IR (docs/spec/lowering.md, SCHED-IR). A Schedule
IR function is a Graph IR function in which every op chosen for a kernel is wrapped in a
``tessera.schedule.kernel`` op:

``"tessera.schedule.kernel"(operands...) ({ ^bb0(args...): body; "tessera.schedule.yield"(r) })``
    One GPU kernel. Its region is the algorithm — Graph IR ops on the block arguments (which
    stand for the operands), optionally through ``prefetch`` ops — and ends with ``yield`` of
    the kernel's results. Its attributes are the schedule, always all present (canonical):

    ==============  =====  ==========================================================
    ``op``          str    the scheduled Graph IR op's short name (``"matmul"``)
    ``tile``        ints   the tile shape: (BM, BN, BK) for matmul and attention,
                           (rows,) for row ops, (elements,) for elementwise kernels
    ``lanes``       int    lanes (threads) per tile
    ``vectorize``   int    consecutive elements per lane access (elementwise kernels)
    ``shared``      bool   stage operand tiles in shared memory
    ``padding``     int    elements added to each shared-memory row (bank conflicts)
    ``swizzle``     str    ``"none"`` or ``"xor"`` shared-memory swizzle
    ``async_copy``  bool   global -> shared copies are cp.async (overlap load and compute)
    ``stages``      int    shared-memory buffers per operand (2 = double buffering)
    ==============  =====  ==========================================================

``"tessera.schedule.prefetch"(%x) {scope = "shared", double_buffer = true}``
    Stage ``%x`` (a block argument of the enclosing kernel) in ``scope`` memory tile by tile
    (seed 001 §4.3). The result has the operand's type and value: prefetching changes where
    data lives, never what it is.

``"tessera.schedule.yield"(values...)``
    The terminator of a kernel's region.

The dialect is closed: these three are its only ops, and the verifier rejects any other
``tessera.schedule.*`` name as an unknown op.

Executing a Schedule IR function with the Graph IR interpreter's semantics (every kernel's
region applied to its operands, prefetch the identity) gives the Graph IR function's results:
the schedule never changes a bit (SCHED-IR-2).
"""
from __future__ import annotations

from .core import Block, Operation, Region
from .registry import close_dialect, register_op

__all__ = ["DIALECT", "KERNEL", "PREFETCH", "YIELD", "SCHEDULE_ATTRS", "SCOPES", "SWIZZLES",
           "kernel_op", "prefetch_op", "yield_op", "schedule_of", "body_ops"]

DIALECT = "tessera.schedule"
KERNEL = f"{DIALECT}.kernel"
PREFETCH = f"{DIALECT}.prefetch"
YIELD = f"{DIALECT}.yield"
SCOPES = ("shared", "register")
SWIZZLES = ("none", "xor")


def _ints(v):
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(type(x) is int and x > 0 for x in v)


def _positive(v):
    return type(v) is int and v > 0


def _nonnegative(v):
    return type(v) is int and v >= 0


#: The schedule attributes of a kernel op: name -> (check, what it must be).
SCHEDULE_ATTRS = {
    "op": (lambda v: isinstance(v, str) and bool(v), "the scheduled op's name (a str)"),
    "tile": (_ints, "a list of positive ints"),
    "lanes": (_positive, "a positive int"),
    "vectorize": (_positive, "a positive int"),
    "shared": (lambda v: isinstance(v, bool), "a bool"),
    "padding": (_nonnegative, "a non-negative int"),
    "swizzle": (lambda v: v in SWIZZLES, f"one of {list(SWIZZLES)}"),
    "async_copy": (lambda v: isinstance(v, bool), "a bool"),
    "stages": (_positive, "a positive int"),
}


def _verify_kernel(op: Operation) -> None:
    for name, (check, what) in SCHEDULE_ATTRS.items():
        if name not in op.attributes or not check(op.attributes[name]):
            raise op.emit_error(f"needs attribute {name!r} = {what}, has {op.attributes.get(name)!r}")
    extra = sorted(set(op.attributes) - set(SCHEDULE_ATTRS))
    if extra:
        raise op.emit_error(f"has unknown attribute(s) {extra}", fix=f"a kernel takes {list(SCHEDULE_ATTRS)}")
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        raise op.emit_error("needs one region of one block (the algorithm)")
    block = op.regions[0].entry
    if [a.type for a in block.args] != [v.type for v in op.operands]:
        raise op.emit_error("its block arguments must have the operands' types")
    last = block.last_op
    if last is None or last.name != YIELD:
        raise op.emit_error(f"its region must end with '{YIELD}'")
    if [v.type for v in last.operands] != [r.type for r in op.results]:
        raise op.emit_error("yields values whose types differ from the kernel's result types")


def _verify_prefetch(op: Operation) -> None:
    if len(op.operands) != 1 or len(op.results) != 1 or op.results[0].type != op.operands[0].type:
        raise op.emit_error("takes one tensor and returns a value of the same type")
    if op.attributes.get("scope") not in SCOPES:
        raise op.emit_error(f"attribute 'scope' must be one of {list(SCOPES)}, is {op.attributes.get('scope')!r}")
    if not isinstance(op.attributes.get("double_buffer"), bool):
        raise op.emit_error("needs a bool attribute 'double_buffer'")
    parent = op.parent_op
    if parent is None or parent.name != KERNEL:
        raise op.emit_error(f"must be inside a '{KERNEL}' region")


def _verify_yield(op: Operation) -> None:
    parent = op.parent_op
    if parent is None or parent.name != KERNEL:
        raise op.emit_error(f"must end the region of a '{KERNEL}'")


register_op(KERNEL, verify=_verify_kernel)
register_op(PREFETCH, verify=_verify_prefetch)
register_op(YIELD, verify=_verify_yield, terminator=True)
close_dialect(DIALECT)  # any other tessera.schedule.* name is an unknown op to the verifier


def kernel_op(operands, result_types, schedule: dict, build, *, location: str | None = None) -> Operation:
    """A new ``tessera.schedule.kernel`` over ``operands``; ``build(block)`` appends the
    algorithm to ``block`` (whose arguments mirror the operands) and returns the values to
    yield. ``schedule`` holds every attribute of :data:`SCHEDULE_ATTRS`."""
    block = Block([v.type for v in operands])
    values = build(block)
    block.append(yield_op(values, location=location))
    return Operation(KERNEL, operands, result_types, dict(schedule), [Region([block])], location)


def prefetch_op(value, *, scope: str = "shared", double_buffer: bool = False,
                location: str | None = None) -> Operation:
    """A new ``tessera.schedule.prefetch`` of ``value`` (seed 001's form)."""
    return Operation(PREFETCH, (value,), (value.type,), {"scope": scope, "double_buffer": bool(double_buffer)},
                     (), location)


def yield_op(values, *, location: str | None = None) -> Operation:
    return Operation(YIELD, tuple(values), (), None, (), location)


def schedule_of(op: Operation) -> dict:
    """The schedule attributes of a kernel op, as a plain dict."""
    return {k: op.attributes[k] for k in SCHEDULE_ATTRS}


def body_ops(op: Operation) -> list:
    """The Graph IR ops of a kernel's region (prefetches and the yield left out), in order."""
    return [o for o in op.regions[0].entry if o.name not in (PREFETCH, YIELD)]
