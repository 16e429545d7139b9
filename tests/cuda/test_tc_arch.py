"""CUDA-TC-1: a kernel under a ``tc:`` policy compiles only for its model's architecture — a
model of another GPU generation would be computed with that generation's tensor cores, whose
bits differ — refused with a BackendError naming the policy, the architecture and the fix,
before NVRTC runs (and by an #error in the text for compilers outside ``build``)."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import op
from tessera_ref.backends.cuda.compile import TensorCoreArchError, build, check_tc_arch
from tessera_ref.backends.cuda.source import render
from tessera_ref.errors import BackendError
from tessera_ref.lowering import lower

from cuda_programs import needs_toolchain


def _tc_source(model, fmt="bf16", dtype=ml_dtypes.bfloat16):
    pol = t.Policy(fmt, accum=model)
    a, b = (t.asarray(np.ones(s, dtype), policy=pol) for s in ((128, 64), (64, 128)))
    return render(lower(t.jit(lambda p, q: op.matmul(p, q)).trace(a, b), dict(tile=(128, 128, 32), lanes=256)).tile)


@pytest.mark.parametrize("model, arch, want", [("tc:sm80", "sm_90", "sm_80"), ("tc:sm90", "sm_80", "sm_90")])
def test_a_model_of_another_architecture_is_refused(model, arch, want):
    src = _tc_source(model)
    with pytest.raises(TensorCoreArchError) as info:
        check_tc_arch(src, arch)
    e = info.value
    assert isinstance(e, BackendError) and f"accum='{model}'" in e.what and arch in e.what and want in e.what
    assert f"compile it for {want}" in e.fix and "drop the tc: policy" in e.fix
    assert "test_tc_arch.py" in str(e)  # the user's line: the matmul's location
    check_tc_arch(src, want)  # its own architecture is fine


def test_the_sm70_model_has_no_architecture_here():
    src = _tc_source("tc:sm70", "f16", np.float16)
    for arch in ("sm_80", "sm_90"):
        with pytest.raises(TensorCoreArchError, match="not a target of this backend"):
            check_tc_arch(src, arch)


def test_the_text_guards_itself():
    src = _tc_source("tc:sm80")
    assert src.tc_models and src.tc_models[0][1] == "tc:sm80"
    assert "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 800\n#error \"accum='tc:sm80'" in src.text
    assert "tsr_mma_m16n8k16_bf16(&" in src.text and "asm volatile" not in src.text.split("tessera_device.cuh")[-1]


@needs_toolchain
def test_build_refuses_before_compiling_and_the_guard_stops_a_raw_compile():
    src = _tc_source("tc:sm80")
    with pytest.raises(TensorCoreArchError):
        build(src, "sm_90")
    with pytest.raises(BackendError, match="tc:sm80.*is sm_80's tensor-core model"):
        build(src.text, "sm_90")  # plain text: no metadata, NVRTC meets the #error
    assert build(src, "sm_80").kernels
