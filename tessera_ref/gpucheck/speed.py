"""Stage ``speed`` (CUDA-CHECK-6): the library kernels' speed as ratios against baselines on the
same device in the same process — cuBLAS SGEMM (TF32 off) for the exact f32 GEMM, cuBLAS bf16
(``cublasGemmEx``) for the tensor-core GEMMs, CuPy's own kernels for rows, softmax,
elementwise, casts and random numbers, batched cuBLAS and PyTorch's SDPA for flash attention —
plus the device's copy bandwidth (the roofline the memory-bound rows are read against) and the
cost per kernel of a captured CUDA graph's replay. Times are CUDA events around one launch, the
best of several after two warm-ups, with no host copies; ``ratio`` is ours / baseline."""
from __future__ import annotations

import numpy as np

from ..backends.cuda.runtime import DYNAMIC_SMEM
from ..backends.cuda.source import render
from ..frontend import jit
from ..ir import tile as T
from ..lowering import lower
from ..numerics import Policy, get_format
from ..ops import FUNCTIONS as op
from ..ops.values import asarray
from .device import Skip

__all__ = ["cases", "single_kernel", "items", "run", "best_ms", "SIZES"]

#: (square GEMM n, rows, row length, flat elements, attention (batch·heads, sequence, head dim)) per scale
SIZES = {"full": (4096, 8192, 4096, 1 << 26, (16, 1024, 64)), "quick": (2048, 4096, 4096, 1 << 24, (16, 512, 64)),
         "dry": (128, 64, 256, 1 << 12, (2, 64, 32))}


def _policy_arrays(shapes, fmt, accum=None):
    pol = Policy(fmt, accum=accum) if accum else None
    rng = np.random.default_rng(0)
    out = []
    for s in shapes:
        x = rng.standard_normal(s).astype(np.float32).astype(get_format(fmt).dtype)
        out.append(asarray(x, policy=pol) if pol else x)
    return out


def cases(arch: str, scale: str = "full") -> dict:
    """name -> (function, example arguments, directives, work) where work is ``("flops", n)``
    or ``("bytes", n)`` — one kernel each."""
    n, rows, cols, flat, (bh, s, d) = SIZES[scale]
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


def single_kernel(fn, args, directives):
    """``(program, kernel)``: the lowered program of a case and its one tile kernel."""
    program = lower(jit(fn).trace(*args), directives or None)
    kernels = [k for k in program.tile.body if T.is_kernel(k)]
    if len(kernels) != 1 or any(plan is None for _, plan in program.steps):
        raise ValueError("a speed case is one kernel")
    return program, kernels[0]


def items(arch: str, quick: bool) -> list:
    names = list(cases(arch))
    if quick:
        names = [n for n in names if n.startswith(("sgemm", "gemm_bf16", "softmax", "elementwise"))]
    return ["copy_bandwidth"] + names + ["graph_replay"] + ([] if quick else ["llama_training_step"])


def best_ms(cp, launch, repeat: int) -> float:
    """The best time in milliseconds of ``repeat`` launches, by CUDA events, after two warm-ups."""
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


def _ours(ctx, fn, args, directives):
    """A launcher of the case's kernel on device copies of ``args`` (no host traffic), the host
    arguments and the number of result elements."""
    program, func = single_kernel(fn, args, directives)
    module, _ = ctx.load(render(program.tile))
    kernel = module.get_function(func.attributes["sym_name"])
    outs = [r.type for r in program.func.regions[0].entry.last_op.operands]
    host = [np.asarray(a.data if hasattr(a, "policy") else a) for a in args]
    buffers = [ctx.to_device(h) for h in host]
    buffers += [ctx.cp.empty(int(np.prod(o.shape)), dtype=f"u{np.dtype(o.dtype).itemsize}"
                             if np.dtype(o.dtype).type.__module__ != "numpy" else o.dtype) for o in outs]
    smem = int(func.attributes.get(DYNAMIC_SMEM, T.shared_layout(func)[1]))
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    grid = tuple(func.attributes["launch.grid"])
    grid = grid + (1,) * (3 - len(grid))
    lanes = func.attributes["launch.lanes"]
    return lambda: kernel(grid, (lanes, 1, 1), tuple(buffers), shared_mem=smem), host, int(buffers[-1].size)


def _cublas_bf16(ctx, a, b):
    """C = A·B by cublasGemmEx with bf16 inputs (their bits as uint16), f32 compute and output,
    row-major by computing Cᵀ = Bᵀ·Aᵀ in cuBLAS's column-major order."""
    from cupy_backends.cuda.libs import cublas
    cp = ctx.cp
    M, K = a.shape
    N = b.shape[1]
    A, B = ctx.to_device(a), ctx.to_device(b)
    C = cp.empty((M, N), dtype=cp.float32)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    handle = cp.cuda.device.get_cublas_handle()
    bf16, f32, compute_32f, default_algo = 14, 0, 68, -1  # CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F

    def launch():
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, N, M, K, one.ctypes.data, B.data.ptr, bf16, N,
                      A.data.ptr, bf16, K, zero.ctypes.data, C.data.ptr, f32, N, compute_32f, default_algo)
    return launch


