"""Front ends: tracing Python functions into Graph IR (:mod:`.graph`)."""
from .graph import GraphFunction, jit, module

__all__ = ["GraphFunction", "jit", "module"]
