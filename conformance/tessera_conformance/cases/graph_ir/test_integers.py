"""GRAPH-TYPE-4, GRAPH-EW-6, GRAPH-CAST-2: the integer element kinds, their wrapping
arithmetic, exact comparisons and casts; expected values from Python integers."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError
from tessera_conformance import clause, oracle_only

from ._cases import check

KINDS = {"i32": (np.int32, 32, True), "ui8": (np.uint8, 8, False), "index": (np.int64, 64, True)}


def _wrap(v: int, bits: int, signed: bool) -> int:
    """``v`` modulo 2^bits, as a two's-complement (signed) or plain (unsigned) integer."""
    v %= 1 << bits
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _values(kind: str) -> np.ndarray:
    dtype, bits, signed = KINDS[kind]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    edge = [lo, lo + 1, -1 if signed else 1, 0, 1, 2, 7, hi - 1, hi]
    return np.array(edge + list(np.random.default_rng(bits).integers(lo, hi, 23, endpoint=True)), dtype=dtype)


@clause("GRAPH-EW-6", "GRAPH-TYPE-4")
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", ["add", "sub", "mul", "minimum", "maximum"])
def test_integer_arithmetic_wraps(backend, kind, name):
    """Every pair of edge and random values: the exact result modulo 2^bits."""
    dtype, bits, signed = KINDS[kind]
    x = _values(kind)
    a, b = np.repeat(x, x.size), np.tile(x, x.size)
    exact = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q,
             "minimum": min, "maximum": max}[name]
    want = np.array([_wrap(exact(int(p), int(q)), bits, signed) for p, q in zip(a, b)], dtype=dtype)
    check(backend, getattr(op, name), (a, b), want, what=f"{name} {kind}")


@clause("GRAPH-EW-6")
@pytest.mark.parametrize("kind", list(KINDS))
def test_integer_neg_abs_and_weak_ints(backend, kind):
    dtype, bits, signed = KINDS[kind]
    x = _values(kind)
    check(backend, op.neg, (x,), np.array([_wrap(-int(v), bits, signed) for v in x], dtype), what="neg")
    check(backend, op.abs, (x,), np.array([_wrap(abs(int(v)), bits, signed) for v in x], dtype), what="abs")
    check(backend, lambda v: v + 3, (x,), np.array([_wrap(int(v) + 3, bits, signed) for v in x], dtype), what="x + 3")


@clause("GRAPH-EW-4", "GRAPH-TYPE-4")
@pytest.mark.parametrize("kind", list(KINDS))
def test_integer_comparisons_are_exact(backend, kind):
    """Near 2^63, f64 would merge neighbours: integers compare as integers."""
    x = _values(kind)
    a, b = np.repeat(x, x.size), np.tile(x, x.size)
    want = np.array([int(p) < int(q) for p, q in zip(a, b)])
    check(backend, op.less, (a, b), want, what="less")
    check(backend, op.equal, (a, b), np.array([int(p) == int(q) for p, q in zip(a, b)]), what="equal")


@clause("GRAPH-CAST-2")
def test_casts_into_and_between_integer_kinds(backend):
    f = np.array([0.0, -0.0, 2.5, -2.5, 3.99, -3.99, 1e10, -1e10, np.inf, -np.inf, np.nan, 255.5, 256.0, -0.5],
                 np.float32)
    check(backend, lambda v: op.cast(v, "i32"), (f,),
          np.array([0, 0, 2, -2, 3, -3, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, -2 ** 31, 0, 255, 256, 0], np.int32))
    check(backend, lambda v: op.cast(v, "ui8"), (f,),
          np.array([0, 0, 2, 0, 3, 0, 255, 0, 255, 0, 0, 255, 255, 0], np.uint8))
    i = np.array([300, -1, 2 ** 40 + 7, -2 ** 31 - 1, 5], np.int64)
    check(backend, lambda v: op.cast(v, "ui8"), (i,), np.array([_wrap(int(v), 8, False) for v in i], np.uint8))
    check(backend, lambda v: op.cast(v, "i32"), (i,), np.array([_wrap(int(v), 32, True) for v in i], np.int32))
    j = np.array([2 ** 24 + 1, -7, 0], np.int32)
    check(backend, lambda v: op.cast(v, "f32"), (j,), np.array([2 ** 24, -7, 0], np.float32))
    check(backend, lambda v: op.cast(v, "i1"), (j,), np.array([True, True, False]))


@clause("GRAPH-TYPE-4")
@oracle_only('element kinds and these errors come from type inference, before any backend runs')
def test_integer_data_and_the_float_only_ops(backend):
    """NumPy int32/uint8 data are i32/ui8 tensors; out-of-range data and float-only ops are DTypeErrors."""
    assert tr.asarray(np.zeros(2, np.int32)).type.format.name == "i32"
    assert tr.asarray(np.zeros(2, np.uint8)).type.format.name == "ui8"
    assert tr.asarray(np.zeros(2, np.int64)).type.format.name == "index"
    with pytest.raises(DTypeError, match="300"):
        tr.asarray([1, 300], dtype="ui8")
    for fn in (op.exp, lambda v: op.div(v, v), op.sum):
        with pytest.raises(DTypeError, match="i32"):
            fn(tr.asarray(np.arange(3, dtype=np.int32)))
