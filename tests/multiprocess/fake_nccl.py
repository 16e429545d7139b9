"""A test double of the few parts of CuPy and ``cupy.cuda.nccl`` that the ``nccl`` transport
calls (``tessera_ref.backends.cuda.nccl``), for ranks that are threads of one process.

It checks OUR USE of those APIs — what a call needs before it may run — not NCCL: its
"device memory" is host memory, its streams run nothing on their own, and it has no
algorithms, channels or protocols. What it enforces, as the real libraries require:

* sends and receives are issued inside ``groupStart``/``groupEnd`` (two ranks that send to each
  other outside a group can deadlock in NCCL), each with a pointer into a live buffer of at
  least ``count`` bytes, ``NCCL_UINT8``, and a peer in the communicator;
* a send reads a buffer whose copy to the device was issued on the send's stream (else nothing
  orders the copy before the send);
* a received buffer is read only after its stream was seen done, and a receive's size is the
  matching send's;
* one communicator per (unique id, rank), every rank of it on its own device; the unique id is
  128 C chars, as CuPy spells it;
* ``abort`` after a timeout is recorded (``FakeNccl.aborted``).

A receive completes when ``Stream.done`` is polled and the matching send has been posted
(messages between two ranks keep their order, as NCCL's do).
"""
from __future__ import annotations

import itertools
import os
import queue
import threading
from types import SimpleNamespace

import numpy as np


class UsageError(AssertionError):
    """The transport used the API in a way the real library does not allow."""


class FakeArray:
    """A device buffer: host bytes, the stream its contents were written on, a pointer."""

    def __init__(self, data: np.ndarray, memory: "Memory", stream):
        self.host, self.stream, self.ready = data, stream, True
        self.size = data.size
        self.data = SimpleNamespace(ptr=memory.register(self))


class Memory:
    """Pointers to the buffers made so far (the double frees none: its tests are small)."""

    def __init__(self):
        self._next, self._at, self._lock = itertools.count(0x1000, 0x1000), {}, threading.Lock()

    def register(self, array: FakeArray) -> int:
        with self._lock:
            ptr = next(self._next)
            self._at[ptr] = array
            return ptr

    def at(self, ptr: int, count: int) -> FakeArray:
        array = self._at.get(ptr)
        if array is None:
            raise UsageError(f"pointer {ptr:#x} is not a live device buffer")
        if count > array.size:
            raise UsageError(f"{count} bytes at {ptr:#x}, a buffer of {array.size}")
        return array


class FakeStream:
    def __init__(self, cuda: "FakeCuda", non_blocking: bool = False):
        self._cuda, self.non_blocking = cuda, non_blocking
        self.ptr = cuda.memory.register(FakeArray(np.zeros(0, np.uint8), cuda.memory, None))
        cuda.streams[self.ptr] = self
        self.pending: list = []   # receives: (fabric, src, dst, buffer, count)

    def __enter__(self):
        self._cuda.local.stack = getattr(self._cuda.local, "stack", []) + [self]
        return self

    def __exit__(self, *exc):
        self._cuda.local.stack.pop()

    @property
    def done(self) -> bool:
        still = []
        for fabric, src, dst, buf, count in self.pending:
            try:
                data = fabric.boxes[(src, dst)].get_nowait()
            except queue.Empty:
                still.append((fabric, src, dst, buf, count))
                continue
            if data.size != count:
                raise UsageError(f"rank {dst} receives {count} bytes from rank {src}, which sent {data.size}")
            buf.host[:count] = data
            buf.ready = True
        self.pending = still
        return not still


class FakeCuda:
    """``cupy.cuda``: the runtime's device count, devices, streams."""

    def __init__(self, devices: int):
        self.memory, self.streams, self.local = Memory(), {}, threading.local()
        self.runtime = SimpleNamespace(getDeviceCount=lambda: devices)
        self.null = FakeStream(self)
        cuda = self

        class Device:
            def __init__(self, index: int):
                if not 0 <= index < devices:
                    raise UsageError(f"device {index} of {devices}")
                self.id = index

            def use(self):
                cuda.local.device = self.id

        self.Device = Device

    def Stream(self, non_blocking: bool = False) -> FakeStream:  # noqa: N802 (CuPy's name)
        return FakeStream(self, non_blocking)

    def current(self) -> FakeStream:
        stack = getattr(self.local, "stack", [])
        return stack[-1] if stack else self.null


