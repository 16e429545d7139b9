"""The exact interpreter, the backend ``"interp"`` (:mod:`.backend`): Graph IR by the primitives'
reference ``impl``, tile kernels in the tile interpreter (:mod:`.tile`), collectives by the
simulated communicator (:mod:`.communicator`); ``"interp-tiles"`` (:mod:`.tiles`) is the
runtime over the tile interpreter as a device."""
from .backend import INTERP, InterpBackend, run_function, run_module
from .tiles import TileInterpDevice, tile_backend

__all__ = ["InterpBackend", "INTERP", "TileInterpDevice", "tile_backend", "run_function", "run_module"]
