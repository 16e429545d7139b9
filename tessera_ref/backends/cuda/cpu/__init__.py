"""The CUDA-on-CPU harness (DESIGN §9; docs/spec/cuda_cpu.md, the ``CUDA-CPU-*`` clauses).

The CUDA C that :func:`~tessera_ref.backends.cuda.source.render` writes for a lowered Tile IR
program, compiled with g++ together with a CPU twin of the device (``include/tessera_cpu.h``)
and run on the CPU with each CUDA thread a fiber:

- ``include/``: the twin (CUDA's keywords, thread indices, vector and narrow types,
  cp.async, shuffles, votes, ldmatrix, mma.sync, atomics) and ``tessera_fiber.h``, the
  fibers (a hand-written x86-64 or AArch64 context switch, ``tessera_switch.h``) and the block
  scheduler with its findings;
- :mod:`.build`: the translation unit, g++, the cache, loading with ctypes;
- :mod:`.harness`: one launch under a schedule and cp.async mode, findings as errors;
- :mod:`.asan`: one launch in the kernel's AddressSanitizer program (``include/tessera_asan.h``),
  a child process, its report parsed;
- :mod:`.backend`: :class:`FiberDevice`, the harness as a runtime device, and the backend ``"cuda-cpu"`` over it.
"""
from .backend import CpuLaunchReport, CudaCpuBackend, FiberDevice
from .harness import CP_ASYNC, MEMCHECKS, SCHEDULES, HarnessFinding, Options

__all__ = ["CudaCpuBackend", "FiberDevice", "CpuLaunchReport", "HarnessFinding", "Options", "SCHEDULES", "CP_ASYNC", "MEMCHECKS"]
