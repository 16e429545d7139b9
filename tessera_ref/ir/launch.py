"""A tile-kernel launch, as every executor receives it (BACKEND-LAUNCH-1)."""
from __future__ import annotations

from dataclasses import dataclass

from .core import Module

__all__ = ["Launch"]


@dataclass
class Launch:
    """One tile-kernel launch (BACKEND-LAUNCH-1): ``grid`` tiles of ``lanes`` lanes of the kernel
    ``kernel`` (its ``sym_name``; None for the module's only kernel) of the Tile IR ``module``
    on ``buffers`` — a list in parameter order or a dict by name; ``mut`` buffers are written
    in place. ``checks``/``counters``/``preset``/``on_error`` are the tile interpreter's
    options; a backend that cannot honour one says so in its report, never silently."""

    module: Module
    kernel: str | None
    grid: object
    lanes: int
    buffers: object
    checks: bool = True
    counters: bool = True
    preset: str = "H100"
    on_error: str = "raise"
