"""The IR infrastructure shared by every Tessera IR level (Graph, Schedule, Tile, Target).

Plain Python objects with MLIR's names and concepts:

- :mod:`~tessera_ref.ir.core`: :class:`Value`, :class:`Operation`, :class:`Block`,
  :class:`Region`, :class:`Module`;
- :mod:`~tessera_ref.ir.types`: tensor, scalar, index and function types;
- :mod:`~tessera_ref.ir.attributes`: attribute values with exact text (dense constants,
  symbol references, bit-exact floats);
- :mod:`~tessera_ref.ir.layout`: sharding layouts; :mod:`~tessera_ref.ir.redistribute`: the
  plan that moves a tensor between two of them;
- :mod:`~tessera_ref.ir.printer` / :mod:`~tessera_ref.ir.parser`: the one text format,
  MLIR generic syntax; print -> parse -> print is byte-identical;
- :mod:`~tessera_ref.ir.registry`: per-op verification hooks and traits (side effects,
  terminators, isolation); :mod:`~tessera_ref.ir.verifier`: structural verification;
- :mod:`~tessera_ref.ir.builtin`: ``tessera.module``, ``tessera.func``, ``tessera.return``;
- :mod:`~tessera_ref.ir.builder`, :mod:`~tessera_ref.ir.rewrite`: building and greedy
  pattern rewriting; :mod:`~tessera_ref.ir.passes`: the pass manager, DCE and CSE.
"""
from .attributes import DenseAttr, SymbolRef, attr_key
from .builder import Builder
from .builtin import FUNC, RETURN, func_op, return_op
from .core import MODULE, Block, BlockArgument, Module, Operation, OpResult, Region, Value
from .errors import IRError, IRParseError, RewriteError, VerifyError
from .layout import ShardLayout
from .parser import parse_attribute, parse_module, parse_type
from .passes import (
    CommonSubexpressionElimination,
    DeadCodeElimination,
    Pass,
    PassManager,
    PassRecord,
    PassReport,
    eliminate_common_subexpressions,
    eliminate_dead_code,
)
from .printer import format_attribute, print_op
from .redistribute import plan as redistribution_plan
from .registry import OPS, OpInfo, has_side_effects, is_trivially_dead, op_info, register_op
from .rewrite import PatternRewriter, RewritePattern, apply_patterns_greedily
from .types import FunctionType, IndexType, ScalarType, TensorType, Type
from .verifier import verify

__all__ = [
    "ShardLayout", "redistribution_plan",
    "Value", "OpResult", "BlockArgument", "Operation", "Block", "Region", "Module", "MODULE",
    "Type", "TensorType", "ScalarType", "IndexType", "FunctionType",
    "DenseAttr", "SymbolRef", "attr_key", "format_attribute",
    "print_op", "parse_module", "parse_type", "parse_attribute", "verify",
    "OpInfo", "OPS", "register_op", "op_info", "has_side_effects", "is_trivially_dead",
    "FUNC", "RETURN", "func_op", "return_op",
    "Builder", "RewritePattern", "PatternRewriter", "apply_patterns_greedily",
    "Pass", "PassManager", "PassReport", "PassRecord", "DeadCodeElimination",
    "CommonSubexpressionElimination", "eliminate_dead_code", "eliminate_common_subexpressions",
    "IRError", "IRParseError", "VerifyError", "RewriteError",
]
