"""Independent references for the mesh cases, written without ``tessera_ref``.

Blocks are cut with NumPy slicing from the layout's definition (MESH-LAYOUT-1,
MESH-TENSOR-2); reductions over ranks fold per-device values one IEEE operation at a time
in ascending rank order (NUM-RED-3); dot products and axis sums follow NUM-RED-1/NUM-RED-2
as the numerics chapter states them; exact sums use ``fractions`` and round once (NUM-RED-4).
Only :func:`mesh_of` (the mesh a case runs on) and :func:`observe` (a run on the backend
that also keeps the result's layout and shards) touch ``tessera_ref``.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import ml_dtypes
import numpy as np

AXES = ("dp", "tp", "pp")
NAN = np.float32("nan")  # the canonical quiet NaN, sign bit clear (NUM-EW-1)
BF16 = ml_dtypes.bfloat16


def mesh_of(shape: tuple):
    """``dist.Mesh`` with axes ``("dp", "tp", "pp")[:len(shape)]`` over devices ``range(prod)``."""
    from tessera_ref import dist
    return dist.Mesh(AXES[:len(shape)], range(math.prod(shape)), shape)


def largest_axis(shape: tuple) -> str:
    """The mesh axis with the most devices (the first of equals): where rank order shows most."""
    return AXES[max(range(len(shape)), key=lambda i: (shape[i], -i))]


def observe(backend, fn):
    """``fn()`` (a DistTensor) run on ``backend`` by the harness's ``eager``: ``(global value,
    facts)`` with facts ``layout``, ``shape``, ``type``, ``partial`` and ``shards`` (``{device:
    local value}``, absent for an exact pending sum). The global value folds a pending
    reduction on the backend."""
    from tessera_conformance import eager
    from tessera_ref.errors import AbstractValueError
    facts = {}

    def go():
        y = fn()
        facts.update(layout=y.layout, shape=y.shape, type=y.type, partial=y.layout.partial)
        try:
            facts["shards"] = {d: y.shard(d) for d in range(y.mesh.size)}
        except AbstractValueError:  # an exact pending sum has no storage value per device yet
            pass
        return y

    return eager(backend, go), facts


# -- meshes (MESH-1) --------------------------------------------------------------------------------

def coords_of(flat: int, axes: tuple, shape: tuple) -> dict:
    """Row-major coordinates of device ``flat``, by repeated division."""
    out = {}
    for axis, size in zip(reversed(axes), reversed(shape)):
        out[axis] = flat % size
        flat //= size
    return {a: out[a] for a in axes}


def flat_of(coords: dict, axes: tuple, shape: tuple) -> int:
    """``((c_0·p_1 + c_1)·p_2 + c_2)…``."""
    i = 0
    for a, p in zip(axes, shape):
        i = i * p + coords[a]
    return i


def groups_of(axes: tuple, shape: tuple, group_axes) -> list:
    """The groups over ``group_axes``: devices differing only along them, each in ascending
    device index (the rank order), the groups in ascending order of their first device."""
    group_axes = set((group_axes,) if isinstance(group_axes, str) else group_axes)
    by_key: dict = {}
    for d in range(math.prod(shape)):
        c = coords_of(d, axes, shape)
        key = tuple(v for a, v in c.items() if a not in group_axes)
        by_key.setdefault(key, []).append(d)
    return sorted((tuple(g) for g in by_key.values()), key=lambda g: g[0])


def prime_factors(n: int) -> list:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def default_shape_rule(n: int, naxes: int) -> tuple:
    """MESH-1.2 in integer arithmetic: factors dealt out ascending; an axis but the last takes at
    least one and more while ``s^k' <= R``."""
    factors, shape, rest = prime_factors(n), [], n
    for i in range(naxes - 1):
        k, size = naxes - i, 1
        while factors and (size == 1 or (size * factors[0]) ** k <= rest):
            size *= factors.pop(0)
        shape.append(size)
        rest //= size
    return tuple(shape) + (rest,)


# -- blocks (MESH-LAYOUT-1, MESH-TENSOR-2) --------------------------------------------------------

def block_index(coords: dict, split_axes: tuple, sizes: dict) -> int:
    """Block ``c_a·p_b + c_b`` of a dimension split over ``(a, b)`` (major first)."""
    b = 0
    for a in split_axes:
        b = b * sizes[a] + coords[a]
    return b


