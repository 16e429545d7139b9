"""The stages of the GPU check (CUDA-CHECK-1), in the order they run: each a module with
``items(arch, quick)`` and ``run(ctx, item) -> dict``, a time limit per item and for the whole
stage (full run, ``--quick``), and whether its items may run side by side."""
from __future__ import annotations

from dataclasses import dataclass

from . import bits, comm, environment, mathbits, mma, sanitize, speed

__all__ = ["Stage", "STAGES", "stage"]


@dataclass(frozen=True)
class Stage:
    name: str
    module: object
    what: str
    item_seconds: float
    budget: tuple  # seconds for the whole stage: (full, quick)
    parallel: bool


#: the budgets add up to 480 s for a full run and 175 s for a quick one (the command's bounds)
STAGES = (
    Stage("environment", environment, "the device, its driver and the toolchain used", 40, (40, 30), False),
    Stage("bits", bits, "library kernels and tensor-core GEMMs vs the interpreter", 60, (90, 40), True),
    Stage("numerics", mathbits, "NUM-MATH, conversions and NaN bits vs the interpreter", 80, (90, 30), True),
    Stage("tc", mma, "tensor-core models vs mma.sync", 50, (60, 20), True),
    Stage("nccl", comm, "NCCL in a world of one", 30, (30, 15), False),
    Stage("sanitizers", sanitize, "compute-sanitizer vs the CPU harness on planted bugs", 60, (80, 0), True),
    Stage("speed", speed, "ratios against cuBLAS, CuPy and PyTorch", 30, (90, 40), False),
)


def stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(name)
