"""LOWER-MATMUL-5 / LOWER-TARGET-1 proven on the SASS (no GPU): the register-blocked exact
SGEMM compiles to a main loop of at least 75% FFMA with 128-bit shared loads and 16-byte
cp.async, no local memory, 0 spills and 0 stack; its variants (transposed, batched, with C,
bf16 and fp8 operands converted to f32 in registers) keep 0 spills / 0 stack / no LDL/STL."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import op
from tessera_ref.backends.cuda.compile import build
from tessera_ref.backends.cuda.report import ARCH_LIMITS, BUDGET_REGISTERS
from tessera_ref.backends.cuda.render import dynamic_smem
from tessera_ref.backends.cuda.source import render
from tessera_ref.lowering import lower

from cuda_programs import needs_toolchain

pytestmark = needs_toolchain

FAST = dict(tile=(128, 128, 8), lanes=256)
BF16, E4M3 = np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn)


def _ones(shape, dtype=np.float32):
    return np.ones(shape, dtype)


def _kernel(fn, args, arch, directives=FAST):
    (k,) = build(render(lower(t.jit(fn).trace(*args), directives).tile), arch).kernels.values()
    return k


def _dynamic_smem(fn, args, directives=FAST) -> int:
    (need,) = dynamic_smem(lower(t.jit(fn).trace(*args), directives).tile).values()
    return need


def _local_memory(k) -> int:
    return sum(n for o, n in k.sass.items() if o.startswith(("LDL", "STL")))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_exact_sgemm_main_loop_is_ffma_with_vector_shared_loads_and_16_byte_cp_async(arch):
    k = _kernel(lambda a, b: op.matmul(a, b), (_ones((256, 64)), _ones((64, 256))), arch)
    assert k.spill_stores == k.spill_loads == k.stack_bytes == 0 and _local_memory(k) == 0, k
    assert k.registers <= BUDGET_REGISTERS, k
    # two stages of A [8, 128] and B [8, 128] f32, in dynamic shared memory (LOWER-TARGET-2)
    assert k.shared_bytes == 0
    assert _dynamic_smem(lambda a, b: op.matmul(a, b), (_ones((256, 64)), _ones((64, 256)))) == 2 * 2 * 8 * 128 * 4
    assert k.share("FFMA") >= 0.75, k.main_loop
    assert k.main_loop["FFMA"] == 8 * 8 * 8  # 8 x 8 micro-tile, BK = 8
    assert k.main_loop["LDS.128"] == 4 * 8  # per k: two 4-row pieces of A, two 4-column pieces of B
    assert any(o.startswith("LDGSTS") and o.endswith(".128") for o in k.main_loop), k.main_loop


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name, fn, args", [
    ("transpose_a", lambda a, b: op.matmul(a, b, transpose_a=True), (_ones((64, 256)), _ones((64, 256)))),
    ("transpose_b", lambda a, b: op.matmul(a, b, transpose_b=True), (_ones((256, 64)), _ones((256, 64)))),
    ("batched", lambda a, b: op.matmul(a, b), (_ones((2, 256, 64)), _ones((2, 64, 256)))),
    ("gemm", lambda a, b, c: op.gemm(a, b, c), (_ones((256, 64)), _ones((64, 256)), _ones((256, 256)))),
    ("bf16", lambda a, b: op.matmul(a, b), (_ones((256, 64), BF16), _ones((64, 256), BF16))),
    ("fp8_e4m3", lambda a, b: op.matmul(a, b), (_ones((256, 64), E4M3), _ones((64, 256), E4M3))),
])
def test_the_sgemm_variants_stay_in_registers(name, fn, args, arch):
    k = _kernel(fn, args, arch)
    assert k.spill_stores == k.spill_loads == k.stack_bytes == 0 and _local_memory(k) == 0, (name, k)
    assert k.registers <= BUDGET_REGISTERS, (name, k)  # __launch_bounds__(256, 2): the tile's register budget
    assert k.shared_bytes <= ARCH_LIMITS[arch].static_smem_per_block, (name, k)
    # the same fma chain on f32 registers (fp8 on sm_80 converts in software, whose loop may be
    # the "main loop" of the report: count the whole kernel)
    assert k.sass["FFMA"] >= 8 * 8 * 8, (name, k.sass)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("fmt, dtype", [("bf16", BF16), ("f16", np.float16)])
def test_a_tensor_core_matmul_is_mma_sync_hmma(fmt, dtype, arch):
    pol = t.Policy(fmt, accum=f"tc:{arch.replace('_', '')}")  # each model on its own architecture (CUDA-TC-1)
    a, b = (t.asarray(_ones(s, dtype), policy=pol) for s in ((256, 64), (64, 256)))
    k = _kernel(lambda p, q: op.matmul(p, q), (a, b), arch, dict(tile=(128, 128, 32), lanes=256))
    assert k.spill_stores == k.spill_loads == k.stack_bytes == 0 and _local_memory(k) == 0, k
    # per K tile of 32: 2 instruction steps x 2 x 8 tiles of 16 x 8 per warp
    hmma = sum(n for o, n in k.main_loop.items() if o.startswith("HMMA.16816.F32"))  # .BF16 for bf16
    assert hmma == 32, k.main_loop
    assert not any(o.startswith("FFMA") for o in k.main_loop), k.main_loop
