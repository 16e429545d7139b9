"""Rendered CUDA C together with the Tile IR op location of each line (CUDA-COMPILE-3).

:func:`render` is :func:`~.render.emit_cuda` (the same text) plus a map from 1-based line
numbers to the location of the Tile IR op that emitted the line, so a compile error names
the user's source line.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir import Module
from ...ir import tile as T
from . import render as R

__all__ = ["Source", "render"]


@dataclass(frozen=True)
class Source:
    """CUDA C ``text`` and ``locations``: line number -> Tile IR op location; ``tc_models``:
    ``(kernel, tensor-core model, location of its mma)`` for each kernel with a ``tc:``
    policy, which :func:`~.compile.build` compiles only for the model's architecture (CUDA-TC-1)."""
    text: str
    locations: dict = field(default_factory=dict)
    tc_models: tuple = ()


class _Located(R._Emitter):
    def __init__(self, func):
        super().__init__(func)
        self.where = []

    def emit(self, text: str) -> None:
        super().emit(text)
        self.where.append(self.location)


def render(module: Module) -> Source:
    """``emit_cuda(module)`` with the op location of every line."""
    kernels = [op for op in module.body if T.is_kernel(op)]
    if not kernels:
        return Source(R.emit_cuda(module))  # raises the renderer's error
    chunks, locations, tc_models = [], {}, []
    line = R.HEADER.count("\n") + 2  # the kernels start after the header and one newline
    for k in kernels:
        e = _Located(k)
        body = e.kernel()
        first = line + body.count("\n") - len(e.lines)  # the line of e.lines[0]
        for j, where in enumerate(e.where):
            if where is not None:
                locations[first + j] = str(where)
        chunks.append(body)
        tc_models += [(k.attributes["sym_name"], m, where) for m, where in sorted(e.tc_models.items())]
        line += body.count("\n") + 2  # "\n\n" between kernels
    return Source(R.HEADER + "\n" + "\n\n".join(chunks) + "\n", locations, tuple(tc_models))
