"""Independent references for the autodiff cases: exact inner products (fractions), explicit
Jacobians of NumPy reference functions, central finite differences, dyadic inputs, and the
Philox key derivation of NUM-RNG-2 written from the spec (for AD-REV-2's derivative seeds)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref.ir import OPS, register_op
from tessera_ref.ops import Tracer
from tessera_ref.ops.values import current_trace
from tessera_conformance import ORACLE, assert_bits, eager, run

from ..numerics._ref_rng import fold as _fold
from ..numerics._ref_rng import key_words as _root_key
from ..numerics._ref_rng import philox as philox4x32_10

__all__ = ["ints", "dyadic", "pow2", "exact_inner", "jacobian", "fd_jvp", "fd_grad", "philox4x32_10",
           "key_words", "derivative_seed", "jvp_on", "vjp_on", "grad_on", "raw_op", "same_as_oracle"]


# -- inputs -------------------------------------------------------------------------------------
def ints(shape, seed, lo=-4, hi=4, dtype=np.float64) -> np.ndarray:
    """Small integers in ``[lo, hi]``: every product and sum of a few of them is exact."""
    return np.random.default_rng(seed).integers(lo, hi + 1, size=shape).astype(dtype)


def dyadic(shape, seed, lo=-2.0, hi=2.0, denom=8, dtype=np.float64) -> np.ndarray:
    """Multiples of ``1/denom`` in ``[lo, hi]`` (``denom`` a power of two): exact in binary."""
    n = np.random.default_rng(seed).integers(int(lo * denom), int(hi * denom) + 1, size=shape)
    return (n / denom).astype(dtype)


def pow2(shape, seed, lo=-2, hi=2, dtype=np.float64) -> np.ndarray:
    """``±2^k`` with ``k`` in ``[lo, hi]``: multiplying by them is exact (no overflow/underflow)."""
    g = np.random.default_rng(seed)
    return (g.choice([-1.0, 1.0], size=shape) * 2.0 ** g.integers(lo, hi + 1, size=shape)).astype(dtype)


# -- exact linear algebra ---------------------------------------------------------------------
def exact_inner(a, b) -> Fraction:
    """``⟨a, b⟩ = Σ Re(conj(a)·b)`` as an exact rational (complex values: pairs of reals)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"inner product of shapes {a.shape} and {b.shape}"
    total = Fraction(0)
    for x, y in zip(a.ravel().tolist(), b.ravel().tolist()):
        if isinstance(x, complex) or isinstance(y, complex):
            x, y = complex(x), complex(y)
            total += Fraction(x.real) * Fraction(y.real) + Fraction(x.imag) * Fraction(y.imag)
        else:
            total += Fraction(x) * Fraction(y)
    return total


def jacobian(f, *shapes) -> np.ndarray:
    """The matrix of the linear NumPy function ``f`` (rows: outputs, columns: all inputs' elements)."""
    sizes = [int(np.prod(s)) for s in shapes]
    cols = []
    for i in range(sum(sizes)):
        flat = np.zeros(sum(sizes))
        flat[i] = 1.0
        parts, start = [], 0
        for s, n in zip(shapes, sizes):
            parts.append(flat[start:start + n].reshape(s))
            start += n
        out = f(*parts)
        out = out if isinstance(out, (tuple, list)) else (out,)
        cols.append(np.concatenate([np.asarray(o).ravel() for o in out]))
    J = np.stack(cols, axis=1)
    return J if np.iscomplexobj(J) else J.astype(np.float64)


def fd_jvp(f, xs, vs, h=1e-6) -> np.ndarray:
    """The central difference ``(f(x + h·v) − f(x − h·v)) / 2h`` of a float64 NumPy function."""
    plus = f(*[np.asarray(x, np.float64) + h * np.asarray(v, np.float64) for x, v in zip(xs, vs)])
    minus = f(*[np.asarray(x, np.float64) - h * np.asarray(v, np.float64) for x, v in zip(xs, vs)])
    if isinstance(plus, (tuple, list)):
        return [(np.asarray(p) - np.asarray(m)) / (2 * h) for p, m in zip(plus, minus)]
    return (np.asarray(plus) - np.asarray(minus)) / (2 * h)


def fd_grad(f, x, h=1e-6) -> np.ndarray:
    """Central differences of the scalar NumPy function ``f`` at every element of ``x``."""
    x = np.asarray(x, np.float64)
    out = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        out[idx] = (float(f(x + e)) - float(f(x - e))) / (2 * h)
    return out


# -- the transforms on a backend ----------------------------------------------------------------
def jvp_on(backend, f, primals, tangents, traced=True):
    """The tangent of ``f`` at ``primals`` along ``tangents`` on ``backend`` (in jit, or eagerly)."""
    n = len(primals)
    return (run if traced else eager)(backend, lambda *a: tr.jvp(f, tuple(a[:n]), tuple(a[n:]))[1],
                                      *primals, *tangents)


def vjp_on(backend, f, primals, cotangent, traced=True):
    """``Jᵀ·cotangent`` of ``f`` at ``primals`` on ``backend`` (a tuple cotangent: several outputs)."""
    n = len(primals)
    several = isinstance(cotangent, (tuple, list))
    cts = tuple(cotangent) if several else (cotangent,)

    def program(*a):
        ct = tuple(a[n:]) if several else a[n]
        return tr.vjp(f, *a[:n])[1](ct)
    return (run if traced else eager)(backend, program, *primals, *cts)


def same_as_oracle(backend, got, compute, what: str = "") -> None:
    """Derivative bits follow from the ops' clauses: ``got`` equals ``compute(ORACLE)``'s bits."""
    if str(backend) != ORACLE:
        assert_bits(got, compute(ORACLE), f"{what} (against the oracle)")


def grad_on(backend, f, *args, argnums=0):
    """``grad(f, argnums)(*args)`` run on ``backend`` (traced)."""
    return run(backend, lambda *a: tr.grad(f, argnums=argnums)(*a), *args)


# -- key derivation (NUM-RNG-2), on the numerics chapter's Philox transcription ---------------
def key_words(seed: int, *folds: int, stream: int = 0) -> tuple:
    """The words of ``RNGKey(seed, stream).fold(f1).fold(f2)…``."""
    words = _root_key(seed, stream)
    for f in folds:
        words = _fold(words, f)
    return words


def derivative_seed(seed, position: int, k: int) -> int:
    """AD-REV-2: the seed ``k0 + 2³²·k1`` of the ``k``-th key at the ``position``-th recorded op."""
    if seed is not None:
        k0, k1 = key_words(seed, k)
    else:
        k0, k1 = key_words(0xAD5EED, position, *((k,) if k else ()))
    return k0 | k1 << 32


# -- an op of an extension dialect (no primitive; optionally with side effects) ---------------
@pytest.fixture
def raw_op():
    """An extension-dialect op with no primitive (or with side effects), emitted into a trace."""
    names = {"ident": "cadtest.ident", "log": "cadtest.log"}
    for key, name in names.items():
        if name not in OPS:
            register_op(name, side_effects=key == "log")

    def emit(key, x):
        trace = current_trace()
        new = trace.emit(names[key], [x.value], [x.type] if key == "ident" else [], {}, None)
        return Tracer(new.results[0], trace) if key == "ident" else None
    yield emit
    for name in names.values():
        OPS.pop(name, None)
