"""``numpy-naive``: a deliberately NON-conforming example backend (docs/conformance.md).

It runs a program the way a quick NumPy port would: matmul by NumPy/BLAS in float32 (whatever
summation order the BLAS picks), sums by ``np.sum`` (pairwise), transcendental functions by
libm through NumPy in float32, casts by ``astype`` (round to nearest even whatever the policy
says: no rtz/rup/rdown, no saturation, no stochastic rounding), and collective reductions by
``np.sum`` over the ranks. Everything else it hands to the interpreter. The suite must fail
it on exactly the clauses those shortcuts break and pass it on the rest — the proof that the
suite bites, and a template for an outside backend (registered through the entry point
``numpy-naive = tessera_conformance.naive:NumpyNaive``).
"""
from __future__ import annotations

import numpy as np

from tessera_ref.backends import Backend, Communicator, get

__all__ = ["NumpyNaive"]

_F32 = np.float32


def _out(call, value):
    """``value`` as the storage of the op's result (a plain ``astype``: RNE, no policy)."""
    return np.asarray(value).astype(call.out_types[0].dtype)


def _matmul(call, a, b, c=None):
    a = np.swapaxes(a, -1, -2) if call.attrs["transpose_a"] else a
    b = np.swapaxes(b, -1, -2) if call.attrs["transpose_b"] else b
    out = np.matmul(a.astype(_F32), b.astype(_F32))
    return (_out(call, out if c is None else out + c.astype(_F32)),)


def _sum(call, x):
    axis = call.attrs["axis"]
    axis = None if axis is None else tuple(axis) if isinstance(axis, (tuple, list)) else axis
    return (_out(call, np.sum(x.astype(_F32), axis=axis, keepdims=call.attrs.get("keepdims", False))),)


def _math(fn):
    return lambda call, x: (_out(call, fn(x.astype(_F32))),)


def _cast(call, x):
    return (_out(call, x),)


#: The shortcuts, by primitive name.
NAIVE = {"matmul": _matmul, "sum": _sum, "cast": _cast,
         **{name: _math(getattr(np, name)) for name in ("exp", "log", "tanh", "sin", "cos", "sqrt")}}


class NaiveCommunicator(Communicator):
    """Reductions by ``np.sum`` over the ranks in storage precision; movement delegated."""

    name = "numpy-naive"

    def __init__(self, mesh, inner):
        super().__init__(mesh)
        self.inner = inner

    def reduce(self, stacked, axes, op, policy):
        if op != "sum" or not isinstance(stacked, np.ndarray):
            return self.inner.reduce(stacked, axes, op, policy)
        positions = tuple(sorted(self.mesh.axis_index(a) for a in axes))
        return np.sum(stacked.astype(_F32), axis=positions, keepdims=True).astype(stacked.dtype)

    def all_gather(self, stacked, axis, dim):
        return self.inner.all_gather(stacked, axis, dim)

    def broadcast(self, stacked, axis, root):
        return self.inner.broadcast(stacked, axis, root)

    def permute(self, stacked, axis, pairs):
        return self.inner.permute(stacked, axis, pairs)

    def send(self, stacked, dst, tag):
        return self.inner.send(stacked, dst, tag)

    def recv(self, posted, src, tag):
        return self.inner.recv(posted, src, tag)


class NumpyNaive(Backend):
    """See the module docstring."""

    name = "numpy-naive"
    description = "a deliberately non-conforming example: BLAS matmul, np.sum, libm math, astype casts"

    def __init__(self):
        self.interp = get("interp")

    def run_op(self, call, *operands) -> tuple:
        rule = NAIVE.get(call.primitive.name)
        if rule is None:
            return self.interp.run_op(call, *operands)
        with np.errstate(all="ignore"):  # inf/NaN arise as they would on a GPU, silently
            return rule(call, *operands)

    def launch(self, launch):
        return self.interp.launch(launch)

    def communicator(self, mesh):
        return NaiveCommunicator(mesh, self.interp.communicator(mesh))
