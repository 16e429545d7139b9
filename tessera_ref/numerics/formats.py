"""The number-format registry (spec clauses ``NUM-FMT-*``).

A :class:`Format` describes one storage format bit by bit: its width, exponent and
mantissa fields, bias, which codes are special (inf, NaN), the derived limits (max,
smallest normal, smallest subnormal) and the NumPy / ml_dtypes dtype that holds its values
(one element per byte for the sub-byte formats; :mod:`tessera_ref.numerics.packing` packs
them densely).

Formats are singletons looked up by name (:func:`get_format`); the bare names ``fp8``,
``fp6`` and ``fp4`` resolve to ``fp8_e4m3``, ``fp6_e2m3`` and ``fp4_e2m1`` (NUM-FMT-2).
``fmt @ accum(f32)`` builds a :class:`~tessera_ref.numerics.policy.Policy` and ``fmt[n, m]``
a tensor annotation, as the Tessera programming guide writes them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import ml_dtypes
import numpy as np

from ..errors import FormatError

__all__ = ["Format", "FORMATS", "ALIASES", "get_format", "all_formats"]

# How a format uses its special codes.
IEEE = "ieee"      # all-ones exponent field = inf (mantissa 0) or NaN: f64 f32 f16 bf16 e5m2
FN = "fn"          # finite + NaN only: S.1111.111 is NaN, no inf (OCP e4m3)
FINITE = "finite"  # every code is a finite number: fp6, fp4 (OCP MX)
SCALE = "scale"    # e8m0: unsigned powers of two, 0xFF is NaN, no zero, no sign
INT = "int"        # two's-complement integers


@dataclass(frozen=True, eq=False)
class Format:
    """One number format. Compare formats with ``is`` or ``==`` (identity).

    Attributes:
        name: canonical name (``"fp8_e4m3"``).
        bits: total width in bits.
        exp_bits, man_bits: exponent and mantissa field widths (``0, 0`` for integers).
        bias: exponent bias (``0`` for integers).
        special: one of ``"ieee"``, ``"fn"``, ``"finite"``, ``"scale"``, ``"int"``.
        dtype: the NumPy/ml_dtypes dtype whose values :func:`~tessera_ref.numerics.cast`
            returns (a sub-byte format still takes one byte per element there).
    """

    name: str
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    special: str
    dtype: np.dtype

    # -- classification -------------------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self.special in (IEEE, FN, FINITE, SCALE)

    @property
    def is_int(self) -> bool:
        return self.special == INT

    @property
    def signed(self) -> bool:
        return self.special != SCALE

    @property
    def has_inf(self) -> bool:
        return self.special == IEEE

    @property
    def has_nan(self) -> bool:
        return self.special in (IEEE, FN, SCALE)

    @property
    def has_subnormals(self) -> bool:
        return self.special in (IEEE, FN, FINITE)

    @property
    def code_dtype(self) -> np.dtype:
        """Unsigned integer dtype that holds one raw code."""
        return np.dtype({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[max(8, self.bits)])

    # -- exponent range ---------------------------------------------------------------
    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal number."""
        if self.is_int:
            return 0
        return (0 if self.special == SCALE else 1) - self.bias

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite number."""
        if self.is_int:
            return self.bits - 2
        top = (1 << self.exp_bits) - 1
        if self.special in (IEEE, SCALE):
            top -= 1
        return top - self.bias

    # -- limits (exact Python floats) -------------------------------------------------
    @cached_property
    def max(self) -> float:
        """Largest finite value."""
        if self.is_int:
            return float((1 << (self.bits - 1)) - 1)
        frac_steps = (1 << self.man_bits) - 1
        if self.special == FN:
            frac_steps -= 1  # S.1111.111 is NaN, so the top mantissa of the top binade is lost
        return float(np.ldexp((1 << self.man_bits) + frac_steps, self.emax - self.man_bits))

    @cached_property
    def min(self) -> float:
        """Smallest finite value (most negative; the smallest power of two for e8m0)."""
        if self.is_int:
            return float(-(1 << (self.bits - 1)))
        if self.special == SCALE:
            return self.min_normal
        return -self.max

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value (``1`` for integers)."""
        return float(np.ldexp(1.0, self.emin))

    @property
    def min_subnormal(self) -> float | None:
        """Smallest positive subnormal value; ``None`` where the format has none."""
        if self.is_int:
            return None
        if not self.has_subnormals:
            return None
        return float(np.ldexp(1.0, self.emin - self.man_bits))

    @property
    def epsilon(self) -> float:
        """Distance from 1.0 to the next larger value."""
        return 1.0 if self.is_int else float(np.ldexp(1.0, -self.man_bits))

    # -- special codes ----------------------------------------------------------------
    @property
    def sign_mask(self) -> int:
        return (1 << (self.bits - 1)) if self.signed and self.is_float else 0

    @property
    def nan_code(self) -> int | None:
        """The canonical NaN code this library writes (quiet, positive); ``None`` if no NaN."""
        if self.special == IEEE:
            return (((1 << self.exp_bits) - 1) << self.man_bits) | (1 << (self.man_bits - 1))
        if self.special == FN:
            return (1 << (self.bits - 1)) - 1
        if self.special == SCALE:
            return (1 << self.bits) - 1
        return None

    @property
    def inf_code(self) -> int | None:
        """The code of +inf; ``None`` if the format has no infinity."""
        if self.special == IEEE:
            return ((1 << self.exp_bits) - 1) << self.man_bits
        return None

    def is_nan_code(self, codes: np.ndarray) -> np.ndarray:
        """Boolean mask of the codes that encode NaN."""
        codes = np.asarray(codes).astype(np.uint64)
        if self.special == IEEE:
            magnitude = codes & np.uint64((1 << (self.bits - 1)) - 1)
            return magnitude > np.uint64(self.inf_code)
        if self.special == FN:
            return (codes & np.uint64((1 << (self.bits - 1)) - 1)) == np.uint64(self.nan_code)
        if self.special == SCALE:
            return codes == np.uint64(self.nan_code)
        return np.zeros(codes.shape, dtype=bool)

    # -- the seeds' spellings ---------------------------------------------------------
    def __matmul__(self, other):
        """``fp6 @ accum(fp32)``: a storage format with an accumulation policy."""
        from .policy import Accum, Policy

        if isinstance(other, Accum):
            return Policy(storage=self, accum=other.format, **other.options)
        return NotImplemented

    def __getitem__(self, dims):
        """``f32[n]`` / ``f16[m, k]``: a tensor annotation with this format as storage."""
        from .policy import Policy
        from .annotations import TensorAnnotation

        dims = dims if isinstance(dims, tuple) else (dims,)
        return TensorAnnotation(dims, Policy(storage=self))

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (get_format, (self.name,))


