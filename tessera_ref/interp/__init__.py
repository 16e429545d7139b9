"""The exact interpreter, the backend ``"interp"`` (:mod:`.backend`): Graph IR by the primitives'
reference ``impl``, tile kernels in the tile interpreter (:mod:`.tile`), collectives by the
simulated communicator (:mod:`.communicator`)."""
from .backend import INTERP, InterpBackend, run_function, run_module

__all__ = ["InterpBackend", "INTERP", "run_function", "run_module"]
