"""GRAPH-FFT-1 … GRAPH-COMPLEX-1: radix-2 DIT and direct DFT with f32 operations in the stated
order and the NUM-MATH-4 twiddle table, against a reference built from the clause (not an FFT
library: NumPy's pocketfft orders its operations differently)."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, ShapeError
from tessera_conformance import clause, run

from . import _reference as R
from ._cases import check, operand, values
from ._formats import from_codes, round_values


def _complex(shape, seed):
    g = np.random.default_rng(seed)
    z = np.empty(shape, np.complex64)
    z.real = g.standard_normal(shape) * np.exp2(g.integers(-6, 6, shape))
    z.imag = g.standard_normal(shape)
    return z


SIZES = [1, 2, 16, 64, 6, 12]


@clause("GRAPH-FFT-1")
@pytest.mark.parametrize("n", SIZES)
def test_fft_of_complex_rows(backend, n):
    """Radix-2 DIT for powers of two, else the direct DFT summed in ascending j from the j = 0 term."""
    z = _complex((3, n), n)
    check(backend, op.fft, (z,), R.fft(z), what=f"n={n}")


@clause("GRAPH-FFT-1")
def test_fft_axis_real_operands_and_empty(backend):
    """A real f32/bf16 operand becomes v + (+0)i; any axis; n = 0 gives an empty result."""
    x = values(operand(np.random.default_rng(1).standard_normal((8, 3)), "bf16"))
    check(backend, lambda v: op.fft(v, axis=0), (round_values(x, "bf16"),), R.fft(x.astype(np.float32), axis=0))
    y = np.random.default_rng(2).standard_normal((2, 12)).astype(np.float32)
    check(backend, op.fft, (y,), R.fft(y))
    check(backend, op.fft, (np.zeros((2, 0), np.complex64),), np.zeros((2, 0), np.complex64))


@clause("GRAPH-FFT-1")
def test_fft_errors(backend):
    """An out-of-range axis is a ShapeError; f64, integer and element-kind operands DTypeErrors."""
    with pytest.raises(ShapeError):
        run(backend, lambda v: op.fft(v, axis=2), np.zeros((2, 4), np.complex64))
    for bad in (tr.asarray(np.zeros(4), dtype="f64"), np.arange(4), np.array([True, False]),
                tr.asarray(np.zeros(4), dtype="int8")):
        with pytest.raises(DTypeError):
            run(backend, op.fft, bad)


@clause("GRAPH-IFFT-1")
@pytest.mark.parametrize("n", [8, 10])
def test_ifft_inverse_table_and_division(backend, n):
    """The inverse twiddle table, then one correctly rounded division by n per part."""
    z = _complex((2, n), 10 + n)
    check(backend, op.ifft, (z,), R.ifft(z))
    check(backend, lambda v: op.ifft(v, axis=0), (np.ascontiguousarray(z.T),), R.ifft(np.ascontiguousarray(z.T), 0))


@clause("GRAPH-FFT2D-1")
def test_fft2d_is_rows_then_columns(backend):
    """fft2d(x) = fft(fft(x, axis=-1), axis=-2), bit for bit."""
    z = _complex((2, 6, 8), 20)
    want = R.fft(R.fft(z, -1), -2)
    check(backend, op.fft2d, (z,), want)
    with pytest.raises(ShapeError):
        run(backend, op.fft2d, np.zeros(4, np.complex64))


@clause("GRAPH-REAL-1", "GRAPH-IMAG-1")
def test_real_and_imag_are_exact(backend):
    """real/imag copy the parts' f32 bits (NaN payloads and −0 kept)."""
    parts = from_codes(np.array([0x7FC00001, 0x80000000, 0xFF800000, 0x3F800000, 0x00000001, 0xFFC12345], np.uint64),
                       "f32")
    z = parts.view(np.complex64)
    check(backend, lambda v: (op.real(v), op.imag(v)), (z,), [parts[0::2].copy(), parts[1::2].copy()])


@clause("GRAPH-COMPLEX-1")
def test_complex_builds_pairs(backend):
    """complex(re, im) broadcasts and converts each part exactly to f32; an f64 part is a DTypeError."""
    re = np.array([[1.5], [-0.0]], np.float32)
    im = values(operand([0.25, np.inf, -3.0], "bf16"))
    want = np.empty((2, 3), np.complex64)
    want.real, want.imag = np.broadcast_to(re, (2, 3)), np.broadcast_to(im.astype(np.float32), (2, 3))
    check(backend, op.complex, (tr.asarray(re, dtype="bf16"), round_values(im, "bf16")), want)
    check(backend, op.complex, (re, np.float32([0.25, np.inf, -3.0])), want)
    with pytest.raises(DTypeError):
        run(backend, op.complex, tr.asarray(np.zeros(2), dtype="f64"), tr.asarray(np.zeros(2), dtype="f64"))
