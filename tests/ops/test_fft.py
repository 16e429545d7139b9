"""FFT family: fft, ifft, fft2d, real, imag, complex (GRAPH-FFT-1 … GRAPH-COMPLEX-1)."""
import math
import struct

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_ref.interp import run_function
from tessera_ref.ir import parse_module
from tessera_ref.numerics import xmath
from tessera_ref.ops import bind
from tessera_ref.ops.fft import FFT

U = 2.0**-24  # unit roundoff of f32


def _complex_input(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a)).view(np.uint8)


# ---------------------------------------------------------------------------------------
# (a) agreement with float64 NumPy

def _fft_bound(x64: np.ndarray, axis: int) -> np.ndarray:
    """Elementwise error bound of a length-n transform of x (broadcast over the axis).

    Radix-2 (Higham, Accuracy and Stability, Thm 24.2): ||ŷ − y||₂ ≤ log2(n)·η/(1 − log2(n)·η)
    ·||y||₂ with η = μ + γ4(√2 + μ) ≈ 7u for twiddles of error μ ≈ u; ||y||₂ = √n·||x||₂ and an
    element's error is at most the 2-norm error: 8·log2(n)·u·√n·||x||₂.
    Direct DFT: each output is n complex products (error ≤ (√2·γ2 + u)|x_j| ≈ 4u|x_j| with the
    twiddle error) summed sequentially (γ_{n−1}·Σ|terms|): ≤ 2·(n + 4)·u·Σ_j |x_j|.
    The exact conversion of the input adds nothing.
    """
    n = x64.shape[axis]
    if n & (n - 1) == 0:
        norm2 = np.sqrt(np.sum(np.abs(x64) ** 2, axis=axis, keepdims=True))
        return 8 * max(math.log2(n), 1) * U * math.sqrt(n) * norm2 + 1e-30
    return 2 * (n + 4) * U * np.sum(np.abs(x64), axis=axis, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((3, 16), -1), ((2, 12, 3), 1), ((4, 7), -1), ((64,), 0),
                                        ((5, 1), -1), ((2, 128), -1)])
@pytest.mark.parametrize("kind", ["complex", "f32", "bf16"])
def test_fft_matches_float64_numpy(shape, axis, kind):
    rng = np.random.default_rng(1)
    if kind == "complex":
        x = _complex_input(rng, shape)
        x64 = x.astype(np.complex128)
    else:
        x = tr.asarray(rng.standard_normal(shape).astype(np.float32), dtype=kind)
        x64 = np.asarray(x).astype(np.float64)
    y = op.fft(x, axis=axis)
    assert y.type == tr.ir.TensorType(shape, "complex<f32>")
    want = np.fft.fft(x64, axis=axis)
    err = np.abs(np.asarray(y).astype(np.complex128) - want)
    assert np.all(err <= _fft_bound(x64, axis))


@pytest.mark.parametrize("n", [8, 12, 32])
def test_ifft_matches_numpy_and_inverts_fft(n):
    rng = np.random.default_rng(2)
    x = _complex_input(rng, (3, n))
    x64 = x.astype(np.complex128)
    y = op.ifft(x)
    # ifft = conj-twiddle transform / n: the fft bound scaled by 1/n, plus one rounding (u|y|)
    want = np.fft.ifft(x64)
    assert np.all(np.abs(np.asarray(y) - want) <= _fft_bound(x64, -1) / n + U * np.abs(want))
    # fft then ifft: the fft's error e (bound B) maps to an error ≤ ||e||₂/√n ≤ B per element
    # (ifft is √n-scaled unitary), plus the ifft's own error on a vector of norm √n·||x||₂
    back = np.asarray(op.ifft(op.fft(x))).astype(np.complex128)
    bound = 2 * _fft_bound(x64, -1) * (1 if n & (n - 1) == 0 else math.sqrt(n)) + U * np.abs(x64)
    assert np.all(np.abs(back - x64) <= bound)


def test_fft2d_equals_fft_along_last_then_second_last_bitwise():
    x = _complex_input(np.random.default_rng(3), (2, 6, 8))
    got = op.fft2d(x)
    want = op.fft(op.fft(x, axis=-1), axis=-2)
    assert np.array_equal(_bits(got), _bits(want))
    other_order = op.fft(op.fft(x, axis=-2), axis=-1)
    assert not np.array_equal(_bits(got), _bits(other_order))  # the stated order matters
    np.testing.assert_allclose(np.asarray(got), np.fft.fft2(x.astype(np.complex128)), rtol=0, atol=1e-4)