def _fmt(name, bits, exp_bits, man_bits, bias, special, dtype) -> Format:
    return Format(name, bits, exp_bits, man_bits, bias, special, np.dtype(dtype))


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        _fmt("f64", 64, 11, 52, 1023, IEEE, np.float64),
        _fmt("f32", 32, 8, 23, 127, IEEE, np.float32),
        _fmt("f16", 16, 5, 10, 15, IEEE, np.float16),
        _fmt("bf16", 16, 8, 7, 127, IEEE, ml_dtypes.bfloat16),
        _fmt("fp8_e4m3", 8, 4, 3, 7, FN, ml_dtypes.float8_e4m3fn),
        _fmt("fp8_e5m2", 8, 5, 2, 15, IEEE, ml_dtypes.float8_e5m2),
        _fmt("fp6_e2m3", 6, 2, 3, 1, FINITE, ml_dtypes.float6_e2m3fn),
        _fmt("fp6_e3m2", 6, 3, 2, 3, FINITE, ml_dtypes.float6_e3m2fn),
        _fmt("fp4_e2m1", 4, 2, 1, 1, FINITE, ml_dtypes.float4_e2m1fn),
        _fmt("e8m0", 8, 8, 0, 127, SCALE, ml_dtypes.float8_e8m0fnu),
        _fmt("int8", 8, 0, 0, 0, INT, np.int8),
        _fmt("int4", 4, 0, 0, 0, INT, ml_dtypes.int4),
    )
}

#: Other accepted names. The bare ``fp8``/``fp6``/``fp4`` defaults are NUM-FMT-2.
ALIASES: dict[str, str] = {
    "fp8": "fp8_e4m3",
    "fp6": "fp6_e2m3",
    "fp4": "fp4_e2m1",
    "fp64": "f64", "float64": "f64", "double": "f64",
    "fp32": "f32", "float32": "f32", "float": "f32",
    "fp16": "f16", "float16": "f16", "half": "f16",
    "bfloat16": "bf16",
    "e4m3": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "e2m3": "fp6_e2m3", "float6_e2m3fn": "fp6_e2m3",
    "e3m2": "fp6_e3m2", "float6_e3m2fn": "fp6_e3m2",
    "e2m1": "fp4_e2m1", "fp4_e2m1fn": "fp4_e2m1", "float4_e2m1fn": "fp4_e2m1", "nvfp4": "fp4_e2m1",
    "fp8_e8m0": "e8m0", "float8_e8m0fnu": "e8m0", "e8m0fnu": "e8m0",
}

_BY_DTYPE = {f.dtype: f for f in FORMATS.values()}


def all_formats() -> list[Format]:
    """Every registered format, widest first."""
    return list(FORMATS.values())


def get_format(spec) -> Format:
    """Resolve a format name, alias, :class:`Format`, NumPy/ml_dtypes dtype or policy.

    Raises :class:`~tessera_ref.errors.FormatError` naming the known formats otherwise.
    """
    if isinstance(spec, Format):
        return spec
    storage = getattr(spec, "storage", None)  # a Policy
    if isinstance(storage, Format):
        return storage
    if isinstance(spec, str):
        key = spec.strip().lower()
        key = ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
    elif spec is not None:
        try:
            dtype = np.dtype(spec)
        except TypeError:
            dtype = None
        if dtype is not None and dtype in _BY_DTYPE:
            return _BY_DTYPE[dtype]
    raise FormatError(
        f"unknown number format {spec!r}",
        fix=f"use one of {', '.join(FORMATS)} (or the aliases fp8, fp6, fp4, fp32, fp16, bfloat16)",
    )
