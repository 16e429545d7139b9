"""Floating-point values and arithmetic of the tile interpreter (TILE-NUM-1, TILE-NUM-2).

A lane value or fragment holds values of one format: f64, f32, f16, bf16 (``ml_dtypes``
``bfloat16``), fp8_e4m3 or fp8_e5m2 (``float8_e4m3fn``, ``float8_e5m2``). Every operation
gives the bits the Graph IR interpreter gives for the same operation, by calling the same
code where the graph has a definition:

- ``add`` ``sub`` ``mul`` ``div`` and ``sqrt`` are one IEEE-754 operation in the operands'
  format, rounded to nearest even (NUM-EW-1): NumPy's ufuncs for f32 and f64, the graph's
  :func:`~tessera_ref.numerics.arith.accum_op` for f16 and bf16. fp8 formats hold values but
  are not computed in (they are never an accumulation format): cast to f32 first.
- ``min`` and ``max`` are IEEE 754-2019 ``minimum``/``maximum`` — the graph's ``op.minimum``
  / ``op.maximum`` (GRAPH-EW-1): a NaN operand gives NaN, and −0 < +0, so
  ``max(−0, +0) = max(+0, −0) = +0`` and ``min(−0, +0) = −0`` whatever the operand order
  (``np.maximum`` returns its first operand on equal zeros).
- ``neg`` and ``abs`` change the sign bit only.
- Every NaN a float operation produces or propagates is the canonical quiet NaN with the
  sign bit clear, as in the graph (:func:`~tessera_ref.numerics.arith.canonical_nan`).
- :func:`convert` rounds once into the target format as the graph's ``to_storage`` does
  (NUM-CVT, rounding to nearest even, the format's own overflow: e4m3 has no infinity, so
  an overflow is the NaN of its sign); a conversion into a format that holds every value of
  the source is exact but for NaN, which becomes the target's canonical quiet NaN with the
  source's sign (NUM-CVT-4, as in the graph's ``cast``).
- :func:`cast_value` is the ``cast`` op (TILE-NUM-3): GRAPH-CAST-1's number → format rule
  with the target policy's rounding (``rne`` ``rtz`` ``rup`` ``rdown``, or ``stochastic``
  with the element's index and seed) and overflow (``native`` ``saturate``), by the graph's
  own conversion — also into the source's own format, where only a NaN's code changes.
"""
from __future__ import annotations

import numpy as np

from ...errors import KernelError
from ...ir.tile import CAST_ROUNDING
from ...numerics import get_format
from ...numerics.arith import ACCUM_FORMATS, accum_op, canonical_nan
from ...numerics.convert import cast
from ...ops.exact import ieee_extreme

__all__ = ["STORAGE_FORMATS", "COMPUTE_FORMATS", "float_binary", "float_unary", "convert", "cast_value",
           "number", "computable"]

#: Formats a tile kernel's floating-point values and buffers may have.
STORAGE_FORMATS = ("f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2")
#: Formats arithmetic is done in (the accumulation formats of NUM-POL-1).
COMPUTE_FORMATS = ACCUM_FORMATS

_UFUNC = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "floordiv": np.floor_divide, "mod": np.mod}
_EXTREME = ("max", "min")
_SIGN = {"neg": np.negative, "abs": np.abs}


def _value(r, canonical: bool = True):
    """A 0-d result as a NumPy scalar (a uniform lane value); NaNs made canonical."""
    r = np.asarray(r)
    if canonical:
        r = canonical_nan(r)
    return r[()] if r.ndim == 0 else r


def computable(fmt: str, what: str, location=None) -> None:
    """A KernelError unless arithmetic can be done in ``fmt``."""
    if fmt not in COMPUTE_FORMATS:
        raise KernelError(f"{what} on {fmt} values: {fmt} is a storage format, arithmetic is done in "
                          f"{', '.join(COMPUTE_FORMATS)}", location=location,
                          fix="cast the values to f32 first (and the result back to the storage format)")


