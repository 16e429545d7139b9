"""The CUDA backend (DESIGN §9). Today: the Tile IR -> CUDA C text renderer (:mod:`.render`),
text only — nothing here compiles or runs, and nothing needs CuPy or a GPU.

Importing this package registers the renderer as the ``"target"`` IR level of lowered
programs and ``@kernel`` objects (:func:`tessera_ref.lowering.register_target`).
"""
from ...lowering import register_target
from .render import emit_cuda

register_target("target", emit_cuda)

__all__ = ["emit_cuda"]
