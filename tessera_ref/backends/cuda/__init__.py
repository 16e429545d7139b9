"""The CUDA backend (DESIGN §9; docs/spec/cuda.md).

- :mod:`.render`: Tile IR -> CUDA C text (table-driven), :mod:`.source` the same text with
  the Tile IR op location of each line;
- ``tessera_device.cuh``: the device header the text includes (NUM-MATH, NUM-CVT, IEEE
  max/min, cp.async, shuffles, mma.sync, ldmatrix);
- :mod:`.toolchain`, :mod:`.nvrtc`, :mod:`.compile`, :mod:`.report`: compile with NVRTC from
  the pinned pip wheels (no GPU needed) and report registers, spills, stack, shared memory,
  SASS mix and occupancy per kernel; :mod:`.tune` the autotuner's register screen;
- :mod:`.runtime`: the backend ``"cuda"``, kernels launched on one GPU with CuPy;
- :mod:`.cpu`: the backend ``"cuda-cpu"``, the same kernels run on the CPU (g++, fibers).

Importing this package needs none of the wheels and no GPU; it registers the renderer as the
``"target"`` IR level of lowered programs and ``@kernel`` objects
(:func:`tessera_ref.lowering.register_target`) and the backends ``"cuda"`` and ``"cuda-cpu"``.
"""
from ...lowering import register_target
from ..registry import register
from .render import emit_cuda
from .runtime import CudaBackend
from .cpu import CudaCpuBackend

register_target("target", emit_cuda)
register("cuda", CudaBackend)  # made on first use: a BackendError without CuPy or a GPU
register("cuda-cpu", CudaCpuBackend)  # made on first use: a BackendError without g++ or off x86-64 and AArch64

__all__ = ["emit_cuda", "CudaBackend", "CudaCpuBackend"]
