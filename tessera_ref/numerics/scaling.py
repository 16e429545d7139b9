"""Block and per-tensor scaling (spec clauses NUM-SCALE, NUM-MX, NUM-NVFP4, NUM-AMAX and
NUM-DELAY).

A scaled tensor stores narrow element codes plus the scales that bring them back to the
tensor's range:

- :func:`quantize_mx` -- OCP Microscaling v1.0: blocks of ``k`` (32) elements along one axis
  share a power-of-two e8m0 scale (NUM-MX);
- :func:`quantize_nvfp4` -- NVIDIA NVFP4: fp4_e2m1 elements, one fp8_e4m3 scale per 16
  elements (or per 16x16 tile) and an f32 per-tensor scale (NUM-NVFP4);
- :func:`quantize_per_tensor` / :func:`amax_scale` -- Transformer Engine's per-tensor amax
  scaling (NUM-AMAX), and :class:`DelayedScaling`, its amax-history recipe (NUM-DELAY).

Every result bit is defined by exact operations (frexp/ldexp by powers of two, comparisons,
order-independent maxima) or by single IEEE-754 f32 operations applied in the order the spec
states; nothing depends on libm, BLAS, summation order or thread count.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import FormatError, ScalingError
from .convert import ROUNDING_MODES, cast, decode, encode, exact_source
from .formats import Format, get_format
from .packing import packed_nbytes

__all__ = [
    "ScaledTensor", "SCHEMES", "MX_ELEMENT_FORMATS", "MX_BLOCK", "NVFP4_BLOCK", "SCALE_ROUNDINGS",
    "AMAX_ALGOS", "quantize_mx", "quantize_nvfp4", "amax_scale", "quantize_per_tensor",
    "DelayedScaling", "HybridScaling",
]

#: The schemes a :class:`ScaledTensor` can carry (NUM-SCALE-1).
SCHEMES = ("mx", "nvfp4", "per_tensor")
_SCALE_FORMAT = {"mx": "e8m0", "nvfp4": "fp8_e4m3", "per_tensor": "f32"}
#: NUM-MX-1: the OCP MX v1.0 element formats.
MX_ELEMENT_FORMATS = ("fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1")
#: NUM-MX-1: the OCP MX v1.0 block size.
MX_BLOCK = 32
#: NUM-NVFP4-1: elements per NVFP4 block (and the side of a 2-D block).
NVFP4_BLOCK = 16
#: NUM-MX-3: how the shared exponent is chosen.
SCALE_ROUNDINGS = ("floor", "ceil")
#: NUM-DELAY-2: how the amax history becomes one amax.
AMAX_ALGOS = ("max", "most_recent")

_E8M0_EMIN, _E8M0_EMAX = -127, 127
_NVFP4_DENOM = np.float32(448.0 * 6.0)  # fp8_e4m3 max x fp4_e2m1 max = 2688, exact in f32
_F32_MIN_NORMAL = np.float32(2.0**-126)
_F32_MAX = np.finfo(np.float32).max
# Scaled MX elements whose magnitude is below this round exactly as the true (possibly
# f64-underflowing) quotient does in every mode: the smallest element subnormal is 2**-16.
_TINY = 2.0**-64


# ---------------------------------------------------------------------------------------
# the container

@dataclass(frozen=True, eq=False, repr=False)
class ScaledTensor:
    """Element codes plus the scales that decode them (NUM-SCALE-1).

    Attributes:
        scheme: ``"mx"``, ``"nvfp4"`` or ``"per_tensor"``.
        codes: raw element codes, one per element (uint8; uint16 for 16-bit formats), in the
            tensor's own axis order, of the *padded* shape (see ``shape``).
        elem_format: the element :class:`~tessera_ref.numerics.formats.Format`.
        scales: raw scale codes. MX: e8m0 codes, NVFP4: fp8_e4m3 codes -- one per block, of
            the padded shape with every blocked axis divided by its block extent. Per-tensor:
            the f32 bits of the quantization scale, shape ``()``.
        scale_format: ``e8m0`` (MX), ``fp8_e4m3`` (NVFP4) or ``f32`` (per-tensor).
        block: the block's extent along each axis in ``axis`` (``()`` for per-tensor).
        axis: the (non-negative) axes the blocks span, ascending.
        shape: the original shape; ``codes.shape`` exceeds it only along blocked axes, by the
            zero padding that ``pad=True`` added.
        global_scale: NVFP4's f32 per-tensor decode scale ``g``; ``None`` otherwise.
    """

    scheme: str
    codes: np.ndarray
    elem_format: Format
    scales: np.ndarray
    scale_format: Format
    block: tuple = ()
    axis: tuple = ()
    shape: tuple = ()
    global_scale: np.float32 | None = None

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ScalingError(f"unknown scaling scheme {self.scheme!r}", fix=f"use one of {', '.join(SCHEMES)}")
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("elem_format", _format(self.elem_format, "element format"))
        set_("scale_format", _format(self.scale_format, "scale format"))
        for name in ("codes", "scales"):
            arr = np.array(getattr(self, name), copy=True)
            if not np.issubdtype(arr.dtype, np.unsignedinteger):
                raise ScalingError(f"ScaledTensor.{name} must hold raw unsigned codes, got dtype {arr.dtype}",
                                   fix="pass the codes from numerics.encode (uint8/uint16/uint32)")
            arr.setflags(write=False)
            set_(name, arr)
        set_("block", tuple(int(b) for b in self.block))
        set_("axis", tuple(int(a) for a in self.axis))
        set_("shape", tuple(int(s) for s in self.shape))
        if self.global_scale is not None:
            set_("global_scale", np.float32(self.global_scale))
        self._check_layout()

    def _check_layout(self):
        codes, scales = self.codes.shape, self.scales.shape
        bad = None
        if self.scale_format.name != _SCALE_FORMAT[self.scheme]:
            bad = f"{self.scheme} scales are {_SCALE_FORMAT[self.scheme]}, not {self.scale_format.name}"
        elif (self.global_scale is None) != (self.scheme != "nvfp4"):
            bad = "a global scale belongs to NVFP4 and only to NVFP4"
        elif len(self.block) != len(self.axis) or len(codes) != len(self.shape):
            bad = "block/axis/shape ranks disagree"
        elif any(b < 1 for b in self.block) or list(self.axis) != sorted(set(self.axis)) \
                or any(not 0 <= a < len(codes) for a in self.axis):
            bad = f"blocks {self.block} along axes {self.axis}: need positive blocks on distinct ascending axes"
        elif self.scheme == "per_tensor":
            if scales != () or codes != self.shape or self.axis:
                bad = "a per-tensor scale is one f32 code (shape ()) for an unpadded tensor"
        elif len(scales) != len(codes):
            bad = "scales must have one axis per tensor axis"
        else:
            blocked = dict(zip(self.axis, self.block))
            for d, (n, s, orig) in enumerate(zip(codes, scales, self.shape)):
                b = blocked.get(d)
                if b is None and (n != orig or s != n):
                    bad = f"axis {d} is not blocked but codes/scales/shape sizes differ ({n}, {s}, {orig})"
                elif b is not None and (n % b or s != n // b or not orig <= n < orig + b):
                    bad = f"axis {d} (block {b}): codes size {n}, scales size {s}, original size {orig}"
        if bad:
            raise ScalingError(f"inconsistent ScaledTensor layout: {bad}",
                               fix="build ScaledTensor with quantize_mx / quantize_nvfp4 / quantize_per_tensor")

    # -- derived --------------------------------------------------------------------
    @property
    def padded_shape(self) -> tuple:
        return tuple(self.codes.shape)

    @property
    def num_blocks(self) -> int:
        """Number of scale blocks (1 for per-tensor)."""
        return int(self.scales.size)

    @property
    def scale_values(self) -> np.ndarray:
        """The scales as f32 values (exact: NUM-CVT-7); NaN marks a NaN block."""
        return decode(self.scales, self.scale_format)

    @property
    def nbytes(self) -> int:
        """Packed storage bytes (NUM-SCALE-3): elements packed per NUM-PACK-1 (padding
        included), one byte per e8m0/e4m3 scale, four per f32 scale or global scale."""
        total = packed_nbytes(self.codes.size, self.elem_format)
        total += packed_nbytes(self.scales.size, self.scale_format)
        return total + (4 if self.global_scale is not None else 0)

    def dequantize(self) -> np.ndarray:
        """The f32 values this tensor stands for, in the original shape (NUM-MX-6,
        NUM-NVFP4-5, NUM-AMAX-4)."""
        elems = decode(self.codes, self.elem_format)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.scheme == "per_tensor":
                out = elems / self.scale_values  # one f32 division (NUM-AMAX-4)
            else:
                scale = _expand_scales(self.scale_values, self.axis, self.block)
                out = elems * scale  # exact except overflow to inf for MX (NUM-MX-6)
                if self.scheme == "nvfp4":
                    out = out * self.global_scale  # one rounding (NUM-NVFP4-5)
        return np.array(out[tuple(slice(0, n) for n in self.shape)], dtype=np.float32)

    def __repr__(self) -> str:
        if self.scheme == "per_tensor":
            layout = f"per-tensor scale {float(self.scale_values):.9g}"
        else:
            axes = f"axis {self.axis[0]}" if len(self.axis) == 1 else f"axes {self.axis}"
            layout = (f"{self.num_blocks} blocks of {'x'.join(map(str, self.block))} along {axes} "
                      f"with {self.scale_format.name} scales")
        extra = "" if self.global_scale is None else f", global scale {float(self.global_scale):.9g}"
        pad = "" if self.padded_shape == self.shape else f", padded to {self.padded_shape}"
        return (f"ScaledTensor({self.scheme}: {self.elem_format.name}{list(self.shape)}, {layout}"
                f"{extra}{pad}, {self.nbytes} bytes)")


# ---------------------------------------------------------------------------------------
# argument checking and block layout

def _format(spec, role: str) -> Format:
    try:
        return get_format(spec)
    except FormatError as exc:
        raise ScalingError(f"{role}: {exc.what}", fix=exc.fix) from None


def _check_rounding(rounding, key, what):
    if rounding not in ROUNDING_MODES:
        raise ScalingError(f"unknown rounding {rounding!r} for {what}", fix=f"use one of {', '.join(ROUNDING_MODES)}")
    if rounding == "stochastic" and key is None:
        raise ScalingError(f"stochastic rounding for {what} needs a random key",
                           fix="pass key=RNGKey(seed) (or an int seed); the same key gives the same bits")


def _as_array(x, what) -> np.ndarray:
    try:
        return exact_source(x)
    except Exception as exc:  # ConversionError: a dtype we cannot take exactly
        raise ScalingError(f"{what}: {getattr(exc, 'what', exc)}", fix=getattr(exc, "fix", None)) from None


def _as_f32(x, what) -> np.ndarray:
    """``x`` as f32: exact for f32 and narrower floats, rounded once (rne) otherwise."""
    src = _as_array(x, what)
    return src if src.dtype == np.float32 else cast(src, "f32")


def _norm_axis(axis, ndim, what) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise ScalingError(f"{what}: axis must be an integer, got {axis!r}", fix="pass e.g. axis=-1")
    if not -ndim <= axis < ndim:
        raise ScalingError(f"{what}: axis {axis} is out of range for a {ndim}-D tensor",
                           fix=f"pass an axis in [{-ndim}, {ndim})")
    return int(axis) % ndim


def _check_block(block, what) -> int:
    if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ScalingError(f"{what}: block size must be a positive integer, got {block!r}",
                           fix=f"use block={MX_BLOCK} (the OCP MX value)")
    return int(block)


def _pad_to_blocks(x, axes, block, pad, what):
    """Zero-pad ``x`` along ``axes`` to multiples of ``block`` (or refuse)."""
    widths = [(0, 0)] * x.ndim
    for a, b in zip(axes, block):
        n = x.shape[a]
        if n % b:
            if not pad:
                raise ScalingError(
                    f"{what}: axis {a} has size {n}, which is not a multiple of the block size {b} "
                    f"(tensor shape {tuple(x.shape)})",
                    fix=f"pass pad=True to zero-pad axis {a} to {-(-n // b) * b} (the original shape "
                        "is kept and dequantize() crops back to it), or choose a block size dividing it")
            widths[a] = (0, -(-n // b) * b - n)
    return np.pad(x, widths) if any(w[1] for w in widths) else x


def _block_split(shape, axes, block):
    """The shape with each blocked axis split into (block count, block extent), and the
    permutation of that split shape that puts the unblocked axes first, then the block
    counts, then the block extents."""
    blk = dict(zip(axes, block))
    split, pos = [], {}
    for d, n in enumerate(shape):
        pos[d] = len(split)
        split += [n // blk[d], blk[d]] if d in blk else [n]
    rest = [d for d in range(len(shape)) if d not in blk]
    perm = [pos[d] for d in rest] + [pos[a] for a in axes] + [pos[a] + 1 for a in axes]
    return split, perm


def _to_blocks(x, axes, block):
    """``x`` (of a padded shape) as ``(unblocked axes..., block counts..., elements of a block)``."""
    split, perm = _block_split(x.shape, axes, block)
    y = x.reshape(split).transpose(perm)
    return y.reshape(y.shape[: x.ndim] + (int(np.prod(block)),))


def _from_blocks(y, shape, axes, block):
    """Inverse of :func:`_to_blocks` for an array of the padded ``shape``."""
    split, perm = _block_split(shape, axes, block)
    return y.reshape([split[p] for p in perm]).transpose(np.argsort(perm)).reshape(shape)


def _scales_to_tensor_layout(s, ndim, axes):
    """Block-layout scales ``(rest..., nblocks per axis...)`` -> the tensor's axis order."""
    rest = [d for d in range(ndim) if d not in axes]
    return np.moveaxis(s, range(s.ndim), rest + list(axes))


