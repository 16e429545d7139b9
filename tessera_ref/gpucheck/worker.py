"""One item of the GPU check in a process of its own (CUDA-CHECK-1): a kernel that faults
poisons its CUDA context, so each item starts from a fresh one and the others still run.

    python -m tessera_ref.gpucheck.worker STAGE ITEM --out DIR [--quick] [--dry-run]

prints the item's result as one JSON line (the last line of its output); an exception is a
result with status ``error`` naming it, a :class:`~.device.Skip` one with status ``skipped``.
``--launch ITEM`` runs a planted-bug kernel once (the process ``compute-sanitizer`` watches).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

__all__ = ["main"]


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # NumPy scalars
        return value.item()
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def main(argv=None) -> int:
    os.environ.setdefault("CUPY_TF32", "0")  # before CuPy is imported: cuBLAS SGEMM, not TF32, as the baseline
    p = argparse.ArgumentParser(prog="python -m tessera_ref.gpucheck.worker")
    p.add_argument("stage", nargs="?")
    p.add_argument("item", nargs="?")
    p.add_argument("--out", default=".")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--launch", metavar="ITEM")
    ns = p.parse_args(argv)
    if ns.launch:
        from .sanitize import launch
        launch(ns.launch)
        return 0
    from .device import Context, Skip
    from .stages import stage
    start = time.monotonic()
    try:
        result = stage(ns.stage).module.run(Context(ns.dry_run, ns.quick, ns.out), ns.item)
    except Skip as why:
        result = {"status": "skipped", "detail": str(why)}
    except Exception as e:  # the item's failure is its result; the check goes on
        lines = traceback.format_exception(type(e), e, e.__traceback__)
        result = {"status": "error", "detail": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                  "traceback": "".join(lines)[-4000:]}
    result["seconds"] = round(time.monotonic() - start, 3)
    sys.stdout.flush()
    print(json.dumps(_jsonable(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
