"""Speed of the CUDA backend's kernels against cuBLAS / CuPy on the same GPU, and their
compile-time budgets without one.

    python benchmarks/cuda_bench.py [--repeat 20] [--arch sm_90]   # on a GPU
    python benchmarks/cuda_bench.py --compile-only                 # anywhere with the cuda-tools extra

On a GPU each case is lowered by tessera_ref (Graph IR -> Tile IR -> CUDA C), compiled with
the pinned NVRTC for the device's architecture and launched on device buffers; the baseline is
the same computation by cuBLAS or CuPy on the same data, in the same process. Times are CUDA
events around one launch, the best of ``--repeat`` after two warm-up launches (no host copies
in either). Rows:

- exact f32 GEMM (NUM-RED-1: ascending-k fma chain, the register-blocked 128x128x8 tile with
  256 threads) — TFLOP/s, vs ``cupy.matmul`` on float32 with TF32 off (cuBLAS SGEMM,
  ``CUPY_TF32=0``), and vs the preset's FP32 peak when the GPU is an A100/H100/H200;
- tensor-core bf16 GEMM under the device's model (``accum="tc:sm80"`` on sm_80,
  ``"tc:sm90"`` on sm_90: ``mma.sync`` m16n8k16, tile 128x128x32) vs cuBLAS bf16
  (``cublasGemmEx`` with CUDA_R_16BF inputs, f32 compute and output);
- on sm_90, tensor-core fp8 (e4m3) GEMM under ``"tc:sm90"`` (``mma.sync`` m16n8k32, tile
  128x128x32) vs the same cuBLAS bf16 GEMM on the same values (e4m3 values are bf16 values;
  CuPy has no binding of cuBLASLt's fp8 matmul to compare with);
- softmax and row sum over the last axis (NUM-RED-2, one warp per row) — GB/s of the
  operand read plus the result written, vs CuPy's ``exp(x - max) / sum`` and ``sum(axis=-1)``;
- a fused elementwise chain ``x * y + z`` (LOWER-FUSE-1: two roundings, no FMA) vs CuPy's;
- flash attention (f32, block_k 64) — TFLOP/s of the 4·B·S²·D flops, vs a CuPy reference
  ``softmax(q kᵀ / √D) v`` with batched cuBLAS SGEMMs;
- a cast f32 -> bf16 and ``rand`` (Philox4x32-10 in the kernel) — GB/s, vs CuPy's f32 -> f16
  ``astype`` and ``cupy.random.random`` (its own generator).

``ratio`` is tessera_ref time / baseline time (above 1: slower). Bits are not compared here
(tests/cuda/test_runtime.py does that, gpu-marked); this script only measures.

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

import numpy as np  # noqa: E402

import tessera_ref as t  # noqa: E402
from tessera_ref import op  # noqa: E402
from tessera_ref.backends.cuda.compile import build  # noqa: E402
from tessera_ref.backends.cuda.runtime import device_bits  # noqa: E402
from tessera_ref.backends.cuda.source import render  # noqa: E402
from tessera_ref.ir import tile as T  # noqa: E402
from tessera_ref.lowering import lower  # noqa: E402
from tessera_ref.numerics import get_format  # noqa: E402


def _policy_arrays(shapes, fmt, accum=None):
    pol = t.Policy(fmt, accum=accum) if accum else None
    rng = np.random.default_rng(0)
    out = []
    for s in shapes:
        x = rng.standard_normal(s).astype(np.float32)
        out.append(t.asarray(x.astype(get_format(fmt).dtype), policy=pol) if pol else x.astype(get_format(fmt).dtype))
    return out


def cases(arch: str) -> dict:
    """name -> (function, example arguments, directives, work) where work is
    ``("flops", n)`` or ``("bytes", n)``."""
    n, rows, cols, flat, (bh, s, d) = 4096, 8192, 4096, 1 << 26, (16, 1024, 64)
    model = f"tc:{arch.replace('_', '')}"
    f32 = lambda *shapes: _policy_arrays(shapes, "f32")  # noqa: E731
    return {
        "sgemm_f32_exact": (lambda a, b: op.matmul(a, b), f32((n, n), (n, n)),
                            dict(tile=(128, 128, 8), lanes=256), ("flops", 2 * n ** 3)),
        f"gemm_bf16_{model}": (lambda a, b: op.matmul(a, b), _policy_arrays([(n, n), (n, n)], "bf16", model),
                               dict(tile=(128, 128, 32), lanes=256), ("flops", 2 * n ** 3)),
        **({f"gemm_fp8_e4m3_{model}": (lambda a, b: op.matmul(a, b),
                                       _policy_arrays([(n, n), (n, n)], "fp8_e4m3", model),
                                       dict(tile=(128, 128, 32), lanes=256), ("flops", 2 * n ** 3))}
           if arch == "sm_90" else {}),  # tc:sm80 has no fp8 model (NUM-TC-1)
        "softmax_f32": (lambda x: op.softmax(x), f32((rows, cols)), {}, ("bytes", 2 * 4 * rows * cols)),
        "row_sum_f32": (lambda x: op.sum(x, axis=-1), f32((rows, cols)), {}, ("bytes", 4 * rows * (cols + 1))),
        "elementwise_x*y+z": (lambda x, y, z: x * y + z, f32((flat,), (flat,), (flat,)), dict(vectorize=4),
                              ("bytes", 4 * 4 * flat)),
        "flash_attention_f32": (lambda q, k, v: op.flash_attention(q, k, v, block_k=64),
                                f32((bh, s, d), (bh, s, d), (bh, s, d)), {}, ("flops", 4 * bh * s * s * d)),
        "cast_f32_bf16": (lambda x: op.cast(x, "bf16"), f32((flat,)), dict(vectorize=4), ("bytes", 6 * flat)),
        "rand_f32": (lambda: op.rand((flat,), seed=1), [], dict(vectorize=4), ("bytes", 4 * flat)),
    }


def _single_kernel(fn, args, directives):
    """The one tile kernel of ``fn``'s lowered program (each case is one kernel)."""
    program = lower(t.jit(fn).trace(*args), directives or None)
    kernels = [k for k in program.tile.body if T.is_kernel(k)]
    assert len(kernels) == 1 and all(plan is not None for _, plan in program.steps), "one kernel per case"
    return program, kernels[0]