def _expand_scales(scales, axes, block):
    """Repeat each scale over its block: the padded element shape."""
    out = scales
    for a, b in zip(axes, block):
        out = np.repeat(out, b, axis=a)
    return out


def _element_index(index, shape, padded, what):
    """Global flat element indices (NUM-CVT-5) for the padded tensor; padding gets index 0
    (its zero values round to zero whatever the random bits)."""
    if index is None:
        idx = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64).reshape(shape)
    else:
        idx = np.asarray(index)
        if not np.issubdtype(idx.dtype, np.integer):
            raise ScalingError(f"{what}: index must hold integer global element indices, got dtype {idx.dtype}",
                               fix="pass the global flat (C-order) indices of this shard's elements")
        try:
            idx = np.broadcast_to(idx, shape).astype(np.uint64)
        except ValueError:
            raise ScalingError(f"{what}: index of shape {idx.shape} does not broadcast to the tensor's shape {shape}",
                               fix="pass one global index per element") from None
    if padded != tuple(shape):
        idx = np.pad(idx, [(0, p - n) for n, p in zip(shape, padded)])
    return idx


def _amax_f32(x32: np.ndarray) -> np.float32:
    """``max |x|`` over the whole tensor (NaN if any element is NaN; 0 for an empty tensor)."""
    if x32.size == 0:
        return np.float32(0.0)
    return np.float32(np.max(np.abs(x32)))


