"""What a case uses: tagging, running a program on a backend, comparing bits."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tessera_ref import backends, jit
from tessera_ref.errors import BackendError

__all__ = ["ORACLE", "clause", "run", "eager", "oracle_and", "numpy_of", "assert_bits",
           "assert_close", "not_applicable", "golden", "GOLDEN"]

#: Stored expected values (``golden/<name>.json``): each records its clause, inputs and bits.
GOLDEN = Path(__file__).resolve().parent / "golden"

#: The backend every other one is judged by.
ORACLE = "interp"

#: Skip reasons starting with these words are reported as such in the matrix.
NOT_APPLICABLE, UNSUPPORTED = "n/a:", "unsupported:"


def clause(*ids: str):
    """``@clause("NUM-RED-2", ...)``: the spec clauses a case checks (at least one)."""
    if not ids:
        raise ValueError("a case names at least one clause")
    return pytest.mark.clause(*ids)


def golden(name: str) -> dict:
    """The golden vectors ``golden/<name>.json`` (``{"clause": ..., "cases": [...]}``)."""
    return json.loads((GOLDEN / f"{name}.json").read_text())


def not_applicable(reason: str):
    """Skip the case on this backend because the clause does not apply to it."""
    pytest.skip(f"{NOT_APPLICABLE} {reason}")


def numpy_of(value):
    """NumPy arrays of a program's result(s): an Array or DistTensor becomes its global value."""
    if isinstance(value, (tuple, list)):
        return [numpy_of(v) for v in value]
    numpy = getattr(value, "numpy", None)
    return np.asarray(numpy() if callable(numpy) else value)


def _unsupported(backend, exc: BackendError):
    pytest.skip(f"{UNSUPPORTED} {backend} refuses the program: {exc.what}")


def run(backend, fn, *args):
    """``fn`` traced with ``jit(fn, backend=backend)`` and run on ``args``; NumPy results."""
    try:
        return numpy_of(jit(fn, backend=backend)(*args))
    except BackendError as exc:
        _unsupported(backend, exc)


def eager(backend, fn, *args):
    """``fn(*args)`` called inside ``with backends.use(backend)`` (eager ops, collectives,
    kernel launches); NumPy results (``raw=True`` semantics are the caller's: pass a lambda)."""
    try:
        with backends.use(backend):
            return numpy_of(fn(*args))
    except BackendError as exc:
        _unsupported(backend, exc)


def oracle_and(backend, fn, *args, traced: bool = True):
    """``(got, expected)``: ``fn`` on ``backend`` and on the oracle (traced with jit, or eager)."""
    go = run if traced else eager
    return go(backend, fn, *args), go(ORACLE, fn, *args)


def _bytes(a) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,)) if a.ndim else a.view(np.uint8)


def assert_bits(got, want, what: str = "") -> None:
    """``got`` and ``want`` have the same dtype, shape and bytes (NaN payloads and -0 included);
    the message names the first differing element and both values."""
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{what}: {len(want)} results expected"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_bits(g, w, f"{what} result {i}")
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    diff = np.nonzero(np.any(_bytes(got) != _bytes(want), axis=-1) if got.ndim else _bytes(got) != _bytes(want))
    if got.ndim and len(diff[0]):
        index = tuple(int(d[0]) for d in diff)
        raise AssertionError(f"{what}: {len(diff[0])} of {got.size} elements differ in their bits; first at "
                             f"{index}: got {got[index]!r} ({_bytes(got)[index].tobytes().hex()}), expected "
                             f"{want[index]!r} ({_bytes(want)[index].tobytes().hex()})")
    if not got.ndim and got.tobytes() != want.tobytes():
        raise AssertionError(f"{what}: got {got!r}, expected {want!r} (bits differ)")


def assert_close(got, want, *, rel: float, what: str = "") -> None:
    """``|got - want| <= rel * max|want|`` elementwise in f64 (clauses that state a bound)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert err <= rel * scale, f"{what}: error {err:.3g} exceeds {rel:g} of the largest |value| ({scale:.3g})"