# ---------------------------------------------------------------------------------------
# without a GPU: the compile-time report

def compile_report(archs) -> None:
    print(f"{'kernel':<26} {'arch':<6} {'regs':>4} {'spill':>5} {'stack':>5} {'smem B':>8} "
          f"{'main-loop FFMA':>14} {'HMMA':>5}")
    for arch in archs:
        for name, (fn, args, directives, _) in cases(arch).items():
            program, func = _single_kernel(fn, args, directives)
            (k,) = build(render(program.tile), arch).kernels.values()
            smem = k.shared_bytes + T.shared_layout(func)[1]
            ffma = k.share("FFMA", "main_loop")
            hmma = sum(c for o, c in k.main_loop.items() if o.startswith("HMMA"))
            print(f"{name:<26} {arch:<6} {k.registers:>4} {k.spill_stores + k.spill_loads:>5} {k.stack_bytes:>5} "
                  f"{smem:>8} {ffma:>13.0%} {hmma:>5}")


# ---------------------------------------------------------------------------------------
# on a GPU

def _gpu():
    try:
        import cupy
        return cupy if cupy.cuda.is_available() else None
    except Exception:
        return None


def _best_ms(cp, launch, repeat: int) -> float:
    for _ in range(2):
        launch()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    best = float("inf")
    for _ in range(repeat):
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop))
    return best


def _ours(cp, arch, fn, args, directives):
    """A launcher of the case's kernel on device copies of ``args`` (no host traffic)."""
    program, func = _single_kernel(fn, args, directives)
    b = build(render(program.tile), arch)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tessera_bench_{func.attributes['sym_name']}_{arch}.cubin")
    with open(path, "wb") as f:
        f.write(b.cubin)
    kernel = cp.RawModule(path=path).get_function(func.attributes["sym_name"])
    outs = [r.type for r in program.func.regions[0].entry.last_op.operands]
    host = [np.asarray(getattr(a, "data", a)) for a in args]
    buffers = [cp.asarray(device_bits(h)) for h in host]
    buffers += [cp.empty(int(np.prod(o.shape)), dtype=device_bits(np.zeros(1, o.dtype)).dtype) for o in outs]
    smem = T.shared_layout(func)[1]
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    grid = tuple(func.attributes["launch.grid"])
    grid = grid + (1,) * (3 - len(grid))
    lanes = func.attributes["launch.lanes"]
    return lambda: kernel(grid, (lanes, 1, 1), tuple(buffers), shared_mem=smem), host, int(buffers[-1].size)


def _cublas_bf16(cp, a, b):
    """C = A·B by cublasGemmEx with bf16 inputs (their bits as uint16), f32 compute and output,
    row-major by computing Cᵀ = Bᵀ·Aᵀ in cuBLAS's column-major order."""
    from cupy_backends.cuda.libs import cublas

    M, K = a.shape
    N = b.shape[1]
    A, B = cp.asarray(device_bits(a)), cp.asarray(device_bits(b))
    C = cp.empty((M, N), dtype=cp.float32)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    handle = cp.cuda.device.get_cublas_handle()
    bf16, f32, compute_32f, default_algo = 14, 0, 68, -1  # CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F

    def run():
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, N, M, K, one.ctypes.data, B.data.ptr, bf16, N,
                      A.data.ptr, bf16, K, zero.ctypes.data, C.data.ptr, f32, N, compute_32f, default_algo)
    return run


