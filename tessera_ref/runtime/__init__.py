"""The runtime (DESIGN §16; docs/spec/runtime.md, the ``RUNTIME-*`` clauses): whole programs
compiled once for a device, kept resident there, and replayed.

- :mod:`.device`: the Device contract — allocator, compiler, kernels, graphs, streams;
- :mod:`.memory`: :class:`DeviceArray`, :func:`device_put`, :class:`MemoryPlan`;
- :mod:`.program`: :class:`Program` (``Program.compile(func, arg_types, device)``, then call it);
- :mod:`.backend`: :class:`DeviceBackend`, the one backend class over every device;
- :func:`counting` (:mod:`tessera_ref.counters`): what ran, counted (``with runtime.counting() as c:``).

The devices live with their executors: ``TileInterpDevice`` (:mod:`tessera_ref.interp.tiles`),
``FiberDevice`` (:mod:`tessera_ref.backends.cuda.cpu.backend`), ``CudaDevice``
(:mod:`tessera_ref.backends.cuda.runtime`, with its CuPy test double in
:mod:`tessera_ref.backends.cuda.fake_cupy`).
"""
from ..counters import Counters, counting, totals
from .device import Allocator, Buffer, Compiler, Device, Graph, HostAllocator, HostStep, Kernel, Launch, Slot, Stream
from .memory import DeviceArray, MemoryPlan, device_put
from .program import Program
from .backend import DeviceBackend

__all__ = ["Counters", "counting", "totals", "Allocator", "Buffer", "Compiler", "Device", "Graph", "HostAllocator",
           "HostStep", "Kernel", "Launch", "Slot", "Stream", "DeviceArray", "MemoryPlan", "device_put", "Program",
           "DeviceBackend"]
