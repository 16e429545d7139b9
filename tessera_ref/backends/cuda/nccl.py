"""The ``nccl`` transport: point-to-point messages between the processes of one program, one
GPU each, over NCCL through CuPy (DESIGN §14; docs/spec/mesh.md MESH-MP-4). Chosen with
``TESSERA_TRANSPORT=nccl``; the collectives are :mod:`tessera_ref.backends.p2p`'s, so the bits
are those of one process.

Each exchange is one NCCL group (``groupStart``, a ``recv`` per source and a ``send`` per
destination, ``groupEnd``) on the GPU of ``LOCAL_RANK``, on the communicator's one
communication stream (made once: a stream per exchange would leave cached blocks in CuPy's
per-stream pool); the host arrays are copied to the GPU and back (the reference interpreter's
values live on the host, and the ordered fold of :func:`~tessera_ref.backends.p2p.fold_ranks`
runs there too: nothing is summed on the GPU). The
NCCL unique id travels from rank 0 to the others over MPI when an MPI runtime started the ranks
(``tessera-ref launch``, ``mpiexec``), else by the rendezvous at ``MASTER_ADDR:MASTER_PORT``
(:mod:`tessera_ref.backends.cuda.rendezvous`; torchrun, MESH-MP-7). A group that does not finish in
``TESSERA_COMM_TIMEOUT`` seconds aborts the communicator and is a
:class:`~tessera_ref.errors.PeerError` naming the ranks awaited. Importing this module needs
neither CuPy nor a GPU; opening the transport needs both (NCCL refuses two ranks on one GPU) and
a CuPy that loads libnccl (a ``BackendError`` with the fix otherwise, never CuPy's own error).
An NCCL receive must know its size and NCCL checks none: the signature exchange of every
collective (MESH-MP-10) is what keeps mismatched ranks from posting receives of other sizes.
"""
from __future__ import annotations

import os
import time

import numpy as np

from ...dist.world import mpi_started, world
from ...errors import BackendError, CollectiveError, PeerError
from ...settings import comm_timeout, integer
from ..p2p import Transport, register_transport
from .rendezvous import address, share_bytes
from .runtime import _cupy

__all__ = ["NCCLTransport"]

_ID_CHARS = 128   # NCCL_UNIQUE_ID_BYTES


class NCCLTransport(Transport):
    """Messages over one NCCL communicator of the world's ranks. ``w`` (a
    :class:`~tessera_ref.dist.world.World`), ``cupy`` and ``nccl`` (the modules) default to this
    process's world and CuPy's; the tests pass stand-ins to run the transport's own logic."""

    name = "nccl"

    def __init__(self, w=None, cupy=None, nccl=None):
        super().__init__()
        cp = self._cp = _cupy() if cupy is None else cupy
        self._nccl = nccl = _nccl_module(cp, nccl)
        w = world() if w is None else w
        self.rank, self.size = w.rank, w.size
        local = integer("LOCAL_RANK", os.environ.get("LOCAL_RANK") or str(w.rank), 0)
        count = cp.cuda.runtime.getDeviceCount()
        if w.size > count and local >= count:
            raise BackendError(f"rank {w.rank} (LOCAL_RANK {local}) has no GPU of its own: this machine has {count}",
                               fix=f"launch at most {count} ranks per machine (NCCL refuses two ranks on one GPU)")
        cp.cuda.Device(local % count).use()
        self.timeout = comm_timeout()
        self.comm = nccl.NcclCommunicator(w.size, _shared_unique_id(nccl, w, self.timeout), w.rank)
        self.stream = cp.cuda.Stream(non_blocking=True)   # the communication stream, reused by every exchange

    def exchange(self, outgoing: dict, incoming: dict) -> dict:
        cp, nccl, stream = self._cp, self._nccl, self.stream
        with stream:  # the copies to the GPU are ordered before the sends that read them
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
                raise PeerError(f"rank {self.rank}: no answer from rank(s) {sorted({*incoming, *outgoing})} in "
                                   f"{self.timeout:g} s over NCCL — they died or took another path through the "
                                   f"program",
                                   fix="check the output of those ranks (TESSERA_COMM_TIMEOUT sets the wait)")
            time.sleep(0.0002)
        # the stream is done: a synchronous copy reads what the receives wrote (CuPy's asnumpy with
        # a stream argument may return before its copy ends, depending on the version)
        return {s: cp.asnumpy(buf).view(dtype).reshape(shape) for s, (buf, shape, dtype) in received.items()}


def _loaded(nccl) -> bool:
    """Whether ``nccl`` (``cupy.cuda.nccl`` or a stand-in) loaded libnccl: CuPy's module says so
    in ``available`` and then lacks ``NcclCommunicator``."""
    return bool(getattr(nccl, "available", True)) and hasattr(nccl, "NcclCommunicator")


def _nccl_module(cp, nccl=None):
    """``nccl`` (default ``cupy.cuda.nccl``) when it loaded libnccl, else a :class:`BackendError`
    with the fix."""
    why = "it did not load libnccl"
    if nccl is None:
        try:
            from cupy.cuda import nccl
        except ImportError as exc:
            nccl, why = None, f"{type(exc).__name__}: {exc}"
    if nccl is None or not _loaded(nccl):
        version = getattr(cp, "__version__", "?")
        raise BackendError(f"the nccl transport needs NCCL, and CuPy {version} cannot use it ({why})",
                           fix="pip install -e '.[cuda]' (CuPy ≥ 13.6 and the nvidia-nccl-cu12 wheel, which such a "
                               "CuPy loads; on CUDA 13 '.[cuda13]'), or put libnccl.so.2 on LD_LIBRARY_PATH; "
                               "without GPUs use TESSERA_TRANSPORT=mpi")
    return nccl


def _shared_unique_id(nccl, w, wait: float) -> tuple:
    """Rank 0's NCCL unique id on every rank: an MPI broadcast when an MPI runtime started the
    ranks, else the rendezvous (module docstring). CuPy spells the id as 128 small ints (C
    chars, signed or not by platform); they travel as int16, exactly."""
    uid = nccl.get_unique_id() if w.rank == 0 else None
    if w.size == 1:
        return uid
    if mpi_started():
        from mpi4py import MPI
        return MPI.COMM_WORLD.bcast(uid, root=0)
    payload = None if uid is None else np.array(uid, dtype=np.int16).tobytes()
    got = share_bytes(payload, w.rank, w.size, wait, length=2 * _ID_CHARS)
    got = tuple(np.frombuffer(got, dtype=np.int16).tolist())
    if not all(-128 <= c <= 255 for c in got):
        host, port = address()
        raise CollectiveError(f"rank {w.rank}: rank 0 at {host}:{port} sent an NCCL unique id that is not "
                              f"{_ID_CHARS} C chars (values {min(got)}..{max(got)})",
                              fix="start every rank with the same tessera_ref version")
    return got


register_transport("nccl", NCCLTransport)