def _baseline(cp, name, host, n_out):
    """The cuBLAS/CuPy launcher for case ``name`` on device copies of ``host`` (``n_out``:
    the number of result elements)."""
    if name.startswith("gemm_bf16"):
        return _cublas_bf16(cp, *host), "cuBLAS bf16 (cublasGemmEx)"
    if name.startswith("gemm_fp8"):
        import ml_dtypes
        return _cublas_bf16(cp, *(h.astype(ml_dtypes.bfloat16) for h in host)), "cuBLAS bf16 on the fp8 values"
    dev = [cp.asarray(h) for h in host]
    if name == "sgemm_f32_exact":
        return (lambda: cp.matmul(*dev)), "cuBLAS SGEMM (cupy.matmul, TF32 off)"
    if name == "softmax_f32":
        def softmax():
            e = cp.exp(dev[0] - dev[0].max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        return softmax, "CuPy exp(x - max) / sum"
    if name == "row_sum_f32":
        return (lambda: dev[0].sum(axis=-1)), "cupy.sum(axis=-1)"
    if name == "elementwise_x*y+z":
        return (lambda: dev[0] * dev[1] + dev[2]), "CuPy x * y + z"
    if name == "flash_attention_f32":
        q, k, v = dev
        scale = np.float32(1 / np.sqrt(q.shape[-1]))

        def attention():
            s = cp.matmul(q, k.transpose(0, 2, 1)) * scale
            e = cp.exp(s - s.max(axis=-1, keepdims=True))
            return cp.matmul(e / e.sum(axis=-1, keepdims=True), v)
        return attention, "CuPy softmax(q kT / sqrt(D)) v (cuBLAS SGEMM)"
    if name == "cast_f32_bf16":
        return (lambda: dev[0].astype(cp.float16)), "CuPy astype(float16)"
    if name == "rand_f32":
        gen = cp.random.default_rng(1)
        return (lambda: gen.random(n_out, dtype=cp.float32)), "cupy.random (its own generator)"
    raise KeyError(name)


def _peak(cp):
    from tessera_ref.sim.presets import get_preset
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    for key in ("H200", "H100", "A100"):
        if key in name:
            return get_preset(key), name
    return None, name


def measure(cp, arch: str, repeat: int) -> None:
    preset, device = _peak(cp)
    print(f"device: {device} ({arch}); best of {repeat} launches after 2 warm-ups; ratio = tessera_ref / baseline time")
    print(f"{'case':<26} {'tessera_ref':>14} {'baseline':>14} {'ratio':>7}  baseline")
    for name, (fn, args, directives, (unit, work)) in cases(arch).items():
        ours, host, n_out = _ours(cp, arch, fn, args, directives)
        theirs, label = _baseline(cp, name, host, n_out)
        a, b = _best_ms(cp, ours, repeat), _best_ms(cp, theirs, repeat)
        per_s, suffix = (1e12, "TFLOP/s") if unit == "flops" else (1e9, "GB/s")
        rate = lambda ms: work / (ms * 1e-3) / per_s  # noqa: E731
        print(f"{name:<26} {rate(a):>8.1f} {suffix:<5} {rate(b):>8.1f} {suffix:<5} {a / b:>7.2f}  {label}")
        if preset is not None and name == "sgemm_f32_exact":
            print(f"{'':<26} {work / (a * 1e-3) / preset.peaks['f32']:>13.0%} of {preset.name}'s FP32 peak")
        if preset is not None and unit == "bytes":
            print(f"{'':<26} {work / (a * 1e-3) / preset.hbm_bandwidth:>13.0%} of {preset.name}'s HBM bandwidth")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--compile-only", action="store_true", help="report registers/spills/SASS per kernel (no GPU)")
    p.add_argument("--arch", default="sm_80,sm_90", help="architectures of --compile-only")
    ns = p.parse_args(argv)
    if ns.compile_only:
        compile_report(ns.arch.split(","))
        return 0
    cp = _gpu()
    if cp is None:
        print("no GPU: nothing measured (python benchmarks/cuda_bench.py --compile-only reports the kernels' "
              "registers, spills and SASS without one)")
        return 0
    from tessera_ref.backends.cuda.runtime import arch_of
    measure(cp, arch_of(cp.cuda.Device().compute_capability), ns.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
