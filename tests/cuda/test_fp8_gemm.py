"""CUDA-TC-3: an fp8 matmul under ``tc:sm90`` renders ``mma.sync.m16n8k32`` (the header's
``tsr_mma_m16n8k32_{e4m3,e5m2}``), compiles for sm_90 only (CUDA-TC-1), and what nvcc makes
of it is visible in the SASS: F2FP unpacks to f16 and two f16 HMMA.16816 per instruction, no
local memory. The shapes the instruction cannot take are a LoweringError. On a GPU the
kernel gives the interpreter's bits (gpu marker; the model is validated on an H200)."""
import re

import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import backends, op
from tessera_ref.backends.cuda.compile import TensorCoreArchError, build, check_tc_arch
from tessera_ref.backends.cuda.report import BUDGET_REGISTERS
from tessera_ref.backends.cuda.source import render
from tessera_ref.errors import BackendError, DTypeError, LoweringError, PolicyError
from tessera_ref.lowering import lower
from tessera_ref.numerics import tc

from cuda_programs import needs_toolchain

DTYPES = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}
TILE = dict(tile=(128, 128, 32), lanes=256)


def _program(fmt, shape=(256, 64, 256), directives=TILE, values=None):
    M, K, N = shape
    pol = t.Policy(fmt, accum="tc:sm90")
    a, b = values or (np.ones((M, K), DTYPES[fmt]), np.ones((K, N), DTYPES[fmt]))
    return lower(t.jit(lambda p, q: op.matmul(p, q)).trace(t.asarray(a, policy=pol), t.asarray(b, policy=pol)),
                 directives)


@pytest.mark.parametrize("fmt", sorted(DTYPES))
def test_fp8_renders_m16n8k32_in_the_ptx_fragment_layout(fmt):
    src = render(_program(fmt).tile)
    ab = fmt[4:]
    text = src.text
    assert text.count(f"tsr_mma_m16n8k32_{ab}(&") == 16  # 2 x 8 tiles of 16 x 8 per warp, one k step of 32
    assert f"mma.sync.aligned.m16n8k32.row.col.f32.{ab}.{ab}.f32" in text and "m16n8k16" not in text
    assert "for (int kk = 0; kk < 32; kk += 32)" in text
    # A: 32-bit loads of four consecutive k at 4t and 4t + 16, rows g and g + 8; B: four bytes packed
    a_regs = re.findall(r"fa\[0\]\[(\d)\] = \*reinterpret_cast<const unsigned\*>\(&\w+\[\w+ \+ "
                        r"\(mr\d+ \+ (\d+)\) \* 32 \+ \(kk \+ 4 \* t\d+ \+ (\d+)\) \* 1\]\);", text)
    assert a_regs == [("0", "0", "0"), ("1", "8", "0"), ("2", "0", "16"), ("3", "8", "16")]  # (register, row, k)
    b_reg = re.search(r"fb\[0\]\[1\] = (.*);", text).group(1)
    assert re.findall(r"\(kk \+ 4 \* t\d+ \+ (\d+)\) \* 128", b_reg) == ["16", "17", "18", "19"]
    assert b_reg.count("reinterpret_cast<const unsigned char*>") == 4 and "<< 8" in b_reg and "<< 24" in b_reg
    assert "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900\n#error \"accum='tc:sm90'" in text
    assert "asm volatile" not in text.split("tessera_device.cuh")[-1]
    assert src.tc_models and src.tc_models[0][1] == "tc:sm90"


@needs_toolchain
@pytest.mark.parametrize("fmt", sorted(DTYPES))
def test_fp8_compiles_for_sm_90_to_unpacks_and_f16_hmma(fmt):
    (k,) = build(render(_program(fmt).tile), "sm_90").kernels.values()
    assert k.spill_stores == k.spill_loads == k.stack_bytes == 0, k
    assert not any(o.startswith(("LDL", "STL")) for o in k.sass), k.sass
    assert k.registers <= BUDGET_REGISTERS, k
    unpack = f"F2FP.F16.{fmt[4:].upper()}.UNPACK_B"
    # per K tile of 32: 16 m16n8k32 per warp, each two f16 HMMA.16816 and 4 FADDs of C (NUM-TC-1's fp8 row)
    assert sum(n for o, n in k.main_loop.items() if o.startswith("HMMA.16816.F32")) == 32, k.main_loop
    assert k.main_loop.get(unpack, 0) > 0, k.main_loop
    assert k.main_loop.get("FADD", 0) == 16 * 4, k.main_loop
    assert not any(o.startswith("FFMA") for o in k.main_loop), k.main_loop


