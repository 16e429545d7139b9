"""The interp backend's communicators (DESIGN §14): the collectives of
:mod:`tessera_ref.backends.p2p` — in one process every rank of the mesh is here and they are the
in-process fold over stacked values (the *simulated* communicator); in a program of several
processes, over the world's transport (:func:`~tessera_ref.backends.p2p.mesh_communicator`,
MESH-MP-4)."""
from __future__ import annotations

from ..backends.p2p import ONE_PROCESS, P2PCommunicator, mesh_communicator

__all__ = ["SimulatedCommunicator", "mesh_communicator"]


class SimulatedCommunicator(P2PCommunicator):
    """Collectives over stacked local values, all ranks in one process."""

    def __init__(self, mesh):
        super().__init__(mesh, ONE_PROCESS)
