"""Module passes, the pass manager, and two generic passes: DCE and CSE.

A :class:`Pass` transforms a module in place (``run(module)``) and counts what it did in
``statistics``. A :class:`PassManager` runs passes in order, verifying the module before
the first pass and after each one (``verify_each=True``) and timing each pass; ``run``
returns a :class:`PassReport`.

:class:`DeadCodeElimination` (``"dce"``) erases every trivially dead op
(:func:`~tessera_ref.ir.registry.is_trivially_dead`: unused results, no side effects, not
a terminator, not a symbol), walking each block backwards so a chain of dead ops goes in
one pass.

:class:`CommonSubexpressionElimination` (``"cse"``) replaces an op by an earlier op that
computes the same thing: same name, same operands (the same values, in order), equal
attributes (:func:`~tessera_ref.ir.attributes.attr_key`), same result types, no regions
and no side effects. "Earlier" means visible: before it in the same block or at an
enclosing op, never across an isolated op. The later op is erased; the earlier op keeps
its location.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from .attributes import attr_key
from .core import Module, Operation
from .errors import IRError, VerifyError
from .registry import has_side_effects, is_trivially_dead, op_info
from .verifier import verify

__all__ = ["Pass", "PassManager", "PassReport", "PassRecord", "DeadCodeElimination",
           "CommonSubexpressionElimination", "eliminate_dead_code", "eliminate_common_subexpressions"]


class Pass:
    """Base class of module passes: set ``name`` and implement :meth:`run`.

    ``statistics`` is a :class:`collections.Counter` the pass increments; the pass manager
    clears it before each run and reports it.
    """

    name: str = "pass"

    def __init__(self):
        self.statistics: Counter = Counter()

    def run(self, module: Module) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement run(module)")


@dataclass
class PassRecord:
    """One pass run: its name, wall time in seconds and statistics."""

    name: str
    seconds: float
    statistics: dict = field(default_factory=dict)


@dataclass
class PassReport:
    """What a :meth:`PassManager.run` did; ``str()`` is a table."""

    records: list
    verify_seconds: float = 0.0

    def __str__(self) -> str:
        lines = [f"{'pass':<24}{'ms':>10}  statistics"]
        for record in self.records:
            stats = ", ".join(f"{k}={v}" for k, v in sorted(record.statistics.items()))
            lines.append(f"{record.name:<24}{record.seconds * 1e3:>10.3f}  {stats}")
        lines.append(f"{'(verification)':<24}{self.verify_seconds * 1e3:>10.3f}")
        return "\n".join(lines)


class PassManager:
    """Runs module passes in order, optionally verifying before and after each."""

    def __init__(self, passes=(), *, verify_each: bool = True):
        self.passes: list[Pass] = []
        self.verify_each = verify_each
        for p in passes:
            self.add(p)

    def add(self, p: Pass) -> "PassManager":
        """Append a pass; returns the manager."""
        if not isinstance(p, Pass):
            raise IRError(f"{p!r} is not a Pass", fix="subclass tessera_ref.ir.Pass")
        self.passes.append(p)
        return self

    def run(self, module: Module) -> PassReport:
        """Run every pass on ``module`` (in place)."""
        report = PassReport([])
        self._verify(module, report, "before the first pass")
        for p in self.passes:
            p.statistics.clear()
            start = time.perf_counter()
            p.run(module)
            report.records.append(PassRecord(p.name, time.perf_counter() - start, dict(p.statistics)))
            self._verify(module, report, f"after pass '{p.name}'")
        return report

    def _verify(self, module: Module, report: PassReport, when: str) -> None:
        if not self.verify_each:
            return
        start = time.perf_counter()
        try:
            verify(module)
        except VerifyError as exc:
            raise VerifyError(f"{exc.detail} ({when})", op_name=exc.op_name, location=exc.location,
                              fix=exc.fix) from None
        finally:
            report.verify_seconds += time.perf_counter() - start


def eliminate_dead_code(op: Operation) -> int:
    """Erase the trivially dead ops nested in ``op``; returns how many were erased."""
    erased = 0
    for region in op.regions:
        for block in region.blocks:
            nested = block._last
            while nested is not None:
                previous = nested._prev
                if is_trivially_dead(nested):
                    nested.erase()
                    erased += 1
                else:
                    erased += eliminate_dead_code(nested)
                nested = previous
    return erased


def eliminate_common_subexpressions(op: Operation) -> int:
    """Merge the equivalent pure ops nested in ``op``; returns how many were erased."""
    return _cse_regions(op, [{}])


def _cse_regions(op: Operation, scopes: list) -> int:
    if op_info(op.name).isolated:
        scopes = []
    erased = 0
    for region in op.regions:
        for block in region.blocks:
            scopes.append({})
            for nested in block:
                if nested.regions:
                    erased += _cse_regions(nested, scopes)
                    continue
                if not nested.results or has_side_effects(nested):
                    continue
                try:
                    key = (nested.name, nested.operands, attr_key(nested.attributes),
                           tuple(r.type for r in nested.results))
                except IRError as exc:
                    raise nested.emit_error(f"cannot compare attributes: {exc.what}", fix=exc.fix) from None
                earlier = next((scope[key] for scope in reversed(scopes) if key in scope), None)
                if earlier is None:
                    scopes[-1][key] = nested
                else:
                    nested.replace_all_uses_with(earlier.results)
                    nested.erase()
                    erased += 1
            scopes.pop()
    return erased


class DeadCodeElimination(Pass):
    """Erase trivially dead ops (statistic ``erased``)."""

    name = "dce"

    def run(self, module: Module) -> None:
        self.statistics["erased"] += eliminate_dead_code(module)


class CommonSubexpressionElimination(Pass):
    """Merge equivalent pure ops (statistic ``erased``)."""

    name = "cse"

    def run(self, module: Module) -> None:
        self.statistics["erased"] += eliminate_common_subexpressions(module)
