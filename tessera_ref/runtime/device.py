"""The Device contract (DESIGN §16; RUNTIME-DEV-1 … 5): what a device gives the runtime.

A :class:`Device` has an :class:`Allocator` (buffers: alloc/free, pooled; copyin/copyout/copy,
counted), a :class:`Compiler` (source → binary, cached per source), kernels (a loaded
library's functions, launched with grid, block, dynamic shared memory and a stream), a
:class:`Graph` (a captured list of launches and host steps, replayed with new buffers bound
to its variable slots), streams and ``synchronize``. ``CudaDevice``, ``FiberDevice`` and
``TileInterpDevice`` (in their executors' packages) implement it; :mod:`.program` builds on
nothing else.
"""
from __future__ import annotations

import abc
import threading
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..errors import BackendError
from ..counters import count

__all__ = ["Buffer", "Allocator", "HostAllocator", "Compiler", "Kernel", "Slot", "Launch", "HostStep", "Graph",
           "Stream", "Device"]


class Buffer:
    """``nbytes`` bytes at ``offset`` of the allocation ``base`` (the allocator's handle);
    :meth:`view` is a part of it (freed with it, never alone)."""

    __slots__ = ("allocator", "base", "offset", "nbytes", "owner")

    def __init__(self, allocator, base, nbytes: int, offset: int = 0, owner: bool = True):
        self.allocator, self.base, self.nbytes, self.offset, self.owner = allocator, base, nbytes, offset, owner

    def view(self, offset: int, nbytes: int) -> "Buffer":
        """Bytes ``offset … offset + nbytes`` of this buffer."""
        if offset < 0 or offset + nbytes > self.nbytes:
            raise BackendError(f"a view of bytes {offset}..{offset + nbytes} of a {self.nbytes}-byte buffer",
                               fix="report this as a bug")
        return Buffer(self.allocator, self.base, nbytes, self.offset + offset, owner=False)

    def __repr__(self) -> str:
        return f"<Buffer {self.nbytes} B at +{self.offset} on {self.allocator.device_name}>"


