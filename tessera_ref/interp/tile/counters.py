"""Performance counters of the tile interpreter (the TILE-COUNT clauses), by hardware.md's rules.

- Shared memory: 32 banks of 4-byte words. A warp's request is split into phases of 32
  lanes for accesses of at most 4 bytes, 16 for 8-byte and 8 for 16-byte ones; the request
  takes, per phase, as many wavefronts as the largest number of *distinct* words mapped to
  one bank (:func:`wavefronts`). The ideal is ``ceil(distinct words / 32)`` per phase.
- Per-lane patterns (fragments with a layout, TILE-COUNT-5): each lane's accesses in program
  order, merged into the widest naturally aligned contiguous pieces of at most 16 bytes
  (:func:`vector_width`); instruction ``i`` of warp ``w`` is one request (:func:`lane_requests`).
- Global memory: 32-byte sectors; each warp's request touches the distinct sectors its lanes'
  bytes fall in (:func:`sectors`). With no cache model, every touched sector is HBM traffic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Counters", "wavefronts", "sectors", "lanes_per_phase", "vector_width", "lane_requests"]


@dataclass
class Counters:
    """What one kernel run did (sums over all tiles)."""

    tiles: int = 0
    barriers: int = 0
    shuffles: int = 0  # warp shuffles (one per warp that executes a shfl_xor): registers, not shared memory
    flops: int = 0
    global_requests: int = 0
    global_sectors: int = 0
    global_requested_bytes: int = 0
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    smem_requests: int = 0
    smem_wavefronts: int = 0
    smem_ideal_wavefronts: int = 0
    smem_read_bytes: int = 0
    smem_write_bytes: int = 0

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def smem_conflict_wavefronts(self) -> int:
        """Wavefronts beyond the ideal: the cost of bank conflicts."""
        return self.smem_wavefronts - self.smem_ideal_wavefronts

    @property
    def sector_efficiency(self) -> float:
        """Requested bytes / (32 × sectors touched), 1.0 for perfectly coalesced access."""
        return self.global_requested_bytes / (32 * self.global_sectors) if self.global_sectors else 1.0

    def add_shared(self, requests: int, wavefronts: int, ideal: int, nbytes: int, write: bool) -> None:
        """Count shared-memory requests moving ``nbytes`` (TILE-COUNT-1)."""
        self.smem_requests += requests
        self.smem_wavefronts += wavefronts
        self.smem_ideal_wavefronts += ideal
        if write:
            self.smem_write_bytes += nbytes
        else:
            self.smem_read_bytes += nbytes

    def add_global(self, requests: int, sectors: int, requested_bytes: int, write: bool) -> None:
        """Count global requests touching ``sectors`` 32-byte sectors (TILE-COUNT-2)."""
        self.global_requests += requests
        self.global_sectors += sectors
        self.global_requested_bytes += requested_bytes
        if write:
            self.hbm_write_bytes += 32 * sectors
        else:
            self.hbm_read_bytes += 32 * sectors


def lanes_per_phase(access_bytes: int) -> int:
    """Lanes served per shared-memory phase (128 bytes per cycle)."""
    return 32 if access_bytes <= 4 else 128 // access_bytes


def wavefronts(byte_addr: np.ndarray, request: np.ndarray, access_bytes: int) -> tuple:
    """``(requests, wavefronts, ideal)`` of shared accesses: lane ``j`` of request
    ``request[j]`` (its position in the request is its lane slot, ``j`` in order) accesses
    ``access_bytes`` bytes at ``byte_addr[j]``. ``request`` is ascending."""
    if byte_addr.size == 0:
        return 0, 0, 0
    per = lanes_per_phase(access_bytes)
    slot = np.arange(byte_addr.size) - np.searchsorted(request, request)  # lane slot in its request
    phase = request * 64 + slot // per
    nwords = max(1, access_bytes // 4)
    words = (byte_addr // 4)[:, None] + np.arange(nwords)[None, :]
    key = np.unique((np.repeat(phase, nwords) << 32) | words.reshape(-1))
    ph, word = key >> 32, key & 0xFFFFFFFF
    bank_key, per_bank = np.unique((ph << 5) | (word & 31), return_counts=True)
    bank_phase = bank_key >> 5
    starts = np.flatnonzero(np.r_[True, bank_phase[1:] != bank_phase[:-1]])
    worst = np.maximum.reduceat(per_bank, starts)
    distinct = np.unique(ph, return_counts=True)[1]
    return int(np.unique(request).size), int(worst.sum()), int((-(-distinct // 32)).sum())


def sectors(byte_addr: np.ndarray, request: np.ndarray, access_bytes: int) -> tuple:
    """``(requests, sectors)`` of global accesses of ``access_bytes`` at ``byte_addr`` grouped
    into ``request`` ids."""
    if byte_addr.size == 0:
        return 0, 0
    first, last = byte_addr // 32, (byte_addr + access_bytes - 1) // 32
    keys = np.concatenate([(request << 40) | first, (request << 40) | last])
    return int(np.unique(request).size), int(np.unique(keys).size)


def vector_width(addr: np.ndarray, itemsize: int) -> int:
    """The widest access — 16, 8 or 4 bytes, else one element — in which every row of
    ``addr`` (the byte addresses one lane accesses one after the other) splits into
    contiguous, naturally aligned pieces."""
    n = addr.shape[-1]
    for width in (16, 8, 4):
        per = width // itemsize
        if per < 1 or n % per:
            continue
        pieces = addr.reshape(-1, per)
        if not (pieces[:, 0] % width).any() and (pieces == pieces[:, :1] + itemsize * np.arange(per)).all():
            return width
    return itemsize


def lane_requests(addr: np.ndarray, itemsize: int, group: int | None = None) -> tuple:
    """``(byte addresses, request ids, access bytes)`` of per-lane accesses ``addr``
    (``[lanes, n]`` byte addresses, each lane's in program order) merged by
    :func:`vector_width` within runs of ``group`` accesses (default: all ``n``): a lane's
    ``i``-th piece is instruction ``i``, and instruction ``i`` of warp ``w`` is request
    ``i · warps + w`` (ascending, lanes in order within it)."""
    lanes = addr.shape[0]
    access = vector_width(addr.reshape(-1, group or addr.shape[1]), itemsize)
    pieces = addr[:, ::max(1, access // itemsize)]
    warps = -(-lanes // 32)
    n = pieces.shape[1]
    request = np.repeat(np.arange(n, dtype=np.int64) * warps, lanes) + np.tile(np.arange(lanes) // 32, n)
    return pieces.T.reshape(-1), request, access