def _baseline(ctx, name, host, n_out):
    """The cuBLAS/CuPy launcher for case ``name`` on device copies of ``host`` and its label."""
    import ml_dtypes
    if ctx.dry_run:
        raise Skip("dry run: the test double has no cuBLAS or CuPy kernels")
    cp = ctx.cp
    if name.startswith("gemm_bf16"):
        return _cublas_bf16(ctx, *host), "cuBLAS bf16 (cublasGemmEx)"
    if name.startswith("gemm_fp8"):
        return _cublas_bf16(ctx, *(h.astype(ml_dtypes.bfloat16) for h in host)), "cuBLAS bf16 on the fp8 values"
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


def _torch_sdpa(ctx, host, repeat) -> dict:
    """PyTorch's scaled_dot_product_attention (f32, TF32 off) on the same q, k, v."""
    if ctx.dry_run:
        raise Skip("dry run: no device for PyTorch")
    try:
        import torch
    except ImportError:
        raise Skip("PyTorch is not installed") from None
    torch.backends.cuda.matmul.allow_tf32 = False
    q, k, v = (torch.from_numpy(np.ascontiguousarray(h)).cuda() for h in host)
    f = torch.nn.functional.scaled_dot_product_attention
    return {"ms": best_ms(ctx.cp, lambda: f(q, k, v), repeat), "label": f"PyTorch {torch.__version__} SDPA (f32)"}


def _copy_bandwidth(ctx, repeat) -> dict:
    if ctx.dry_run:
        raise Skip("dry run: the test double's copies are host copies")
    n = 1 << 28
    cp = ctx.cp
    src, dst = cp.empty(n, dtype=np.float32), cp.empty(n, dtype=np.float32)  # a GiB each
    ms = best_ms(cp, lambda: cp.copyto(dst, src), repeat)
    return {"status": "pass", "gb_s": 8 * n / (ms * 1e-3) / 1e9, "ms": ms,
            "detail": f"device-to-device copy of {4 * n >> 20} MiB: {8 * n / (ms * 1e-3) / 1e9:.0f} GB/s (read + write)"}


def _graph_replay(ctx, repeat) -> dict:
    """Cost per kernel of a captured graph of 100 tiny launches against as many plain launches."""
    cp = ctx.cp
    launch, _, _ = _ours(ctx, lambda x, y, z: x * y + z, _policy_arrays([(256,)] * 3, "f32"), dict(vectorize=4))
    count = 10 if ctx.dry_run else 100
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        launch()  # loaded and warm before the capture
        stream.begin_capture()
        for _ in range(count):
            launch()
        graph = stream.end_capture()
        plain = best_ms(cp, lambda: [launch() for _ in range(count)], repeat)
        replay = best_ms(cp, lambda: graph.launch(stream), repeat)
    return {"status": "pass", "us_per_kernel_graph": replay * 1e3 / count, "us_per_kernel_plain": plain * 1e3 / count,
            "ratio": replay / plain, "detail": f"{count} tiny kernels: {replay * 1e3 / count:.2f} µs each by graph "
                                               f"replay, {plain * 1e3 / count:.2f} µs each launched one by one"}


def run(ctx, item: str) -> dict:
    repeat = 3 if ctx.dry_run else 10 if ctx.quick else 20
    if item == "copy_bandwidth":
        return _copy_bandwidth(ctx, repeat)
    if item == "graph_replay":
        return _graph_replay(ctx, repeat)
    if item == "llama_training_step":
        raise Skip("the training step has no CUDA kernels yet (its ops' kernel families: issue 27; the model: issue 28)")
    scale = "dry" if ctx.dry_run else "quick" if ctx.quick else "full"
    fn, args, directives, (unit, work) = cases(ctx.arch, scale)[item]
    ours, host, n_out = _ours(ctx, fn, args, directives)
    a = best_ms(ctx.cp, ours, repeat)
    per_s, suffix = (1e12, "TFLOP/s") if unit == "flops" else (1e9, "GB/s")
    result = {"status": "pass", "unit": suffix, "ours_ms": a, "ours_rate": work / (a * 1e-3) / per_s, "work": work,
              "kind": unit}
    try:
        theirs, label = _baseline(ctx, item, host, n_out)
        b = best_ms(ctx.cp, theirs, repeat)
        result.update(baseline=label, baseline_ms=b, baseline_rate=work / (b * 1e-3) / per_s, ratio=a / b)
        line = f"{result['ours_rate']:.1f} {suffix} vs {result['baseline_rate']:.1f} ({label}): ratio {a / b:.2f}"
    except Skip as why:
        result.update(baseline=f"skipped: {why}")
        line = f"{result['ours_rate']:.1f} {suffix} (baseline skipped: {why})"
    if item.startswith("flash_attention"):
        try:
            torch = _torch_sdpa(ctx, host, repeat)
            result.update(torch_ms=torch["ms"], torch_label=torch["label"], torch_ratio=a / torch["ms"])
            line += f"; vs {torch['label']}: ratio {a / torch['ms']:.2f}"
        except Skip as why:
            result.update(torch_label=f"skipped: {why}")
    result["detail"] = line
    return result