# ---------------------------------------------------------------------------------------
# MX (OCP Microscaling v1.0)

def _mx_exponents(amax: np.ndarray, fmt: Format, scale_rounding: str):
    """Shared exponents (int64, clamped) and the NaN-scale mask of MX blocks (NUM-MX-2..4)."""
    a = amax.astype(np.float64)
    nan = ~np.isfinite(a)  # a NaN element (np.max propagates it) or an infinite amax
    ok = ~nan & (a > 0)
    safe = np.where(ok, a, 1.0)
    _, ex = np.frexp(safe)  # safe = f * 2**ex, f in [0.5, 1): floor(log2 safe) = ex - 1, exactly
    e = ex.astype(np.int64) - 1 - fmt.emax
    if scale_rounding == "ceil":  # safe * 2**-e lies in [2**emax, 2**(emax+1)): exact
        e = e + (np.ldexp(safe, -e) > fmt.max)
    nan = nan | (e > _E8M0_EMAX)
    e = np.where(ok, np.maximum(e, _E8M0_EMIN), _E8M0_EMIN)
    return np.where(nan, 0, e), nan


def quantize_mx(x, elem_fmt="fp8_e4m3", *, block=MX_BLOCK, axis=-1, scale_rounding="floor",
                rounding="rne", key=None, index=None, pad=False) -> ScaledTensor:
    """OCP MX v1.0 block quantization (NUM-MX-1 ... NUM-MX-6).

    Blocks of ``block`` consecutive elements along ``axis`` share the scale ``X = 2**E``
    (an e8m0 code ``E + 127``) with ``E = floor(log2(amax)) - emax_elem`` (``"floor"``, the OCP
    rule; elements whose ``|V| / X`` exceeds the element max saturate) or the smallest ``E``
    with ``amax / 2**E <= elem max`` (``"ceil"``; no element saturates). ``E > 127``, an
    infinite amax or any NaN in the block make the scale NaN (0xFF, element codes 0); ``E``
    below -127 (and an all-zero block) give ``E = -127``. Elements are ``V / X`` computed
    exactly and converted with ``rounding`` and saturation.

    Args:
        x: real array (any float or integer dtype; values taken exactly, f64 included).
        elem_fmt: one of :data:`MX_ELEMENT_FORMATS`.
        block: elements per block (OCP: 32).
        axis: the axis the blocks run along.
        scale_rounding: ``"floor"`` or ``"ceil"``.
        rounding, key, index: the element conversion's rounding mode, random key (stochastic)
            and global element indices (default ``0 … x.size-1`` in C order; a shard passes
            its global indices to round as the whole tensor does).
        pad: zero-pad ``axis`` to a multiple of ``block`` instead of raising.
    """
    what = "quantize_mx"
    fmt = _format(elem_fmt, f"{what} element format")
    if fmt.name not in MX_ELEMENT_FORMATS:
        raise ScalingError(f"{what}: {fmt.name} is not an MX element format",
                           fix=f"use one of {', '.join(MX_ELEMENT_FORMATS)}")
    block = _check_block(block, what)
    if scale_rounding not in SCALE_ROUNDINGS:
        raise ScalingError(f"{what}: unknown scale_rounding {scale_rounding!r}",
                           fix="use 'floor' (OCP MX: top elements may saturate) or 'ceil' (no element saturates)")
    _check_rounding(rounding, key, what)
    src = _as_array(x, what)
    if src.ndim == 0:
        raise ScalingError(f"{what}: a 0-d tensor has no axis to block", fix="reshape it to 1-D first")
    ax = _norm_axis(axis, src.ndim, what)
    shape = tuple(src.shape)
    v = _pad_to_blocks(src.astype(np.float64), (ax,), (block,), pad, what)
    padded = tuple(v.shape)
    vb = _to_blocks(v, (ax,), (block,))

    amax = np.max(np.abs(vb), axis=-1)  # NaN if the block holds a NaN
    e, nan = _mx_exponents(amax, fmt, scale_rounding)
    # V / X exactly: ldexp by a power of two is exact unless the f64 result underflows; a
    # nonzero magnitude below 2**-64 rounds like any other such magnitude in every mode.
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.ldexp(np.where(nan[..., None], 0.0, vb), -e[..., None])
    q = np.where((vb != 0) & (np.abs(q) < _TINY) & ~nan[..., None], np.copysign(_TINY, vb), q)
    q32 = q.astype(np.float32)
    if np.array_equal(q32, q):  # exact in f32: lets encode take its table path
        q = q32
    idx = None
    if rounding == "stochastic":
        idx = _to_blocks(_element_index(index, shape, padded, what), (ax,), (block,))
    codes = encode(q, fmt, rounding=rounding, overflow="saturate", key=key, index=idx)  # NaN blocks: q = +0
    scales = np.where(nan, np.uint8(0xFF), (e + 127).astype(np.uint8))
    return ScaledTensor(
        scheme="mx", codes=_from_blocks(codes, padded, (ax,), (block,)), elem_format=fmt,
        scales=_scales_to_tensor_layout(scales, len(shape), (ax,)), scale_format=get_format("e8m0"),
        block=(block,), axis=(ax,), shape=shape,
    )