class Allocator(abc.ABC):
    """Device memory (RUNTIME-DEV-2): :meth:`alloc` takes a freed buffer of the same size from
    the pool when there is one (else makes one: counted in ``allocations``), :meth:`free` puts
    it back; :meth:`copyin`/:meth:`copyout` move host bytes (counted in ``h2d_bytes`` and
    ``d2h_bytes``), :meth:`copy` device bytes (``d2d_bytes``); :meth:`array` is a buffer as the
    device's native array of a dtype and shape, what its kernels take."""

    pooled = True

    def __init__(self, device_name: str):
        self.device_name = device_name
        self._pool: dict = defaultdict(list)
        self._held = 0
        self._lock = threading.Lock()

    def alloc(self, nbytes: int) -> Buffer:
        nbytes = int(nbytes)
        with self._lock:
            free = self._pool.get(nbytes)
            if free:
                return Buffer(self, free.pop(), nbytes)
        base = self._alloc(max(nbytes, 1))  # an empty value still gets an address
        with self._lock:
            self._held += nbytes
            held = self._held
        count(allocations=1, pool_bytes=held)
        return Buffer(self, base, nbytes)

    def free(self, buf: Buffer) -> None:
        if not buf.owner:
            return
        if self.pooled:
            with self._lock:
                self._pool[buf.nbytes].append(buf.base)
            return
        with self._lock:
            self._held -= buf.nbytes
        self._free(buf.base)

    def copyin(self, buf: Buffer, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        count(h2d_bytes=host.nbytes)
        self._copyin(buf, host.reshape(-1).view(np.uint8))

    def copyout(self, host: np.ndarray, buf: Buffer) -> None:
        count(d2h_bytes=host.nbytes)
        self._copyout(host.reshape(-1).view(np.uint8), buf)

    def copy(self, dst: Buffer, src: Buffer) -> None:
        count(d2d_bytes=src.nbytes)
        self._copy(dst, src)

    @abc.abstractmethod
    def _alloc(self, nbytes: int): ...

    def _free(self, base) -> None:
        """Give ``base`` back to the device (unpooled allocators)."""

    @abc.abstractmethod
    def _copyin(self, buf: Buffer, data: np.ndarray) -> None: ...

    @abc.abstractmethod
    def _copyout(self, data: np.ndarray, buf: Buffer) -> None: ...

    @abc.abstractmethod
    def _copy(self, dst: Buffer, src: Buffer) -> None: ...

    @abc.abstractmethod
    def array(self, buf: Buffer, dtype, shape):
        """``buf`` as the device's array of ``dtype`` and ``shape`` (no copy)."""


class HostAllocator(Allocator):
    """Memory of a device that lives in this process: NumPy byte arenas, zeroed when made."""

    def _alloc(self, nbytes: int):
        return np.zeros(nbytes, np.uint8)

    def _copyin(self, buf, data) -> None:
        buf.base[buf.offset:buf.offset + buf.nbytes] = data

    def _copyout(self, data, buf) -> None:
        data[...] = buf.base[buf.offset:buf.offset + buf.nbytes]

    def _copy(self, dst, src) -> None:
        dst.base[dst.offset:dst.offset + dst.nbytes] = src.base[src.offset:src.offset + src.nbytes]

    def array(self, buf, dtype, shape):
        return buf.base[buf.offset:buf.offset + buf.nbytes].view(dtype).reshape(shape)


class Compiler(abc.ABC):
    """Source → binary (RUNTIME-DEV-3), cached per :meth:`key` of the source: a hit is no
    compile; a miss is counted in ``compiles``."""

    def __init__(self):
        self._cache: dict = {}
        self._lock = threading.Lock()

    def key(self, source):
        return getattr(source, "text", source)

    def compile(self, source):
        key = self.key(source)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        binary = self._compile(source)
        count(compiles=1)
        with self._lock:
            return self._cache.setdefault(key, binary)

    @abc.abstractmethod
    def _compile(self, source): ...


class Kernel(abc.ABC):
    """One function of a loaded library (RUNTIME-DEV-4): called with its arguments as native
    arrays and scalars in parameter order, its symbolic sizes last."""

    name: str

    @abc.abstractmethod
    def __call__(self, args: list, grid: tuple, block: tuple, smem: int, stream=None, options=None):
        """Launch on ``args``; returns a report or None (``options``: the device's own)."""


@dataclass(frozen=True)
class Slot:
    """A buffer of a program viewed as ``dtype`` and ``shape``: ``index`` names the buffer
    (a key of the graph's bindings), ``offset`` is where the view starts in it."""

    index: object
    dtype: object
    shape: tuple
    offset: int = 0

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class Launch:
    """One launch of a captured list: ``args`` are :class:`Slot` s and scalars in parameter
    order; ``where`` names the kernel and its Tile IR location for errors."""

    kernel: Kernel
    args: tuple
    grid: tuple
    block: tuple
    smem: int
    where: str


@dataclass
class HostStep:
    """One op the user allowed on the host (RUNTIME-HOST-1): ``run(arrays) -> arrays`` on host
    copies of the ``ins`` slots, its results copied into the ``outs`` slots (both counted)."""

    run: object
    ins: tuple
    outs: tuple
    name: str


class Graph:
    """A captured list of :class:`Launch` es and :class:`HostStep` s (RUNTIME-DEV-5), replayed
    in order with :meth:`replay`. ``fixed`` binds the slots that never change (the arena,
    constants); each replay binds the others. This serial replay is every host device's; a
    device that batches launches (CUDA graphs) overrides :meth:`replay`."""

    def __init__(self, device: "Device", items: list, fixed: dict):
        self.device, self.items, self.fixed = device, items, dict(fixed)
        self.launches = sum(isinstance(i, Launch) for i in items)
        self._arrays = {}  # (slot) -> native array, for slots over fixed buffers

    def _array(self, slot: Slot, bound: dict):
        buf = bound.get(slot.index)
        if buf is None:
            arr = self._arrays.get(slot)
            if arr is None:
                buf = self.fixed[slot.index]
                arr = self._arrays[slot] = self.device.allocator.array(buf.view(slot.offset, slot.nbytes),
                                                                        slot.dtype, slot.shape)
            return arr
        return self.device.allocator.array(buf.view(slot.offset, slot.nbytes), slot.dtype, slot.shape)

    def replay(self, bindings: dict, stream=None, options: dict | None = None) -> list:
        """Run every item with ``bindings`` (slot index -> Buffer) for the variable slots;
        returns the launches' reports (``options``: what the device's kernels take)."""
        count(replays=1, graph_launches=self.launches)
        reports = []
        for item in self.items:
            if isinstance(item, Launch):
                args = [self._array(a, bindings) if isinstance(a, Slot) else a for a in item.args]
                reports.append(self.device.run_launch(item, args, stream, options))
            else:
                self.device.run_host_step(item, lambda s: self._buffer(s, bindings))
        return reports

    def _buffer(self, slot: Slot, bindings: dict) -> Buffer:
        buf = bindings.get(slot.index)
        buf = self.fixed[slot.index] if buf is None else buf
        return buf.view(slot.offset, slot.nbytes)


class Stream:
    """An ordered queue of work on a device; host devices run work as it is issued."""

    def synchronize(self) -> None:
        """Wait for the work issued so far."""


class Device(abc.ABC):
    """A device (see the module docstring). Subclasses set ``name`` and make ``allocator`` and
    ``compiler``; :meth:`render` gives the source form their compiler takes, :meth:`load` a
    compiled library's kernels."""

    name = ""
    #: Bytes of memory, where the device says (programs larger are refused at compile time).
    capacity: int | None = None

    allocator: Allocator
    compiler: Compiler

    def __repr__(self) -> str:
        return f"<tessera device {self.name!r}>"

    @abc.abstractmethod
    def render(self, tile_module):
        """The source of a Tile IR module in the form :attr:`compiler` takes."""

    @abc.abstractmethod
    def load(self, binary, source, tile_module) -> dict:
        """``{kernel name: Kernel}`` of a compiled library."""

    def graph(self, items: list, fixed: dict, inputs: tuple = (), outputs: tuple = ()) -> Graph:
        """The captured list ``items`` over ``fixed`` buffers; each replay binds the slots
        ``inputs`` (read) and ``outputs`` (written)."""
        return Graph(self, items, fixed)

    def run_launch(self, launch: Launch, args: list, stream=None, options: dict | None = None):
        """One launch of a captured list on native ``args``; its report."""
        return launch.kernel(args, launch.grid, launch.block, launch.smem, stream, options)

    def run_host_step(self, step: HostStep, buffer) -> None:
        """``step`` on host copies of its operands (``buffer(slot)`` is a slot's buffer)."""
        count(host_steps=1)
        ins = []
        for s in step.ins:
            host = np.empty(s.shape, s.dtype)
            self.allocator.copyout(host, buffer(s))
            ins.append(host)
        for s, value in zip(step.outs, step.run(ins)):
            self.allocator.copyin(buffer(s), np.ascontiguousarray(value, s.dtype))

    def stream(self) -> Stream:
        return Stream()

    def synchronize(self) -> None:
        """Wait for all work issued to the device."""
