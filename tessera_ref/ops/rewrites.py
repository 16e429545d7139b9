"""Graph-level rewrites (GRAPH-RW-1 to GRAPH-RW-4), run on every traced module by :func:`optimize`.

Every rewrite here keeps every bit of every result (the interpreter gives the same arrays
before and after), except :class:`FuseAttention`, which changes rounding and therefore only
fires when the policies of all the tensors involved say ``reduction="reassociate"``:

- GRAPH-RW-1 :class:`FoldTransposePair` — ``transpose(transpose(x, p), q)`` becomes one
  transpose with the composed permutation, or ``x`` itself when that is the identity;
- GRAPH-RW-2 :class:`FoldTransposeIntoMatmul` — a matmul operand that is a transpose of
  its last two axes is replaced by the transpose's input and the op's ``transpose_a`` /
  ``transpose_b`` flag toggled (same products, same K order: same bits);
- GRAPH-RW-3 :class:`FoldConstants` — an op whose operands are all constants and whose
  results have at most :data:`FOLD_LIMIT` elements each is replaced by constants holding
  its results, computed by its own ``impl`` (the bits the interpreter would compute);
- GRAPH-RW-4 :class:`FuseAttention` — ``matmul(softmax(matmul(q, k, transpose_b=True),
  axis=-1), v)`` becomes ``flash_attention(q, k, v, scale=1.0)`` when allowed (above); the
  blocked online softmax rounds differently from the unfused graph;
- then common-subexpression and dead-code elimination (:mod:`tessera_ref.ir.passes`).
"""
from __future__ import annotations

from ..ir import (CommonSubexpressionElimination, DeadCodeElimination, Module, Operation, Pass,
                  PassManager, RewritePattern, TensorType, apply_patterns_greedily)
from ..errors import TesseraError
from ..ir.types import ElementKind
from .primitive import Call, primitive, primitive_of

__all__ = ["optimize", "GraphRewrites", "FoldTransposePair", "FoldTransposeIntoMatmul", "FoldConstants",
           "FuseAttention", "FOLD_LIMIT", "PATTERNS"]

#: Largest result (in elements) that constant folding writes into the IR.
FOLD_LIMIT = 4096

_TRANSPOSE = "tessera.graph.transpose"
_MATMUL = "tessera.graph.matmul"
_SOFTMAX = "tessera.graph.softmax"
_CONSTANT = "tessera.graph.constant"


def _producer(value, name: str) -> Operation | None:
    op = value.defining_op
    return op if op is not None and op.name == name else None


def _swaps_last_two(perm) -> bool:
    n = len(perm)
    return n >= 2 and tuple(perm) == tuple(range(n - 2)) + (n - 1, n - 2)


class FoldTransposePair(RewritePattern):
    """GRAPH-RW-1 (see the module docstring)."""

    root = _TRANSPOSE

    def match_and_rewrite(self, op, rewriter) -> bool:
        inner = _producer(op.operands[0], _TRANSPOSE)
        if inner is None:
            return False
        p, q = inner.attributes["perm"], op.attributes["perm"]
        composed = tuple(p[j] for j in q)
        source = inner.operands[0]
        if composed == tuple(range(len(composed))):
            rewriter.replace_op(op, [source])
        else:
            new = rewriter.create(_TRANSPOSE, [source], [op.result.type], {"perm": composed}, location=op.location)
            rewriter.replace_op(op, new)
        return True


class FoldTransposeIntoMatmul(RewritePattern):
    """GRAPH-RW-2 (see the module docstring)."""

    root = _MATMUL

    def match_and_rewrite(self, op, rewriter) -> bool:
        for index, flag in ((0, "transpose_a"), (1, "transpose_b")):
            transpose = _producer(op.operands[index], _TRANSPOSE)
            if transpose is None or not _swaps_last_two(transpose.attributes["perm"]):
                continue
            operands = list(op.operands)
            operands[index] = transpose.operands[0]
            attrs = dict(op.attributes)
            if attrs.get(flag, False):
                attrs.pop(flag)
            else:
                attrs[flag] = True
            attrs = primitive_of(op).check_attrs(attrs)
            new = rewriter.create(_MATMUL, operands, [r.type for r in op.results], attrs, location=op.location)
            rewriter.replace_op(op, new)
            return True
        return False


