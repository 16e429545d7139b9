"""An observer of the seam and small references for the backend cases.

:class:`Spy` is an outside backend, written here as a third party would: it delegates every
op, launch and communicator call to the backend under test and counts them, so a case can
tell that something ran *through* the current backend. :func:`fold_ranks` is the rank-order
fold of NUM-RED-3 in NumPy float32, one add at a time; :data:`scale` a tile kernel to launch.
"""
from __future__ import annotations

import collections

import numpy as np

from tessera_ref import f32, kernel, mut, symbols, tile
from tessera_ref.backends import Backend, Communicator, get

n = symbols("n")


@kernel
def scale(x: f32[n], y: mut[f32[n]], alpha: f32):
    """``y = alpha · x``, one element per lane (a tile kernel to launch)."""
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i]


class SpyCommunicator(Communicator):
    """Counts each transport call and hands it to the inner backend's communicator."""

    name = "spy"

    def __init__(self, mesh, inner, counts):
        super().__init__(mesh)
        self.inner, self.counts = inner, counts

    def _count(self, what):
        self.counts[what] += 1

    def reduce(self, stacked, axes, op, policy):
        self._count("reduce")
        return self.inner.reduce(stacked, axes, op, policy)

    def all_gather(self, stacked, axis, dim):
        self._count("all_gather")
        return self.inner.all_gather(stacked, axis, dim)

    def broadcast(self, stacked, axis, root):
        self._count("broadcast")
        return self.inner.broadcast(stacked, axis, root)

    def permute(self, stacked, axis, pairs):
        self._count("permute")
        return self.inner.permute(stacked, axis, pairs)

    def send(self, stacked, dst, tag):
        self._count("send")
        return self.inner.send(stacked, dst, tag)

    def recv(self, posted, src, tag):
        self._count("recv")
        return self.inner.recv(posted, src, tag)


class Spy(Backend):
    """The backend ``inner`` (a name), counting what it is asked to run."""

    description = "counts ops, launches and transport calls; runs them on the backend under test"

    def __init__(self, inner: str, name: str = "spy"):
        self.inner = get(inner)
        self.name = name
        self.counts = collections.Counter()

    def run_op(self, call, *operands):
        self.counts["op"] += 1
        self.counts["op:" + call.primitive.name] += 1
        return self.inner.run_op(call, *operands)

    def launch(self, launch):
        self.counts["launch"] += 1
        return self.inner.launch(launch)

    def communicator(self, mesh):
        return SpyCommunicator(mesh, self.inner.communicator(mesh), self.counts)

    def ran(self, before: collections.Counter) -> collections.Counter:
        """What was counted since ``before`` (a copy of :attr:`counts`)."""
        return self.counts - before


def fold_ranks(values: np.ndarray, axis: int) -> np.ndarray:
    """``((x₀ + x₁) + x₂) + …`` along ``axis`` in float32, one elementwise add per rank."""
    moved = np.moveaxis(np.asarray(values, np.float32), axis, 0)
    acc = moved[0].copy()
    for v in moved[1:]:
        acc = np.add(acc, v, dtype=np.float32)
    return np.expand_dims(acc, axis)


def wide(rng: np.random.Generator, shape, lo: int = -20, hi: int = 21) -> np.ndarray:
    """f32 values of mixed signs over a wide dynamic range: rounding depends on the order."""
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)).astype(np.float32)
