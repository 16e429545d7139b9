"""The interp backend's communicators (DESIGN §14): the collectives of
:mod:`tessera_ref.backends.p2p` — in one process every rank of the mesh is here and they are the
in-process fold over stacked values (the *simulated* communicator); in a program of several
processes, over the world's transport (``TESSERA_TRANSPORT``, default ``mpi``; MESH-MP-4)."""
from __future__ import annotations

import os

from ..backends.p2p import ONE_PROCESS, P2PCommunicator, world_transport
from ..dist.world import placement

__all__ = ["SimulatedCommunicator", "communicator"]


class SimulatedCommunicator(P2PCommunicator):
    """Collectives over stacked local values, all ranks in one process."""

    def __init__(self, mesh):
        super().__init__(mesh, ONE_PROCESS)


def communicator(mesh) -> P2PCommunicator:
    """The communicator of ``mesh`` for this process: simulated when it owns the whole mesh."""
    if placement(mesh).single:
        return SimulatedCommunicator(mesh)
    return P2PCommunicator(mesh, world_transport(os.environ.get("TESSERA_TRANSPORT", "mpi")))
