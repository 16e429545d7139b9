"""Dynamic shared memory in the CUDA text: one extern array, 128-byte boundaries, the byte count
a launch needs, and the per-architecture budget (hardware.md: 227 KB sm_90, 163 KB sm_80)."""
import re

import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import op
from tessera_ref.backends.cuda.render import SMEM_LIMIT, dynamic_smem, emit_cuda
from tessera_ref.errors import LoweringError
from tessera_ref.ir import tile as T
from tessera_ref.lowering import lower


def _seed_003(stages: int):
    """Seed 003's FlashAttention schedule: f16, S = 1024, D = 64, tile (128, 128, 64), padding 1."""
    q = np.zeros((1024, 64), np.float16)
    graph = t.jit(lambda q, k, v: op.flash_attention(q, k, v, block_k=128)).trace(q, q, q)
    return lower(graph, dict(tile=(128, 128, 64), padding=1, async_copy=True, stages=stages))


def test_seed_003_three_stages_fits_sm_90_not_sm_80():
    program = _seed_003(3)
    (need,) = dynamic_smem(program.tile).values()
    # Q 128x(64+1) f16, K and V rings 3x128x(64+1) f16 each, Kt 64x(128+1) f16, S/P 128x(128+1) f32, m, l, alpha
    # 128 f32 each; every one a multiple of 128 B, so no gaps
    assert need == 128 * 65 * 2 + 2 * 3 * 128 * 65 * 2 + 64 * 129 * 2 + 128 * 129 * 4 + 3 * 128 * 4 == 200_576
    text = emit_cuda(program.tile, arch="sm_90")
    assert "extern __shared__ __align__(16) unsigned char tsr_smem[];" in text
    assert "// dynamic shared memory: 200576 B; over 49,152 B: raise cudaFuncAttributeMaxDynamicSharedMemorySize" \
        in text
    assert "__shared__ __align__(128)" not in text  # no static arrays left
    with pytest.raises(LoweringError, match=r"needs 200,576 B .* over the 166,912 B \(163 KB\) a block may use on "
                                            r"sm_80") as info:
        emit_cuda(program.tile, arch=["sm_90", "sm_80"])
    assert "fewer pipeline stages" in info.value.fix


def test_four_stages_are_over_the_sm_90_budget():
    with pytest.raises(LoweringError,
                       match=r"needs 233,856 B .* over the 232,448 B \(227 KB\) a block may use on sm_90"):
        emit_cuda(_seed_003(4).tile)


def test_allocations_sit_at_128_byte_boundaries_in_program_order():
    kb = T.KernelBuilder("k", [("y", T.buffer((4,), "f32"), True)])
    a = kb.alloc((3, 5), "f16", pad=1)      # 3 x 6 x 2 = 36 B -> 128
    b = kb.alloc((2, 40), "f32")            # 320 B -> 384
    c = kb.alloc((1,), "fp8_e4m3")          # 1 B -> 128
    kb.store(kb.params[0], [kb.lane_id()], kb.cast(kb.load(b, [0, kb.lane_id()]), "f32"))
    del a, c
    module = kb.finish()
    func = module.body.first_op
    offsets, total = T.shared_layout(func)
    assert sorted(offsets.values()) == [0, 128, 512] and total == 640
    text = emit_cuda(module)
    assert re.findall(r"reinterpret_cast<(\w+)\*>\(tsr_smem \+ (\d+)\)", text) == \
        [("__half", "0"), ("float", "128"), ("__nv_fp8_e4m3", "512")]
    assert "// dynamic shared memory: 640 B\n" in text  # under 48 KB: no attribute to raise


def test_a_kernel_without_allocations_declares_no_shared_memory():
    program = lower(t.jit(lambda x: op.sum(x, axis=1)).trace(np.ones((8, 100), np.float32)))
    assert list(dynamic_smem(program.tile).values()) == [0]
    assert "tsr_smem" not in emit_cuda(program.tile)


def test_an_unknown_architecture_is_refused():
    with pytest.raises(LoweringError, match="not 'sm_75'"):
        emit_cuda(_seed_003(2).tile, arch="sm_75")
    assert SMEM_LIMIT == {"sm_80": 166_912, "sm_90": 232_448}
