"""Independent references for the mesh tests, written without ``tessera_ref.dist``.

Blocks are cut with plain NumPy slicing from the layout's definition (MESH-LAYOUT-1,
MESH-TENSOR-2); reductions over ranks fold per-device values one at a time in ascending
rank order with NumPy float32 scalars (NUM-RED-3).
"""
from __future__ import annotations

import math

import numpy as np


def coords_of(flat: int, mesh_axes: tuple, mesh_shape: tuple) -> dict:
    """Row-major coordinates of device ``flat`` (MESH-1), computed by repeated division."""
    out = {}
    for axis, size in zip(reversed(mesh_axes), reversed(mesh_shape)):
        out[axis] = flat % size
        flat //= size
    return out


def block_index(coords: dict, axes: tuple, sizes: dict) -> int:
    """The block a device holds of a dimension split over ``axes`` (major first)."""
    b = 0
    for a in axes:
        b = b * sizes[a] + coords[a]
    return b


def expected_shard(x: np.ndarray, dims: tuple, mesh_axes: tuple, mesh_shape: tuple, device: int,
                   padded: bool = False) -> np.ndarray:
    """Device ``device``'s block of the global array ``x`` under a layout with split ``dims``:
    per dimension, block ``b`` of length ``ceil(n/p)`` (``n/p`` unpadded), padded with +0 at the
    end of the last blocks."""
    sizes = dict(zip(mesh_axes, mesh_shape))
    c = coords_of(device, mesh_axes, mesh_shape)
    out = x
    for d, axes in enumerate(dims):
        if not axes:
            continue
        p = math.prod(sizes[a] for a in axes)
        n = x.shape[d]
        if not padded:
            assert n % p == 0
        length = -(-n // p)
        b = block_index(c, axes, sizes)
        lo, hi = min(b * length, n), min((b + 1) * length, n)
        piece = np.take(out, np.arange(lo, hi), axis=d)
        if hi - lo < length:
            pad = [(0, 0)] * out.ndim
            pad[d] = (0, length - (hi - lo))
            piece = np.pad(piece, pad)  # zeros: +0
        out = piece
    return out


def fold_f32(values, op: str = "sum") -> np.ndarray:
    """Fold ``values[0], values[1], …`` (one array per rank, ascending) element by element in
    float32: ``((v0 ⊕ v1) ⊕ v2) ⊕ …`` (sum, prod), IEEE maximum/minimum (NaN wins, −0 < +0)."""
    values = [np.asarray(v, dtype=np.float32) for v in values]
    out = np.empty(values[0].shape, dtype=np.float32)
    for idx in np.ndindex(*values[0].shape):
        acc = values[0][idx]
        for v in values[1:]:
            b = v[idx]
            if op == "sum":
                acc = np.float32(acc + b)
            elif op == "prod":
                acc = np.float32(acc * b)
            elif op in ("max", "min"):
                if math.isnan(acc) or math.isnan(b):
                    acc = np.float32("nan")
                elif acc == b:  # -0 < +0
                    neg = math.copysign(1.0, acc) < 0 and math.copysign(1.0, b) < 0
                    pos = math.copysign(1.0, acc) > 0 and math.copysign(1.0, b) > 0
                    if op == "max":
                        acc = np.float32(-0.0) if neg else (acc if acc != 0 else np.float32(0.0))
                    else:
                        acc = np.float32(0.0) if pos else (acc if acc != 0 else np.float32(-0.0))
                else:
                    acc = max(acc, b) if op == "max" else min(acc, b)
            else:
                raise ValueError(op)
        out[idx] = acc
    return out


def bits(x) -> bytes:
    """The bytes of an array (compares bit patterns, so −0 ≠ +0 and NaN payloads count)."""
    x = np.ascontiguousarray(np.asarray(x))
    return x.dtype.str.encode() + repr(x.shape).encode() + x.tobytes()


def same_bits(a, b) -> bool:
    return bits(a) == bits(b)
