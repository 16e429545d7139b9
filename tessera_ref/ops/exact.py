"""Exact building blocks the primitives' ``impl`` rules share (so each definition exists once).

- :func:`math_in_accum` — a transcendental in an accumulation format (GRAPH-MATH-1): the
  operand (an accum value, hence exact in f64) goes through the NUM-MATH algorithm in f64
  and the f64 result is rounded once to nearest even into ``accum``. For ``accum = f64`` the
  NUM-MATH result is the answer. No host libm decides a bit.
- :func:`reduce_axes` — the canonical axis reduction (NUM-RED-2) over one or several axes:
  the reduced axes, in ascending order, are flattened row-major into one axis of length
  ``L = prod(sizes)`` and reduced in the 32-lane + butterfly order.
- :func:`ieee_extreme` — IEEE 754-2019 ``maximum``/``minimum`` of two arrays, elementwise.
"""
from __future__ import annotations

import numpy as np

from ..numerics import reduce_canonical, xmath
from ..numerics.arith import accum_format, canonical_nan, round_f64_into, to_accum

__all__ = ["MATH_FUNCTIONS", "math_in_accum", "reduce_axes", "move_axes_last", "ieee_extreme"]

#: The NUM-MATH algorithms by op name (``sqrt`` is not here: it is one IEEE operation, NUM-EW-1).
MATH_FUNCTIONS = {
    "exp": xmath.exp, "expm1": xmath.expm1, "log": xmath.log, "sin": xmath.sin, "cos": xmath.cos,
    "tanh": xmath.tanh, "erf": xmath.erf, "erfc": xmath.erfc, "sigmoid": xmath.sigmoid,
    "silu": xmath.silu, "gelu": xmath.gelu, "gelu_tanh": xmath.gelu_tanh, "rsqrt": xmath.rsqrt,
    "pow": xmath.pow,
}


def ieee_extreme(a, b, op: str) -> np.ndarray:
    """IEEE 754-2019 ``maximum(a, b)`` (``op = "max"``) or ``minimum(a, b)`` (``"min"``),
    elementwise with NumPy broadcasting, on arrays of one floating-point format.

    Both are exact (the result is one of the operands): a NaN operand gives NaN (whichever
    operand it is, unlike C's ``fmax``), and −0 is less than +0, so ``maximum(+0, −0) = +0``
    and ``minimum(+0, −0) = −0`` in either operand order. NaNs come back as NumPy produces
    them; callers make them canonical.
    """
    r = np.maximum(a, b) if op == "max" else np.minimum(a, b)
    zeros = (a == 0) & (b == 0)
    if np.any(zeros):
        neg = np.signbit(a) & np.signbit(b) if op == "max" else np.signbit(a) | np.signbit(b)
        r = np.where(zeros, np.where(neg, -0.0, 0.0).astype(r.dtype), r)
    return r


def math_in_accum(name: str, *operands, accum) -> np.ndarray:
    """``name`` (a key of :data:`MATH_FUNCTIONS`) of ``operands`` in ``accum`` (see the module
    docstring); operands are converted into ``accum`` first. Returns ``accum.dtype`` values."""
    accum = accum_format(accum)
    wide = [to_accum(x, accum).astype(np.float64) for x in operands]
    r = MATH_FUNCTIONS[name](*wide)
    if accum.name != "f64":
        r = round_f64_into(np.asarray(r, dtype=np.float64), accum)
    return canonical_nan(np.asarray(r))


def move_axes_last(x: np.ndarray, axes: tuple) -> np.ndarray:
    """``x`` with ``axes`` (ascending) moved to the end and flattened row-major into one axis."""
    rest = [a for a in range(x.ndim) if a not in axes]
    length = 1
    for a in axes:
        length *= x.shape[a]
    moved = np.transpose(x, rest + list(axes))
    return moved.reshape(moved.shape[:len(rest)] + (length,))


def reduce_axes(x: np.ndarray, axes: tuple, op: str, *, accum) -> np.ndarray:
    """NUM-RED-2 ``op`` (sum, mean, max, min) of ``x`` over ``axes`` in ``accum`` (see the
    module docstring). Returns ``accum.dtype`` values with the reduced axes removed."""
    return reduce_canonical(move_axes_last(np.asarray(x), tuple(axes)), -1, op, accum=accum)
