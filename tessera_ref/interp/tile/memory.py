"""Global buffers, shared buffers and views for the tile interpreter (the TILE-MEM clauses).

- :class:`Global` wraps a kernel's NumPy argument; byte addresses are ``base + flat·size``
  with each buffer's base aligned to 256 bytes (for sector counts).
- :class:`Shared` is one ``tshared`` allocation of one tile: a physical array whose element
  offsets come from the logical index through the row pitch (``cols + pad``) and, with
  ``swizzle="xor"``, CuTe's ``Swizzle<3,4,3>`` on byte offsets (the 128-byte swizzle:
  bits 4-6 ^= bits 7-9). It keeps the checkers' shadow state per physical element:
  initialized, pending cp.async copies, and the phase and lane of the last write and reads.
- :class:`View` is a static box of a buffer at uniform offsets (``X[t:t+128]``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["Global", "Shared", "View", "ALL_LANES", "NO_LANE", "swizzle_bytes"]

#: Shadow lane marks: no access yet / several lanes (or the whole tile).
NO_LANE = -1
ALL_LANES = -2


def swizzle_bytes(offsets: np.ndarray) -> np.ndarray:
    """CuTe ``Swizzle<3,4,3>`` of byte offsets: ``o ^ ((o & (7 << 7)) >> 3)``."""
    return offsets ^ ((offsets & (7 << 7)) >> 3)


class Global:
    """A global-memory buffer: kernel parameter ``name`` holding ``array``."""

    space = "global"

    def __init__(self, name: str, array: np.ndarray, base: int, mut: bool):
        self.name, self.array, self.base, self.mut = name, array, base, mut
        self.shape = array.shape
        self.itemsize = array.dtype.itemsize
        self.flat = array.reshape(-1)
        self.written = np.zeros(array.size, dtype=bool) if mut else None
        self.writer = np.full(array.size, -1, dtype=np.int64) if mut else None  # tile_linear of the last store
        self.layout_key = ("global", name, self.shape, base)

    def flat_index(self, index: tuple) -> np.ndarray:
        """Row-major flat element offsets of a tuple of (in-bounds) index arrays."""
        return np.ravel_multi_index(index, self.shape) if len(self.shape) > 1 else np.asarray(index[0])

    def box(self, offsets: tuple, shape: tuple) -> np.ndarray:
        """Flat offsets of the box at ``offsets`` of ``shape`` (in bounds), in row-major order."""
        grids = np.ix_(*[np.arange(o, o + s) for o, s in zip(offsets, shape)])
        return np.ravel_multi_index(grids, self.shape) if len(self.shape) > 1 else grids[0]


_LAYOUTS: dict = {}


def _layout(shape: tuple, itemsize: int, swizzle: str, pad: int) -> tuple:
    """(physical element offset of each logical index, physical elements spanned), cached."""
    key = (shape, itemsize, swizzle, pad)
    hit = _LAYOUTS.get(key)
    if hit is None:
        pitch = shape[-1] + pad
        strides, running = [1] * len(shape), pitch
        for axis in range(len(shape) - 2, -1, -1):
            strides[axis] = running
            running *= shape[axis]
        logical = np.zeros(shape, dtype=np.int64)
        for axis, stride in enumerate(strides):
            ix = [None] * len(shape)
            ix[axis] = slice(None)
            logical += np.arange(shape[axis], dtype=np.int64)[tuple(ix)] * stride
        if swizzle == "xor":
            logical = swizzle_bytes(logical * itemsize) // itemsize
        logical.setflags(write=False)
        hit = _LAYOUTS[key] = (logical, running)
    return hit


class Shared:
    """One shared-memory allocation of a tile (see the module docstring)."""

    space = "shared"

    def __init__(self, name: str, shape: tuple, dtype: np.dtype, swizzle: str, pad: int, base: int,
                 shadow: bool):
        self.name, self.shape, self.swizzle, self.pad, self.base = name, shape, swizzle, pad, base
        self.dtype = np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        logical, running = _layout(tuple(shape), self.itemsize, swizzle, pad)
        self.phys_map = logical
        self.layout_key = ("shared", shape, self.itemsize, swizzle, pad, base)
        size = -(-int(running * self.itemsize) // 128) * 128 // self.itemsize  # whole 128-byte rows (swizzle)
        self.data = np.zeros(size, dtype=self.dtype)
        if shadow:
            self.init = np.zeros(size, dtype=bool)
            self.pending = np.zeros(size, dtype=np.int16)
            self.w_phase = np.full(size, -1, dtype=np.int64)
            self.w_lane = np.full(size, NO_LANE, dtype=np.int64)
            self.r_phase = np.full(size, -1, dtype=np.int64)
            self.r_lane = np.full(size, NO_LANE, dtype=np.int64)

    def logical_of(self, phys: np.ndarray) -> list:
        """The logical indices (tuples) of physical element offsets, for messages."""
        flat = np.argsort(self.phys_map.reshape(-1))
        order = self.phys_map.reshape(-1)[flat]
        pos = np.searchsorted(order, phys)
        return [tuple(int(i) for i in np.unravel_index(flat[p], self.shape)) for p in np.atleast_1d(pos)]


    def logical_indices(self, phys: np.ndarray) -> np.ndarray:
        """The logical indices of physical element offsets, one row per offset."""
        flat = np.argsort(self.phys_map.reshape(-1))
        order = self.phys_map.reshape(-1)[flat]
        return np.stack(np.unravel_index(flat[np.searchsorted(order, phys)], self.shape), axis=-1)


class View:
    """A static box of ``base`` (a :class:`Global` or :class:`Shared`) at uniform ``offsets``
    with ``shape``; ``drop`` leading dimensions of the box have size 1 and are not part of
    the view's own shape."""

    def __init__(self, base, offsets: tuple, shape: tuple, drop: int):
        self.base, self.offsets, self.shape, self.drop = base, offsets, shape, drop
        self.name = base.name
        self.space = base.space
        self.itemsize = base.itemsize

    @property
    def box_shape(self) -> tuple:
        return (1,) * self.drop + self.shape
