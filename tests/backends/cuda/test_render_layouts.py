"""LOWER-TARGET-1 for fragment layouts (TILE-FRAG-1), vector accesses and index types."""
import numpy as np

import tessera_ref as t
from tessera_ref import op
from tessera_ref.backends.cuda.owned import Owned, mode_expr
from tessera_ref.backends.cuda.render import emit_cuda
from tessera_ref.ir import tile as T
from tessera_ref.ir.fragment import TVLayout, blocked
from tessera_ref.lowering import lower


def test_mode_expr_splits_an_index_first_mode_fastest():
    assert mode_expr("i", (16, 16), (4, 512)) == "(i % 16) * 4 + (i / 16) * 512"
    assert mode_expr("s", (4, 2), (1, 64)) == "(s % 4) + (s / 4) * 64"
    assert mode_expr("s", (1,), (0,)) == "0"


def _offsets(owned: Owned, lane: int, slot: int) -> int:
    """Evaluate the C expressions of ``owned`` for one lane and slot (Python's // is C's /
    for these non-negative values)."""
    env = {"threadIdx": type("T", (), {"x": lane})}
    py = lambda e: e.replace("/", "//")  # noqa: E731
    return eval(py(owned.lane_offset), env) + eval(py(owned.value_offset(str(slot))))


def test_the_c_expressions_of_a_layout_name_the_elements_the_layout_does():
    layout = blocked(64, 64, 128)
    owned = Owned(layout, (64, 64))
    table = layout.offsets()
    for lane in (0, 1, 7, 8, 77, 127):
        for slot in range(layout.values):
            assert _offsets(owned, lane, slot) == table[lane, slot]
    assert owned.separable and owned.row_major_slots()


def test_a_layout_that_is_not_separable_renders_with_the_generic_slot_loop():
    # lane l owns elements l and l + 32 of a [4, 16] fragment: its column l mod 16 is no lane
    # mode's column part, so there is no micro-tile origin; slots go through e / 16, e % 16
    layout = TVLayout((32,), (1,), (2,), (32,))
    assert layout.problem((4, 16)) is None and not Owned(layout, (4, 16)).separable
    assert Owned(TVLayout((16, 2), (1, 32), (2,), (16,)), (4, 16)).separable  # lane (i, j): column i, rows 2j, 2j+1
    kb = T.KernelBuilder("k", [("X", T.buffer((4, 16), "f32")), ("Y", T.buffer((4, 16), "f32"), True)])
    X, Y = kb.params
    f = kb.frag_load(X, layout=layout)
    kb.frag_store(Y, kb.binary("add", f, f), layout=layout)
    text = emit_cuda(kb.finish())
    assert text.count("const int e = threadIdx.x + s * 32;") == 3  # load, add, store
    assert "Y[(e / 16) * 16 + (e % 16) * 1] = tsr_canon(v1[s]);" in text  # a sum: its NaN made canonical


def test_indices_are_int_for_static_buffers_and_long_for_symbolic_sizes():
    a = np.ones((64, 64), np.float32)
    text = emit_cuda(lower(t.jit(lambda x, y: op.matmul(x, y)).trace(a, a)).tile)
    assert "const int " in text and "long" not in text.split("generated from Tile IR")[1].split("\n", 1)[1]
    kb = T.KernelBuilder("k", [("X", T.buffer(("n",), "f32")), ("Y", T.buffer(("n",), "f32"), True)])
    X, Y = kb.params
    kb.store(Y, [kb.lane_id()], kb.load(X, [kb.lane_id()]))
    text = emit_cuda(kb.finish())
    assert "long v0 = threadIdx.x;" in text and "long n" in text


def test_the_fast_sgemm_text_uses_vector_accesses_and_16_byte_cp_async():
    a = np.ones((256, 64), np.float32)
    text = emit_cuda(lower(t.jit(lambda x, y: op.matmul(x, y)).trace(a, a.T.copy()),
                           dict(tile=(128, 128, 8), lanes=256)).tile)
    assert text.count("reinterpret_cast<const float4*>") == 4  # per k: A rows 0-3 and 64-67, B the same
    assert text.count("make_float4(") == 16  # the 8 x 8 micro-tile stored as 16 float4
    assert "tsr_cp_async<16>(" in text and "tsr_cp_async<4>(" in text  # B rows; A transposed element-wise
    assert "for (int k = 0; k < 8; ++k)" in text and "fmaf(ra[i], rb[j]" in text


def test_a_tensor_core_mma_without_the_mma_sync_layout_is_a_lowering_error():
    import pytest
    from tessera_ref.errors import LoweringError
    pol = t.Policy("bf16", accum="tc:sm80")
    import ml_dtypes
    a = t.asarray(np.ones((32, 32), ml_dtypes.bfloat16), policy=pol)
    program = lower(t.jit(lambda p, q: op.matmul(p, q)).trace(a, a), dict(tile=(16, 16, 16)))  # 2 tiles, 4 warps
    with pytest.raises(LoweringError, match="mma.sync.m16n8k16"):
        emit_cuda(program.tile)