def test_empty_axis_gives_an_empty_result():
    y = op.ifft(np.zeros((3, 0), np.float32))
    assert y.type == tr.ir.TensorType((3, 0), "complex<f32>") and np.asarray(y).shape == (3, 0)


def test_real_input_equals_complex_with_zero_imaginary_part():
    x = np.random.default_rng(4).standard_normal((3, 10)).astype(np.float32)
    z = op.complex(x, np.zeros_like(x))
    assert np.array_equal(_bits(op.fft(x)), _bits(op.fft(z)))


def test_real_imag_complex_are_exact():
    rng = np.random.default_rng(5)
    re = tr.asarray(rng.standard_normal((4, 3)).astype(np.float32), dtype="bf16")
    im = rng.standard_normal((3,)).astype(np.float32)
    z = op.complex(re, im)  # shapes broadcast, bf16 parts exact in f32
    assert z.type == tr.ir.TensorType((4, 3), "complex<f32>")
    assert np.array_equal(np.asarray(op.real(z)), np.asarray(re).astype(np.float32))
    assert np.array_equal(np.asarray(op.imag(z)), np.broadcast_to(im, (4, 3)))
    assert op.real(z).type == tr.ir.TensorType((4, 3), "f32")
    w = np.array([complex(np.nan, -0.0), complex(-0.0, np.inf)], dtype=np.complex64)
    assert np.array_equal(_bits(op.real(w)), _bits(w.real.copy()))
    assert np.array_equal(_bits(op.imag(w)), _bits(w.imag.copy()))


# ---------------------------------------------------------------------------------------
# (b) bits: a tiny pure-Python implementation of the clauses

