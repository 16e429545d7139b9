"""``dist.visualize(t)``: which device holds which block of a distributed tensor (MESH-VIS-1).

A text grid of the blocks of a 1-D or 2-D :class:`~tessera_ref.dist.DistTensor` — one cell per
block, its index ranges on the borders — naming in each cell the devices that hold that block
(several when the tensor is replicated over a mesh axis). It reads only the tensor's type and
mesh, so abstract tensors work too.
"""
from __future__ import annotations

from ..errors import LayoutError, user_location
from ..sim.units import device_ranges
from .tensor import DistTensor, local_shape

__all__ = ["visualize", "blocks"]


def _block_index(axes: tuple, coords: dict, mesh) -> int:
    """The block a device holds along a dimension split over ``axes`` (the first axis major)."""
    index = 0
    for a in axes:
        index = index * mesh.axis_size(a) + coords[a]
    return index


def blocks(t: DistTensor) -> dict:
    """``{block index tuple: [device indices]}``: which devices hold each block of ``t``."""
    out: dict = {}
    for i, name in enumerate(t.mesh.devices):
        coords = t.mesh.coords(name)
        key = tuple(_block_index(axes, coords, t.mesh) for axes in t.layout.dims)
        out.setdefault(key, []).append(i)
    return out


def _ranges(n: int, block: int, count: int) -> list:
    """``"a:b"`` for each of ``count`` blocks of ``block`` elements of a dimension of ``n``
    (padding cut off; a block entirely of padding reads ``pad``)."""
    return [f"{min(k * block, n)}:{min((k + 1) * block, n)}" if k * block < n else "pad" for k in range(count)]


def visualize(t, *, file=None) -> str:
    """Print (to ``file``, default stdout) and return the block grid of ``t`` (MESH-VIS-1)."""
    if not isinstance(t, DistTensor):
        raise LayoutError(f"dist.visualize needs a DistTensor, got {type(t).__name__}",
                          fix="pass a tensor made by dist.tensor(..., mesh=...) or an op on one",
                          location=user_location())
    if t.type.rank not in (1, 2):
        raise LayoutError(f"dist.visualize draws 1-D and 2-D tensors; {t.type} has rank {t.type.rank}",
                          fix="reshape it to 2-D first (op.reshape), or print t.layout and t.local_shape",
                          location=user_location())
    lay, mesh, shape = t.layout, t.mesh, t.type.shape
    lshape = local_shape(shape, lay, mesh)
    counts = [mesh.axis_size(axes) if axes else 1 for axes in lay.dims]
    held = blocks(t)
    rows = _ranges(shape[0], lshape[0], counts[0]) if len(shape) == 2 else [None]
    cols = _ranges(shape[-1], lshape[-1], counts[-1])
    cells = [[device_ranges(mesh.devices, held[(r, c) if len(shape) == 2 else (c,)]) for c in range(len(cols))]
             for r in range(len(rows))]
    width = max(len(x) for x in cols + [c for row in cells for c in row]) + 2
    label = max((len(f"rows {r} ") for r in rows if r), default=0)
    rule = " " * label + ("+" + "-" * width) * len(cols) + "+"
    lines = [f"{t.type} on {mesh!r}: each device holds a block of {' x '.join(map(str, lshape))}",
             " " * label + "".join(" " + c.center(width) for c in cols), rule]
    for r, row in zip(rows, cells):
        lines.append((f"rows {r}" if r else "").ljust(label) + "".join("|" + c.center(width) for c in row) + "|")
        lines.append(rule)
    if lay.partial:
        lines.append(f"pending {lay.partial_op} over {', '.join(lay.partial)}: the devices of a cell hold "
                     f"contributions; the block is their {lay.partial_op}")
    text = "\n".join(lines)
    print(text, file=file)
    return text
