"""Stage ``numerics`` (CUDA-CHECK-2): the device header's NUM-MATH functions on every f16 and
bf16 input and on sampled f32 inputs, the conversions of NUM-CVT exhaustively over the 8- and
16-bit formats (sampled from f32), and the NaN bits of ``+ − × ÷`` (CUDA-RUN-3) — each against
the interpreter."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..backends.registry import use
from ..frontend import jit
from ..ir.tile import MATH_FNS
from ..lowering import lower
from ..ops import FUNCTIONS as op
from ..ops.exact import math_in_accum
from .device import compare_bits

__all__ = ["MATH_KERNEL", "items", "run", "sixteen_bit_inputs", "f32_samples"]

MATH_KERNEL = r"""
#include "tessera_device.cuh"
extern "C" __global__ void math_f32(const float* x, float* y, int fn, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  float r;
  switch (fn) {
    case 0: r = tsr_exp(v); break;      case 1: r = tsr_expm1(v); break;  case 2: r = tsr_log(v); break;
    case 3: r = tsr_sin(v); break;      case 4: r = tsr_cos(v); break;    case 5: r = tsr_tanh(v); break;
    case 6: r = tsr_erf(v); break;      case 7: r = tsr_erfc(v); break;   case 8: r = tsr_sigmoid(v); break;
    case 9: r = tsr_silu(v); break;     case 10: r = tsr_gelu(v); break;  case 11: r = tsr_gelu_tanh(v); break;
    default: r = tsr_rsqrt(v);
  }
  y[i] = r;
}
"""

#: conversions per source format: (target, rounding, overflow) (NUM-CVT-1 … 4)
CASTS = {
    "f32": [(t, r, o) for t in ("bf16", "f16", "fp8_e4m3", "fp8_e5m2") for r in ("rne", "rtz", "rup", "rdown")
            for o in ("native", "saturate")],
    "bf16": [(t, r, o) for t in ("f16", "fp8_e4m3", "fp8_e5m2") for r in ("rne", "rtz", "rup", "rdown")
             for o in ("native", "saturate")] + [("f32", "rne", "native"), ("fp8_e4m3", "stochastic", "native")],
    "f16": [(t, r, "native") for t in ("bf16", "fp8_e4m3", "fp8_e5m2") for r in ("rne", "rtz", "rup", "rdown")]
           + [("f32", "rne", "native")],
    "fp8": [(t, "rne", "native") for t in ("f32", "f16", "bf16")] + [("fp8_e4m3", r, "saturate") for r in ("rne", "rtz")],
}
_DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
           "fp8_e5m2": ml_dtypes.float8_e5m2}


def items(arch: str, quick: bool) -> list:
    if quick:
        return ["math_exp", "math_tanh", "cast_bf16", "nan_f32"]
    return [f"math_{f}" for f in MATH_FNS] + [f"cast_{s}" for s in CASTS] + ["nan_f32", "nan_bf16", "nan_f16"]


def sixteen_bit_inputs() -> np.ndarray:
    """Every f16 and every bf16 value, as f32 (2·2^16 values, NaNs and infinities included)."""
    codes = np.arange(1 << 16, dtype=np.uint16)
    return np.concatenate([codes.view(np.float16).astype(np.float32), codes.view(ml_dtypes.bfloat16).astype(np.float32)])


def f32_samples(n: int) -> np.ndarray:
    """``n`` f32 values of uniformly random bit patterns (seeded), specials included."""
    return np.random.default_rng(2026).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _math(ctx, name: str) -> dict:
    sixteen, sampled = sixteen_bit_inputs(), f32_samples({"full": 1 << 20, "quick": 1 << 16, "dry": 1 << 11}[ctx.scale])
    if ctx.scale == "dry":  # the harness runs a thread per input: a sample of the 16-bit values
        sixteen = sixteen[::64]
    x = np.concatenate([sixteen, sampled])
    module, _ = ctx.load(MATH_KERNEL)
    kernel = module.get_function("math_f32")
    dx, dy = ctx.to_device(x), ctx.cp.empty(x.size, dtype=np.float32)
    kernel(((x.size + 255) // 256, 1, 1), (256, 1, 1), (dx, dy, np.int32(MATH_FNS.index(name)), np.int64(x.size)))
    with np.errstate(all="ignore"):
        want = math_in_accum(name, x, accum="f32")
    result = compare_bits(ctx.cp.asnumpy(dy), want, [x])
    every = "sampled" if ctx.scale == "dry" else "every"
    result["detail"] = f"tsr_{name} on {x.size} inputs ({every} f16 and bf16, sampled f32): " + result.get(
        "detail", "every bit equal")
    return result


def _run_program(ctx, fn, args) -> list:
    """``fn`` traced, lowered and run on the device and on the interpreter: one comparison per result."""
    program = lower(jit(fn).trace(*args))
    with use("interp"):
        want, _ = program.run(*args)
    with use(ctx.backend):
        got, _ = program.run(*args)
    return [compare_bits(g, w, args) for g, w in zip(got, want)]


def _sources(source: str, scale: str):
    if source == "f32":
        yield "f32", f32_samples({"full": 1 << 20, "quick": 1 << 14, "dry": 1 << 10}[scale]).reshape(-1, 1024)
    elif source == "fp8":
        codes = np.arange(256, dtype=np.uint8).reshape(4, 64)
        yield "fp8_e4m3", codes.view(ml_dtypes.float8_e4m3fn)
        yield "fp8_e5m2", codes.view(ml_dtypes.float8_e5m2)
    else:
        codes = np.arange(1 << 16, dtype=np.uint16).reshape(64, 1024)
        yield source, codes[::16 if scale == "dry" else 1].view(_DTYPES[source])


def _casts(ctx, source: str) -> dict:
    done, bad = 0, []
    for fmt, x in _sources(source, ctx.scale):
        for target, rounding, overflow in CASTS[source][:3 if ctx.scale == "dry" else None]:
            if target == fmt:
                continue
            seed = {"seed": 11} if rounding == "stochastic" else {}
            (r,) = _run_program(ctx, lambda v: op.cast(v, target, rounding=rounding, overflow=overflow, **seed), [x])
            done += 1
            if r["status"] != "pass":
                bad.append(f"{fmt}->{target} {rounding}/{overflow}: {r['detail']}")
    every = "every" if source != "f32" and ctx.scale != "dry" else "sampled"
    detail = f"{done} conversions of {every} {source} value(s)"
    return {"status": "differ", "detail": f"{len(bad)} of {done} differ; first: {bad[0]}", "differing": bad} if bad \
        else {"status": "pass", "detail": detail + ": every bit equal"}


def _specials(fmt: str) -> np.ndarray:
    """The operands whose sums, differences, products and quotients produce or carry NaNs."""
    bits = {"f32": (np.uint32, [0x7FC00000, 0x7FC00001, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF]),
            "bf16": (np.uint16, [0x7FC0, 0x7FC1, 0xFFC0, 0x7F81, 0xFFFF]),
            "f16": (np.uint16, [0x7E00, 0x7E01, 0xFE00, 0x7C01, 0xFFFF])}[fmt]
    nans = np.array(bits[1], dtype=bits[0]).view(_DTYPES[fmt]).astype(np.float32)
    ordinary = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 3.0e38 if fmt != "f16" else 65504.0, 1e-40], np.float32)
    return np.concatenate([ordinary, nans]).astype(_DTYPES[fmt])


def _nan_bits(ctx, fmt: str) -> dict:
    s = _specials(fmt)
    a, b = np.repeat(s, s.size).reshape(s.size, s.size), np.tile(s, s.size).reshape(s.size, s.size)
    results = _run_program(ctx, lambda x, y: (x + y, x - y, x * y, x / y), [a, b])
    bad = [f"{o}: {r['detail']}" for o, r in zip("+-*/", results) if r["status"] != "pass"]
    return {"status": "differ", "detail": "; ".join(bad), "differing": bad} if bad else \
        {"status": "pass", "detail": f"{fmt} + - * / on {a.size} pairs of specials (NaN payloads, inf, 0): every bit "
                                     f"equal"}


def run(ctx, item: str) -> dict:
    kind, arg = item.split("_", 1)
    return {"math": _math, "cast": _casts, "nan": _nan_bits}[kind](ctx, arg)
