"""What a tile-kernel run returns: outputs, findings, counters, coverage and a roofline time."""
from __future__ import annotations

from dataclasses import dataclass, field

from .counters import Counters

__all__ = ["TileReport"]


@dataclass
class TileReport:
    """The result of :func:`~tessera_ref.interp.tile.run` (TILE-EXEC-1).

    ``outputs``: the ``mut`` buffers (the caller's arrays, updated in place); ``coverage``:
    per ``mut`` buffer, (elements stored at least once, elements); ``findings``: checker
    findings (:class:`~tessera_ref.interp.tile.checkers.Finding`), warnings included;
    ``counters``: :class:`~tessera_ref.interp.tile.counters.Counters`; ``roofline``: the
    roofline time of (FLOPs, HBM bytes) on ``preset`` (``None`` with counters off).
    """

    kernel: str
    grid: tuple
    lanes: int
    outputs: dict
    coverage: dict
    counters: Counters
    findings: list = field(default_factory=list)
    roofline: object = None
    preset: str = "H100"

    def text(self) -> str:
        """A summary for a person."""
        c = self.counters
        lines = [f"kernel @{self.kernel}: grid {self.grid} x {self.lanes} lanes, {c.tiles} tiles, "
                 f"{c.barriers} barriers" + (f", {c.shuffles} warp shuffles" if c.shuffles else "")]
        for name, (done, total) in self.coverage.items():
            note = "" if done == total else f"  <- {total - done} elements never stored"
            lines.append(f"  {name}: {done} of {total} elements stored{note}")
        if self.roofline is not None:
            lines.append(f"  FLOPs {c.flops:,}; HBM {c.hbm_bytes:,} B ({c.global_sectors:,} sectors in "
                         f"{c.global_requests:,} requests, {100 * c.sector_efficiency:.1f}% efficient)")
            lines.append(f"  shared: {c.smem_read_bytes:,} B read, {c.smem_write_bytes:,} B written; "
                         f"{c.smem_wavefronts:,} wavefronts for {c.smem_requests:,} requests "
                         f"(ideal {c.smem_ideal_wavefronts:,}, {c.smem_conflict_wavefronts:,} from bank conflicts)")
            r = self.roofline
            lines.append(f"  roofline on {self.preset}: {r.time * 1e6:.3f} us ({r.bound}-bound)")
        lines += [f"  {f}" for f in self.findings] or ["  no findings"]
        return "\n".join(lines)

    __str__ = text
