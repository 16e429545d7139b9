"""Speed of the CUDA backend's kernels against cuBLAS / CuPy / PyTorch on the same GPU, and
their compile-time report without one.

    python benchmarks/cuda_bench.py [--quick]          # on a GPU
    python benchmarks/cuda_bench.py --compile-only     # anywhere with the cuda-tools extra

On a GPU this is the speed stage of ``tessera-ref gpu-check`` (tessera_ref.gpucheck.speed,
docs/spec/cuda.md CUDA-CHECK-6) in one process: each case — exact f32 GEMM (NUM-RED-1's
ascending-k fma chain, the register-blocked 128x128x8 tile), the tensor-core bf16 and (on
sm_90) fp8 GEMMs under the device's model, softmax and a row sum (one warp per row), a fused
``x * y + z``, flash attention (f32, block_k 64), a cast f32 -> bf16 and ``rand`` (Philox in
the kernel) — lowered by tessera_ref (Graph IR -> Tile IR -> CUDA C), compiled with NVRTC for
the device and timed by CUDA events (best of N after two warm-ups, no host copies) against
cuBLAS SGEMM with TF32 off, ``cublasGemmEx`` bf16, CuPy's own kernels, batched cuBLAS and
PyTorch's SDPA. ``ratio`` is tessera_ref time / baseline time (above 1: slower). Bits are not
compared here (``tessera-ref gpu-check`` does that).

Without a GPU (or without CuPy) it prints ``no GPU: nothing measured`` and exits 0; with
``--compile-only`` it prints, per kernel and architecture, what ptxas and the SASS say
(registers, spills, stack, shared memory, the main loop's FFMA share and HMMA count) — which
needs only the cuda-tools extra.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("CUPY_TF32", "0")  # cuBLAS SGEMM, not TF32, for the f32 baseline

from tessera_ref.backends.cuda.compile import build  # noqa: E402
from tessera_ref.backends.cuda.source import render  # noqa: E402
from tessera_ref.gpucheck import speed  # noqa: E402
from tessera_ref.ir import tile as T  # noqa: E402


def compile_report(archs) -> None:
    print(f"{'kernel':<26} {'arch':<6} {'regs':>4} {'spill':>5} {'stack':>5} {'smem B':>8} "
          f"{'main-loop FFMA':>14} {'HMMA':>5}")
    for arch in archs:
        for name, (fn, args, directives, _) in speed.cases(arch).items():
            program, func = speed.single_kernel(fn, args, directives)
            (k,) = build(render(program.tile), arch).kernels.values()
            smem = k.shared_bytes + T.shared_layout(func)[1]
            ffma = k.share("FFMA", "main_loop")
            hmma = sum(c for o, c in k.main_loop.items() if o.startswith("HMMA"))
            print(f"{name:<26} {arch:<6} {k.registers:>4} {k.spill_stores + k.spill_loads:>5} {k.stack_bytes:>5} "
                  f"{smem:>8} {ffma:>13.0%} {hmma:>5}")


def _gpu() -> bool:
    try:
        import cupy
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


def measure(quick: bool) -> None:
    from tessera_ref.gpucheck.device import Context, Skip
    ctx = Context(dry_run=False, quick=quick, out=os.environ.get("TMPDIR", "/tmp"))
    print(f"arch {ctx.arch}; ratio = tessera_ref / baseline time")
    for item in speed.items(ctx.arch, quick):
        try:
            print(f"{item:<26} {speed.run(ctx, item)['detail']}")
        except Skip as why:
            print(f"{item:<26} skipped: {why}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller problems, fewer repeats")
    p.add_argument("--compile-only", action="store_true", help="report registers/spills/SASS per kernel (no GPU)")
    p.add_argument("--arch", default="sm_80,sm_90", help="architectures of --compile-only")
    ns = p.parse_args(argv)
    if ns.compile_only:
        compile_report(ns.arch.split(","))
        return 0
    if not _gpu():
        print("no GPU: nothing measured (python benchmarks/cuda_bench.py --compile-only reports the kernels' "
              "registers, spills and SASS without one)")
        return 0
    measure(ns.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