# ---------------------------------------------------------------------------------------
# NVFP4

def _nvfp4_global_scale(x32, global_amax, what) -> np.float32:
    """NUM-NVFP4-2: g = f32(global_amax) / 2688, or 1 where that is not a positive normal."""
    if global_amax is None:
        ga = _amax_f32(x32)
    else:
        arr = _as_array(global_amax, f"{what} global_amax")
        if arr.size != 1:
            raise ScalingError(f"{what}: global_amax must be one number, got shape {arr.shape}",
                               fix="pass max |x| over the whole (unsharded) tensor")
        ga = arr.reshape(()) if arr.dtype == np.float32 else cast(arr.reshape(()), "f32")
        ga = np.float32(ga)
        if ga < 0:
            raise ScalingError(f"{what}: global_amax must be non-negative, got {float(ga)!r}",
                               fix="pass max |x|, an absolute value")
    with np.errstate(all="ignore"):
        g = np.float32(ga / _NVFP4_DENOM)  # one f32 division
    if not (np.isfinite(ga) and g >= _F32_MIN_NORMAL):
        return np.float32(1.0)
    return g


def quantize_nvfp4(x, *, axis=None, block_2d=False, rounding="rne", key=None, index=None,
                   pad=False, global_amax=None) -> ScaledTensor:
    """NVFP4 quantization (NUM-NVFP4-1 ... NUM-NVFP4-5).

    fp4_e2m1 elements; one fp8_e4m3 decode scale per 16 elements along ``axis`` (default the
    last), or per 16x16 tile of two axes when ``block_2d`` (default the last two); one f32
    global decode scale. With ``xb`` a block's f32 values and every operation an IEEE-754 f32
    operation rounded to nearest even::

        g   = ga / 2688                        (g = 1 unless ga is finite and g >= 2**-126)
        s_b = e4m3_rne_saturate((amax_b / 6) / g)      (NaN code if amax_b is inf or NaN)
        q_i = fp4_saturate(x_i / (s_b * g), rounding)  (code 0 for every element if s_b is 0 or NaN)

    where ``ga`` is ``global_amax`` (default: ``max |x|`` over the tensor, which a sharded caller
    must pass as the global value) rounded to f32.

    Args:
        x: real array; f64 (and integer) inputs are first rounded to f32 (rne).
        axis: block axis (an int), or with ``block_2d`` a pair of distinct axes.
        rounding, key, index: element rounding (``"stochastic"`` with a key for gradients) and
            the global element indices that key it.
        pad: zero-pad the blocked axes to multiples of 16 instead of raising.
        global_amax: the per-tensor amax to derive ``g`` from (non-negative).
    """
    what = "quantize_nvfp4"
    _check_rounding(rounding, key, what)
    x32 = _as_f32(x, what)
    if x32.ndim < (2 if block_2d else 1):
        raise ScalingError(f"{what}: a {x32.ndim}-D tensor cannot hold {'16x16' if block_2d else '16-element'} blocks",
                           fix="reshape the tensor" + ("" if block_2d else " to 1-D first"))
    if block_2d:
        pair = (-2, -1) if axis is None else axis
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ScalingError(f"{what}: block_2d needs a pair of axes, got axis={axis!r}",
                               fix="pass axis=(-2, -1) (the default) or another pair of distinct axes")
        axes = tuple(sorted(_norm_axis(a, x32.ndim, what) for a in pair))
        if axes[0] == axes[1]:
            raise ScalingError(f"{what}: block_2d needs two distinct axes, got axis={axis!r}",
                               fix="pass axis=(-2, -1)")
    else:
        axes = (_norm_axis(-1 if axis is None else axis, x32.ndim, what),)
    block = (NVFP4_BLOCK,) * len(axes)
    fp4, e4m3 = get_format("fp4_e2m1"), get_format("fp8_e4m3")

    shape = tuple(x32.shape)
    g = _nvfp4_global_scale(x32, global_amax, what)
    xp = _pad_to_blocks(x32, axes, block, pad, what)
    padded = tuple(xp.shape)
    xb = _to_blocks(xp, axes, block)

    with np.errstate(all="ignore"):
        amax = np.max(np.abs(xb), axis=-1)  # NaN if the block holds a NaN
        t = (amax / np.float32(6.0)) / g  # two f32 divisions
        s_codes = encode(t, e4m3, rounding="rne", overflow="saturate")
        s_codes = np.where(np.isfinite(amax), s_codes, np.uint8(e4m3.nan_code))
        s = decode(s_codes, e4m3)
        d = s * g  # f32 multiplication; > 0 whenever s > 0, since g >= 2**-126
        y = xb / d[..., None]  # f32 division
    idx = None
    if rounding == "stochastic":
        idx = _to_blocks(_element_index(index, shape, padded, what), axes, block)
    codes = encode(y, fp4, rounding=rounding, overflow="saturate", key=key, index=idx)
    zero_block = (s == 0) | np.isnan(s)
    codes = np.where(zero_block[..., None], np.uint8(0), codes)
    return ScaledTensor(
        scheme="nvfp4", codes=_from_blocks(codes, padded, axes, block), elem_format=fp4,
        scales=_scales_to_tensor_layout(s_codes, len(shape), axes), scale_format=e4m3,
        block=block, axis=axes, shape=shape, global_scale=g,
    )


