"""The exact interpreter: executes Graph IR functions with the primitives' reference ``impl``."""
from .graph import run_function, run_module

__all__ = ["run_function", "run_module"]
