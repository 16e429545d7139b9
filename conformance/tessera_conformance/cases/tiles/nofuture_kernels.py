"""Python kernels in a module WITHOUT `from __future__ import annotations` (TILE-FE-1): the
sizes are defined with `symbols` before the defs, or the annotations are quoted."""
from tessera_ref import f32, kernel, mut, tile
from tessera_ref.frontend.tile_api import symbols

n = symbols("n")
R, C = symbols("R C")


@kernel
def saxpy(x: f32[n], y: mut[f32[n]], alpha: f32):
    """y = alpha * x + y, the tail lanes masked."""
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]


@kernel
def scale_rows(X: "f32[R, C]", Y: "mut[f32[R, C]]", s: f32):
    """Quoted annotations: Python does not evaluate them."""
    r = tile.linear_id()
    if r < R:
        for c in range(C):
            Y[r, c] = X[r, c] * s
