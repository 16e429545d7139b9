"""The tile interpreter (docs/spec/tiles.md): runs Tile IR kernels one tile at a time with
lanes vectorized, checks races, bounds, uninitialized reads and divergent barriers, and
counts bank-conflict wavefronts, global sectors, bytes and FLOPs."""
from .checkers import Finding
from .counters import Counters, sectors, wavefronts
from .executor import run
from .report import TileReport

__all__ = ["run", "TileReport", "Finding", "Counters", "wavefronts", "sectors"]
