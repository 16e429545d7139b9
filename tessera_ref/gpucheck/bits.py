"""Stage ``bits`` (CUDA-CHECK-2): every library kernel and tensor-core GEMM on the device
against the interpreter, one program per item."""
from __future__ import annotations

from ..backends.registry import use
from .device import compare_bits
from .programs import LIBRARY, TC_GEMMS, on_the_interpreter

__all__ = ["items", "run"]

QUICK = ("matmul_f32", "softmax", "layernorm", "elementwise_bf16", "cast_f32_e4m3_rtz_saturate", "rand_f32",
         "attention_causal")


def items(arch: str, quick: bool) -> list:
    gemms = [n for n in TC_GEMMS if n.endswith(arch.replace("_", ""))]
    return list(QUICK) + gemms[:1] if quick else list(LIBRARY) + gemms


def run(ctx, name: str) -> dict:
    program, inputs, want = on_the_interpreter(name, 7)
    with use(ctx.backend):
        got, reports = program.run(*inputs)
    results = [compare_bits(g, w, inputs) for g, w in zip(got, want)]
    bad = [r for r in results if r["status"] != "pass"]
    kernels = sorted({r.kernel for r in reports})
    if bad:
        return {"status": "differ", "kernels": kernels, "detail": bad[0]["detail"], "outputs": results}
    return {"status": "pass", "kernels": kernels, "detail": f"{sum(r['elements'] for r in results)} elements equal"}
