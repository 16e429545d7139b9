"""Block geometry: which global box of a tensor each device block is, which process writes
each distinct block (the lowest-rank owner, CKPT-SAVE-2), and which saved boxes a destination
block reads (CKPT-RESTORE-2). A box is a tuple of ``(lo, hi)`` per dimension.
"""
from __future__ import annotations

import bisect
import itertools

import numpy as np

from ..dist.mesh import Mesh
from ..dist.world import placement
from ..errors import CheckpointError

__all__ = ["block_box", "saved_blocks", "my_blocks", "SavedGrid"]


def block_box(shape: tuple, lshape: tuple, layout, mesh: Mesh, coords: dict) -> tuple:
    """The global box of the block that the device at mesh ``coords`` holds (padding cut off)."""
    box = []
    for n, l, axes in zip(shape, lshape, layout.dims):
        b = 0
        for a in axes:  # major first (MESH-LAYOUT-1)
            b = b * mesh.axis_size(a) + coords[a]
        box.append((min(b * l, n), min((b + 1) * l, n)))
    return tuple(box)


def saved_blocks(shape: tuple, lshape: tuple, layout, mesh: Mesh) -> list:
    """``[(box, writer rank, mesh coords)]`` for every distinct block, in row-major order of the
    split axes: the writer is the process owning the block's device with coordinate 0 on every
    axis that does not split the tensor (the lowest-rank holder, CKPT-SAVE-2); empty blocks
    (all padding) are left out."""
    place = placement(mesh)
    split = [a for a in mesh.axes if a in layout.split_axes]
    out = []
    for values in itertools.product(*(range(mesh.axis_size(a)) for a in split)):
        coords = dict.fromkeys(mesh.axes, 0) | dict(zip(split, values))
        box = block_box(shape, lshape, layout, mesh, coords)
        if all(hi > lo for lo, hi in box) or not shape:
            out.append((box, place.owner(tuple(coords[a] for a in mesh.axes)), coords))
    return out


def my_blocks(shape: tuple, lshape: tuple, layout, mesh: Mesh) -> list:
    """``[(stacked index, box)]`` for the distinct blocks this process holds in a layout without
    a pending reduction: one per position of its stacked storage (MESH-MP-2)."""
    place = placement(mesh)
    varying = layout.varying_axes
    stack = tuple(b if a in varying else 1 for a, b in zip(mesh.axes, place.box))
    out = []
    for index in np.ndindex(*stack):
        coords = {a: s + i for a, s, i in zip(mesh.axes, place.start, index)}
        out.append((index, block_box(shape, lshape, layout, mesh, coords)))
    return out


class SavedGrid:
    """The saved boxes of one tensor, checked to tile its global box exactly (a grid of
    intervals per dimension, each cell once), and searched by interval (CKPT-RESTORE-2)."""

    def __init__(self, shape: tuple, shards: list, where: str):
        self.shape = shape
        self.cuts, self.cells = [], {}
        if 0 in shape:  # no bytes: nothing saved, nothing to read
            if shards:
                raise CheckpointError(f"{where}: a tensor of shape {list(shape)} has saved blocks",
                                      fix="the manifest is damaged")
            return
        for d, n in enumerate(shape):
            spans = sorted({s["box"][d] for s in shards})
            if spans and (spans[0][0] != 0 or spans[-1][1] != n or any(
                    a[1] != b[0] for a, b in zip(spans, spans[1:])) or any(lo >= hi for lo, hi in spans)):
                raise CheckpointError(f"{where}: the saved blocks of dimension {d} ({spans[:4]}...) do not tile "
                                      f"0..{n}", fix="the manifest is damaged")
            self.cuts.append(spans)
        for s in shards:
            key = tuple(self.cuts[d].index(s["box"][d]) for d in range(len(shape)))
            if key in self.cells:
                raise CheckpointError(f"{where}: two saved blocks cover {s['box']}", fix="the manifest is damaged")
            self.cells[key] = s
        expected = int(np.prod([len(c) for c in self.cuts])) if shape else 1
        if len(self.cells) != expected:
            raise CheckpointError(f"{where}: {len(self.cells)} saved blocks do not cover the tensor "
                                  f"({expected} expected)", fix="the manifest is damaged")

    def overlapping(self, box: tuple):
        """``(saved shard, intersection box)`` for every saved block meeting ``box``."""
        if 0 in self.shape:
            return
        ranges = []
        for d, (lo, hi) in enumerate(box):
            spans = self.cuts[d]
            first = bisect.bisect_right([s[1] for s in spans], lo)
            last = bisect.bisect_left([s[0] for s in spans], hi)
            ranges.append(range(first, last))
        for key in itertools.product(*ranges):
            shard = self.cells[key]
            inter = tuple((max(lo, s[0]), min(hi, s[1])) for (lo, hi), s in zip(box, shard["box"]))
            yield shard, inter
