"""Discrete Fourier transforms and complex helpers (GRAPH-FFT-*, GRAPH-IFFT-1, GRAPH-REAL-1, ...).

Complex tensors hold ``complex<f32>`` elements (NumPy ``complex64``). Every transform is one
specified algorithm in f32 arithmetic, each real operation rounded to nearest even (no fused
multiply-add), so a CUDA kernel reproduces it bit for bit:

- a complex product ``(a + bi)(c + di)`` is ``(a⊗c ⊖ b⊗d) + (a⊗d ⊕ b⊗c)i``, the two products
  of each part rounded first, then their sum; a complex sum or difference is two f32 ops;
- the twiddles ``w_m`` of a length-``n`` transform are ``RN32(cos) + RN32(sin)·i`` of
  ``sincos_turns(∓(m ⊘ n))`` (NUM-MATH-4, f64, ``m ⊘ n`` the rounded f64 quotient; ``−`` for
  the forward and ``+`` for the inverse transform);
- ``n`` a power of two: iterative radix-2 decimation-in-time Cooley–Tukey (bit reversal, then
  butterflies of half-span 1, 2, 4, …); other ``n``: the direct DFT with sequential sums.

Real input (any float format narrower than f64) is converted exactly to f32 and given a zero
imaginary part (+0). The inverse transform divides each real and imaginary part by ``n``.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir import TensorType
from ..ir.types import COMPLEX64
from ..numerics import accum_op, xmath
from ..numerics.arith import to_accum
from .adjoint import cast_to, constant, linear_jvp, op, unbroadcast
from .bind import bind
from .sharding import elementwise_rule, keep_whole_rule
from .primitive import Attr, Cost, define
from .typecheck import broadcast_shapes, check_int, is_float, nbytes, normalize_axis, numel

__all__ = ["fft", "ifft", "fft2d", "real", "imag", "complex"]

_F32 = np.dtype(np.float32)


# ---------------------------------------------------------------------------------------
# f32 complex arithmetic on (real, imag) pairs of float32 arrays

def _op(name: str, *operands) -> np.ndarray:
    """One IEEE f32 operation, rounded to nearest even, NaNs canonical (NUM-EW-1)."""
    return accum_op(name, *operands, accum="f32")


def _cmul(a, b):
    """``a·b`` = ``(ar⊗br ⊖ ai⊗bi, ar⊗bi ⊕ ai⊗br)``: four rounded products, two rounded sums."""
    (ar, ai), (br, bi) = a, b
    return (_op("sub", _op("mul", ar, br), _op("mul", ai, bi)),
            _op("add", _op("mul", ar, bi), _op("mul", ai, br)))


def _cadd(a, b):
    return _op("add", a[0], b[0]), _op("add", a[1], b[1])


def _csub(a, b):
    return _op("sub", a[0], b[0]), _op("sub", a[1], b[1])


def _twiddles(n: int, inverse: bool, count: int | None = None):
    """``(re, im)`` f32 arrays of ``w_m`` for ``m = 0 … count−1`` (default ``n``): the rounded
    ``cos`` and ``sin`` of ``sincos_turns(∓(m ⊘ n))`` (``−`` forward, ``+`` inverse)."""
    turns = np.arange(n if count is None else count, dtype=np.float64) / np.float64(n)
    sin, cos = xmath.sincos_turns(turns if inverse else -turns)
    return cos.astype(np.float32), sin.astype(np.float32)


def _bit_reversal(n: int) -> np.ndarray:
    """The permutation ``j → reverse of j's log2(n) bits``."""
    bits = n.bit_length() - 1
    j = np.arange(n)
    rev = np.zeros(n, dtype=np.intp)
    for b in range(bits):
        rev |= ((j >> b) & 1) << (bits - 1 - b)
    return rev


