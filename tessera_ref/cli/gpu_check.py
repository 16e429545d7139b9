"""``tessera-ref gpu-check``: prove the CUDA backend on the GPU of this machine, in stages, and
write what it found (CUDA-CHECK-1 … 7; tessera_ref.gpucheck)."""
from __future__ import annotations

import argparse

from ..gpucheck.runner import run_check
from ..gpucheck.stages import STAGES

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("gpu-check", help="run the CUDA backend on this machine's GPU: bits vs the interpreter, "
                                         "NUM-MATH, tensor-core models, NCCL, sanitizers, speed; write a report")
    p.add_argument("--quick", action="store_true", help="a subset of every stage (about 3 minutes)")
    p.add_argument("--dry-run", action="store_true",
                   help="run every stage against a CuPy stand-in whose device is the CUDA-on-CPU harness (no GPU)")
    p.add_argument("--out", default="gpu-check", help="the directory of the report (default ./gpu-check)")
    p.add_argument("--stage", action="append", choices=[s.name for s in STAGES],
                   help="run only this stage (repeatable; the environment stage always runs)")
    p.add_argument("--jobs", type=int, default=None, help="items run side by side (default min(8, CPUs))")
    return p


def run(args) -> int:
    report = run_check(args.out, quick=args.quick, dry_run=args.dry_run, only=args.stage, jobs=args.jobs)
    print(f"{report['status']}: {', '.join(f'{args.out}/{f}' for f in report['files'])}")
    return 0 if report["status"] == "pass" else 1
