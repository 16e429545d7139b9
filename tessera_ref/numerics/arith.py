"""Exact elementwise arithmetic and the fused multiply-add (spec clauses NUM-EW-1, NUM-EW-2).

Every operation here is *one* IEEE-754 operation in an accumulation format ``accum`` (f16,
bf16, f32 or f64), rounded to nearest even with subnormals kept, and its bits depend on
nothing but the operands: no BLAS, no host math library, no summation order.

How each ``accum`` is computed exactly:

- **f32, f64** — NumPy's ``+ - * /`` and ``sqrt`` on float32/float64 arrays are the IEEE-754
  operations themselves (correctly rounded, gradual underflow).
- **f16, bf16** — the operation is done in f64 and the f64 result rounded once more into
  ``accum``. That double rounding is innocuous: for ``+ - * /`` and ``sqrt`` of q-bit operands,
  rounding first to p ≥ 2q + 2 bits never changes the final q-bit result (Figueroa 1995);
  here p = 53 and q = 11 (f16) or 8 (bf16). f64 neither overflows nor becomes subnormal on
  these operands (nonzero ``|results|`` lie in [2^-266, 2^261]), and a result in the target's
  subnormal range is exact in f64 (sums, differences, products) or far from a midpoint of the
  coarser grid there (quotients), so the argument holds there too.
- **fma** — the exact ``a·b + c`` rounded once (NUM-EW-2); see :func:`fma`.

A NaN produced or propagated by these operations is returned as the canonical quiet NaN with
the sign bit clear (payloads and NaN signs depend on operand order in hardware, so they are
not part of the result).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..errors import ArithError, TesseraError
from .convert import cast, exact_source, widen_16
from .formats import Format, get_format
from .policy import as_policy

__all__ = [
    "ArithError", "ACCUM_FORMATS", "ELEMENTWISE_OPS", "accum_format", "source_format",
    "default_accum", "to_accum", "accum_op", "apply_elementwise", "fma",
    "add", "sub", "mul", "div", "sqrt",
    "two_sum", "two_product", "round_to_odd", "round_f64_into", "canonical_nan",
]

#: The IEEE formats an operation can be computed in (NUM-POL-1).
ACCUM_FORMATS = ("f16", "bf16", "f32", "f64")
#: Operation name -> number of operands.
ELEMENTWISE_OPS = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}

_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "sqrt": np.sqrt}
_F64_MIN_NORMAL = 2.0 ** -1022
_WIDEN_16 = {get_format(name).dtype: get_format(name) for name in ("f16", "bf16")}


# ---------------------------------------------------------------------------------------
# formats of operands and of the computation

def accum_format(spec) -> Format:
    """The :class:`Format` named by ``spec``, checked to be an accumulation format."""
    fmt = get_format(spec)
    if fmt.name not in ACCUM_FORMATS:
        raise ArithError(
            f"{fmt.name} cannot be an accumulation format",
            fix=f"compute in one of {', '.join(ACCUM_FORMATS)} (f32 is the usual choice)",
        )
    return fmt


def source_format(x) -> Format:
    """The format whose values ``x`` holds: its dtype's format, f64 for other integer dtypes."""
    arr = np.asarray(x)
    try:
        return get_format(arr.dtype)
    except TesseraError:
        exact_source(arr)  # raises a ConversionError for dtypes that hold no real numbers
        return get_format("f64")


def default_accum(*formats: Format) -> Format:
    """The default accumulation format for operands of ``formats``: f64 when one of them is
    f64, else f32 (NUM-POL-1's default, applied to the widest operand)."""
    return get_format("f64" if any(f.name == "f64" for f in formats) else "f32")


def to_accum(x, accum) -> np.ndarray:
    """``x`` converted into ``accum`` (NUM-EW-1): exactly when representable, else rounded
    to nearest even with the format's own overflow. Returns values of ``accum.dtype``."""
    accum = accum_format(accum)
    arr = np.asarray(x)
    if arr.dtype == accum.dtype:
        return arr
    if accum.name == "f32" and arr.dtype in _WIDEN_16:  # exact: one compiled pass
        return widen_16(arr.view(np.uint16), _WIDEN_16[arr.dtype], quiet=True)
    return cast(arr, accum, rounding="rne", overflow="native")