@needs_toolchain
def test_fp8_is_refused_for_sm_80():
    src = render(_program("fp8_e4m3").tile)
    with pytest.raises(TensorCoreArchError) as info:
        check_tc_arch(src, "sm_80")
    e = info.value
    assert "accum='tc:sm90'" in e.what and "sm_80" in e.what and "compile it for sm_90" in e.fix
    with pytest.raises(TensorCoreArchError):
        build(src, "sm_80")
    with pytest.raises(BackendError, match="tc:sm90.*is sm_90's tensor-core model"):
        build(src.text, "sm_80")  # plain text: NVRTC meets the #error


def test_mixed_e4m3_e5m2_operands_are_refused_at_the_matmul():
    """PTX has m16n8k32 with .e4m3 x .e5m2; the Graph IR matmul takes one format (and NUM-TC-1
    models none mixed), so no such kernel is ever rendered."""
    a = t.asarray(np.ones((64, 64), DTYPES["fp8_e4m3"]), policy=t.Policy("fp8_e4m3", accum="tc:sm90"))
    b = t.asarray(np.ones((64, 64), DTYPES["fp8_e5m2"]), policy=t.Policy("fp8_e5m2", accum="tc:sm90"))
    with pytest.raises(DTypeError, match="different element types"):
        t.jit(lambda p, q: op.matmul(p, q)).trace(a, b)


def test_sm80_has_no_fp8_model():
    with pytest.raises(PolicyError, match="does not take fp8_e4m3"):
        t.asarray(np.ones((32, 32), ml_dtypes.float8_e4m3fn), policy=t.Policy("fp8_e4m3", accum="tc:sm80"))


@pytest.mark.parametrize("shape, directives, match", [
    ((64, 48, 64), None, "the K tile 24 splits the k = 32 instructions of tc:sm90"),  # K not a multiple of 32
    ((64, 64, 64), dict(tile=(64, 64, 16)), "the K tile 16 splits the k = 32 instructions"),  # bf16's k step
])
def test_k_tiles_that_split_the_blocks_are_a_lowering_error(shape, directives, match):
    with pytest.raises(LoweringError, match=match) as info:
        _program("fp8_e4m3", shape, directives)
    assert "multiple of 32" in info.value.fix and "test_fp8_gemm.py" in str(info.value)


@pytest.mark.parametrize("directives", [dict(padding=1), dict(swizzle="xor")])
def test_staging_the_instruction_cannot_read_is_a_lowering_error(directives):
    program = _program("fp8_e4m3", (64, 64, 64), directives)
    with pytest.raises(LoweringError, match="m16n8k32 .fp8_e4m3, fp8_e5m2.*4-byte") as info:
        render(program.tile)
    assert "no swizzle" in info.value.fix and "test_fp8_gemm.py" in str(info.value)


@pytest.mark.gpu
@needs_toolchain
@pytest.mark.parametrize("fmt", sorted(DTYPES))
def test_fp8_gemm_on_the_gpu_gives_the_interpreters_bits(fmt):
    """tc:sm90's fp8 instruction is validated on an H200 (NUM-TC-1, CUDA-TC-2), so the kernel
    must give the interpreter's bits, as bf16's and f16's do (operands of spread exponents: the
    blocks' alignment matters)."""
    cupy = pytest.importorskip("cupy")
    if not cupy.cuda.is_available() or cupy.cuda.Device().compute_capability != "90":
        pytest.skip("needs an sm_90 GPU")
    rng = np.random.default_rng(3)
    A = (rng.standard_normal((256, 128)) * np.exp2(rng.integers(-3, 4, (256, 128)))).astype(DTYPES[fmt])
    B = rng.standard_normal((128, 256)).astype(DTYPES[fmt])
    program = _program(fmt, (256, 128, 256), TILE, (A, B))
    with backends.use("interp"):
        (want,), _ = program.run(A, B)
    with backends.use("cuda"):
        (got,), _ = program.run(A, B)
    assert np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))
    model = tc.mma(A, B, np.zeros((256, 256), np.float32), "tc:sm90").astype(DTYPES[fmt])
    assert np.array_equal(np.asarray(want).view(np.uint8), model.view(np.uint8))
