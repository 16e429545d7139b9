"""The ``mpi`` transport: point-to-point messages between the processes of one program over
mpi4py (DESIGN §14; docs/spec/mesh.md MESH-MP-4, MESH-MP-5). The collectives themselves are
:mod:`tessera_ref.backends.p2p`'s; this module only moves bytes.

Every receive is posted with ``Irecv`` and every send with ``Isend``, then all are completed
together by polling ``Testall``: no wait is unbounded. A peer that sends nothing for
``TESSERA_COMM_TIMEOUT`` seconds (default 120; :mod:`tessera_ref.settings`) is a
:class:`~tessera_ref.errors.PeerError` naming the ranks still awaited — it died, or it took another
path through the program; a message the MPI runtime fails (a peer died) is one as well. Every
received message's size is checked against the size expected: a peer that sent more or fewer
bytes is a :class:`~tessera_ref.errors.CollectiveError` naming both (MESH-MP-10).
mpi4py is imported when the transport is first opened, so the package imports without it.
"""
from __future__ import annotations

import time

import numpy as np

from ..dist.world import mpi_started, transport_name, world
from ..errors import BackendError, CollectiveError, PeerError, TesseraError
from ..settings import comm_timeout
from .p2p import Transport, register_transport, world_transport

__all__ = ["MPITransport"]

#: The one tag of the transport's messages: MPI keeps messages of one (source, tag,
#: communicator) in order, and every process runs the same sequence of exchanges.
_TAG = 7


class MPITransport(Transport):
    """Messages over ``MPI.COMM_WORLD`` (a private duplicate of it)."""

    name = "mpi"

    def __init__(self):
        super().__init__()
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise BackendError(f"the mpi transport needs mpi4py and an MPI runtime ({exc})",
                               fix="pip install mpi4py mpich (or tessera_ref[mpi])") from None
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        launched = world()
        if (launched.rank, launched.size) != (self.rank, self.size):
            raise BackendError(f"the launcher says rank {launched.rank} of {launched.size} ({launched.source}), "
                               f"but MPI says rank {self.rank} of {self.size}: mismatched world sizes",
                               fix="start the ranks with one launcher: tessera-ref launch -n N script.py, or "
                                   "mpiexec -n N python script.py without a WORLD_SIZE of its own")
        self.timeout = comm_timeout()

    def exchange(self, outgoing: dict, incoming: dict) -> dict:
        MPI = self._mpi
        received = {s: np.empty(shape, dtype=dtype) for s, (shape, dtype) in incoming.items()}
        requests, peers = [], []
        for s, buf in received.items():
            requests.append(self.comm.Irecv([buf.reshape(-1).view(np.uint8), MPI.BYTE], source=s, tag=_TAG))
            peers.append(s)
        for d, array in outgoing.items():
            data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            requests.append(self.comm.Isend([data, MPI.BYTE], dest=d, tag=_TAG))
            peers.append(d)
            self.bytes_sent += data.size
        statuses = [MPI.Status() for _ in requests]
        self._complete(requests, peers, statuses, [b.nbytes for b in received.values()])
        for (s, buf), status in zip(received.items(), statuses):
            if status.Get_count(MPI.BYTE) != buf.nbytes:
                raise self._wrong_size(s, f"{status.Get_count(MPI.BYTE)} bytes", buf.nbytes)
        return received

    def _wrong_size(self, peer: int, sent: str, expected: int) -> CollectiveError:
        """The error of ``peer`` having sent another size than this process expected."""
        during = self.call.describe() if self.call else "a message outside any collective"
        return CollectiveError(f"rank {self.rank}: rank {peer} sent {sent} where this rank expected {expected} bytes, "
                               f"in {during} — the processes are not running the same collective",
                               fix="every process must issue the same collectives, in the same order, with the same "
                                   "operands' shapes and formats (SPMD)")

    def _complete(self, requests: list, peers: list, statuses: list, expected: list) -> None:
        """Wait for every request, at most ``timeout`` seconds in all; a peer that does not
        answer, or that the MPI runtime reports failed, is a :class:`PeerError` naming it, and
        one that sent more than it expected (``expected``: the sizes of the receives, which come
        first in ``requests``) a :class:`CollectiveError`."""
        MPI = self._mpi
        deadline, pause = time.monotonic() + self.timeout, 0.0
        try:
            while not MPI.Request.Testall(requests, statuses):
                if time.monotonic() > deadline:
                    waiting = sorted({p for p, r in zip(peers, requests) if r != MPI.REQUEST_NULL and not r.Test()})
                    raise PeerError(f"rank {self.rank}: no answer from rank(s) {waiting} in {self.timeout:g} s — "
                                    f"they died or took another path through the program",
                                    fix="check the output of those ranks; every rank must run the same collectives "
                                        "in the same order (TESSERA_COMM_TIMEOUT sets the wait)")
                pause = min(0.002, pause + 0.00005)
                time.sleep(pause)
        except MPI.Exception as exc:  # a message longer than its receive, or a peer failed (its process died)
            for peer, status, size in zip(peers, statuses, expected):
                if MPI.Get_error_class(status.Get_error()) == MPI.ERR_TRUNCATE:
                    raise self._wrong_size(peer, "more bytes", size) from None
            raise PeerError(f"rank {self.rank}: the MPI runtime failed a message to or from rank(s) "
                            f"{sorted(set(peers))} ({exc}) — one of them failed",
                            fix="check the output of those ranks: the first rank that failed is the cause") from None


def _open_early() -> None:
    """In a program of several processes on this transport, MPI starts when the package is
    imported: MPI's start waits for every rank, so it must not depend on how far each rank's
    program has got (a rank failing before its first collective would leave the others waiting
    there, with no timeout). A failure here is raised again, with its fix, by the first collective;
    without an MPI runtime (torchrun) nothing starts here and making a mesh says why (MESH-MP-7)."""
    try:
        if world().size > 1 and transport_name() == "mpi" and mpi_started():
            world_transport("mpi")
    except TesseraError:
        return


register_transport("mpi", MPITransport)
_open_early()
