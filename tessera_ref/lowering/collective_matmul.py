"""Collective matmul: a collective next to a GEMM cut into chunks that pipeline (LOWER-CM-1 … LOWER-CM-3).

With the directive ``schedule.collective_matmul(chunks=n)`` (a thread default, like the other
``schedule`` directives), a sharded Graph IR function is rewritten before it runs — and
``inspect_ir("schedule")`` shows the rewritten function — so that the two tensor-parallel
patterns the sharding propagation inserts become ``n`` independent steps each:

* ``matmul → reduce_scatter`` (a K-split GEMM whose pending sum is scattered): the operand
  that owns one of the result's whole dimensions is ``split`` into ``n`` chunks along it;
  chunk ``k`` is multiplied and reduce-scattered on its own; the chunks' results are
  ``concat``-ed back. Chunk ``k + 1``'s GEMM runs while chunk ``k``'s reduce-scatter is on the
  link.
* ``all_gather → matmul`` (an operand gathered only to be multiplied): the gathered operand
  is ``split`` along one of its whole, non-contracted dimensions; chunk ``k`` is gathered and
  multiplied on its own, so chunk ``k``'s GEMM runs while chunk ``k + 1`` is gathered.

The chunk dimension is the first of the result's last, second-to-last, then leading
dimensions that one operand owns alone, is whole (split over no mesh axis) in that operand
and in the collective's result, is not the scattered or gathered dimension, and has at least
two elements; ``n`` is capped at its size, chunks are as equal as possible (the first ones one
larger). A pattern with no such dimension, or whose GEMM accumulates into ``C``, rounds
stochastically (keyed by element position), or leaves another reduction pending (``concat``
would carry it out), is left as it is.

Values (LOWER-CM-2): every element of a GEMM depends only on its own row, column and the K
order, so a chunk's GEMM gives the same bits as the same elements of the whole GEMM; a
reduce-scatter folds each element's contributions in ascending rank order (NUM-RED-3) whatever
else is in its buffer, and a gather moves bits. The rewritten function's results are therefore
bit-identical to the original's.
"""
from __future__ import annotations

from ..errors import LoweringError, running_op_at
from ..ir import Operation
from ..ir.builtin import FUNC, RETURN
from ..ops.bind import bind
from ..ops.collective import all_gather, reduce_scatter
from ..ops.primitive import primitive_of
from ..ops.shape import concat, split
from ..ops.values import Trace, Tracer

__all__ = ["DIRECTIVE", "collective_matmul", "apply_directive"]

#: The ``schedule`` directive (a thread default) that turns the rewrite on: the chunk count.
DIRECTIVE = "collective_matmul"

MATMUL = "tessera.graph.matmul"
GATHER = "tessera.graph.all_gather"
SCATTER = "tessera.graph.reduce_scatter"


def _chunkable_matmul(op: Operation) -> bool:
    """A two-operand matmul whose elements do not depend on their positions' keys."""
    if op.name != MATMUL or len(op.operands) != 2 or op.attributes.get("seed") is not None:
        return False
    return getattr(op.results[0].type.policy, "rounding", None) != "stochastic"


def _owners(op: Operation) -> list:
    """``(result dim, operand index, operand dim)`` for each result dimension one operand of the
    matmul ``op`` owns alone, in the order of preference (N, M, then leading dimensions)."""
    a, b = (v.type for v in op.operands)
    rank = op.results[0].type.rank
    ta, tb = op.attributes.get("transpose_a"), op.attributes.get("transpose_b")
    out = [(rank - 1, 1, b.rank - 2 if tb else b.rank - 1), (rank - 2, 0, a.rank - 1 if ta else a.rank - 2)]
    for d in range(rank - 2):
        if b.rank == 2 and a.rank == rank:
            out.append((d, 0, d))
        elif a.rank == 2 and b.rank == rank:
            out.append((d, 1, d))
    return out


def _whole(t, dim: int) -> bool:
    lay = t.layout
    return lay is None or (not lay.padded and not lay.dims[dim])