def expected_shard(x: np.ndarray, dims: tuple, axes: tuple, shape: tuple, device: int,
                   padded: bool = False) -> np.ndarray:
    """Device ``device``'s block of ``x``: per split dimension, block ``b`` of length
    ``ceil(n/p)`` (``n/p`` when even), the end of the last blocks filled with +0."""
    sizes = dict(zip(axes, shape))
    c = coords_of(device, axes, shape)
    out = np.asarray(x)
    for d, split in enumerate(dims):
        if not split:
            continue
        p = math.prod(sizes[a] for a in split)
        n = out.shape[d]
        assert padded or n % p == 0
        length = -(-n // p)
        b = block_index(c, split, sizes)
        lo, hi = min(b * length, n), min((b + 1) * length, n)
        piece = np.take(out, np.arange(lo, hi), axis=d)
        if hi - lo < length:
            pad = [(0, 0)] * out.ndim
            pad[d] = (0, length - (hi - lo))
            piece = np.pad(piece, pad)  # +0
        out = piece
    return out


# -- folds in rank order (NUM-RED-3) ------------------------------------------------------------

def _canonical_nan(a: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), NAN.astype(a.dtype), a)


def ieee_max(a, b):
    """IEEE 754-2019 maximum: NaN wins, −0 < +0."""
    a, b = np.asarray(a), np.asarray(b)
    pick_b = (b > a) | ((a == b) & np.signbit(a) & ~np.signbit(b))
    out = np.where(pick_b, b, a)
    return np.where(np.isnan(a) | np.isnan(b), NAN.astype(out.dtype), out)


def ieee_min(a, b):
    """IEEE 754-2019 minimum: NaN wins, −0 < +0."""
    a, b = np.asarray(a), np.asarray(b)
    pick_b = (b < a) | ((a == b) & np.signbit(b) & ~np.signbit(a))
    out = np.where(pick_b, b, a)
    return np.where(np.isnan(a) | np.isnan(b), NAN.astype(out.dtype), out)


def fold(values, op: str = "sum", storage=np.float32) -> np.ndarray:
    """``((v0 ⊕ v1) ⊕ v2) ⊕ …`` elementwise in f32 (the accum format of f32 and bf16 storage),
    one IEEE operation per step, then one conversion into ``storage`` (round to nearest even)."""
    vals = [np.asarray(v).astype(np.float32) for v in values]
    acc = vals[0].copy()
    with np.errstate(all="ignore"):
        for v in vals[1:]:
            if op == "sum":
                acc = _canonical_nan(np.add(acc, v, dtype=np.float32))
            elif op == "prod":
                acc = _canonical_nan(np.multiply(acc, v, dtype=np.float32))
            elif op == "max":
                acc = ieee_max(acc, v)
            elif op == "min":
                acc = ieee_min(acc, v)
            else:
                raise ValueError(op)
    return acc.astype(storage)


def fold_groups(per_device: list, axes: tuple, shape: tuple, group_axes, op: str = "sum",
                storage=np.float32) -> list:
    """Per device, the fold (in rank order) of its group's contributions over ``group_axes``."""
    out = [None] * len(per_device)
    for g in groups_of(axes, shape, group_axes):
        value = fold([per_device[d] for d in g], op, storage)
        for d in g:
            out[d] = value
    return out


# -- exact sums (NUM-RED-4) -------------------------------------------------------------------------

def round_f32(q: Fraction) -> np.float32:
    """A rational rounded to nearest-even f32 (subnormals, overflow to inf), by integer arithmetic."""
    if q == 0:
        return np.float32(0.0)
    sign, a = (-1 if q < 0 else 1), abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1                                       # 2^e <= a < 2^(e+1)
    ulp = Fraction(2) ** (max(e, -126) - 23)
    m, r = divmod(a, ulp)
    m = int(m) + (1 if r > ulp / 2 or (r == ulp / 2 and int(m) % 2) else 0)
    value = m * ulp
    if value >= Fraction(2) ** 128:
        return np.float32(sign * np.inf)
    return np.float32(sign * float(value))


def exact_sum_f32(values) -> np.ndarray:
    """Elementwise: the exact sum of finite f32 arrays, rounded once to f32 (+0 for an exact zero)."""
    vals = [np.asarray(v, np.float32) for v in values]
    out = np.empty(vals[0].shape, np.float32)
    for idx in np.ndindex(*out.shape):
        out[idx] = round_f32(sum((Fraction(float(v[idx])) for v in vals), Fraction(0)))
    return out


# -- the canonical orders of one device (NUM-RED-1, NUM-RED-2) ---------------------------------------

