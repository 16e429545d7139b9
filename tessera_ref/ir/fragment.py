"""Fragment ownership: which lane holds which elements of a register fragment (TILE-FRAG-1).

A fragment op (``fill``, ``frag_load``, ``frag_store``, ``mma``) may carry a ``layout``
attribute, a CuTe-style thread-value layout ``[lane_shape, lane_stride, value_shape,
value_stride]`` (four lists of ints). Lane ``l`` and value index ``v`` are split into
coordinates over their shapes, the first mode fastest (``l = c0 + s0·(c1 + s1·…)``), and
the element they name is the row-major offset ``Σ cᵢ·lane_strideᵢ + Σ dⱼ·value_strideⱼ`` in
the fragment. The layout must be a bijection from (lanes × values) onto the fragment's
elements (the verifier checks it). Without the attribute the ownership is cyclic: lane ``l``
holds the elements ``j ≡ l (mod lanes)`` in row-major order, value ``v`` being element
``l + v·lanes`` (the last value of some lanes is absent when ``lanes`` does not divide the
size).

:func:`blocked` builds the register-blocked layout of a ``rows × cols`` fragment: the lanes
form a ``LR × LC`` grid (lane ``l`` at row ``l // LC``, column ``l % LC``), each lane holds a
``TM × TN`` micro-tile made of ``r × c`` blocks (``r``, ``c`` ≤ 4) strided by ``LR·r`` rows
and ``LC·c`` columns, its values numbered row-major in the micro-tile — so a warp reads
consecutive 16-byte pieces of a shared row (conflict-free ``LDS.128``).

:func:`mma_sync` builds the layout of the accumulator of ``mma.sync.m16n8k16`` tiled over a
block tile: the warps form a ``WM × WN`` grid, each warp holds ``RM × RN`` tiles of 16 × 8,
and in each tile lane ``4g + t`` (``g = lane >> 2``, ``t = lane & 3``) holds ``c0, c1 = (g,
2t + {0, 1})`` and ``c2, c3 = (g + 8, 2t + {0, 1})`` (hardware.md's PTX table); slot ``j + 2h
+ 4·rn + 4·RN·rm`` is register ``c(2h + j)`` of tile ``(rm, rn)``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["TVLayout", "blocked", "mma_sync", "layout_of", "ownership"]


class TVLayout(NamedTuple):
    """A thread-value layout (see the module docstring)."""

    lane_shape: tuple
    lane_stride: tuple
    value_shape: tuple
    value_stride: tuple

    @property
    def lanes(self) -> int:
        return math.prod(self.lane_shape)

    @property
    def values(self) -> int:
        return math.prod(self.value_shape)

    def attr(self) -> list:
        """The attribute value: four lists of ints."""
        return [list(self.lane_shape), list(self.lane_stride), list(self.value_shape), list(self.value_stride)]

    @staticmethod
    def _part(shape, stride, n: int) -> np.ndarray:
        out = np.zeros(n, dtype=np.int64)
        index = np.arange(n, dtype=np.int64)
        for size, step in zip(shape, stride):
            out += (index % size) * step
            index //= size
        return out

    def lane_offsets(self) -> np.ndarray:
        """Per lane, the lane part of its offsets (``Σ cᵢ·lane_strideᵢ``)."""
        return self._part(self.lane_shape, self.lane_stride, self.lanes)

    def value_offsets(self) -> np.ndarray:
        """Per value slot, the value part of its offsets (``Σ dⱼ·value_strideⱼ``)."""
        return self._part(self.value_shape, self.value_stride, self.values)

    def offsets(self) -> np.ndarray:
        """``[lanes, values]`` row-major element offsets."""
        return self.lane_offsets()[:, None] + self.value_offsets()[None, :]

    def problem(self, shape) -> str | None:
        """Why this layout is not a bijection onto a fragment of ``shape`` (None when it is)."""
        n = math.prod(shape)
        if self.lanes * self.values != n:
            return (f"owns {self.lanes} lanes x {self.values} values = {self.lanes * self.values} elements, "
                    f"the fragment {list(shape)} has {n}")
        offs = self.offsets().reshape(-1)
        if offs.min() < 0 or offs.max() >= n or np.unique(offs).size != n:
            return f"does not map (lane, value) one-to-one onto the {n} elements of the fragment {list(shape)}"
        return None


def _ints(x) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(type(v) is int for v in x)


def layout_of(attributes: dict) -> TVLayout | None:
    """The ``layout`` attribute of an op as a :class:`TVLayout` (None: cyclic ownership).
    Raises ValueError for a malformed attribute (the verifier names the op)."""
    value = attributes.get("layout")
    if value is None:
        return None
    if not (isinstance(value, (list, tuple)) and len(value) == 4 and all(map(_ints, value))
            and len(value[0]) == len(value[1]) and len(value[2]) == len(value[3])
            and min(value[0]) > 0 and min(value[2]) > 0):
        raise ValueError(f"layout must be [lane_shape, lane_stride, value_shape, value_stride] (lists of ints, "
                         f"shapes positive, each stride list as long as its shape), is {value!r}")
    return TVLayout(*(tuple(v) for v in value))


def ownership(layout: TVLayout | None, size: int, lanes: int) -> np.ndarray:
    """``[lanes, values]`` row-major offsets of the elements each lane owns, value by value;
    ``-1`` where a cyclic lane has no last value."""
    if layout is not None:
        return layout.offsets()
    values = -(-size // lanes)
    offs = np.arange(lanes, dtype=np.int64)[:, None] + lanes * np.arange(values, dtype=np.int64)[None, :]
    return np.where(offs < size, offs, -1)


def _block(size: int) -> int:
    return next(b for b in (4, 2, 1) if size % b == 0)


def blocked(rows: int, cols: int, lanes: int) -> TVLayout | None:
    """The register-blocked layout of a ``rows × cols`` fragment over ``lanes`` lanes (see the
    module docstring), or None when there is none: the lane grid ``LR × LC`` (``LC`` a power
    of two ≤ 16 dividing ``cols``, ``LR = lanes / LC`` dividing ``rows``) closest to square
    micro-tiles (wider ones first), with at least 2 values per lane."""
    best = None
    for LC in (16, 8, 4, 2, 1):
        if lanes % LC or cols % LC or rows % (lanes // LC):
            continue
        TM, TN = rows // (lanes // LC), cols // LC
        if TM * TN < 2:
            continue
        key = (abs(TM - TN), -TN)
        if best is None or key < best[0]:
            best = (key, LC, TM, TN)
    if best is None:
        return None
    _, LC, TM, TN = best
    LR, r, c = lanes // LC, _block(TM), _block(TN)
    modes = [(c, 1), (TN // c, LC * c), (r, cols), (TM // r, LR * r * cols)]
    modes = [m for m in modes if m[0] > 1] or [(1, 0)]
    return TVLayout((LC, LR), (c, r * cols), tuple(m[0] for m in modes), tuple(m[1] for m in modes))


def mma_sync(rows: int, cols: int, lanes: int) -> TVLayout | None:
    """The ``mma.sync.m16n8k16`` accumulator layout (fp8's ``m16n8k32`` has the same) of a
    ``rows × cols`` fragment over ``lanes`` lanes (see the module docstring), or None when the
    tile is not made of whole 16 × 8 tiles that the warps share evenly: the warp grid with the
    squarest per-warp region (more columns first)."""
    if rows % 16 or cols % 8 or lanes % 32:
        return None
    warps, tiles_m, tiles_n = lanes // 32, rows // 16, cols // 8
    best = None
    for WN in range(1, warps + 1):
        WM = warps // WN
        if warps % WN or tiles_m % WM or tiles_n % WN:
            continue
        RM, RN = tiles_m // WM, tiles_n // WN
        key = (abs(16 * RM - 8 * RN), -RN)
        if best is None or key < best[0]:
            best = (key, WM, WN, RM, RN)
    if best is None:
        return None
    _, WM, WN, RM, RN = best
    return TVLayout((4, 8, WN, WM), (2, cols, 8 * RN, 16 * RM * cols),
                    (2, 2, RN, RM), (1, 8 * cols, 8, 16 * cols))
