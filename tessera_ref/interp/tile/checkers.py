"""The tile interpreter's checkers (the TILE-CHECK clauses): what each finding is and how it is found.

The interpreter runs a tile's lanes in lockstep, which hides races; the checkers look at
*barrier phases* instead (the stretch of a tile's execution between two ``tbarrier()`` calls),
where the hardware promises no order between lanes:

- a shared element written by one lane and read or written by another lane in the same
  phase is a race (RAW / WAW); read by one lane and written by another in the same phase,
  WAR. Tile-collective operations (``cp_async``, ``frag_load``, ``frag_store``, ``mma``)
  access their elements on behalf of every lane (``ALL_LANES``), so any lane access of the
  same element in the same phase conflicts with them. A copy by ``cp_async`` writes when the
  ``cp_async_wait`` that retires its group runs; reading an element with a copy in flight,
  or writing it, is a race too, and so is issuing a copy into an element another lane read
  or wrote in the same phase (the copy may land at any moment before its wait);
- reading a shared element nothing wrote is an uninitialized read;
- several lanes of one store, or a later tile, storing to one global element is a race when
  the values differ and redundant work when they agree (TILE-CHECK-6);
- :class:`Finding` records what, where (kernel source line), which tile, lanes and indices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ...errors import TileBarrierError, TileBoundsError, TileRaceError, TileUninitializedError
from .memory import ALL_LANES, NO_LANE

__all__ = ["Finding", "SharedAccess", "ERRORS", "describe_lanes", "check_read", "check_write", "mark_read", "mark_write",
           "check_global_store"]

#: The error class raised for each finding kind.
ERRORS = {"race": TileRaceError, "bounds": TileBoundsError, "uninitialized": TileUninitializedError,
          "barrier": TileBarrierError}


@dataclass
class Finding:
    """One checker finding: ``kind`` (race, bounds, uninitialized, barrier, warning), a
    sentence ``what``, the kernel source ``location``, the ``tile`` id, the ``lanes`` and
    the element ``index`` involved; ``count`` repeats folded into it."""

    kind: str
    what: str
    location: str | None
    tile: tuple
    lanes: tuple = ()
    index: tuple = ()
    count: int = 1
    fix: str | None = field(default=None, repr=False)

    def __str__(self) -> str:
        where = f" [at {self.location}]" if self.location else ""
        more = f" (and {self.count - 1} more like it)" if self.count > 1 else ""
        return f"{self.kind}: {self.what}{where}{more}"


class SharedAccess(NamedTuple):
    """One shared-memory access as the checkers saw it (TILE-CHECK-7): the ``tile``, its barrier
    ``phase`` (0 before the first ``tbarrier()``), what happened (``verb``: ``"reads"``,
    ``"writes"``, ``"cp.async writes"`` when a copy is issued, ``"cp.async lands in"`` when its
    wait retires it, ...), the ``buffer``'s name, per element its logical ``index`` (one row per
    element) and ``lanes`` (:data:`ALL_LANES` for a tile-collective op), whether it
    ``conflicts`` with an earlier access of the phase (a finding), and the source ``location``."""

    tile: tuple
    phase: int
    verb: str
    buffer: str
    index: np.ndarray
    lanes: np.ndarray
    conflicts: np.ndarray
    location: str | None


def describe_lanes(lanes) -> str:
    """``lanes 0-31, 40`` style text of a set of lane ids (ALL_LANES: every lane)."""
    values = sorted({int(x) for x in np.atleast_1d(lanes)})
    if values and values[0] == ALL_LANES:
        return "every lane (a tile-collective op)"
    runs, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            runs.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    text = ", ".join(runs[:6]) + (", ..." if len(runs) > 6 else "")
    return ("lane " if len(values) == 1 else "lanes ") + text


def _other(marks: np.ndarray, lanes) -> np.ndarray:
    """Where the shadow lane ``marks`` name a lane other than the accessing ``lanes``."""
    if np.ndim(lanes) == 0 and lanes == ALL_LANES:
        return marks != NO_LANE
    return (marks != NO_LANE) & (marks != lanes)


def check_read(buf, phys: np.ndarray, lanes, phase: int):
    """``(kind, mask, detail)`` of the first problem with reading ``phys``, or ``None``."""
    bad = buf.pending[phys] > 0
    if bad.any():
        return "race", bad, "reads data of a cp.async copy still in flight (no cp_async_wait retired it)"
    bad = (buf.w_phase[phys] == phase) & _other(buf.w_lane[phys], lanes)
    if bad.any():
        return "race", bad, "read-after-write race: another lane wrote it in the same barrier phase"
    bad = ~buf.init[phys]
    if bad.any():
        return "uninitialized", bad, "reads shared memory that nothing has written"
    return None


def check_write(buf, phys: np.ndarray, lanes, phase: int, asynchronous: bool = False):
    """``(kind, mask, detail)`` of the first problem with writing ``phys``, or ``None``."""
    bad = buf.pending[phys] > 0
    if bad.any():
        return "race", bad, "writes an element a cp.async copy in flight will also write"
    bad = (buf.r_phase[phys] == phase) & _other(buf.r_lane[phys], lanes)
    if bad.any():
        how = "a cp.async refills" if asynchronous else "writes"
        return "race", bad, (f"write-after-read race: {how} an element another lane read in the same "
                             "barrier phase")
    bad = (buf.w_phase[phys] == phase) & _other(buf.w_lane[phys], lanes)
    if bad.any():  # a copy may land at any moment before its wait: its issue counts as the write
        how = "a cp.async copies into" if asynchronous else "writes"
        return "race", bad, f"write-after-write race: {how} an element another lane wrote in the same barrier phase"
    return None


def mark_read(buf, phys: np.ndarray, lanes, phase: int) -> None:
    """Record reads of ``phys`` by ``lanes`` (an array per element, or ALL_LANES)."""
    if np.ndim(lanes) == 0:  # a tile-collective read: every lane's
        buf.r_lane[phys] = ALL_LANES
    else:
        prev_same = buf.r_phase[phys] == phase
        prev = buf.r_lane[phys]
        uniq, first, counts = np.unique(phys, return_index=True, return_counts=True)
        lane_of = lanes[first]
        many = counts > 1
        if many.any():  # several lanes of this op read one element: mark it 'many' if they differ
            order = np.argsort(phys, kind="stable")
            sorted_lanes = lanes[order]
            starts = np.r_[0, np.cumsum(counts)[:-1]]
            lo = np.minimum.reduceat(sorted_lanes, starts)
            hi = np.maximum.reduceat(sorted_lanes, starts)
            lane_of = np.where(lo != hi, ALL_LANES, lane_of)
        pos = np.searchsorted(uniq, phys)
        before = np.zeros(uniq.size, dtype=np.int64)
        before_same = np.zeros(uniq.size, dtype=bool)
        before[pos] = prev
        before_same[pos] = prev_same
        lane_of = np.where(before_same & (before != lane_of), ALL_LANES, lane_of)
        buf.r_lane[uniq] = lane_of
        phys = uniq
    buf.r_phase[phys] = phase


def mark_write(buf, phys: np.ndarray, lanes, phase: int) -> None:
    """Record writes of ``phys`` by ``lanes``; the elements are initialized from now on."""
    buf.w_phase[phys] = phase
    buf.w_lane[phys] = lanes
    buf.init[phys] = True


def check_global_store(buf, offs: np.ndarray, values: np.ndarray, lanes: np.ndarray, tile_linear: int,
                       grid: tuple) -> list:
    """TILE-CHECK-6 for a store of ``values`` at flat ``offs`` of global ``buf`` by ``lanes``
    of tile ``tile_linear``: ``[(kind, what, flat offset, lanes)]`` (kind ``race`` when the
    values differ, ``warning`` when they agree); records the tile as the elements' writer."""
    out = []

    def finding(flat, who, differ, how):
        what = "different values (the result depends on the order)" if differ else "the same value (redundant work)"
        out.append(("race" if differ else "warning", f"{how}: {what}", int(flat), who))

    bits = values.view(np.dtype(f"u{values.itemsize}"))
    order = np.argsort(offs, kind="stable")
    o, b = offs[order], bits[order]
    twin = o[1:] == o[:-1]
    tile = tuple(int(i) for i in np.unravel_index(tile_linear, grid))
    if twin.any():
        dup = np.isin(offs, o[1:][twin])
        finding(o[1:][twin][0], lanes[dup], bool((b[1:][twin] != b[:-1][twin]).any()),
                f"from {describe_lanes(lanes[dup])} of tile {tile} in one store")
    prev = buf.writer[offs]
    other = (prev >= 0) & (prev != tile_linear)
    if other.any():
        old = buf.flat[offs[other]].view(bits.dtype)
        first = int(np.flatnonzero(other)[0])
        earlier = tuple(int(i) for i in np.unravel_index(int(prev[first]), grid))
        finding(offs[first], lanes[other], bool((old != bits[other]).any()),
                f"from tile {tile} after tile {earlier} stored it")
    buf.writer[offs] = tile_linear
    return out