# ---------------------------------------------------------------------------------------
# per-tensor amax scaling (Transformer Engine)

def _check_margin(margin, what) -> int:
    if isinstance(margin, (bool, np.bool_)) or not isinstance(margin, (int, np.integer)) or not 0 <= margin <= 127:
        raise ScalingError(f"{what}: margin must be an integer in [0, 127], got {margin!r}",
                           fix="pass margin=0 (the default) or a small non-negative integer")
    return int(margin)


def _per_tensor_format(fmt, what) -> Format:
    f = _format(fmt, f"{what} format")
    if f.name in ("e8m0", "f32", "f64"):
        raise ScalingError(f"{what}: per-tensor scaling cannot store into {f.name}",
                           fix="use a narrow format: fp8_e4m3, fp8_e5m2, fp6_*, fp4_e2m1, int8, f16, bf16")
    return f


def _scale_from_amax(amax32: np.float32, fmt: Format, margin: int) -> np.float32 | None:
    """NUM-AMAX-1: ``(max / amax) / 2**margin`` in f32, or ``None`` where amax is unusable."""
    if not (np.isfinite(amax32) and amax32 > 0):
        return None
    with np.errstate(over="ignore"):
        s = np.float32(np.float32(fmt.max) / amax32)  # one f32 division
    if np.isinf(s):
        s = _F32_MAX
    return np.float32(s / np.float32(2.0**margin))  # one f32 division by a power of two


