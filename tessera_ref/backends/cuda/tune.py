"""The CUDA backend's autotuning screen (CUDA-TUNE-1; seed 003 §3.4 "monitor register count").

:func:`register_screen` returns a ``screen(module)`` for
:func:`tessera_ref.lowering.autotune.autotune_kernel`: it compiles the configuration's Tile IR
with NVRTC for ``arch`` and rejects it when a kernel spills or uses more than
``max_registers`` registers per thread (ptxas's ``-v`` numbers), or does not compile.
"""
from __future__ import annotations

from ...errors import BackendError
from .compile import build
from .report import BUDGET_REGISTERS
from .source import render

__all__ = ["register_screen"]


def register_screen(arch: str = "sm_90", max_registers: int = BUDGET_REGISTERS):
    """A screen rejecting configurations over ``max_registers`` or with spills on ``arch``."""

    def screen(module) -> str | None:
        try:
            b = build(render(module), arch)
        except BackendError as exc:
            return f"does not compile for {arch}: {exc.what.splitlines()[0]}"
        for k in b.kernels.values():
            if k.spill_stores or k.spill_loads:
                return f"{k.name} spills on {arch} ({k.spill_stores} B stored, {k.spill_loads} B loaded)"
            if k.registers > max_registers:
                return f"{k.name} uses {k.registers} registers per thread on {arch}, over the budget of {max_registers}"
        return None

    screen.key = f"cuda-registers:{arch}:{max_registers}"
    return screen
