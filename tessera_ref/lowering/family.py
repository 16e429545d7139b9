"""Kernel families: the objects the lowering dispatches through (LOWER-FAMILY-1).

A :class:`KernelFamily` holds everything the lowering knows about one family of Graph IR
ops, in one module per family (:mod:`.matmul`, :mod:`.rows`, :mod:`.elementwise`,
:mod:`.attention`): its default schedule, the directives it honours, how it fits a schedule
to an op's shapes (SCHED-FIT-1), its Tile IR template (LOWER-PLAN-1) and its cost
(LOWER-COST-1). An op's family is its primitive's ``kernel_family`` slot, which the family
module fills with :func:`register_family` when it is imported.

Also here, shared by the families: what a family's cost returns (:class:`KernelCost`), the
time model (:func:`kernel_seconds`) and the fitting rule of one tile size (:func:`fit_size`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..errors import LoweringError
from ..ir import Operation
from ..ops.primitive import PRIMITIVES, primitive_of
from ..sim.presets import get_preset
from ..sim.roofline import peak_key

__all__ = ["KernelFamily", "KernelCost", "FAMILIES", "register_family", "family_of", "describe_families",
           "fit_size", "kernel_seconds"]


@dataclass(frozen=True, eq=False)
class KernelFamily:
    """One kernel family (see the module docstring).

    - ``defaults`` — the default schedule: every attribute of
      :data:`~tessera_ref.ir.schedule.SCHEDULE_ATTRS` but ``op``;
    - ``uses`` — the directives the family honours; the others keep the defaults;
    - ``fit(op, schedule) -> dict`` — the schedule entries (``tile``, and whatever depends on
      it) fitted to ``op``'s shapes, given the defaults overridden by the directives;
    - ``template(kernel_op, name) -> KernelPlan`` — the tile kernel of a scheduled kernel;
    - ``cost(op, schedule, preset) -> KernelCost`` — what that kernel costs, without running it
      (``op`` the kernel op for a fusing family, see ``fuses``);
    - ``staged`` — whether, with ``shared``, the Schedule IR stages the operands (``prefetch``);
    - ``scope`` — what the template accepts beyond the op, for error messages;
    - ``fuses`` — whether chains of the family's ops become one kernel (LOWER-FUSE-1); the
      template and cost of a fusing family take the kernel op itself (its ops are
      ``schedule.body_ops(kernel)``), those of the others its one Graph IR op.
    """

    name: str
    defaults: dict
    uses: tuple
    fit: Callable
    template: Callable
    cost: Callable
    staged: bool
    scope: str
    fuses: bool = False

    def ops(self) -> list:
        """The short names of the primitives of this family."""
        return sorted(name for name, prim in PRIMITIVES.items() if prim.kernel_family is self)

    def __repr__(self) -> str:
        return f"KernelFamily({self.name})"


#: Registered families by name, in registration order.
FAMILIES: dict[str, KernelFamily] = {}


def register_family(family: KernelFamily, prims) -> None:
    """Register ``family`` as the kernel family of the primitives ``prims`` (each has one)."""
    if family.name in FAMILIES:
        raise LoweringError(f"kernel family {family.name!r} is already registered", fix="register each family once")
    for prim in prims:
        if prim.kernel_family is not None:
            raise LoweringError(f"{prim.name} cannot join the {family.name} family: it is in the "
                                f"{prim.kernel_family.name} family", fix="give each primitive one kernel family")
    FAMILIES[family.name] = family
    for prim in prims:
        prim.kernel_family = family


def family_of(op: Operation) -> KernelFamily | None:
    """The kernel family of a Graph IR op — its primitive's ``kernel_family`` — or ``None``
    when it has no tile lowering."""
    prim = primitive_of(op)
    return prim.kernel_family if prim is not None else None


def describe_families() -> str:
    """The families, their ops and what their templates accept, for error messages."""
    return "; ".join(f"{f.name}: {', '.join(f.ops())} ({f.scope})" for f in FAMILIES.values())


def fit_size(size: int, want: int) -> int:
    """The largest tile size <= ``want`` that divides ``size`` (SCHED-FIT-1)."""
    want = max(1, min(want, size))
    while size % want:
        want -= 1
    return want


@dataclass(frozen=True)
class KernelCost:
    """What the cost model says about one scheduled kernel (:mod:`.cost`)."""

    smem_bytes: int
    hbm_bytes: int
    flops: int
    tiles: int
    seconds: float

    def fits(self, preset) -> tuple:
        """``(ok, reason)``: whether the shared memory fits ``preset``'s per-block limit."""
        limit = get_preset(preset).smem_per_block
        if self.smem_bytes > limit:
            return False, f"needs {self.smem_bytes:,} B of shared memory per block, over the limit of {limit:,} B"
        return True, None


def kernel_seconds(flops, hbm_bytes, tiles, overlap, dtype, preset) -> float:
    """The time of a kernel of ``tiles`` tiles (LOWER-COST-1): compute with wave quantization
    (``ceil(tiles / SMs)`` waves of one tile per SM, each at ``peak / SMs``) and memory at the
    HBM bandwidth, overlapped (``max``) when ``overlap``, added otherwise."""
    p = get_preset(preset)
    peak = p.peaks[peak_key(p, dtype)]
    waves = math.ceil(tiles / p.sm_count) if tiles else 0
    compute = waves * (flops / max(tiles, 1)) / (peak / p.sm_count)
    memory = hbm_bytes / p.hbm_bandwidth
    return max(compute, memory) if overlap else compute + memory