def amax_scale(amax, fmt="fp8_e4m3", margin=0) -> np.float32:
    """Transformer Engine's per-tensor scale ``f32(f32(max)/f32(amax)) / 2**margin``
    (NUM-AMAX-1, NUM-AMAX-2).

    ``amax`` is rounded to f32 (rne) first. A quotient that overflows becomes the largest
    f32. Where amax is 0, inf or NaN, TE keeps the previous scale; with no history here the
    result is ``1.0`` (:class:`DelayedScaling` keeps its previous scale instead).
    """
    what = "amax_scale"
    f = _per_tensor_format(fmt, what)
    margin = _check_margin(margin, what)
    a = _as_array(amax, what)
    if a.size != 1:
        raise ScalingError(f"{what}: amax must be one number, got shape {a.shape}", fix="pass max |x| as a scalar")
    a32 = np.float32(a.reshape(()) if a.dtype == np.float32 else cast(a.reshape(()), "f32"))
    if a32 < 0:
        raise ScalingError(f"{what}: amax must be non-negative, got {float(a32)!r}", fix="pass max |x|")
    s = _scale_from_amax(a32, f, margin)
    return np.float32(1.0) if s is None else s


def quantize_per_tensor(x, fmt="fp8_e4m3", scale=None, margin=0, *, rounding="rne", key=None,
                        index=None) -> ScaledTensor:
    """Per-tensor scaled quantization (NUM-AMAX-3, NUM-AMAX-4).

    ``x`` is rounded to f32 (exact for f32 and narrower), multiplied by the f32 ``scale``
    (one f32 multiplication) and converted to ``fmt`` with ``rounding`` and saturation.
    ``scale=None`` uses :func:`amax_scale` of ``max |x|`` with ``margin``. Dequantize divides the
    decoded elements by ``scale`` (one f32 division).
    """
    what = "quantize_per_tensor"
    f = _per_tensor_format(fmt, what)
    _check_rounding(rounding, key, what)
    x32 = _as_f32(x, what)
    if scale is None:
        scale = amax_scale(_amax_f32(x32), f, margin)
    else:
        if margin:
            raise ScalingError(f"{what}: margin={margin} only applies when the scale is derived from amax",
                               fix="fold the margin into the scale you pass, or pass scale=None")
        s = _as_array(scale, what)
        if s.size != 1:
            raise ScalingError(f"{what}: scale must be one number, got shape {s.shape}", fix="pass an f32 scalar")
        scale = np.float32(s.reshape(()) if s.dtype == np.float32 else cast(s.reshape(()), "f32"))
        if not (np.isfinite(scale) and scale > 0):
            raise ScalingError(f"{what}: scale must be a positive finite f32, got {float(scale)!r}",
                               fix="use amax_scale(amax, fmt) or 1.0")
    with np.errstate(over="ignore", invalid="ignore"):
        y = x32 * scale  # one f32 multiplication
    idx = None if index is None else _element_index(index, x32.shape, x32.shape, what)
    codes = encode(y, f, rounding=rounding, overflow="saturate", key=key, index=idx).reshape(y.shape)
    return ScaledTensor(
        scheme="per_tensor", codes=codes, elem_format=f,
        scales=np.asarray(np.float32(scale)).view(np.uint32).reshape(()), scale_format=get_format("f32"),
        shape=tuple(x32.shape),
    )