def _radix2(x, inverse: bool):
    """Radix-2 DIT on the last axis (length a power of two) of the ``(re, im)`` pair ``x``."""
    n = x[0].shape[-1]
    perm = _bit_reversal(n)
    re, im = x[0][..., perm], x[1][..., perm]
    table = _twiddles(n, inverse, max(n // 2, 1))
    lead = re.shape[:-1]
    h = 1
    while h < n:
        groups = n // (2 * h)
        re, im = re.reshape(lead + (groups, 2, h)), im.reshape(lead + (groups, 2, h))
        stride = np.arange(h) * groups  # w of span 2h at position k is w_n^(k·n/2h)
        w = (table[0][stride], table[1][stride])
        top, bottom = (re[..., 0, :], im[..., 0, :]), (re[..., 1, :], im[..., 1, :])
        t = _cmul(w, bottom)
        new_bottom, new_top = _csub(top, t), _cadd(top, t)
        re = np.stack([new_top[0], new_bottom[0]], axis=-2).reshape(lead + (n,))
        im = np.stack([new_top[1], new_bottom[1]], axis=-2).reshape(lead + (n,))
        h *= 2
    return re, im


def _direct(x, inverse: bool):
    """The direct DFT on the last axis: ``X_k = (…(x_0·w_0 + x_1·w_{k mod n}) + …) + x_{n−1}·w_{(n−1)k mod n}``."""
    n = x[0].shape[-1]
    table = _twiddles(n, inverse)
    k = np.arange(n)
    acc = None
    for j in range(n):
        m = (j * k) % n
        term = _cmul((x[0][..., j, None], x[1][..., j, None]), (table[0][m], table[1][m]))
        acc = term if acc is None else _cadd(acc, term)
    return acc


def _transform_last(x, inverse: bool):
    """The GRAPH-FFT-1 / GRAPH-IFFT-1 transform of the ``(re, im)`` pair along the last axis."""
    n = x[0].shape[-1]
    if n == 0:
        return x
    if n & (n - 1) == 0:
        out = _radix2(x, inverse)
    else:
        out = _direct(x, inverse)
    if inverse:
        size = np.float32(n)
        out = (_op("div", out[0], size), _op("div", out[1], size))
    return out


def _split(data: np.ndarray, t: TensorType):
    """The (re, im) f32 pair of operand values of type ``t`` (real values: exact, im = +0)."""
    if t.policy is COMPLEX64:
        return np.ascontiguousarray(data.real), np.ascontiguousarray(data.imag)
    re = to_accum(data, "f32")
    return re, np.zeros_like(re)


def _join(pair) -> np.ndarray:
    out = np.empty(pair[0].shape, dtype=np.complex64)
    out.real, out.imag = pair
    return out


# ---------------------------------------------------------------------------------------
# fft, ifft, fft2d

def _require_f32_exact(name: str, t: TensorType) -> None:
    """A DTypeError unless ``t`` is complex<f32> or a float format whose values f32 holds."""
    if t.policy is COMPLEX64 or (is_float(t) and t.format.name != "f64"):
        return
    raise DTypeError(f"{name} transforms complex<f32> tensors or real tensors of f32 or a narrower "
                     f"float format, got {t}",
                     fix="cast it first, e.g. op.cast(x, 'f32'), or build complex input with op.complex")


def _fft_infer(name: str, min_rank: int):
    def infer(attrs, x):
        _require_f32_exact(name, x)
        if x.rank < min_rank:
            raise ShapeError(f"{name} needs a tensor of rank >= {min_rank}, got {x}",
                             fix="reshape it, e.g. op.reshape(x, (1,) + shape)")
        if "axis" in attrs:
            normalize_axis(name, attrs["axis"], x)
        return TensorType(x.shape, COMPLEX64)
    return infer


def _along(pair, axis: int, inverse: bool):
    moved = tuple(np.moveaxis(p, axis, -1) for p in pair)
    out = _transform_last(moved, inverse)
    return tuple(np.ascontiguousarray(np.moveaxis(p, -1, axis)) for p in out)


def _fft_impl(inverse: bool):
    def impl(call, x):
        axis = call.attrs["axis"] % x.ndim
        return _join(_along(_split(x, call.in_types[0]), axis, inverse))
    return impl


def _fft2d_impl(call, x):
    pair = _split(x, call.in_types[0])
    return _join(_along(_along(pair, x.ndim - 1, False), x.ndim - 2, False))


def _transform_flops(n: int) -> int:
    """5·n·log2(n) for radix-2 (10 real ops per butterfly), 8·n² for the direct DFT."""
    if n <= 1:
        return 0
    return 5 * n * int(math.log2(n)) if n & (n - 1) == 0 else 8 * n * n


def _fft_cost(call):
    x, out = call.in_types[0], call.out_types[0]
    axes = (call.attrs["axis"] % x.rank,) if "axis" in call.attrs else (x.rank - 2, x.rank - 1)
    total = numel(x)
    flops = 0
    for axis in axes:
        n = x.shape[axis]
        if n:
            flops += total // n * _transform_flops(n)
    if call.primitive is IFFT:
        flops += 2 * total
    return Cost(flops, nbytes(x) + nbytes(out))


_AXIS = {"axis": Attr(-1, check_int, "the axis to transform (negative counts from the end)")}

def _conj(z):
    """The complex conjugate, ``complex(real(z), −imag(z))`` (exact)."""
    return complex(real(z), op().neg(imag(z)))


def _as_operand(z, x):
    """A complex cotangent ``z`` for the operand ``x``: itself for a complex ``x``; for a real
    one its real part, cast into ``x``'s policy (the imaginary part is the derivative along
    the imaginary direction a real operand does not have)."""
    return z if x.type.policy is COMPLEX64 else cast_to(real(z), x.type.policy)


def _transform_vjp(transform):
    """AD-FFT-1: with the real inner product ``⟨a, b⟩ = Σ Re(conj(a)·b)``, the adjoint of a DFT
    ``F`` is ``Fᴴ``, and ``Fᴴ·ḡ = conj(F·conj(ḡ))``: the same transform (same axis, same
    normalization: ``ifft``'s ``1/n`` stays) between two exact conjugations. No ``n`` factor
    is introduced, so the cotangent is the exact adjoint of the op's scaling."""
    def vjp(attrs, primals, results, cts):
        return (_as_operand(_conj(transform(_conj(cts[0]), **attrs)), primals[0]),)
    return vjp


FFT = define("fft", infer=_fft_infer("fft", 1), impl=_fft_impl(False), cost=_fft_cost,
             spec="GRAPH-FFT-1", shard=keep_whole_rule(lambda attrs, x: (attrs["axis"],)), attrs=dict(_AXIS),
             vjp=_transform_vjp(lambda z, **attrs: fft(z, **attrs)), jvp=linear_jvp("fft"))
IFFT = define("ifft", infer=_fft_infer("ifft", 1), impl=_fft_impl(True), cost=_fft_cost,
              spec="GRAPH-IFFT-1", shard=keep_whole_rule(lambda attrs, x: (attrs["axis"],)), attrs=dict(_AXIS),
              vjp=_transform_vjp(lambda z, **attrs: ifft(z, **attrs)), jvp=linear_jvp("ifft"))
FFT2D = define("fft2d", infer=_fft_infer("fft2d", 2), impl=_fft2d_impl, cost=_fft_cost, spec="GRAPH-FFT2D-1", shard=keep_whole_rule(lambda attrs, x: (x.rank - 2, x.rank - 1)),
               vjp=_transform_vjp(lambda z: fft2d(z)), jvp=linear_jvp("fft2d"))


def fft(x, axis=-1):
    """The discrete Fourier transform ``X_k = Σ_j x_j·e^(−2πi·jk/n)`` along ``axis``, as
    complex<f32> (GRAPH-FFT-1): radix-2 Cooley–Tukey for power-of-two ``n``, else the direct
    DFT, in rounded f32 arithmetic. Real input gets a zero imaginary part."""
    return bind(FFT, x, axis=axis)


def ifft(x, axis=-1):
    """The inverse transform ``x_j = (1/n)·Σ_k X_k·e^(+2πi·jk/n)`` along ``axis`` (GRAPH-IFFT-1):
    the algorithm of :func:`fft` with conjugate twiddles, then each part divided by ``n``."""
    return bind(IFFT, x, axis=axis)


def fft2d(x):
    """The 2-D transform over the last two axes (GRAPH-FFT2D-1): ``fft`` along axis −1, then
    ``fft`` along axis −2 of that result (bitwise equal to the two calls)."""
    return bind(FFT2D, x)


# ---------------------------------------------------------------------------------------
# real, imag, complex

def _part_infer(name: str):
    def infer(attrs, z):
        if z.policy is not COMPLEX64:
            raise DTypeError(f"{name} takes a complex<f32> tensor, got {z}",
                             fix="make one with op.complex(re, im) or op.fft(x)")
        return TensorType(z.shape, "f32")
    return infer


def _complex_infer(attrs, re, im):
    for t in (re, im):
        if not is_float(t) or t.format.name == "f64":
            raise DTypeError(f"complex builds complex<f32> from f32 (or narrower float) parts, got {re} and {im}",
                             fix="cast the parts to f32 first, e.g. op.cast(x, 'f32')")
    return TensorType(broadcast_shapes("complex", re, im), COMPLEX64)


def _complex_impl(call, re, im):
    shape = call.out_types[0].shape
    return _join(tuple(np.broadcast_to(to_accum(p, "f32"), shape) for p in (re, im)))


def _copy_cost(call):
    return Cost(0, sum(nbytes(t) for t in call.in_types + call.out_types))


def _zero_f32():
    return constant(0.0, "f32")


def _complex_vjp(attrs, primals, results, cts):
    """AD-COMPLEX-1: ``re̅ = real(ḡ)``, ``im̅ = imag(ḡ)``, summed over broadcast axes and cast
    into each part's policy; ``real``/``imag`` put their f32 cotangent back as the real or
    imaginary part of a complex one (the other part +0)."""
    parts = (real(cts[0]), imag(cts[0]))
    return tuple(cast_to(unbroadcast(p, x.shape), x.type.policy) for p, x in zip(parts, primals))


REAL = define("real", infer=_part_infer("real"), impl=lambda call, z: np.ascontiguousarray(z.real),
              cost=_copy_cost, spec="GRAPH-REAL-1", shard=elementwise_rule,
              vjp=lambda attrs, primals, results, cts: (complex(cts[0], _zero_f32()),), jvp=linear_jvp("real"))
IMAG = define("imag", infer=_part_infer("imag"), impl=lambda call, z: np.ascontiguousarray(z.imag),
              cost=_copy_cost, spec="GRAPH-IMAG-1", shard=elementwise_rule,
              vjp=lambda attrs, primals, results, cts: (complex(_zero_f32(), cts[0]),), jvp=linear_jvp("imag"))
COMPLEX = define("complex", infer=_complex_infer, impl=_complex_impl, cost=_copy_cost, spec="GRAPH-COMPLEX-1", shard=elementwise_rule,
                 vjp=_complex_vjp, jvp=linear_jvp("complex"))


def real(z):
    """The real parts of a complex<f32> tensor, as f32 (GRAPH-REAL-1; exact)."""
    return bind(REAL, z)


def imag(z):
    """The imaginary parts of a complex<f32> tensor, as f32 (GRAPH-IMAG-1; exact)."""
    return bind(IMAG, z)


def complex(re, im):  # noqa: A001 - the op's name; this module does not use the builtin
    """The complex<f32> tensor ``re + im·i`` (GRAPH-COMPLEX-1): parts of f32 or a narrower float
    format, converted exactly; shapes broadcast."""
    return bind(COMPLEX, re, im)