def canonical_nan(x: np.ndarray) -> np.ndarray:
    """``x`` with every NaN replaced by the canonical quiet NaN, sign bit clear."""
    nan = np.isnan(x)
    if nan.any():
        x = np.where(nan, x.dtype.type(np.nan), x)
    return x


# ---------------------------------------------------------------------------------------
# error-free transformations (f64)

def two_sum(x: np.ndarray, y: np.ndarray, out=None, t1=None, t2=None):
    """Knuth's TwoSum: ``(s, e)`` with ``s = fl(x + y)`` and ``x + y == s + e`` exactly, for
    f64 arrays whose sum does not overflow (subnormals included; ``e`` is NaN when ``s`` is
    not finite). ``out``, ``t1``, ``t2``: optional f64 buffers for ``s``, scratch and ``e``;
    ``out`` must not alias ``x`` or ``y``."""
    s = np.add(x, y, out=out)
    b = np.subtract(s, x, out=t1)
    e = np.subtract(s, b, out=t2)
    np.subtract(x, e, out=e)
    np.subtract(y, b, out=b)
    np.add(e, b, out=e)
    return s, e


def round_to_odd(s: np.ndarray, e: np.ndarray, flag=None, scratch=None) -> np.ndarray:
    """Turn ``s = fl(x)`` with exact error ``e = x - s`` into ``RO53(x)`` in place.

    Rounding to odd is truncation toward zero with the last bit set when inexact: ``s``
    steps one code toward zero when ``e`` has the opposite sign (the code below a power of
    two is its predecessor, so this is right across binades), then its low bit is OR-ed with
    ``e != 0``. ``s`` is never 0 for ``e != 0`` (a sum that rounds to 0 is exact). NaN
    errors (non-finite ``s``) leave ``s`` unchanged. ``flag`` (bool) and ``scratch`` (int64)
    are optional buffers of ``s``'s shape; ``e`` is left intact.
    """
    sb = s.view(np.int64)
    inexact = np.less(0.0, np.abs(e), out=flag)
    toward_zero = np.bitwise_xor(sb, e.view(np.int64), out=scratch)
    np.less(toward_zero, 0, out=toward_zero)  # 1 where the signs differ
    toward_zero &= inexact
    sb -= toward_zero
    sb |= inexact
    return s


