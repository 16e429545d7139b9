"""SASS proofs (no GPU) of the cast and random kernels (LOWER-CAST-1, LOWER-RNG-1,
CUDA-HDR-3, CUDA-HDR-7): the Philox4x32-10 draw is integer multiplies (one 32×32→64 product
or high half per Philox product: 20 per block, one folded where a counter word is the
constant 0) and XORs with no floating-point arithmetic but the one exact conversion of the
24-bit draw; conversions run in registers (no local memory, no stack) and a widening cast of
a 16-bit value needs no double precision."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import op
from tessera_ref.backends.cuda.compile import build
from tessera_ref.backends.cuda.source import render
from tessera_ref.lowering import lower

from cuda_programs import needs_toolchain

pytestmark = needs_toolchain

ARCHS = ["sm_80", "sm_90"]


def _kernel(fn, *args, arch):
    (k,) = build(render(lower(t.jit(fn).trace(*args)).tile), arch).kernels.values()
    return k


def _count(sass, *prefixes):
    return sum(n for o, n in sass.items() if o.startswith(prefixes))


@pytest.mark.parametrize("arch", ARCHS)
def test_one_philox_block_per_draw_in_integer_multiplies(arch):
    k = _kernel(lambda: op.rand((64, 64), seed=5), arch=arch)
    products = _count(k.sass, "IMAD.WIDE.U32", "IMAD.HI.U32")
    assert 19 <= products <= 20, k.sass
    assert _count(k.sass, "LOP3") >= 20  # the XORs of the Feistel rounds (two per round at least)
    assert _count(k.sass, "FADD", "FMUL", "FFMA", "DADD", "DMUL", "DFMA") <= 1, k.sass  # the exact * 2^-24
    assert not _count(k.sass, "LDL", "STL") and k.stack_bytes == 0 and k.registers <= 32


@pytest.mark.parametrize("arch", ARCHS)
def test_dropout_draws_and_divides_in_registers(arch):
    k = _kernel(lambda x: op.dropout(x, 0.25, seed=5), np.ones((64, 64), np.float32), arch=arch)
    assert 19 <= _count(k.sass, "IMAD.WIDE.U32", "IMAD.HI.U32") <= 20
    assert not _count(k.sass, "LDL", "STL") and k.stack_bytes == 0 and k.spill_stores == 0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("to, rounding, overflow", [("bf16", "rne", "native"), ("fp8_e4m3", "rtz", "saturate"),
                                                    ("f16", "rup", "native")])
def test_narrowing_casts_run_in_registers(arch, to, rounding, overflow):
    k = _kernel(lambda x: op.cast(x, to, rounding=rounding, overflow=overflow), np.ones((64, 64), np.float32),
                arch=arch)
    assert not _count(k.sass, "LDL", "STL") and k.stack_bytes == 0 and k.spill_stores == 0 and k.registers <= 40


@pytest.mark.parametrize("arch", ARCHS)
def test_a_widening_cast_is_a_conversion_and_a_nan_test(arch):
    k = _kernel(lambda x: op.cast(x, "f32"), np.ones((64, 64), ml_dtypes.bfloat16), arch=arch)
    assert not _count(k.sass, "D", "F2F.F64") and sum(k.sass.values()) < 60, k.sass
