"""SASS proofs (no GPU) of the row and attention kernels: NUM-RED-2's butterfly is warp
shuffles (SHFL.BFLY) with no barrier and no shared memory (LOWER-ROWS-1), FlashAttention
passes only its four staging barriers (LOWER-FA-1), and its shared memory is dynamic, above
48 KB and within each architecture's budget (LOWER-TARGET-2)."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import op
from tessera_ref.backends.cuda.compile import build
from tessera_ref.backends.cuda.render import SMEM_LIMIT, dynamic_smem, emit_cuda
from tessera_ref.backends.cuda.source import render
from tessera_ref.errors import LoweringError
from tessera_ref.lowering import lower

from cuda_programs import needs_toolchain

pytestmark = needs_toolchain

ARCHS = ["sm_80", "sm_90"]
X = np.ones((64, 1000), np.float32)
#: row op -> (function, its NUM-RED-2 reductions)
ROWS = {"sum": (lambda x: op.sum(x, axis=1), 1), "mean": (lambda x: op.mean(x, axis=1), 1),
        "max": (lambda x: op.max(x, axis=1), 1), "min": (lambda x: op.min(x, axis=1), 1),
        "softmax": (lambda x: op.softmax(x), 2), "layernorm_safe": (lambda x: op.layernorm_safe(x), 2),
        "rmsnorm_safe": (lambda x: op.rmsnorm_safe(x), 1)}


def _kernel(program, arch):
    (k,) = build(render(program.tile), arch).kernels.values()
    return k


def _barriers(counts) -> int:
    return sum(n for o, n in counts.items() if o.startswith("BAR"))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(ROWS))
def test_row_reductions_are_shuffle_butterflies_without_barriers(name, dtype, arch):
    fn, reductions = ROWS[name]
    program = lower(t.jit(fn).trace(X.astype(dtype)))
    k = _kernel(program, arch)
    assert k.sass["SHFL.BFLY"] == 5 * reductions, k.sass
    assert _barriers(k.sass) == 0 and k.barriers == 0  # no BAR anywhere, so none inside a butterfly
    assert k.shared_bytes == 0 and list(dynamic_smem(program.tile).values()) == [0]
    assert k.spill_stores == k.spill_loads == k.stack_bytes == 0 and k.registers <= 64, k


def _flash(q, causal=False, **schedule):
    block_k = schedule["tile"][1]
    f = lambda q, k, v: op.flash_attention(q, k, v, block_k=block_k, causal=causal)  # noqa: E731
    return lower(t.jit(f).trace(q, q, q), dict(async_copy=True, **schedule))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_has_four_barriers_and_shuffle_row_steps(causal, arch):
    """f32, tile (64, 64, 64), padding 1, 2 stages: 117,248 B of dynamic shared memory (over
    48 KB). The code holds the pipeline's, Kᵀ's, S's and P's barriers, 4 in all; the per-row
    max and sum are 10 shuffles (the row steps)."""
    program = _flash(np.ones((256, 64), np.float32), causal, tile=(64, 64, 64), padding=1, stages=2)
    (need,) = dynamic_smem(program.tile).values()
    assert need == (64 * 65 + 2 * 2 * 64 * 65 + 64 * 65 + 64 * 65 + 3 * 64) * 4 == 117_248
    k = _kernel(program, arch)
    assert _barriers(k.sass) == 4 and k.sass["BAR.SYNC.DEFER_BLOCKING"] == 4, k.sass
    assert k.sass["SHFL.BFLY"] == 10, k.sass
    assert k.shared_bytes == 0 and k.spill_stores == k.spill_loads == 0 and need <= SMEM_LIMIT[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_seed_003_flash_attention_compiles_with_dynamic_shared_memory(arch):
    """Seed 003's schedule — f16, tile (128, 128, 64), padding 1, 3 stages — needs 200,576 B:
    within sm_90's 227 KB, over sm_80's 163 KB, where the renderer refuses it."""
    program = _flash(np.ones((1024, 64), np.float16), tile=(128, 128, 64), padding=1, stages=3)
    (need,) = dynamic_smem(program.tile).values()
    assert need == 200_576
    if arch == "sm_80":
        with pytest.raises(LoweringError, match="200,576 B .* over the 166,912 B"):
            emit_cuda(program.tile, arch=arch)
        return
    assert need <= SMEM_LIMIT[arch]
    # rows of 65 halves are 130 bytes apart, so no 4-byte piece is aligned: the lanes copy them
    assert "cp.async cannot make (pieces under 4 bytes)" in emit_cuda(program.tile, arch=arch)
    k = _kernel(program, arch)
    assert k.sass["SHFL.BFLY"] == 10 and _barriers(k.sass) == 4
    assert k.spill_stores == k.spill_loads == k.stack_bytes == 0, k


@pytest.mark.parametrize("arch", ARCHS)
def test_a_fused_chain_is_one_kernel_without_contraction(arch):
    """(a*b + c) - a fused: one kernel whose SASS multiplies and adds separately (FMUL, FADD,
    no FFMA: NUM-EW-2) and uses no shared memory or barrier."""
    f = lambda a, b, c: a * b + c - a  # noqa: E731
    program = lower(t.jit(f).trace(X, X, X))
    k = _kernel(program, arch)
    assert k.sass["FMUL"] == 1 and k.sass["FADD"] >= 2 and not any(o.startswith("FFMA") for o in k.sass), k.sass
    assert _barriers(k.sass) == 0 and k.shared_bytes == 0 and k.stack_bytes == 0