class HybridScaling(NamedTuple):
    """The HYBRID recipe (NUM-DELAY-4): e4m3 for forward tensors, e5m2 for gradients."""

    forward: "DelayedScaling"
    backward: "DelayedScaling"


class DelayedScaling:
    """Transformer Engine's delayed scaling: a scale from an amax history (NUM-DELAY-1..4).

    ``quantize(x)`` quantizes with the *current* :attr:`scale` (computed from amaxes recorded
    before ``x``), then records ``max |x|`` and updates the scale. The history keeps the last
    ``history_len`` amaxes (oldest first). The scale is ``amax_scale`` of the history's max
    (``algo="max"``) or its newest entry (``"most_recent"``); while that amax is 0, inf or NaN
    the previous scale is kept. An empty history has scale 1.0.
    """

    def __init__(self, fmt="fp8_e4m3", history_len=1024, algo="max", margin=0):
        what = "DelayedScaling"
        self.fmt = _per_tensor_format(fmt, what)
        if isinstance(history_len, (bool, np.bool_)) or not isinstance(history_len, (int, np.integer)) \
                or history_len < 1:
            raise ScalingError(f"{what}: history_len must be a positive integer, got {history_len!r}",
                               fix="use history_len=1024 (TE's default) or another positive length")
        if algo not in AMAX_ALGOS:
            raise ScalingError(f"{what}: unknown amax algorithm {algo!r}", fix="use 'max' or 'most_recent'")
        self.history_len = int(history_len)
        self.algo = algo
        self.margin = _check_margin(margin, what)
        self.reset()

    @classmethod
    def hybrid(cls, history_len=1024, algo="max", margin=0) -> HybridScaling:
        """``(forward, backward)``: an e4m3 recipe for weights/activations and an e5m2 recipe
        for gradients, with independent histories."""
        return HybridScaling(cls("fp8_e4m3", history_len, algo, margin), cls("fp8_e5m2", history_len, algo, margin))

    def reset(self) -> None:
        """Forget the history; the scale returns to 1.0."""
        self._history = np.zeros(0, dtype=np.float32)
        self._scale = np.float32(1.0)

    @property
    def history(self) -> np.ndarray:
        """The recorded amaxes (f32), oldest first, at most ``history_len``; read-only."""
        h = self._history.copy()
        h.setflags(write=False)
        return h

    @property
    def scale(self) -> np.float32:
        """The scale the next :meth:`quantize` uses."""
        return self._scale

    def record(self, amax) -> None:
        """Append an amax (rounded to f32) and update the scale (NUM-DELAY-2)."""
        a = _as_array(amax, "DelayedScaling.record")
        if a.size != 1:
            raise ScalingError(f"DelayedScaling.record: amax must be one number, got shape {a.shape}",
                               fix="pass max |x| as a scalar")
        a32 = np.float32(a.reshape(()) if a.dtype == np.float32 else cast(a.reshape(()), "f32"))
        if a32 < 0:
            raise ScalingError(f"DelayedScaling.record: amax must be non-negative, got {float(a32)!r}",
                               fix="pass max |x|")
        self._history = np.append(self._history, a32)[-self.history_len:]
        h = self._history
        current = np.float32(np.max(h)) if self.algo == "max" else h[-1]  # np.max propagates NaN
        s = _scale_from_amax(current, self.fmt, self.margin)
        if s is not None:
            self._scale = s

    def quantize(self, x, *, rounding="rne", key=None, index=None) -> ScaledTensor:
        """Quantize with the current scale, then record ``max |x|`` (NUM-DELAY-3)."""
        x32 = _as_f32(x, "DelayedScaling.quantize")
        st = quantize_per_tensor(x32, self.fmt, scale=self._scale, rounding=rounding, key=key, index=index)
        self.record(_amax_f32(x32))
        return st

    def __repr__(self) -> str:
        return (f"DelayedScaling({self.fmt.name}, history {len(self._history)}/{self.history_len}, "
                f"algo={self.algo}, margin={self.margin}, scale={float(self._scale):.9g})")