def float_binary(fn: str, x, y, fmt: str, location=None):
    """``fn`` (add sub mul div min max floordiv mod) of two values of format ``fmt``."""
    computable(fmt, f"'{fn}'", location)
    with np.errstate(all="ignore"):
        if fn in _EXTREME:
            return _value(ieee_extreme(x, y, fn))
        if fmt in ("f16", "bf16") and fn not in ("floordiv", "mod"):
            return _value(accum_op(fn, x, y, accum=fmt))
        return _value(_UFUNC[fn](x, y))


def float_fma(x, y, z, fmt: str, location=None):
    """``x·y + z`` of values of format ``fmt``, rounded once (NUM-EW-2: ``accum_op("fma")``)."""
    computable(fmt, "'fma'", location)
    return _value(accum_op("fma", x, y, z, accum=fmt))


def float_unary(fn: str, x, fmt: str, location=None):
    """``neg``, ``abs`` (any float format) or ``sqrt`` (a compute format) of a ``fmt`` value."""
    if fn in _SIGN:
        return _value(_SIGN[fn](x))
    computable(fmt, f"'{fn}'", location)
    with np.errstate(all="ignore"):
        return _value(np.sqrt(x) if fmt in ("f32", "f64") else accum_op(fn, x, accum=fmt))


def number(value, dtype: np.dtype):
    """A Python number (an attribute, a scalar argument) as a value of ``dtype``: f32 and f64
    by NumPy (one rounding from the double), narrower formats by :func:`convert` from f64
    (``ml_dtypes`` would round through f32, twice), integers as they are."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub" or dtype in (np.float32, np.float64):
        return dtype.type(value)
    return convert(np.float64(value), dtype)


def _exact_into(src, dst) -> bool:
    """Whether every value of format ``src`` is a value of format ``dst``."""
    tiny = lambda f: f.min_subnormal or f.min_normal  # noqa: E731
    return dst.man_bits >= src.man_bits and dst.max >= src.max and tiny(dst) <= tiny(src) \
        and (dst.has_inf or not src.has_inf) and (dst.has_nan or not src.has_nan)


def convert(x, dtype: np.dtype):
    """``x`` (a lane value or fragment) as values of ``dtype``: see the module docstring.
    Integer (index) sources and targets convert with NumPy's ``astype``."""
    arr = np.asarray(x)
    dtype = np.dtype(dtype)
    if arr.dtype == dtype:
        return _value(arr, canonical=False)
    if arr.dtype.kind in "iub" or dtype.kind in "iub":
        return _value(arr.astype(dtype), canonical=False)
    dst = get_format(dtype)
    if _exact_into(get_format(arr.dtype), dst):
        out = arr.astype(dtype)
        nan = np.isnan(arr)
        if nan.any():  # NUM-CVT-4: the canonical quiet NaN of the target, with the source's sign
            out = np.where(nan, cast(arr, dst, rounding="rne", overflow="native"), out)
        return _value(out, canonical=False)
    return _value(cast(arr, dst, rounding="rne", overflow="native"), canonical=False)


def cast_value(x, policy, location=None, *, seed=None, index=None):
    """The ``cast`` op of ``x`` (a float lane value or fragment) into ``policy``'s storage:
    see the module docstring. Stochastic rounding draws NUM-CVT-5's bits from
    ``RNGKey(seed)`` at the elements' ``index`` (the graph's ``to_storage`` key and index)."""
    if policy.rounding not in CAST_ROUNDING:
        raise KernelError(f"cast to {policy}: a tile cast rounds by {', '.join(CAST_ROUNDING)}, not "
                          f"{policy.rounding!r}", location=location,
                          fix="cast with another rounding mode, or run the cast in the Graph IR interpreter")
    arr = np.asarray(x)
    key = None
    if policy.rounding == "stochastic":
        arr, index = np.broadcast_arrays(arr, np.maximum(np.asarray(index), 0).astype(np.uint64))
        key = seed
    with np.errstate(all="ignore"):
        out = cast(arr, policy.storage, rounding=policy.rounding, overflow=policy.overflow, key=key, index=index)
    return _value(out, canonical=False)
