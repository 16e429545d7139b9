"""Shared pieces of the CUDA compile-proof tests: the toolchain skip, the library programs
(tessera_ref.gpucheck.programs: the GPU check runs the same ones) and the device data of
tests/cuda/data."""
from pathlib import Path

import numpy as np
import pytest

from tessera_ref.backends.cuda import toolchain
from tessera_ref.gpucheck.mma import DTYPES as MMA_DTYPES
from tessera_ref.gpucheck.programs import LIBRARY, TC_GEMMS, lowered, on_the_interpreter  # noqa: F401

needs_toolchain = pytest.mark.skipif(
    not toolchain.available(),
    reason=f"needs the CUDA compile-only wheels (NVRTC, runtime headers, cuobjdump): {toolchain.INSTALL_FIX}")

#: mma.sync results measured on an H200 (tests/cuda/data/README.md)
H200 = Path(__file__).parent / "data" / "h200_mma_2026-11-28.npz"


def h200_cases(fmt: str):
    """``(key, a, b, c, d)`` of every case of input format ``fmt`` in :data:`H200`: the
    operands as arrays of ``fmt``, the f32 accumulator in and the device's f32 result."""
    data = np.load(H200)
    for key in sorted({k.rsplit("_", 1)[0] for k in data.files if k.startswith(fmt + "_")}):
        a, b = (data[f"{key}_{x}"].view(MMA_DTYPES[fmt]) for x in "ab")
        yield key, a, b, data[f"{key}_c"], data[f"{key}_d"]


#: (kernel name, what fails today) -> why (the entries of a kernel that regresses go here, with
#: the reason)
KNOWN: dict = {
    ("elementwise_sincos", "stack"): "CUDA-HDR-2: tsr_sin/tsr_cos reduce arguments above 2^20·π/2 exactly, with a "
                                     "multiprecision remainder in a 432-byte local frame",
}