class FoldConstants(RewritePattern):
    """GRAPH-RW-3 (see the module docstring)."""

    def match_and_rewrite(self, op, rewriter) -> bool:
        prim = primitive_of(op)
        if prim is None or op.name == _CONSTANT or not op.operands:
            return False
        if not all(v.defining_op is not None and v.defining_op.name == _CONSTANT for v in op.operands):
            return False
        types = [r.type for r in op.results]
        if not all(t.is_static and _numel(t) <= FOLD_LIMIT for t in types):
            return False
        from .constant import constant_attrs
        from .values import Array
        inputs = [v.defining_op.attributes["value"].to_array() for v in op.operands]
        call = Call(prim, op.attributes, tuple(v.type for v in op.operands), tuple(types), op.location)
        constants = [rewriter.create(_CONSTANT, [], [t], constant_attrs(Array(value, t)), location=op.location)
                     for value, t in zip(prim.run(call, *inputs), types)]
        rewriter.replace_op(op, [c.result for c in constants])
        return True


def _numel(t: TensorType) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


def _reassociation_allowed(*values) -> bool:
    for v in values:
        policy = v.type.policy
        if isinstance(policy, ElementKind) or policy.reduction != "reassociate":
            return False
    return True


class FuseAttention(RewritePattern):
    """GRAPH-RW-4 (see the module docstring)."""

    root = _MATMUL

    def match_and_rewrite(self, op, rewriter) -> bool:
        if len(op.operands) != 2 or op.attributes.get("transpose_a") or op.attributes.get("transpose_b"):
            return False
        softmax = _producer(op.operands[0], _SOFTMAX)
        if softmax is None or len(softmax.result.users) != 1:
            return False
        scores = softmax.operands[0]
        if softmax.attributes.get("axis", -1) % scores.type.rank != scores.type.rank - 1:
            return False
        qk = _producer(scores, _MATMUL)
        if qk is None or len(qk.result.users) != 1 or len(qk.operands) != 2:
            return False
        if qk.attributes.get("transpose_a") or not qk.attributes.get("transpose_b"):
            return False
        q, k = qk.operands
        v = op.operands[1]
        if not _reassociation_allowed(q, k, v, scores, softmax.result, op.result):
            return False
        prim = primitive("flash_attention")
        attrs = prim.check_attrs({"scale": 1.0})
        try:
            (result_type,) = prim.infer_types(attrs, (q.type, k.type, v.type))
        except TesseraError:  # shapes flash_attention does not take: leave the graph as it is
            return False
        if result_type != op.result.type:
            return False
        new = rewriter.create(prim.ir_name, [q, k, v], [result_type], attrs, location=op.location)
        rewriter.replace_op(op, new)
        return True


#: The patterns :func:`optimize` applies, in priority order.
PATTERNS = (FoldTransposePair, FoldTransposeIntoMatmul, FoldConstants, FuseAttention)


class GraphRewrites(Pass):
    """The patterns of :data:`PATTERNS`, to a fixpoint (counts in ``statistics``)."""

    name = "graph-rewrites"

    def run(self, module: Module) -> None:
        self.statistics["patterns applied"] += apply_patterns_greedily(module, [p() for p in PATTERNS])


def optimize(module: Module):
    """Rewrite ``module`` in place (GRAPH-RW-1..4, then CSE and DCE); returns the pass report."""
    return PassManager([GraphRewrites(), CommonSubexpressionElimination(), DeadCodeElimination()]).run(module)
