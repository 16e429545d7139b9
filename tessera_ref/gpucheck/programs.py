"""The programs the GPU check runs (CUDA-CHECK-2): one of every library kernel family, the
tensor-core GEMMs of the ``tc:`` policies, and the interpreter's results for them.

``LIBRARY`` maps a name to ``(function, example arguments, directives)``; the GPU check and the
compile-proof tests (tests/cuda) use the same table, so a kernel proven to compile in CI is the
kernel whose bits the check compares on a device.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..backends.registry import use
from ..frontend import jit
from ..lowering import lower
from ..numerics import Policy
from ..ops import FUNCTIONS as op
from ..ops.values import Array, asarray

__all__ = ["LIBRARY", "TC_GEMMS", "lowered", "on_the_interpreter", "random_inputs"]

F32 = np.ones((64, 64), np.float32)
F64 = np.ones((64, 64), np.float64)
BF16 = np.ones((64, 64), ml_dtypes.bfloat16)
E4M3 = np.ones((64, 64), ml_dtypes.float8_e4m3fn)
E5M2 = np.ones((8, 64), ml_dtypes.float8_e5m2)
BATCH = np.ones((2, 64, 32), np.float32)


def _tc(fmt: str, model: str, shape=(64, 64)):
    return asarray(np.ones(shape, {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
                                   "fp8_e5m2": ml_dtypes.float8_e5m2}[fmt]), policy=Policy(fmt, accum=model))


#: name -> (function, example arguments, directives): a kernel of every library family.
LIBRARY = {
    "matmul_f32": (lambda a, b: op.matmul(a, b), (F32, F32), dict(tile=(32, 32, 16), stages=3, padding=1)),
    "matmul_f32_swizzle": (lambda a, b: op.matmul(a, b), (F32, F32), dict(tile=(32, 32, 16), stages=3,
                                                                            swizzle="xor")),
    "gemm_f32_sync": (lambda a, b, c: op.gemm(a, b, c), (F32, F32, F32), dict(async_copy=False)),
    "matmul_bf16": (lambda a, b: op.matmul(a, b), (BF16, BF16), dict(tile=(32, 32, 16), stages=2)),
    "matmul_fp8": (lambda a, b: op.matmul(a, b), (E4M3, E4M3), dict(tile=(32, 32, 16), stages=2)),
    "matmul_batched": (lambda a, b: op.matmul(a, b), (BATCH, np.ones((2, 32, 64), np.float32)), {}),
    "matmul_transposed": (lambda a, b: op.matmul(a, b, transpose_a=True, transpose_b=True), (F32, F32), {}),
    "softmax": (lambda x: op.softmax(x), (F32,), {}),
    "softmax_e5m2": (lambda x: op.softmax(x), (E5M2,), {}),
    "layernorm": (lambda x: op.layernorm_safe(x), (F32,), {}),
    "rmsnorm": (lambda x: op.rmsnorm_safe(x), (F32,), {}),
    "sum": (lambda x: op.sum(x, axis=-1), (F32,), {}),
    "max": (lambda x: op.max(x, axis=-1), (F32,), {}),
    "mean_axis0": (lambda x: op.mean(x, axis=0), (F32,), {}),
    "elementwise_f32": (lambda a, b: op.maximum(a, b) * 2.0 - a, (F32, F32), dict(vectorize=4)),
    "elementwise_bf16": (lambda a, b: a * b + a, (BF16, BF16), {}),
    "elementwise_e4m3": (lambda a, b: a + b, (E4M3, E4M3), {}),
    "elementwise_broadcast": (lambda x, m, b, s: (x - m) * s + b,
                              (F32, np.ones((64, 1), np.float32), np.ones(64, np.float32), np.ones(1, np.float32)),
                              dict(vectorize=4)),
    "elementwise_math": (lambda x, y: (op.silu(x) * op.exp(y) + op.tanh(x), op.gelu(x) - op.rsqrt(op.abs(y)),
                                       op.pow(op.abs(x), op.log(op.sigmoid(y))) / op.erf(x),
                                       op.gelu(x, approximate="tanh") + op.sqrt(op.expm1(op.erfc(y)))),
                         (F32, F32), {}),
    "elementwise_math_bf16": (lambda x, b: op.sigmoid(x) * op.exp(x - b), (BF16, np.ones((64, 1), ml_dtypes.bfloat16)),
                              {}),
    "elementwise_sincos": (lambda x: op.sin(x) * op.cos(x), (F32,), {}),
    "elementwise_masks": (lambda a, b, c: (op.where(op.logical_and(op.less(a, b), op.logical_not(op.equal(b, c))), a,
                                                    op.fma(a, b, c)), op.greater_equal(a, c)),
                          (F32, F32, np.ones((64, 1), np.float32)), {}),
    "cast_f32_bf16": (lambda x: op.cast(x, "bf16"), (F32,), dict(vectorize=4)),
    "cast_f32_e4m3_rtz_saturate": (lambda x: op.cast(x, "fp8_e4m3", rounding="rtz", overflow="saturate"), (F32,), {}),
    "cast_f64_f32_rup": (lambda x: op.cast(x, "f32", rounding="rup"), (F64,), {}),
    "cast_bf16_f32": (lambda x: op.cast(x, "f32"), (BF16,), {}),
    "cast_e4m3_f16": (lambda x: op.cast(x, "f16"), (E4M3,), {}),
    "cast_e5m2_e4m3_rdown": (lambda x: op.cast(x, "fp8_e4m3", rounding="rdown"), (E5M2,), {}),
    "cast_bf16_e4m3_stochastic": (lambda x: op.cast(x, "fp8_e4m3", rounding="stochastic", seed=5), (BF16,), {}),
    "add_bf16_stochastic": (lambda a, b: op.add(a, b, seed=6),
                            (asarray(BF16, policy=Policy("bf16", rounding="stochastic")),) * 2, {}),
    "cast_fused": (lambda x, s: op.cast(op.cast(x, "f32") * s, "fp8_e5m2", overflow="saturate"), (BF16, F32), {}),
    "rand_f32": (lambda x: op.rand((64, 64), seed=7, stream=1) + x, (F32,), {}),
    "rand_f64": (lambda: op.rand((64, 64), seed=7, dtype="f64"), (), {}),
    "rand_bf16_rtz": (lambda: op.rand((64, 64), seed=7, dtype=Policy("bf16", rounding="rtz")), (), {}),
    "dropout_f32": (lambda x: op.dropout(x, 0.1, seed=3), (F32,), {}),
    "dropout_bf16": (lambda x: op.dropout(x, 0.5, seed=3), (BF16,), dict(vectorize=4)),
    "attention": (lambda q, k, v: op.flash_attention(q, k, v, block_k=32), (F32, F32, F32), dict(stages=1)),
    "attention_causal": (lambda q, k, v: op.flash_attention(q, k, v, causal=True, block_k=32), (F32, F32, F32),
                         dict(stages=3, padding=1)),
    "attention_bf16": (lambda q, k, v: op.flash_attention(q, k, v, causal=True, block_k=32),
                       (BF16, BF16, BF16), dict(stages=2)),
}

#: name -> the same, for the tensor-core GEMMs of each model (sm_80 and sm_90; CUDA-TC-1
#: compiles each only for its own architecture, so the check runs those of the device's).
TC_GEMMS = {
    f"gemm_{fmt}_{model.replace(':', '_')}": (lambda a, b: op.matmul(a, b), (_tc(fmt, model), _tc(fmt, model)),
                                             dict(tile=(64, 64, 32), lanes=128))
    for model, fmts in (("tc:sm80", ("bf16", "f16")), ("tc:sm90", ("bf16", "f16", "fp8_e4m3", "fp8_e5m2")))
    for fmt in fmts
}


def _entry(name: str):
    return LIBRARY[name] if name in LIBRARY else TC_GEMMS[name]


def lowered(name: str):
    """The lowered program of ``name`` (of :data:`LIBRARY` or :data:`TC_GEMMS`)."""
    fn, args, directives = _entry(name)
    return lower(jit(fn).trace(*args), directives or None)


def random_inputs(name: str, seed: int) -> list:
    """Random inputs of the shapes and formats of ``name``'s example arguments (policies kept)."""
    rng = np.random.default_rng(seed)
    out = []
    for a in _entry(name)[1]:
        if isinstance(a, Array):
            out.append(asarray(rng.standard_normal(a.shape).astype(a.data.dtype), policy=a.policy))
        else:
            out.append(rng.standard_normal(a.shape).astype(a.dtype))
    return out


def on_the_interpreter(name: str, seed: int):
    """``(program, inputs, want)``: program ``name`` lowered, random inputs of its example
    arguments' shapes and formats, and its results on the interpreter backend."""
    program = lowered(name)
    inputs = random_inputs(name, seed)
    with use("interp"):
        want, _ = program.run(*inputs)
    return program, inputs, want