def _fma_f32(a64: np.ndarray, b64: np.ndarray, c32: np.ndarray) -> np.ndarray:
    """``round_f32(a·b + c)`` elementwise, one rounding. The product of f32 values is exact in
    f64, so ``a·b + c = s + err`` exactly (TwoSum). ``f32(s)`` is that rounding unless ``s`` is
    exactly halfway between two f32 values and ``err ≠ 0`` (rounding to f64 is monotone, so ``s``
    lies on the same side of every f32 midpoint as the exact value otherwise); those elements
    are rounded from the exact rational."""
    p = a64 * b64
    c = c32.astype(np.float64)
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    out = s.astype(np.float32)
    r64 = out.astype(np.float64)
    other = np.nextafter(out, np.where(s > r64, np.float32(np.inf), np.float32(-np.inf))).astype(np.float64)
    midway = (err != 0) & (s != r64) & (s == (r64 + other) / 2)
    for idx in zip(*np.nonzero(midway)):
        out[idx] = round_f32(Fraction(float(a64[idx])) * Fraction(float(b64[idx])) + Fraction(float(c32[idx])))
    return out


def dot_ref(a: np.ndarray, b: np.ndarray, c=None) -> np.ndarray:
    """NUM-RED-1 with f32 accum: ``acc = +0`` (or ``C``), ``acc = fma(a_k, b_k, acc)`` for k
    ascending; returns f32 (round it into a narrower storage afterwards). ``a`` is ``[…, M, K]``,
    ``b`` ``[…, K, N]`` (f32 or bf16, converted exactly to f32)."""
    a, b = np.asarray(a).astype(np.float32), np.asarray(b).astype(np.float32)
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    acc = np.zeros(shape, np.float32) if c is None else np.broadcast_to(np.asarray(c, np.float32), shape).copy()
    for k in range(a.shape[-1]):
        ak = np.broadcast_to(a[..., :, k:k + 1].astype(np.float64), shape)
        bk = np.broadcast_to(b[..., k:k + 1, :].astype(np.float64), shape)
        acc = _fma_f32(ak, bk, acc)
    return acc


def exact_dot_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[M, K] @ [K, N]``: each output the exact sum of exact products, rounded once to f32."""
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            out[i, j] = round_f32(sum((Fraction(float(a[i, k])) * Fraction(float(b[k, j]))
                                       for k in range(a.shape[1])), Fraction(0)))
    return out


def sum_ref(x: np.ndarray, axis=-1) -> np.ndarray:
    """NUM-RED-2 sum in f32 over ``axis`` (an int or a tuple, flattened row-major): 32 lane
    partials from −0, lane ``l`` folding ``x_l, x_{l+32}, …``; then the butterfly 16, 8, 4, 2, 1."""
    x = np.asarray(x).astype(np.float32)
    axes = tuple(sorted(a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis)))
    rest = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, rest + list(axes))
    flat = moved.reshape(moved.shape[:len(rest)] + (-1,))
    lanes = np.full(flat.shape[:-1] + (32,), -0.0, np.float32)
    with np.errstate(all="ignore"):
        for i in range(flat.shape[-1]):
            lanes[..., i % 32] = lanes[..., i % 32] + flat[..., i]
        for off in (16, 8, 4, 2, 1):
            lanes = lanes + lanes[..., np.arange(32) ^ off]
    return _canonical_nan(lanes[..., 0])


# -- inputs --------------------------------------------------------------------------------------------

def wide(rng: np.random.Generator, shape, lo: int = -20, hi: int = 21) -> np.ndarray:
    """f32 values of mixed signs over a wide dynamic range: rounding depends on the order."""
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)).astype(np.float32)


def cancelling(rng: np.random.Generator, n: int, shape) -> list:
    """``n`` contributions of one shape whose sums cancel: big values ±2^20, small ones, ones."""
    out = [wide(rng, shape, -8, 9) for _ in range(n)]
    big = np.float32(2.0 ** 20)
    for r, v in enumerate(out):
        v.reshape(-1)[r % v.size] += big if r % 2 == 0 else -big
    return out


def rank_orders(axes: tuple, shape: tuple, group_axes) -> list:
    """The coordinates of one group over ``group_axes`` in rank order (row-major in mesh order)."""
    names = [a for a in axes if a in group_axes]
    sizes = dict(zip(axes, shape))
    return [dict(zip(names, c)) for c in itertools.product(*(range(sizes[a]) for a in names))]
