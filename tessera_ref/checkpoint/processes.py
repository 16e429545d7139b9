"""The few messages the processes of one save exchange (CKPT-SAVE-4): rank 0 names the
temporary directory, every process reports its file's size and hashes (or its error) to
rank 0, and rank 0 announces the outcome. JSON over the world's transport, never pickle.
"""
from __future__ import annotations

import json

import numpy as np

from ..backends.p2p import world_transport
from ..dist.world import transport_name, world

__all__ = ["rank_and_size", "broadcast", "gather"]


def rank_and_size() -> tuple:
    w = world()
    return w.rank, w.size


def _blob(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), np.uint8)


def broadcast(value):
    """Rank 0's ``value`` (JSON-able) on every process."""
    rank, size = rank_and_size()
    if size == 1:
        return value
    t = world_transport(transport_name())
    got = t.exchange_sized({r: _blob(value) for r in range(1, size)} if rank == 0 else {},
                           [] if rank == 0 else [0], np.uint8)
    return value if rank == 0 else json.loads(got[0].tobytes())


def gather(value) -> list | None:
    """Every process's ``value`` by rank on rank 0 (``None`` elsewhere)."""
    rank, size = rank_and_size()
    if size == 1:
        return [value]
    t = world_transport(transport_name())
    got = t.exchange_sized({0: _blob(value)} if rank else {}, range(1, size) if rank == 0 else [], np.uint8)
    if rank:
        return None
    return [value] + [json.loads(got[r].tobytes()) for r in range(1, size)]
