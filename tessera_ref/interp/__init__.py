"""The exact interpreter, the backend ``"interp"`` (:mod:`.backend`): Graph IR by the primitives'
reference ``impl``, tile kernels in the tile interpreter (:mod:`.tile`), collectives by the
simulated communicator (:mod:`.communicator`); ``"interp-tiles"`` (:mod:`.tiles`) runs ops as
tile kernels."""
from .backend import INTERP, InterpBackend, run_function, run_module
from .tiles import TileBackend

__all__ = ["InterpBackend", "INTERP", "TileBackend", "run_function", "run_module"]