def _r32(v: float) -> float:
    """v rounded to f32 (nearest even); for + − × of f32 values the f64 result then rounded is
    the correctly rounded f32 result (53 ≥ 2·24 + 2)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def _cmul(a, b):
    return (_r32(_r32(a[0] * b[0]) - _r32(a[1] * b[1])), _r32(_r32(a[0] * b[1]) + _r32(a[1] * b[0])))


def _cadd(a, b):
    return _r32(a[0] + b[0]), _r32(a[1] + b[1])


def _csub(a, b):
    return _r32(a[0] - b[0]), _r32(a[1] - b[1])


def _table(n, inverse):
    out = []
    for m in range(n):
        t = m / n if inverse else -(m / n)
        s, c = xmath.sincos_turns(np.array([t]))
        out.append((_r32(float(c[0])), _r32(float(s[0]))))
    return out


def _ref_radix2(x, inverse=False):
    n = len(x)
    p = n.bit_length() - 1
    tw = _table(n, inverse)
    y = [x[int(format(j, f"0{p}b")[::-1], 2)] for j in range(n)]
    h = 1
    while h < n:
        for g in range(0, n, 2 * h):
            for k in range(h):
                j = g + k
                t = _cmul(tw[k * n // (2 * h)], y[j + h])
                y[j], y[j + h] = _cadd(y[j], t), _csub(y[j], t)
        h *= 2
    return _scaled(y, n) if inverse else y


def _ref_direct(x, inverse=False):
    n = len(x)
    tw = _table(n, inverse)
    out = []
    for k in range(n):
        acc = _cmul(x[0], tw[0])
        for j in range(1, n):
            acc = _cadd(acc, _cmul(x[j], tw[j * k % n]))
        out.append(acc)
    return _scaled(out, n) if inverse else out


def _scaled(y, n):
    return [(_r32(a / n), _r32(b / n)) for a, b in y]


def _as_pairs(z):
    return [(float(v.real), float(v.imag)) for v in z]


def _as_array(pairs):
    return np.array([complex(a, b) for a, b in pairs], dtype=np.complex64)


@pytest.mark.parametrize("inverse", [False, True])
def test_radix2_order_bitwise_n8(inverse):
    x = _complex_input(np.random.default_rng(6), (8,)) * np.float32(1000)
    got = (op.ifft if inverse else op.fft)(x)
    want = _as_array(_ref_radix2(_as_pairs(x), inverse))
    assert np.array_equal(_bits(got), _bits(want))
    # the test can tell orders apart: the direct DFT of the same input has other bits
    assert not np.array_equal(_bits(want), _bits(_as_array(_ref_direct(_as_pairs(x), inverse))))


@pytest.mark.parametrize("inverse", [False, True])
def test_direct_dft_order_bitwise_n6(inverse):
    x = _complex_input(np.random.default_rng(7), (2, 6))
    got = np.asarray((op.ifft if inverse else op.fft)(x))
    for row in range(2):
        want = _as_array(_ref_direct(_as_pairs(x[row]), inverse))
        assert np.array_equal(_bits(got[row]), _bits(want))
    # another natural order (descending j) gives other bits on this input
    reversed_sum = _as_array(_ref_direct(_as_pairs(x[0])[:1] + _as_pairs(x[0])[1:][::-1], inverse))
    assert not np.array_equal(_bits(got[0]), _bits(reversed_sum))


def test_fft_batched_along_middle_axis_equals_per_vector():
    x = _complex_input(np.random.default_rng(8), (3, 8, 2))
    got = np.asarray(op.fft(x, axis=1))
    for i in range(3):
        for j in range(2):
            assert np.array_equal(_bits(got[i, :, j]), _bits(_as_array(_ref_radix2(_as_pairs(x[i, :, j])))))


# ---------------------------------------------------------------------------------------
# (c) errors

def test_errors_name_types_and_the_user_line():
    with pytest.raises(DTypeError, match=r"tensor<4xf64>.*test_fft\.py:"):
        op.fft(np.zeros(4, np.float64))
    with pytest.raises(DTypeError, match=r"tensor<4xindex>.*test_fft\.py:"):
        op.ifft(np.zeros(4, np.int64))
    with pytest.raises(ShapeError, match=r"axis 2.*tensor<3x4xcomplex<f32>>.*test_fft\.py:"):
        op.fft(np.zeros((3, 4), np.complex64), axis=2)
    with pytest.raises(ShapeError, match=r"rank >= 2.*tensor<4xf32>.*test_fft\.py:"):
        op.fft2d(np.zeros(4, np.float32))
    with pytest.raises(DTypeError, match=r"tensor<3xf32>.*test_fft\.py:"):
        op.real(np.zeros(3, np.float32))
    with pytest.raises(DTypeError, match=r"tensor<3xf64>.*test_fft\.py:"):
        op.complex(np.zeros(3, np.float64), np.zeros(3, np.float32))
    with pytest.raises(ShapeError, match=r"tensor<3xf32>, tensor<4xf32>.*test_fft\.py:"):
        op.complex(np.zeros(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(OpError, match=r"unknown attribute.*'norm'.*test_fft\.py:"):
        bind(FFT, np.zeros(4, np.float32), norm="ortho")
    with pytest.raises(OpError, match=r"'axis'"):
        op.fft(np.zeros(4, np.float32), axis="last")


# ---------------------------------------------------------------------------------------
# (d) eager == jit, (e) IR round trip

def _pipeline(x, y):
    z = op.complex(x, y)
    return op.real(op.fft2d(z)), op.imag(op.ifft(op.fft(z, axis=0), axis=-1)), op.fft(op.real(z))


def test_jit_matches_eager_and_ir_round_trips():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.standard_normal((6, 8)).astype(np.float32)
    eager = _pipeline(x, y)
    f = tr.jit(_pipeline)
    jitted = f(x, y)
    for a, b in zip(eager, jitted):
        assert np.array_equal(_bits(a), _bits(b))
    m = f.trace(x, y)
    text = str(m)
    assert "tessera.graph.fft2d" in text and "complex<f32>" in text
    parsed = parse_module(text)
    assert str(parsed) == text
    for a, b in zip(eager, run_function(parsed.body.first_op, x, y)):
        assert np.array_equal(_bits(a), _bits(b))


def test_cost():
    from tessera_ref.ops.primitive import Call
    from tessera_ref.ops.fft import FFT2D
    t = tr.ir.TensorType((4, 8, 6), "complex<f32>")
    call = Call(FFT2D, {}, (t,), (t,))
    # rows: 4·8 vectors of n=6 (direct, 8·36 FLOPs); columns: 4·6 vectors of n=8 (5·8·3 FLOPs)
    assert FFT2D.cost(call) == (32 * 8 * 36 + 24 * 5 * 8 * 3, 2 * 4 * 8 * 6 * 8)