class FakeCupy:
    """``cupy``: ``empty``, ``asarray`` (from the host) and ``asnumpy`` of byte buffers."""

    uint8 = np.uint8

    def __init__(self, devices: int = 8):
        self.cuda = FakeCuda(devices)

    def empty(self, n: int, dtype) -> FakeArray:
        return FakeArray(np.full(n, 0xA5, dtype=np.uint8), self.cuda.memory, self.cuda.current())

    def asarray(self, a: np.ndarray) -> FakeArray:
        if a.dtype != np.uint8 or a.ndim != 1:
            raise UsageError(f"the transport moves bytes; asarray got {a.dtype} of shape {a.shape}")
        return FakeArray(a.copy(), self.cuda.memory, self.cuda.current())

    def asnumpy(self, a: FakeArray) -> np.ndarray:
        if not a.ready:
            raise UsageError("a received buffer is read before its stream was seen done")
        return a.host.copy()


class Fabric:
    """What the ranks of one unique id share: a queue of messages per (source, destination)."""

    def __init__(self, size: int):
        self.size = size
        self.boxes = {(s, d): queue.Queue() for s in range(size) for d in range(size)}
        self.members: dict = {}   # rank -> device
        self.lock = threading.Lock()


class FakeNccl:
    """``cupy.cuda.nccl`` for the ranks (threads) that share ``cupy`` (one :class:`FakeCupy`)."""

    NCCL_UINT8 = 7

    def __init__(self, cupy: FakeCupy):
        self._cupy, self._fabrics, self._lock = cupy, {}, threading.Lock()
        self._local = threading.local()
        self.aborted: list = []
        nccl = self

        class NcclCommunicator:
            def __init__(self, size: int, uid, rank: int):
                if not (isinstance(uid, tuple) and len(uid) == 128 and all(-128 <= c <= 127 for c in uid)):
                    raise UsageError("a unique id is 128 C chars (a tuple of ints -128..127 here)")
                with nccl._lock:
                    self.fabric = nccl._fabrics.setdefault(uid, Fabric(size))
                device = getattr(cupy.cuda.local, "device", None)
                with self.fabric.lock:
                    if rank in self.fabric.members or device in self.fabric.members.values() or device is None:
                        raise UsageError(f"rank {rank} on device {device}: NCCL needs one device a rank, "
                                         f"each rank once ({self.fabric.members})")
                    self.fabric.members[rank] = device
                self.rank, self.size = rank, size

            def _check(self, count, datatype, peer):
                if datatype != FakeNccl.NCCL_UINT8 or not 0 <= peer < self.size:
                    raise UsageError(f"datatype {datatype}, peer {peer} of {self.size}")
                if not getattr(nccl._local, "group", 0):
                    raise UsageError("send/recv outside groupStart/groupEnd")

            def send(self, ptr, count, datatype, peer, stream_ptr):
                self._check(count, datatype, peer)
                buf, stream = cupy.cuda.memory.at(ptr, count), cupy.cuda.streams[stream_ptr]
                if buf.stream is not stream:
                    raise UsageError("a send reads a buffer copied to the device on another stream: nothing "
                                     "orders the copy before the send")
                nccl._local.ops.append(("send", self.fabric, self.rank, peer, buf, count, stream))

            def recv(self, ptr, count, datatype, peer, stream_ptr):
                self._check(count, datatype, peer)
                buf, stream = cupy.cuda.memory.at(ptr, count), cupy.cuda.streams[stream_ptr]
                nccl._local.ops.append(("recv", self.fabric, peer, self.rank, buf, count, stream))

            def abort(self):
                nccl.aborted.append(self.rank)

        self.NcclCommunicator = NcclCommunicator

    @staticmethod
    def get_unique_id() -> tuple:
        return tuple(int(b) for b in np.frombuffer(os.urandom(128), dtype=np.int8))

    def groupStart(self):  # noqa: N802 (NCCL's names)
        depth = getattr(self._local, "group", 0)
        if depth == 0:
            self._local.ops = []
        self._local.group = depth + 1

    def groupEnd(self):  # noqa: N802
        self._local.group -= 1
        if self._local.group:
            return
        for kind, fabric, src, dst, buf, count, stream in self._local.ops:
            if kind == "send":
                fabric.boxes[(src, dst)].put(buf.host[:count].copy())
            else:
                buf.ready = False
                stream.pending.append((fabric, src, dst, buf, count))
