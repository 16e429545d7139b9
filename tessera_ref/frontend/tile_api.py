"""The names a ``@kernel`` body uses: ``tile``, ``tshared``, ``cp_async``, ``tbarrier``, ``mut``.

A kernel body is never run by Python: :mod:`tessera_ref.frontend.kernel` reads its source
and turns these names into Tile IR (docs/spec/tiles.md, TILE-FE-*). The objects exist so that
``from tessera import tile, tshared, cp_async, tbarrier`` works, and calling one outside a
kernel says so.
"""
from __future__ import annotations

from ..errors import KernelError

__all__ = ["tile", "tshared", "cp_async", "tbarrier", "mut", "symbols", "KERNEL_NAMES"]

#: The operations each namespace offers inside a kernel body.
KERNEL_NAMES = {
    "tile": ("linear_id", "lane_id", "tile_id", "id", "num_tiles", "num_lanes", "range", "load", "store",
             "mma", "mma_sync", "zeros"),
    "tshared": ("alloc",),
    "cp_async": ("shared", "commit", "wait"),
}


class _KernelOnly:
    """A name that only means something inside a ``@kernel`` body."""

    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _KernelOnly(f"{self._path}.{name}")

    def __getitem__(self, item):
        return self

    def __call__(self, *args, **kwargs):
        raise KernelError(f"{self._path}(...) runs only inside a @kernel body, which Tessera compiles "
                          "to Tile IR; Python never calls it directly",
                          fix="decorate the function with @kernel and launch it: k(*arrays, grid=..., lanes=...)")

    def __repr__(self) -> str:
        return f"<tessera kernel name {self._path}>"


tile = _KernelOnly("tile")
tshared = _KernelOnly("tshared")
cp_async = _KernelOnly("cp_async")
tbarrier = _KernelOnly("tbarrier")
#: ``y: mut[f32[n]]`` marks a global buffer the kernel writes (the DSL writes ``mut f32[n]``).
mut = _KernelOnly("mut")


def symbols(names: str) -> tuple:
    """Placeholders for the symbolic sizes of Python kernel annotations (``M, K =
    symbols("M K")``), so linters see the names defined; the front end reads sizes from the
    annotations, never from these objects."""
    return tuple(_KernelOnly(name) for name in names.split())
