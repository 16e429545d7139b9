"""The ``nccl`` transport: point-to-point messages between the processes of one program, one
GPU each, over NCCL through CuPy (DESIGN §14; docs/spec/mesh.md MESH-MP-4). Chosen with
``TESSERA_TRANSPORT=nccl``; the collectives are :mod:`tessera_ref.backends.p2p`'s, so the bits
are those of one process.

Each exchange is one NCCL group (``groupStart``, a ``recv`` per source and a ``send`` per
destination, ``groupEnd``) on the GPU of ``LOCAL_RANK``; the host arrays are copied to the GPU
and back (the reference interpreter's values live on the host). The NCCL unique id travels
from rank 0 to the others over MPI (``tessera-ref launch`` starts the ranks with ``mpiexec``).
A group that does not finish in ``TESSERA_COMM_TIMEOUT`` seconds aborts the communicator and is
a :class:`~tessera_ref.errors.BackendError` naming the ranks awaited. Importing this module
needs neither CuPy nor a GPU; opening the transport needs both (NCCL refuses two ranks on
one GPU).
"""
from __future__ import annotations

import os
import time

import numpy as np

from ...dist.world import world
from ...errors import BackendError
from ..p2p import Transport, register_transport, timeout
from .runtime import _cupy

__all__ = ["NCCLTransport"]


class NCCLTransport(Transport):
    """Messages over one NCCL communicator of the world's ranks."""

    name = "nccl"

    def __init__(self):
        super().__init__()
        cp = self._cp = _cupy()
        from cupy.cuda import nccl
        self._nccl = nccl
        w = world()
        self.rank, self.size = w.rank, w.size
        local = int(os.environ.get("LOCAL_RANK", w.rank))
        count = cp.cuda.runtime.getDeviceCount()
        if w.size > count and local >= count:
            raise BackendError(f"rank {w.rank} (LOCAL_RANK {local}) has no GPU of its own: this machine has {count}",
                               fix=f"launch at most {count} ranks per machine (NCCL refuses two ranks on one GPU)")
        cp.cuda.Device(local % count).use()
        uid = nccl.get_unique_id() if w.rank == 0 else None
        if w.size > 1:
            from mpi4py import MPI
            uid = MPI.COMM_WORLD.bcast(uid, root=0)
        self.comm = nccl.NcclCommunicator(w.size, uid, w.rank)
        self.timeout = timeout()

    def exchange(self, outgoing: dict, incoming: dict) -> dict:
        cp, nccl = self._cp, self._nccl
        stream = cp.cuda.Stream(non_blocking=True)
        received = {s: (cp.empty(int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=cp.uint8), shape, dtype)
                    for s, (shape, dtype) in incoming.items()}
        sent = {d: cp.asarray(np.ascontiguousarray(a).reshape(-1).view(np.uint8)) for d, a in outgoing.items()}
        nccl.groupStart()
        for s, (buf, _, _) in received.items():
            self.comm.recv(buf.data.ptr, buf.size, nccl.NCCL_UINT8, s, stream.ptr)
        for d, buf in sent.items():
            self.comm.send(buf.data.ptr, buf.size, nccl.NCCL_UINT8, d, stream.ptr)
            self.bytes_sent += buf.size
        nccl.groupEnd()
        deadline = time.monotonic() + self.timeout
        while not stream.done:
            if time.monotonic() > deadline:
                self.comm.abort()
                raise BackendError(f"rank {self.rank}: no answer from rank(s) {sorted({*incoming, *outgoing})} in "
                                   f"{self.timeout:g} s over NCCL — they died or took another path through the program",
                                   fix="check the output of those ranks (TESSERA_COMM_TIMEOUT sets the wait)")
            time.sleep(0.0002)
        return {s: cp.asnumpy(buf).view(dtype).reshape(shape) for s, (buf, shape, dtype) in received.items()}


register_transport("nccl", NCCLTransport)
