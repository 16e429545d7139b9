"""Dense storage of sub-byte codes (spec clause NUM-PACK-1).

- 4-bit formats (fp4_e2m1, int4): two codes per byte, element ``2j`` in the low nibble and
  element ``2j+1`` in the high nibble.
- 6-bit formats (fp6_e2m3, fp6_e3m2): four codes per three bytes; codes ``c0..c3`` form the
  24-bit little-endian word ``c0 | c1 << 6 | c2 << 12 | c3 << 18``.
- 8-bit and wider formats: the codes' own little-endian bytes.

Elements are taken in C order; a trailing partial group is padded with zero codes.
Memory accounting (:func:`packed_nbytes`) uses these packed sizes.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConversionError
from .formats import get_format

__all__ = ["pack", "unpack", "packed_nbytes"]

# bits -> (codes per group, bytes per group) for the packed sub-byte layouts
_GROUPS = {4: (2, 1), 6: (4, 3)}


def packed_nbytes(count: int, fmt) -> int:
    """Bytes that ``count`` elements of ``fmt`` occupy when packed."""
    fmt = get_format(fmt)
    if fmt.bits in _GROUPS:
        per_group, group_bytes = _GROUPS[fmt.bits]
        return -(-int(count) // per_group) * group_bytes
    return int(count) * fmt.bits // 8


def pack(codes, fmt) -> np.ndarray:
    """Pack raw ``codes`` of ``fmt`` (any shape, taken in C order) into a 1-D uint8 array."""
    fmt = get_format(fmt)
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.integer):
        raise ConversionError(
            f"pack expects integer codes, got dtype {codes.dtype}",
            fix=f"encode values first: numerics.encode(x, {fmt.name!r})",
        )
    flat = codes.reshape(-1)
    if flat.size and (flat.min() < 0 or int(flat.max()) >= (1 << fmt.bits)):
        raise ConversionError(
            f"codes out of range for {fmt.name}: packing needs values in [0, {1 << fmt.bits})",
            fix="pass raw codes from numerics.encode, not values",
        )
    if fmt.bits not in _GROUPS:
        return np.ascontiguousarray(flat.astype(fmt.code_dtype)).view(np.uint8).copy()
    per_group, group_bytes = _GROUPS[fmt.bits]
    groups = -(-flat.size // per_group)
    padded = np.zeros(groups * per_group, dtype=np.uint32)
    padded[: flat.size] = flat
    lanes = padded.reshape(groups, per_group)
    word = np.zeros(groups, dtype=np.uint32)
    for j in range(per_group):
        word |= lanes[:, j] << np.uint32(j * fmt.bits)
    out = np.empty((groups, group_bytes), dtype=np.uint8)
    for byte in range(group_bytes):
        out[:, byte] = (word >> np.uint32(8 * byte)) & np.uint32(0xFF)
    return out.reshape(-1)


def unpack(data, fmt, shape) -> np.ndarray:
    """Inverse of :func:`pack`: the codes of ``fmt`` for an array of ``shape``."""
    fmt = get_format(fmt)
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    count = int(np.prod(shape, dtype=np.int64))
    data = np.asarray(data)
    need = packed_nbytes(count, fmt)
    if data.dtype != np.uint8 or data.ndim != 1 or data.size != need:
        raise ConversionError(
            f"unpack of {count} {fmt.name} elements needs a 1-D uint8 array of {need} bytes, "
            f"got dtype {data.dtype} with shape {data.shape}",
            fix="pass exactly the bytes pack() produced for this shape",
        )
    if fmt.bits not in _GROUPS:
        return data.view(fmt.code_dtype).reshape(shape).copy()
    per_group, group_bytes = _GROUPS[fmt.bits]
    rows = data.reshape(-1, group_bytes).astype(np.uint32)
    word = np.zeros(rows.shape[0], dtype=np.uint32)
    for byte in range(group_bytes):
        word |= rows[:, byte] << np.uint32(8 * byte)
    mask = np.uint32((1 << fmt.bits) - 1)
    lanes = np.stack([(word >> np.uint32(j * fmt.bits)) & mask for j in range(per_group)], axis=-1)
    return lanes.reshape(-1)[:count].astype(np.uint8).reshape(shape)
