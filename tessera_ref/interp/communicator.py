"""The simulated communicator: every rank of the mesh in this process, its local values stacked
(DESIGN §14). Reductions fold ranks in ascending order in the accum format and round once
(NUM-RED-3); exact pending sums are summed exactly (NUM-RED-4); the rest is array movement."""
from __future__ import annotations

import math

import numpy as np

from ..backends.base import Communicator
from ..numerics import ExactAccumulator, cast
from ..numerics.arith import accum_op, to_accum
from ..numerics.reduce import extreme_last_axis

__all__ = ["SimulatedCommunicator"]


def _fold(values: np.ndarray, op: str, policy) -> np.ndarray:
    """Fold axis 0 of ``values`` (one entry per rank, ascending) with ``op`` in the accum
    format, then convert once into storage."""
    accum = policy.accum
    if policy.reduction == "exact" and op == "sum":
        acc = ExactAccumulator(values.shape[1:], "f64" if policy.storage.name == "f64" else "f32")
        return acc.add(values, axis=0).round(policy.storage, rounding=policy.rounding, overflow=policy.overflow)
    with np.errstate(all="ignore"):
        if op in ("max", "min"):
            acc = extreme_last_axis(np.moveaxis(to_accum(values, accum), 0, -1), op)
        else:
            acc = to_accum(values[0], accum)
            for g in range(1, values.shape[0]):
                acc = accum_op("add" if op == "sum" else "mul", acc, values[g], accum=accum)
    return cast(acc, policy.storage, rounding=policy.rounding, overflow=policy.overflow)


class SimulatedCommunicator(Communicator):
    """Collectives over stacked local values, all ranks in one process (the interp backend's)."""

    name = "simulated"

    def _expand(self, local: np.ndarray, axes) -> np.ndarray:
        """``local`` broadcast to full size along the given mesh axes."""
        shape = list(local.shape)
        for a in axes:
            i = self.mesh.axis_index(a)
            shape[i] = self.mesh.shape[i]
        return np.broadcast_to(local, tuple(shape))

    def reduce(self, stacked, axes: tuple, op: str, policy):
        positions = sorted(self.mesh.axis_index(a) for a in axes)
        if isinstance(stacked, ExactAccumulator):
            return stacked.sum_axes(tuple(positions))
        moved = np.moveaxis(self._expand(stacked, axes), positions, list(range(len(positions))))
        group = math.prod(moved.shape[:len(positions)])
        folded = _fold(moved.reshape((group,) + moved.shape[len(positions):]), op, policy)
        return np.expand_dims(folded, tuple(positions))

    def all_gather(self, stacked, axis: str, dim: int):
        i, m = self.mesh.axis_index(axis), self.mesh.ndim
        moved = np.moveaxis(stacked, i, m + dim - 1)  # mesh axis i now sits just before the dimension
        merged = moved.reshape(moved.shape[:m + dim - 1] + (-1,) + moved.shape[m + dim + 1:])
        return np.expand_dims(merged, i)

    def broadcast(self, stacked, axis: str, root: int):
        return np.take(stacked, [root], axis=self.mesh.axis_index(axis))

    def send(self, stacked, dst, tag: int):
        return stacked  # every device is in this process: the values themselves travel

    def recv(self, posted, src, tag: int):
        return posted

    def permute(self, stacked, axis: str, pairs: list):
        i = self.mesh.axis_index(axis)
        src = self._expand(stacked, (axis,))
        out = np.zeros(src.shape, dtype=src.dtype)
        for s, d in pairs:
            out[(slice(None),) * i + (d,)] = src[(slice(None),) * i + (s,)]
        return out