def _sizes(n: int, chunks: int) -> tuple:
    k = min(chunks, n)
    return tuple(n // k + (1 if i < n % k else 0) for i in range(k))


def _plan(op: Operation, chunks: int):
    """``(kind, matmul, collective, result dim, operand index, operand dim, sizes)`` when ``op``
    starts a pattern this pass rewrites into ``chunks`` (>= 2) chunks, else None."""
    if op.name == MATMUL and _chunkable_matmul(op) and len(op.results[0].users) == 1:
        mm, coll = op, op.results[0].users[0]
        pending = mm.results[0].type.layout.partial if mm.results[0].type.layout is not None else ()
        if coll.name != SCATTER or coll.attributes["axis"] not in pending:
            return None
        kind, skip = "scatter", coll.attributes["dim"] % mm.results[0].type.rank
        candidates = [(rdim, i, odim, mm.operands[i].type) for rdim, i, odim in _owners(mm)]
        out = coll.results[0].type
    elif op.name == GATHER and len(op.results[0].users) == 1:
        mm, coll = op.results[0].users[0], op
        if not _chunkable_matmul(mm) or mm.operands[0] is mm.operands[1]:
            return None
        x = coll.operands[0].type
        kind, skip = "gather", x.layout.dim_of(coll.attributes["axis"])
        candidates = [(rdim, i, odim, x) for rdim, i, odim in _owners(mm) if mm.operands[i] is coll.results[0]]
        out = mm.results[0].type
    else:
        return None
    if out.layout is None or out.layout.partial:
        return None  # concat would carry out the pending reduction
    for rdim, i, odim, t in candidates:
        chunked = rdim if kind == "scatter" else odim
        if chunked != skip and _whole(t, odim) and _whole(out, rdim) and isinstance(t.shape[odim], int) \
                and t.shape[odim] >= 2:
            return (kind, mm, coll, rdim, i, odim, _sizes(t.shape[odim], chunks))
    return None


def _emit(plan, env: dict, trace: Trace):
    """The chunked steps of ``plan`` appended to ``trace``; returns the value replacing the
    pattern's last result."""
    kind, mm, coll, rdim, i, odim, sizes = plan
    prim, attrs, axis = primitive_of(mm), dict(mm.attributes), coll.attributes["axis"]
    outs = []
    if kind == "scatter":
        operands = [Tracer(env[v], trace) for v in mm.operands]
        with running_op_at(mm.location):
            parts = split(operands[i], sizes, axis=odim)
        for part in parts:
            operands[i] = part
            with running_op_at(mm.location):
                y = bind(prim, *operands, **attrs)
            with running_op_at(coll.location):
                outs.append(reduce_scatter(y, axis, coll.attributes["dim"], op=coll.attributes["op"]))
    else:
        other = Tracer(env[mm.operands[1 - i]], trace)
        with running_op_at(coll.location):
            parts = split(Tracer(env[coll.operands[0]], trace), sizes, axis=odim)
        for part in parts:
            with running_op_at(coll.location):
                g = all_gather(part, axis)
            with running_op_at(mm.location):
                outs.append(bind(prim, *([g, other] if i == 0 else [other, g]), **attrs))
    with running_op_at(coll.location if kind == "scatter" else mm.location):
        return concat(outs, axis=rdim).value


def collective_matmul(func: Operation, chunks: int) -> Operation:
    """``func`` (a ``tessera.func`` of a sharded trace) with every pattern of the module
    docstring cut into ``chunks`` pipelined steps: a new function, or ``func`` itself when no
    pattern matches. The chunked steps take the place of the pattern's last op."""
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise LoweringError(f"collective_matmul: chunks must be a positive int, got {chunks!r}",
                            fix="schedule.collective_matmul(chunks=4)")
    entry = func.regions[0].entry
    plans, skipped = {}, set()
    for op in entry if chunks >= 2 else ():
        if id(op) in skipped or id(op) in plans:
            continue
        plan = _plan(op, chunks)
        if plan is not None:
            first, last = (plan[1], plan[2]) if plan[0] == "scatter" else (plan[2], plan[1])
            skipped.add(id(first))
            plans[id(last)] = plan
    if not plans:
        return func  # (also when chunks == 1)
    trace = Trace(func.attributes["sym_name"], location=func.location)
    env = {a: t.value for a, t in zip(entry.args, trace.arguments([a.type for a in entry.args]))}
    results = []
    for op in entry:
        if op.name == RETURN:
            results = [Tracer(env[v], trace) for v in op.operands]
        elif id(op) in plans:
            last = op.results[0]
            env[last] = _emit(plans[id(op)], env, trace)
        elif id(op) not in skipped:
            trace.block.append(op.clone(env))
    return trace.finish(results).body.first_op


def apply_directive(func: Operation, directives) -> Operation:
    """``func`` rewritten by :func:`collective_matmul` when ``directives`` (the ``schedule``
    directives in force) ask for it, else ``func``."""
    chunks = (directives or {}).get(DIRECTIVE)
    if chunks is None or chunks == 1 or func.name != FUNC:
        return func
    return collective_matmul(func, chunks)
