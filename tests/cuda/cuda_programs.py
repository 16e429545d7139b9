"""Shared pieces of the CUDA compile-proof tests: the toolchain skip and the library programs
(tessera_ref.gpucheck.programs: the GPU check runs the same ones)."""
import pytest

from tessera_ref.backends.cuda import toolchain
from tessera_ref.gpucheck.programs import LIBRARY, TC_GEMMS, lowered, on_the_interpreter  # noqa: F401

needs_toolchain = pytest.mark.skipif(
    not toolchain.available(),
    reason=f"needs the CUDA compile-only wheels (NVRTC, runtime headers, cuobjdump): {toolchain.INSTALL_FIX}")

#: (kernel name, what fails today) -> why: empty since the attention fragments are register
#: micro-tiles (the entries of a kernel that regresses go here, with the reason)
KNOWN: dict = {}
