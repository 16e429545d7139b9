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

__all__ = ["NumpyNaive", "BREAKS"]

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


#: The clauses each shortcut breaks, by the cases whose programs it changes (a case's program
#: may use several ops; the suite must fail exactly the union and pass every other clause).
BREAKS = {
    # BLAS reorders the k sum and rounds per its own blocking (NUM-RED-1)
    "matmul": (
        "AD-4", "AD-CHOLESKY-1", "AD-FLASHATTENTION-1", "AD-SVD-1", "BACKEND-OP-1", "BACKEND-RUN-1",
        "GRAPH-MATMUL-1", "GRAPH-RW-2", "MESH-SHARD-4", "NUM-RED-1", "NUM-RED-4", "SCHED-FE-2", "TILE-FE-1",
        # ... and ignores a tensor-core policy's block FMAs (NUM-TC-*)
        "NUM-RED-5", "NUM-TC-1", "NUM-TC-2", "NUM-TC-3", "NUM-TC-6",
    ),
    # np.sum adds pairwise, not in the 32-lane order (NUM-RED-2), and never exactly
    "sum": (
        "AD-CHOLESKY-1", "AD-FLASHATTENTION-1", "AD-LAYERNORMSAFE-1", "AD-RMSNORMSAFE-1", "AD-SOFTMAX-1",
        "AD-SVD-1", "BACKEND-RUN-1", "GRAPH-MEAN-1", "GRAPH-SUM-1", "GRAPH-TYPE-3", "MESH-COLL-1",
        "MESH-SHARD-3", "NUM-EW-1", "NUM-POL-1", "NUM-RED-2", "NUM-RED-4", "SCHED-IR-2",
        # the global norm's exact f64 sums of squares (OPTIM-CLIP-1)
        "OPTIM-CLIP-1",
    ),
    # libm in f32 is not the spec's algorithms (NUM-MATH), and f64 operands lose precision
    "math": (
        "AD-MATH-1", "AD-MESH-1", "BACKEND-OP-1", "BACKEND-RUN-1", "GRAPH-COS-1", "GRAPH-EW-1",
        "GRAPH-EXP-1", "GRAPH-GELU-1", "GRAPH-LOG-1", "GRAPH-MATH-1", "GRAPH-RSQRT-1", "GRAPH-RW-3",
        "GRAPH-SILU-1", "GRAPH-SIN-1", "GRAPH-SQRT-1", "GRAPH-TANH-1", "GRAPH-TRACE-1", "GRAPH-TYPE-3",
        "GRAPH-VERIFY-1", "MESH-SHARD-2", "NUM-EW-1", "NUM-EW-3", "NUM-MATH-1", "NUM-MATH-2", "NUM-MATH-3",
        "NUM-MATH-6", "NUM-MATH-8",
        # AdamW's f64 sqrt of the bias correction, the cosine schedule's f64 cos
        "OPTIM-ADAMW-1", "OPTIM-API-1", "OPTIM-SCHED-2",
    ),
    # astype rounds to nearest even whatever the policy: no rtz/rup/rdown, saturation, stochastic
    "cast": (
        "GRAPH-CAST-1", "GRAPH-TYPE-3", "NUM-CVT-1", "NUM-CVT-2", "NUM-CVT-3", "NUM-CVT-4", "NUM-CVT-5",
        "NUM-CVT-6", "NUM-CVT-7", "NUM-FMT-1", "NUM-FMT-3", "NUM-RNG-4",
        "GRAPH-CAST-2",  # ... and astype wraps a float beyond an integer kind's range instead of saturating
    ),
    # np.sum over ranks is not the ascending rank-order fold in the accum format (NUM-RED-3)
    "comm": (
        "BACKEND-COMM-1", "MESH-COLL-1", "MESH-COLL-2", "MESH-LAYOUT-1", "MESH-SHARD-3", "MESH-TENSOR-1",
        "MESH-SHARD-TAKE-1",  # np.sum from +0 loses the −0 of a gathered entry (the fold adds −0 to it)
    ),
}


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
