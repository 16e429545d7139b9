"""Tile IR: building, verification and the text round trip (TILE-IR-1)."""
import pytest

from tessera_ref.ir import IRError, VerifyError, parse_module, verify
from tessera_ref.ir import tile as T


def _saxpy_module():
    kb = T.KernelBuilder("saxpy", [("x", T.buffer(("n",), "f32")), ("y", T.buffer(("n",), "f32"), True),
                                   ("alpha", "f32")], location="k.py:3")
    x, y, alpha = kb.params
    i = kb.linear_id()
    n = kb.dim(x, 0)

    def then():
        v = kb.binary("add", kb.binary("mul", alpha, kb.load(x, [i])), kb.load(y, [i]))
        kb.store(y, [i], v)
        return []
    kb.if_(kb.binary("lt", i, n), then=then)
    s = kb.alloc((64, 32), "f16", swizzle="xor", pad=0)
    acc = kb.fill((64, 64), "f32", 0.0)
    kb.cp_async(kb.alloc((16,), "f32"), kb.subview(x, [kb.const(0)], (16,)))

    def body(k, acc):
        return [kb.mma(kb.subview(s, [0, k], (64, 16)), kb.fill((16, 64), "f16"), acc)]
    kb.for_(0, 32, 16, init=[acc], body=body, prefetch=2)
    kb.commit()
    kb.wait(1)
    kb.barrier()
    return kb.finish()


def test_round_trip_is_byte_identical():
    text = str(_saxpy_module())
    again = parse_module(text)
    verify(again)
    assert str(again) == text
    assert '"tessera.tile.mma"' in text and "tile.mut = [\"y\"]" in text and "tile.sizes = {n = [\"x\", 0]}" in text


def test_verifier_rejects_mismatched_mma():
    kb = T.KernelBuilder("bad", [], location="k.py:1")
    a, b, acc = kb.fill((4, 8), "f32"), kb.fill((4, 8), "f32"), kb.fill((4, 8), "f32")
    kb.mma(a, b, acc)
    with pytest.raises(VerifyError, match="needs a \\[M, K\\], b \\[K, N\\]"):
        kb.finish()


def test_unknown_tile_op_is_reported():
    text = str(_saxpy_module()).replace('"tessera.tile.barrier"', '"tessera.tile.barier"')
    with pytest.raises(IRError, match="barier"):
        verify(parse_module(text))


def test_scalar_parameters_cannot_be_mut():
    with pytest.raises(IRError, match="cannot be mut"):
        T.KernelBuilder("k", [("alpha", "f32", True)])


def test_front_end_kernels_round_trip():
    import pathlib

    from tile_kernels import matmul

    from tessera_ref import kernel

    tp_axpy = kernel.load(pathlib.Path(__file__).parent / "data" / "tp_axpy.tsr")
    for module in (matmul.module, tp_axpy.base.module):
        text = str(module)
        assert str(parse_module(text)) == text


def test_lowered_narrow_batched_transposed_kernels_round_trip():
    """bf16 / fp8 buffers, 3-D batched operands, the transposing copy: the text round-trips."""
    import ml_dtypes
    import numpy as np

    import tessera_ref as t
    from tessera_ref import op
    from tessera_ref.lowering import lower

    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        a = np.ones((2, 32, 32), dtype)
        g = t.jit(lambda a, b: op.softmax(op.matmul(a, b, transpose_b=True)))
        text = str(lower(g.trace(a, a)).tile)
        again = parse_module(text)
        verify(again)
        assert str(again) == text
        assert ("xbf16>" if dtype == ml_dtypes.bfloat16 else "xfp8_e4m3>") in text
