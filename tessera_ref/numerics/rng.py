"""The counter-based random number generator (NUM-RNG).

Every random value is a pure function of a key and a *global element index*: element ``i``
of a draw reads only Philox4x32-10 blocks whose counters are built from ``i`` (and, for
rejection sampling, a round number). So a shard that passes its global indices gets exactly
the same slice of the unsharded result, on any mesh, in any order, with any thread count.

Counter spaces (NUM-RNG-3); a 64-bit block number ``n`` fills counter words 0 and 1 as
``(lo32 n, hi32 n)``, words 2 and 3 separate the spaces:

- ``random_bits`` and f32 ``uniform``: counter ``(n, 0, 0)``, ``n = i >> 2``; element ``i``
  uses word ``i & 3``.
- f64 ``uniform``: counter ``(n, 1, 0)``, ``n = i >> 1``; words ``2(i & 1)`` and ``2(i & 1) + 1``.
- ``normal``: counter ``(i, 2, 0)``; words 0, 1 give ``u1``, words 2, 3 give ``u2``.
- ``poisson`` round ``d``: counter ``(i, 3, d)``; words 0, 1 and 2, 3 give two uniforms.
- key derivation: counter ``(s, 0, KEY_TAG)`` under the parent key; words 0, 1.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np

from ..errors import RNGError
from . import xmath

__all__ = [
    "philox4x32_10", "RNGKey", "as_key", "random_bits", "uniform", "normal", "poisson",
    "rand", "randn", "randpoisson", "KEY_TAG", "POISSON_MAX_ROUNDS", "POISSON_LAM_MAX",
]

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_CHUNK = 1 << 15          # counters per vectorized Philox pass: keeps the working set in cache
_DRAW_CHUNK = 1 << 15     # elements per pass of a whole draw (bits → floats → transforms)

KEY_TAG = 0x6B657973      # "keys": counter word 3 of key derivation (NUM-RNG-2)
POISSON_MAX_ROUNDS = 256  # rounds of two uniforms per element before poisson gives up (NUM-RNG-7)
POISSON_LAM_MAX = 2.0**52  # largest rate: every count stays an exact f64 integer

_TWO_M24 = np.float32(2.0**-24)
_TWO_M53 = 2.0**-53


# ---------------------------------------------------------------------------------------
# Philox4x32-10

def _rounds(c0, c1, c2, c3, k0, k1):
    """Ten Philox rounds on 32-bit words held in uint64 (products are exact); keys broadcast."""
    c0, c1, c2, c3 = (np.array(c, dtype=np.uint64) for c in (c0, c1, c2, c3))  # own buffers
    p0 = np.empty_like(c0)
    p1 = np.empty_like(c0)
    for r in range(10):
        if r:
            k0 = (k0 + _W0) & _MASK32
            k1 = (k1 + _W1) & _MASK32
        np.multiply(c0, _M0, out=p0)
        np.multiply(c2, _M1, out=p1)
        np.right_shift(p1, _S32, out=c0)      # c0' = hi(M1·c2) ^ c1 ^ k0
        c0 ^= c1
        c0 ^= k0
        np.right_shift(p0, _S32, out=c2)      # c2' = hi(M0·c0) ^ c3 ^ k1
        c2 ^= c3
        c2 ^= k1
        np.bitwise_and(p1, _MASK32, out=c1)   # c1' = lo(M1·c2)
        np.bitwise_and(p0, _MASK32, out=c3)   # c3' = lo(M0·c0)
    return c0, c1, c2, c3


def _philox_flat(c0, c1, c2, c3, k0, k1) -> np.ndarray:
    """Philox of flat counter words (uint64, values < 2**32, broadcastable) → ``(N, 4)`` uint32.

    Keys are uint64 scalars or flat arrays of the same length. Processed in cache-sized chunks.
    """
    keys = (np.asarray(k0), np.asarray(k1))
    c0, c1, c2, c3 = np.broadcast_arrays(c0, c1, c2, c3, *(k for k in keys if k.ndim))[:4]
    n = c0.shape[0]
    out = np.empty((n, 4), dtype=np.uint32)
    for s in range(0, n, _CHUNK):
        part = slice(s, min(n, s + _CHUNK))
        k0, k1 = (k[part] if k.ndim else k[()] for k in keys)
        words = _rounds(c0[part], c1[part], c2[part], c3[part], k0, k1)
        for j, w in enumerate(words):
            out[part, j] = w
    return out


def _as_words(a, name: str, width: int) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu" or arr.ndim == 0 or arr.shape[-1] != width:
        raise RNGError(
            f"philox4x32_10 {name} must be an integer array whose last axis has {width} words, "
            f"got dtype {arr.dtype} and shape {arr.shape}",
            fix=f"pass a uint32 array of shape (..., {width})",
        )
    if arr.dtype != np.uint32 and arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
        raise RNGError(
            f"philox4x32_10 {name} words must lie in [0, 2**32)",
            fix="pass 32-bit unsigned words (np.uint32)",
        )
    return arr.astype(np.uint32, copy=False)


def philox4x32_10(counter, key) -> np.ndarray:
    """Philox4x32 with 10 rounds (NUM-RNG-1), vectorized.

    Args:
        counter: integer array of shape ``(..., 4)``, words in ``[0, 2**32)``.
        key: integer array of shape ``(..., 2)``; its leading axes broadcast with the counter's.

    Returns:
        uint32 array of shape ``broadcast(counter[..., 0], key[..., 0]) + (4,)``.

    One round maps ``(c0, c1, c2, c3)`` with key ``(k0, k1)`` to
    ``(hi(M1·c2) ^ c1 ^ k0, lo(M1·c2), hi(M0·c0) ^ c3 ^ k1, lo(M0·c0))`` where ``hi``/``lo``
    are the upper/lower 32 bits of the 64-bit product, ``M0 = 0xD2511F53``,
    ``M1 = 0xCD9E8D57``; between rounds the key is bumped by ``(0x9E3779B9, 0xBB67AE85)``
    modulo 2**32. Reproduces the Random123 known-answer vectors.
    """
    c = _as_words(counter, "counter", 4)
    k = _as_words(key, "key", 2)
    try:
        lead = np.broadcast_shapes(c.shape[:-1], k.shape[:-1])
    except ValueError:
        raise RNGError(
            f"philox4x32_10 counter shape {c.shape} and key shape {k.shape} do not broadcast",
            fix="make the leading axes (all but the last) broadcast-compatible",
        ) from None
    c = np.broadcast_to(c, lead + (4,)).reshape(-1, 4)
    if k.ndim == 1:      # one key for every counter
        k0, k1 = np.uint64(k[0]), np.uint64(k[1])
    else:
        k = np.broadcast_to(k, lead + (2,)).reshape(-1, 2)
        k0, k1 = (k[:, j].astype(np.uint64) for j in range(2))
    out = _philox_flat(c[:, 0], c[:, 1], c[:, 2], c[:, 3], k0, k1)
    return out.reshape(lead + (4,))


def _philox_scalar(counter: tuple[int, int, int, int], key: tuple[int, int]) -> tuple[int, ...]:
    out = _philox_flat(*(np.array([w], dtype=np.uint64) for w in counter),
                       np.uint64(key[0]), np.uint64(key[1]))
    return tuple(int(w) for w in out[0])


# ---------------------------------------------------------------------------------------
# keys

def _check_u64(value, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise RNGError(
            f"{what} must be a non-negative integer, got {type(value).__name__} {value!r}",
            fix=f"pass an int in [0, 2**64) as the {what}",
        )
    value = operator.index(value)
    if not 0 <= value < 2**64:
        raise RNGError(f"{what} {value} is outside [0, 2**64)", fix=f"pass a {what} in [0, 2**64)")
    return value


def _derive(parent: tuple[int, int], stream: int) -> tuple[int, int]:
    """Child key words: words 0, 1 of Philox(counter=(lo32 s, hi32 s, 0, KEY_TAG), key=parent)."""
    out = _philox_scalar((stream & 0xFFFFFFFF, stream >> 32, 0, KEY_TAG), parent)
    return out[0], out[1]


@dataclass(frozen=True)
class RNGKey:
    """A Philox key derived from a seed, a stream id and a path of folds (NUM-RNG-2).

    ``RNGKey(seed, stream).words = derive((lo32 seed, hi32 seed), stream)`` and
    ``key.fold(s).words = derive(key.words, s)``, where ``derive(k, s)`` is words 0 and 1 of
    ``philox4x32_10((lo32 s, hi32 s, 0, KEY_TAG), k)``. Seeds, streams and fold ids are
    integers in ``[0, 2**64)``. An op keys its draws with ``RNGKey(seed).fold(op_id)``.
    """

    seed: int
    stream: int = 0
    folds: tuple[int, ...] = ()
    _words: tuple[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        seed = _check_u64(self.seed, "seed")
        stream = _check_u64(self.stream, "stream")
        if not isinstance(self.folds, tuple):
            raise RNGError(f"folds must be a tuple of ints, got {type(self.folds).__name__}",
                           fix="derive child keys with key.fold(stream)")
        folds = tuple(_check_u64(f, "fold stream") for f in self.folds)
        words = _derive((seed & 0xFFFFFFFF, seed >> 32), stream)
        for f in folds:
            words = _derive(words, f)
        object.__setattr__(self, "seed", seed)
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "folds", folds)
        object.__setattr__(self, "_words", words)

    @property
    def words(self) -> np.ndarray:
        """The Philox key ``(k0, k1)`` as a uint32 array of shape (2,)."""
        return np.array(self._words, dtype=np.uint32)

    def fold(self, stream: int) -> RNGKey:
        """The child key for ``stream`` (an op id, a layer index…): ``derive(self.words, stream)``."""
        return RNGKey(self.seed, self.stream, self.folds + (_check_u64(stream, "fold stream"),))


def as_key(key) -> RNGKey:
    """``key`` itself if it is an :class:`RNGKey`; ``RNGKey(key)`` for an int seed."""
    if isinstance(key, RNGKey):
        return key
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        return RNGKey(int(key))
    raise RNGError(
        f"expected an RNGKey or an int seed, got {type(key).__name__} {key!r}",
        fix="pass RNGKey(seed) or a non-negative int seed",
    )


# ---------------------------------------------------------------------------------------
# element indices and counter spaces

def _check_index(index) -> np.ndarray:
    try:
        arr = np.asarray(index)
    except OverflowError:
        arr = None
    if arr is None or arr.dtype == object:
        raise RNGError("element indices must be integers in [0, 2**64)",
                       fix="pass an integer array (np.uint64 for indices beyond 2**63)")
    if arr.dtype.kind not in "iu":
        raise RNGError(
            f"element indices must be an integer array, got dtype {arr.dtype}",
            fix="pass global flat element indices as an int64 or uint64 array",
        )
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        raise RNGError(
            f"element indices must be non-negative, got minimum {arr.min()}",
            fix="pass global flat element indices (C order), 0 … size−1",
        )
    return arr.astype(np.uint64, copy=False)


def _lohi(n):
    return n & _MASK32, n >> _S32


def _stream_words(key: RNGKey, index: np.ndarray, per_block: int, space: int, rnd=0) -> np.ndarray:
    """Words of counter space ``space`` for each flat index: ``(N, 4 // per_block)`` uint32.

    Element ``i`` reads block ``n = i // per_block`` (counter ``(n, space, rnd)``) and its
    words ``w·(i mod per_block) … w·(i mod per_block) + w − 1``, ``w = 4 // per_block``.
    When the blocks touched span at most ``N`` block numbers, each is computed once.
    """
    k0, k1 = (np.uint64(w) for w in key._words)
    width = 4 // per_block
    shift = np.uint64(per_block.bit_length() - 1)
    blocks = index >> shift
    n = index.shape[0]
    if n == 0:
        return np.empty((0, width), dtype=np.uint32)
    if per_block == 1:
        lo, hi = _lohi(blocks)
        return _philox_flat(lo, hi, np.uint64(space), np.uint64(rnd), k0, k1)
    first, last = int(blocks.min()), int(blocks.max())
    lane = (index & np.uint64(per_block - 1)).astype(np.intp) * width
    if last - first < n:
        span = np.arange(first, last + 1, dtype=np.uint64)
        lo, hi = _lohi(span)
        flat = _philox_flat(lo, hi, np.uint64(space), np.uint64(rnd), k0, k1).reshape(-1)
        start = (blocks - np.uint64(first)).astype(np.intp) * 4 + lane
    else:
        lo, hi = _lohi(blocks)
        flat = _philox_flat(lo, hi, np.uint64(space), np.uint64(rnd), k0, k1).reshape(-1)
        start = np.arange(n, dtype=np.intp) * 4 + lane
    if width == 1:
        return flat[start][:, None]
    return flat[start[:, None] + np.arange(width, dtype=np.intp)]


def _u53(hi_word: np.ndarray, lo_word: np.ndarray) -> np.ndarray:
    """``((hi >> 5)·2**26 + (lo >> 6))·2**-53``: a uniform f64 multiple of 2**-53 in [0, 1)."""
    a = (hi_word >> np.uint32(5)).astype(np.uint64) << np.uint64(26)
    b = (lo_word >> np.uint32(6)).astype(np.uint64)
    return (a | b).astype(np.float64) * _TWO_M53


def _by_chunks(draw, flat: np.ndarray, dtype, *per_element) -> np.ndarray:
    """``draw(flat, *per_element)`` evaluated on chunks of the flat index (elementwise, so the
    chunking changes speed, never bits)."""
    n = flat.shape[0]
    if n <= _DRAW_CHUNK:
        return draw(flat, *per_element)
    out = np.empty(n, dtype=dtype)
    for s in range(0, n, _DRAW_CHUNK):
        part = slice(s, s + _DRAW_CHUNK)
        out[part] = draw(flat[part], *(a if a.ndim == 0 else a[part] for a in per_element))
    return out


def _float_dtype(dtype, what: str) -> np.dtype:
    name = getattr(dtype, "name", None)
    if name in ("f32", "fp32", "f64", "fp64"):     # tessera_ref format objects
        dtype = np.float32 if name in ("f32", "fp32") else np.float64
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.type not in (np.float32, np.float64):
        raise RNGError(
            f"{what} draws float32 or float64, not {dtype!r}",
            fix="draw float32 and convert with tessera_ref.numerics.cast for narrower formats",
        )
    return dt


# ---------------------------------------------------------------------------------------
# distributions

def random_bits(key, index) -> np.ndarray:
    """32 random bits per element (NUM-RNG-4): uint32 array shaped like ``index``.

    Element ``i`` is word ``i mod 4`` of ``philox4x32_10((lo32 n, hi32 n, 0, 0), key.words)``
    with ``n = i // 4``. ``index`` holds global flat element indices in ``[0, 2**64)``.
    """
    key = as_key(key)
    idx = _check_index(index)
    bits = _by_chunks(lambda f: _stream_words(key, f, 4, 0)[:, 0], idx.reshape(-1), np.uint32)
    return bits.reshape(idx.shape)


def uniform(key, index, dtype=np.float32) -> np.ndarray:
    """Uniform values in ``[0, 1)`` (NUM-RNG-5), shaped like ``index``.

    f32: ``(random_bits(key, i) >> 8)·2**-24`` — 24 bits, largest value ``1 − 2**-24``.
    f64: from words ``2(i mod 2)`` (``a``) and ``2(i mod 2) + 1`` (``b``) of block
    ``(lo32 n, hi32 n, 1, 0)``, ``n = i // 2``: ``((a >> 5)·2**26 + (b >> 6))·2**-53`` —
    53 bits, largest value ``1 − 2**-53``. All operations are exact.
    """
    dt = _float_dtype(dtype, "uniform")
    key = as_key(key)
    idx = _check_index(index)
    draw = _uniform_f32 if dt == np.float32 else _uniform_f64
    return _by_chunks(lambda f: draw(key, f), idx.reshape(-1), dt).reshape(idx.shape)


def _uniform_f32(key: RNGKey, flat: np.ndarray) -> np.ndarray:
    bits = _stream_words(key, flat, 4, 0)[:, 0]
    return (bits >> np.uint32(8)).astype(np.float32) * _TWO_M24


def _uniform_f64(key: RNGKey, flat: np.ndarray) -> np.ndarray:
    w = _stream_words(key, flat, 2, 1)
    return _u53(w[:, 0], w[:, 1])


def _normal_f64(key: RNGKey, flat: np.ndarray) -> np.ndarray:
    w = _stream_words(key, flat, 1, 2)
    u1 = _u53(w[:, 0], w[:, 1])
    u2 = _u53(w[:, 2], w[:, 3])
    radius = np.sqrt(-2.0 * xmath.log(1.0 - u1))
    _, cos = xmath.sincos_turns(u2)
    return radius * cos


def normal(key, index, dtype=np.float32) -> np.ndarray:
    """Standard normal values by Box–Muller (NUM-RNG-6), shaped like ``index``.

    Element ``i`` reads block ``(lo32 i, hi32 i, 2, 0)``: ``u1`` from words 0, 1 and ``u2``
    from words 2, 3, each as the f64 uniform of NUM-RNG-5 (``(w0 >> 5)·2**26 + (w1 >> 6)``
    times 2**-53). Then, in f64, ``z = sqrt((−2) ⊗ log(1 ⊖ u1)) ⊗ cos_turns(u2)`` with ``log``
    of NUM-MATH-2 and the cosine of NUM-MATH-4 (``1 ⊖ u1 ∈ (0, 1]`` is exact), rounded once
    to ``dtype`` (RNE). So an f32 normal is the f64 normal rounded to f32.
    """
    dt = _float_dtype(dtype, "normal")
    key = as_key(key)
    idx = _check_index(index)
    draw = lambda f: _normal_f64(key, f).astype(dt)  # noqa: E731
    return _by_chunks(draw, idx.reshape(-1), dt).reshape(idx.shape)


def _check_lam(lam, shape) -> np.ndarray:
    arr = np.asarray(lam)
    if arr.dtype.kind not in "iuf":
        raise RNGError(f"poisson rate lam must be real numbers, got dtype {arr.dtype}",
                       fix="pass a float scalar or array")
    arr = arr.astype(np.float64)
    bad = ~((arr >= 0) & (arr <= POISSON_LAM_MAX))   # catches NaN too
    if bad.any():
        raise RNGError(
            f"poisson rate lam must lie in [0, 2**52], got {arr[bad].reshape(-1)[0]!r}",
            fix="pass finite non-negative rates",
        )
    try:
        ok = np.broadcast_shapes(arr.shape, shape) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise RNGError(
            f"poisson rate of shape {arr.shape} does not broadcast to the index shape {tuple(shape)}",
            fix="pass a scalar rate or one that broadcasts to the index array",
        )
    return arr


def _pick(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return a if a.ndim == 0 else a[rows]


def _two_uniforms(key: RNGKey, index: np.ndarray, rnd: int):
    w = _stream_words(key, index, 1, 3, rnd)
    return _u53(w[:, 0], w[:, 1]), _u53(w[:, 2], w[:, 3])


def _gave_up(n: int):
    return RNGError(
        f"poisson: {n} element(s) were still unfinished after {POISSON_MAX_ROUNDS} rounds "
        "(probability below 1e-100 for any valid rate; this indicates a bug)",
        fix="report this key, index and rate",
    )


def _poisson_knuth(key: RNGKey, index: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Knuth's product of uniforms for ``lam < 10``: the count of uniforms whose running
    product stays above ``exp(−lam)``."""
    enlam = xmath.exp(-lam)
    count = np.zeros(index.shape, dtype=np.int64)
    prod = np.ones(index.shape)
    active = np.arange(index.shape[0])
    for rnd in range(POISSON_MAX_ROUNDS):
        if active.size == 0:
            return count
        ua, ub = _two_uniforms(key, index[active], rnd)
        limit = _pick(enlam, active)
        p = prod[active] * ua
        go_a = p > limit
        p = p * ub
        go_b = go_a & (p > limit)
        count[active] += go_a.astype(np.int64) + go_b
        prod[active] = p
        active = active[go_b]
    if active.size:
        raise _gave_up(active.size)
    return count


def _poisson_ptrs(key: RNGKey, index: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Hörmann's PTRS (transformed rejection with squeeze) for ``lam ≥ 10``."""
    slam = np.sqrt(lam)
    loglam = xmath.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    invalpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2.0)
    log_invalpha = xmath.log(invalpha)
    count = np.zeros(index.shape, dtype=np.int64)
    active = np.arange(index.shape[0])
    for rnd in range(POISSON_MAX_ROUNDS):
        if active.size == 0:
            return count
        u, v = _two_uniforms(key, index[active], rnd)
        a_, b_, lam_ = _pick(a, active), _pick(b, active), _pick(lam, active)
        uu = u - 0.5
        us = 0.5 - np.abs(uu)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.floor(((2.0 * a_) / us + b_) * uu + lam_ + 0.43)
        accept = (us >= 0.07) & (v <= _pick(vr, active))
        reject = (k < 0) | ((us < 0.013) & (v > us))
        test = np.flatnonzero(~accept & ~reject)
        if test.size:
            rows = active[test]
            ut, kt = us[test], k[test]
            lhs = (xmath.log(v[test]) + _pick(log_invalpha, rows)) - xmath.log(
                _pick(a, rows) / (ut * ut) + _pick(b, rows))
            rhs = (-_pick(lam, rows) + kt * _pick(loglam, rows)) - xmath.log_factorial(kt)
            accept[test] = lhs <= rhs
        count[active[accept]] = k[accept].astype(np.int64)
        active = active[~accept]
    if active.size:
        raise _gave_up(active.size)
    return count


def poisson(key, index, lam) -> np.ndarray:
    """Poisson counts with rate ``lam`` (NUM-RNG-7): int64 array shaped like ``index``.

    Round ``d`` of element ``i`` reads block ``(lo32 i, hi32 i, 3, d)``: uniforms ``A_d`` from
    words 0, 1 and ``B_d`` from words 2, 3 (NUM-RNG-5's f64 construction). For ``lam < 10``
    Knuth's method: ``L = exp(−lam)`` (NUM-MATH-3), ``p = 1``, ``X = 0``; consume
    ``A_0, B_0, A_1, B_1, …`` in order, ``p = p ⊗ u``, while ``p > L`` count ``X += 1``;
    the result is ``X``. For ``lam ≥ 10`` Hörmann's PTRS, one attempt per round with
    ``U = A_d ⊖ 0.5``, ``V = B_d`` (constants and tests as in the spec), ``log`` from
    NUM-MATH-2 and ``log k!`` from NUM-MATH-5. At most :data:`POISSON_MAX_ROUNDS` rounds;
    an element unfinished after them raises :class:`RNGError`. ``lam`` is a scalar or an
    array broadcasting to ``index``'s shape, with values in ``[0, 2**52]``.
    """
    key = as_key(key)
    idx = _check_index(index)
    lam = _check_lam(lam, idx.shape)
    flat = idx.reshape(-1)
    if lam.size == 1:
        lam0 = lam.reshape(())
        method = _poisson_knuth if lam0 < 10.0 else _poisson_ptrs
        return _by_chunks(lambda f: method(key, f, lam0), flat, np.int64).reshape(idx.shape)
    lam_flat = np.broadcast_to(lam, idx.shape).reshape(-1)
    return _by_chunks(lambda f, lf: _poisson_mixed(key, f, lf), flat, np.int64, lam_flat).reshape(idx.shape)


def _poisson_mixed(key: RNGKey, flat: np.ndarray, lam: np.ndarray) -> np.ndarray:
    out = np.empty(flat.shape, dtype=np.int64)
    small = lam < 10.0
    out[small] = _poisson_knuth(key, flat[small], lam[small])
    big = ~small
    out[big] = _poisson_ptrs(key, flat[big], lam[big])
    return out


# ---------------------------------------------------------------------------------------
# whole-tensor convenience

def _arange_index(shape) -> np.ndarray:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    try:
        shape = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise RNGError(f"shape must be a tuple of ints, got {shape!r}", fix="pass e.g. (64, 48)") from None
    if any(d < 0 for d in shape):
        raise RNGError(f"shape {shape} has a negative dimension", fix="pass non-negative sizes")
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64).reshape(shape)


def rand(key, shape, dtype=np.float32) -> np.ndarray:
    """``uniform(key, arange(size).reshape(shape), dtype)`` (NUM-RNG-8)."""
    return uniform(key, _arange_index(shape), dtype)


def randn(key, shape, dtype=np.float32) -> np.ndarray:
    """``normal(key, arange(size).reshape(shape), dtype)`` (NUM-RNG-8)."""
    return normal(key, _arange_index(shape), dtype)


def randpoisson(key, shape, lam) -> np.ndarray:
    """``poisson(key, arange(size).reshape(shape), lam)`` (NUM-RNG-8)."""
    return poisson(key, _arange_index(shape), lam)
