"""CUDA-RUN-1 … 3: the backend "cuda". Without a GPU making it is a BackendError that says
so; on a GPU (``gpu`` marker) every library kernel that compiles today gives the
interpreter's bits, and the header's NUM-MATH functions give them on every f16/bf16 input."""
import numpy as np
import pytest

from cuda_programs import KNOWN, LIBRARY, needs_toolchain, on_the_interpreter
from tessera_ref import backends
from tessera_ref.backends.cuda.runtime import arch_of
from tessera_ref.errors import BackendError


def _gpu() -> bool:
    try:
        import cupy
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


@pytest.mark.skipif(_gpu(), reason="this machine has a GPU")
def test_without_a_gpu_the_cuda_backend_says_so():
    with pytest.raises(BackendError, match="CuPy|GPU") as info:
        backends.get("cuda")
    assert "interp" in info.value.fix or "pip install" in info.value.fix
    with pytest.raises(BackendError):
        with backends.use("cuda"):
            pass
    assert "cuda" in backends.available()


def test_architecture_of_a_compute_capability():
    assert [arch_of(c) for c in ("80", "86", "89", "90")] == ["sm_80", "sm_80", "sm_80", "sm_90"]
    with pytest.raises(BackendError, match="7.5"):
        arch_of("75")


RUNNABLE = [n for n in LIBRARY if (n, "compile") not in KNOWN]


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.gpu
@needs_toolchain
@pytest.mark.parametrize("name", RUNNABLE)
def test_device_bits_equal_the_interpreter(name):
    program, inputs, want = on_the_interpreter(name, 7)
    with backends.use("cuda"):
        got, reports = program.run(*inputs)
    assert reports and all(r.checks is False for r in reports)
    for g, w in zip(got, want):
        assert np.array_equal(_bits(g), _bits(w)), name


@pytest.mark.gpu
@needs_toolchain
def test_device_math_is_the_interpreters_on_every_16_bit_input(tmp_path):
    import cupy
    from tessera_ref.backends.cuda.compile import build
    from tessera_ref.backends.cuda.runtime import arch_of as arch
    from tessera_ref.ir.tile import MATH_FNS
    from tessera_ref.ops.exact import math_in_accum
    from tessera_ref.gpucheck.mathbits import MATH_KERNEL, sixteen_bit_inputs
    b = build(MATH_KERNEL, arch(cupy.cuda.Device().compute_capability))
    path = tmp_path / "math.cubin"
    path.write_bytes(b.cubin)
    kernel = cupy.RawModule(path=str(path)).get_function("math_f32")
    x = sixteen_bit_inputs()
    dx = cupy.asarray(x)
    for i, name in enumerate(MATH_FNS):
        dy = cupy.empty_like(dx)
        kernel(((x.size + 255) // 256,), (256,), (dx, dy, np.int32(i), np.int64(x.size)))
        want = math_in_accum(name, x, accum="f32")
        assert np.array_equal(dy.get().view(np.uint32), want.view(np.uint32)), name