def _fma_round_to_odd(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``RO53(a·b + c)`` for f64 arrays holding values of f32 or narrower formats: ``a·b``
    is exact in f64 (at most 48 bits, magnitude in [2^-298, 2^256]) and the sum cannot
    overflow. Infinite and NaN operands give IEEE's ``a·b + c``."""
    with np.errstate(invalid="ignore", over="ignore"):
        return round_to_odd(*two_sum(a * b, c))


def _split(a: np.ndarray):
    """Veltkamp's split of a double into two halves of at most 26 bits each."""
    t = a * 134217729.0  # 2**27 + 1
    hi = t - (t - a)
    return hi, a - hi


def two_product(a: np.ndarray, b: np.ndarray):
    """Dekker's TwoProduct: ``a·b == hi + lo`` exactly when ``|a|, |b| < 2^995`` (the split
    does not overflow), ``|a·b| < 2^1000`` and every bit of the product lies at or above 2^-1022."""
    hi = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    lo = ((a_hi * b_hi - hi) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return hi, lo


def _fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Correctly rounded f64 ``a·b + c``, emulated (NumPy has no hardware fma).

    Boldo & Melquiond's algorithm (IEEE Trans. Computers 57(4), 2008, proved in Coq; glibc's
    software fma): ``ph + pl = a·b`` (Dekker), ``s + e = c + ph`` (TwoSum),
    ``u = RO53(e + pl)``, result ``RN(s + u)`` — correct at any precision ≥ 5 when no
    operation overflows or underflows. That holds on the *safe* set: ``|a|, |b| < 2^995``,
    ``|c| < 2^1000`` and ``2^-916 ≤ |a·b| < 2^1000``, so every part of the product is a multiple of
    2^-1020 and no sum reaches 2^1002 (a subnormal ``e`` or ``e + pl`` is then exact, which
    every rounding agrees with); and a result above 2^-1022, where f64's grid is the
    unbounded-exponent grid. A zero result is exact when ``e + pl`` was — it is then +0, IEEE's
    sign for an exact zero sum of nonzero terms. Zero and non-finite operands give IEEE's
    ``a·b + c`` (``c`` when only ``c`` is infinite), a zero ``c`` gives ``RN(a·b)``, and the
    rare remaining elements are computed with rational arithmetic.
    """
    a, b, c = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, c)))
    with np.errstate(all="ignore"):
        ph, pl = two_product(a, b)
        s, e = two_sum(c, ph)
        u, u_err = two_sum(e, pl)
        u_exact = u_err == 0.0
        r = s + round_to_odd(u, u_err)

        finite_ab = np.isfinite(a) & np.isfinite(b)
        special = ~(finite_ab & np.isfinite(c)) | (a == 0) | (b == 0)
        r = np.where(special, np.where(np.isinf(c) & finite_ab, c, a * b + c), r)
        zero_c = ~special & (c == 0)
        r = np.where(zero_c, a * b, r)
        general = ~special & ~zero_c
        ea, eb, ec = (np.frexp(v)[1].astype(np.int64) for v in (a, b, c))
        safe = (ea <= 995) & (eb <= 995) & (ec <= 1000) & (ea + eb <= 1000) & (ea + eb >= -914)
        exact_zero = general & safe & (r == 0) & u_exact
        r = np.where(exact_zero, 0.0, r)
        redo = general & ~exact_zero & (~safe | (np.abs(r) <= _F64_MIN_NORMAL))
    for i in np.flatnonzero(redo):
        r.flat[i] = _fma_exact_scalar(float(a.flat[i]), float(b.flat[i]), float(c.flat[i]))
    return r


def _fma_exact_scalar(a: float, b: float, c: float) -> float:
    """``a·b + c`` rounded once to f64 by rational arithmetic (finite, nonzero operands)."""
    x = Fraction(a) * Fraction(b) + Fraction(c)
    if x == 0:
        return 0.0  # exact cancellation of nonzero terms: +0 under round-to-nearest
    try:
        return x.numerator / x.denominator  # CPython's int division: correctly rounded, ties even
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


# ---------------------------------------------------------------------------------------
# one operation in accum, and the policy-level elementwise op

def _check_operands(op: str, operands) -> tuple[int, ...]:
    if op not in ELEMENTWISE_OPS:
        raise ArithError(f"unknown elementwise operation {op!r}",
                         fix=f"use one of {', '.join(ELEMENTWISE_OPS)}")
    if len(operands) != ELEMENTWISE_OPS[op]:
        raise ArithError(f"{op} takes {ELEMENTWISE_OPS[op]} operand(s), got {len(operands)}",
                         fix=f"pass exactly {ELEMENTWISE_OPS[op]} array(s)")
    shapes = [np.shape(x) for x in operands]
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ArithError(
            f"the operands of {op} have shapes {', '.join(map(str, shapes))}, which do not broadcast",
            fix="make the shapes equal or broadcastable (NumPy rules), e.g. with reshape or a size-1 axis",
        ) from None


def round_f64_into(x: np.ndarray, accum: Format) -> np.ndarray:
    """f64 values rounded once to nearest even into the accumulation format ``accum``
    (f32: IEEE convertFormat, overflow to inf; f16/bf16: NUM-CVT). Returns ``accum.dtype``."""
    if accum.name == "f32":
        with np.errstate(over="ignore"):  # overflow to ±inf is the defined result
            return x.astype(np.float32)
    return cast(x, accum, rounding="rne", overflow="native")


def accum_op(op: str, *operands, accum="f32") -> np.ndarray:
    """One IEEE-754 operation ``op`` in ``accum``, rounded to nearest even (NUM-EW-1).

    ``op`` is one of :data:`ELEMENTWISE_OPS`; operands are converted by :func:`to_accum` and
    broadcast. ``"fma"`` is the single-rounding fused multiply-add (NUM-EW-2). Returns values
    of ``accum.dtype`` (NaNs canonical, see the module docstring).
    """
    accum = accum_format(accum)
    shape = _check_operands(op, operands)
    vals = [np.atleast_1d(to_accum(x, accum)) for x in operands]
    with np.errstate(all="ignore"):  # IEEE's inf/NaN results are the defined answers
        if accum.name == "f64":
            r = _fma_f64(*vals) if op == "fma" else _UFUNCS[op](*vals)
        elif op == "fma":
            wide = [v.astype(np.float64) for v in vals]
            r = round_f64_into(_fma_round_to_odd(*wide), accum)
        elif accum.name == "f32":
            r = _UFUNCS[op](*vals)
        else:
            r = round_f64_into(_UFUNCS[op](*(v.astype(np.float64) for v in vals)), accum)
    return canonical_nan(r).reshape(shape)


def apply_elementwise(op: str, *operands, policy, key=None, index=None) -> np.ndarray:
    """``op`` on ``operands`` under ``policy`` (NUM-EW-1): operands converted exactly into
    ``policy.accum``, one IEEE operation there, the result converted once into
    ``policy.storage`` with the policy's rounding and overflow.

    ``policy`` is a :class:`~tessera_ref.numerics.policy.Policy`, a format or a format name;
    ``key``/``index`` feed stochastic rounding (NUM-CVT-5). Returns values of
    ``policy.storage.dtype``.
    """
    pol = as_policy(policy)
    r = accum_op(op, *operands, accum=pol.accum)
    return cast(r, pol.storage, rounding=pol.rounding, overflow=pol.overflow, key=key, index=index)


def fma(a, b, c, fmt="f32") -> np.ndarray:
    """Fused multiply-add: the exact ``a·b + c`` rounded once into ``fmt`` (NUM-EW-2).

    ``fmt`` is an accumulation format (f16, bf16, f32, f64); operands are converted into it
    first (exactly when representable). How the single rounding is obtained exactly:

    - f16, bf16, f32: ``a·b`` is exact in f64 (at most 2·24 bits, magnitude within
      [2^-298, 2^256]); ``a·b + c`` is rounded *to odd* in f64 (TwoSum gives the exact error,
      :func:`round_to_odd`) and then to nearest even in ``fmt``. Rounding to odd at p bits
      followed by any rounding at q ≤ p − 2 bits equals a single rounding at q bits (Boldo &
      Melquiond 2008): every q-bit midpoint is a p-bit number with an even last bit, so an
      inexact odd result never lands on one. 53 ≥ 24 + 2.
    - f64: Dekker's exact product with Boldo & Melquiond's emulation (see ``_fma_f64``),
      with exact rational arithmetic for the operands near the ends of the exponent range.

    IEEE special cases hold: ``fma(inf, 0, c)`` and ``fma(inf, 1, -inf)`` are NaN,
    ``fma(x, y, inf)`` is inf for finite ``x, y``, an exact zero result is +0 unless ``a·b``
    and ``c`` are both −0 or both zero-and-negative (``fma(+0, -x, -0) = -0``).
    """
    return accum_op("fma", a, b, c, accum=fmt)


def add(a, b, *, policy, key=None, index=None) -> np.ndarray:
    """``a + b`` under ``policy`` (NUM-EW-1)."""
    return apply_elementwise("add", a, b, policy=policy, key=key, index=index)


def sub(a, b, *, policy, key=None, index=None) -> np.ndarray:
    """``a - b`` under ``policy`` (NUM-EW-1)."""
    return apply_elementwise("sub", a, b, policy=policy, key=key, index=index)


def mul(a, b, *, policy, key=None, index=None) -> np.ndarray:
    """``a * b`` under ``policy`` (NUM-EW-1); ``a * b + c`` is two roundings (NUM-EW-2)."""
    return apply_elementwise("mul", a, b, policy=policy, key=key, index=index)


def div(a, b, *, policy, key=None, index=None) -> np.ndarray:
    """``a / b`` under ``policy`` (NUM-EW-1); ``x / 0`` is ±inf and ``0 / 0`` NaN (IEEE)."""
    return apply_elementwise("div", a, b, policy=policy, key=key, index=index)


def sqrt(a, *, policy, key=None, index=None) -> np.ndarray:
    """Correctly rounded square root under ``policy`` (NUM-EW-1); ``sqrt(-0) = -0``."""
    return apply_elementwise("sqrt", a, policy=policy, key=key, index=index)
