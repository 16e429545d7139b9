"""The C expressions of fragment ownership (TILE-FRAG-1) for the CUDA renderer.

:class:`Owned` says, for a fragment of ``shape`` under a :class:`~tessera_ref.ir.fragment.TVLayout`,
which element value slot ``s`` of a lane holds: the row-major offset
``lane_offset(threadIdx.x) + value_offset(s)``, both written as C expressions whose value
part folds to a constant once the slot loop is unrolled. When the layout is *separable* —
every element's row is a lane part plus a value part, and so is its column — it also gives
the lane's row and column origin and each slot's (row, column) within them, which the
renderer uses for register micro-tiles (``mma`` with one operand load per row or column,
vector loads and stores of consecutive columns).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["Owned", "mode_expr"]


def mode_expr(index: str, shape, stride) -> str:
    """``Σ ((index / P_i) % S_i) · stride_i`` (the first mode fastest; ``index`` below the
    product of ``shape``, so the last mode needs no ``%``) as C text, ``0`` if empty."""
    terms, period, total = [], 1, math.prod(shape)
    for size, step in zip(shape, stride):
        if size > 1 and step:
            coord = index if period == 1 else f"({index} / {period})"
            coord = coord if period * size == total else f"({coord} % {size})"
            terms.append(coord if step == 1 else f"{coord} * {step}")
        period *= size
    return " + ".join(terms) or "0"


def _split(shape, stride, n: int, cols: int):
    """Per index (lane or value), its row and column parts: each mode's stride split into
    ``(stride // cols, stride % cols)``."""
    index = np.arange(n, dtype=np.int64)
    rows = np.zeros(n, dtype=np.int64)
    cols_ = np.zeros(n, dtype=np.int64)
    for size, step in zip(shape, stride):
        coord = index % size
        index = index // size
        rows += coord * (step // cols)
        cols_ += coord * (step % cols)
    return rows, cols_


class Owned:
    """The ownership of a 2-D fragment of ``shape`` under ``layout`` (see the module docstring)."""

    def __init__(self, layout, shape):
        self.layout, self.shape = layout, tuple(shape)
        self.values = layout.values
        self.lane_offset = mode_expr("threadIdx.x", layout.lane_shape, layout.lane_stride)
        cols = self.shape[-1]
        offsets = layout.offsets()
        lane_rows, lane_cols = _split(layout.lane_shape, layout.lane_stride, layout.lanes, cols)
        val_rows, val_cols = _split(layout.value_shape, layout.value_stride, layout.values, cols)
        self.separable = len(self.shape) == 2 and np.array_equal(
            offsets, (lane_rows[:, None] + val_rows[None, :]) * cols + lane_cols[:, None] + val_cols[None, :]) \
            and (lane_cols[:, None] + val_cols[None, :]).max() < cols
        if self.separable:
            self.lane_row = mode_expr("threadIdx.x", layout.lane_shape, [s // cols for s in layout.lane_stride])
            self.lane_col = mode_expr("threadIdx.x", layout.lane_shape, [s % cols for s in layout.lane_stride])
            self.value_rows, self.value_cols = [int(r) for r in val_rows], [int(c) for c in val_cols]
            #: the divisor every lane's column origin is a multiple of (0: all are 0)
            self.col_align = math.gcd(*[int(s % cols) for s, n in zip(layout.lane_stride, layout.lane_shape)
                                        if n > 1])
            self.row_align = math.gcd(*[int(s // cols) for s, n in zip(layout.lane_stride, layout.lane_shape)
                                        if n > 1])
            self.rows = sorted(set(self.value_rows))
            self.cols = sorted(set(self.value_cols))

    def value_offset(self, slot: str) -> str:
        """The value part of slot ``slot``'s offset (a constant once the slot is)."""
        return mode_expr(slot, self.layout.value_shape, self.layout.value_stride)

    def row_major_slots(self) -> bool:
        """Whether slot ``i · len(cols) + j`` holds (row ``rows[i]``, column ``cols[j]``)."""
        return self.separable and all(
            self.value_rows[i * len(self.cols) + j] == r and self.value_cols[i * len(self.cols) + j] == c
            for i, r in enumerate(self.rows) for j, c in enumerate(self.cols)) and \
            len(self.rows) * len(self.cols) == self.values
