"""What a case uses: tagging, running a program on a backend, comparing bits."""
from __future__ import annotations

import contextvars
import json
from pathlib import Path

import numpy as np
import pytest

from tessera_ref import backends, jit
from tessera_ref.errors import BackendError, BackendFinding

__all__ = ["ORACLE", "clause", "oracle_only", "run", "eager", "oracle_and", "numpy_of", "assert_bits",
           "assert_close", "not_applicable", "unsupported", "communicator", "golden", "GOLDEN"]

#: Stored expected values (``golden/<name>.json``): each records its clause, inputs and bits.
GOLDEN = Path(__file__).resolve().parent / "golden"

#: The backend every other one is judged by.
ORACLE = "interp"

#: Skip reasons starting with these words are reported as such in the matrix.
NOT_APPLICABLE, UNSUPPORTED = "n/a:", "unsupported:"

#: The clause ids of the running case (set by the plugin) and the inputs of its last run.
CLAUSES: contextvars.ContextVar = contextvars.ContextVar("tessera_conformance_clauses", default=())
_INPUTS: contextvars.ContextVar = contextvars.ContextVar("tessera_conformance_inputs", default=())


def begin_case(clauses) -> None:
    """The plugin, before a case: its clause ids (for failure messages), no inputs yet."""
    CLAUSES.set(tuple(clauses))
    _INPUTS.set(())


def clause(*ids: str):
    """``@clause("NUM-RED-2", ...)``: the spec clauses a case checks (at least one)."""
    if not ids:
        raise ValueError("a case names at least one clause")
    return pytest.mark.clause(*ids)


def oracle_only(reason: str):
    """``@oracle_only("...")`` (or ``pytestmark = oracle_only(...)``): the case checks a part of
    the library no backend implements (``reason`` says which); it runs on the oracle and is
    n/a, with that reason, on every other backend."""
    return pytest.mark.oracle_only(reason)


def golden(name: str) -> dict:
    """The golden vectors ``golden/<name>.json`` (``{"clause": ..., "cases": [...]}``)."""
    return json.loads((GOLDEN / f"{name}.json").read_text())


def not_applicable(reason: str):
    """Skip the case on this backend because the clause does not apply to it."""
    pytest.skip(f"{NOT_APPLICABLE} {reason}")


def unsupported(backend, exc: BackendError, what: str = "the program"):
    """Skip the case: ``backend`` refused ``what`` with ``exc`` (BACKEND-ERR-1). A
    :class:`~tessera_ref.errors.BackendFinding` — a bug the backend's own checks found in what
    it ran — is no refusal: it is raised again, and the case fails."""
    if isinstance(exc, BackendFinding):
        raise exc
    pytest.skip(f"{UNSUPPORTED} {backend} refuses {what}: {exc.what}")


def numpy_of(value):
    """NumPy arrays of a program's result(s): an Array or DistTensor becomes its global value."""
    if isinstance(value, (tuple, list)):
        return [numpy_of(v) for v in value]
    numpy = getattr(value, "numpy", None)
    return np.asarray(numpy() if callable(numpy) else value)


def _remember(args) -> None:
    """Keep the array inputs of a run for a failure message (:func:`assert_bits`)."""
    arrays = []
    for a in args:
        try:
            arrays.append(numpy_of(a))
        except Exception:  # a mesh, a key, a callable: not an array input
            continue
    _INPUTS.set(tuple(a for a in arrays if isinstance(a, np.ndarray) and a.dtype != object))


def run(backend, fn, *args):
    """``fn`` traced with ``jit(fn, backend=backend)`` and run on ``args``; NumPy results."""
    _remember(args)
    try:
        return numpy_of(jit(fn, backend=backend)(*args))
    except BackendError as exc:
        unsupported(backend, exc)


def eager(backend, fn, *args):
    """``fn(*args)`` called inside ``with backends.use(backend)`` (eager ops, collectives,
    kernel launches); NumPy results (``raw=True`` semantics are the caller's: pass a lambda)."""
    _remember(args)
    try:
        with backends.use(backend):
            return numpy_of(fn(*args))
    except BackendError as exc:
        unsupported(backend, exc)


def oracle_and(backend, fn, *args, traced: bool = True):
    """``(got, expected)``: ``fn`` on ``backend`` and on the oracle (traced with jit, or eager)."""
    go = run if traced else eager
    return go(backend, fn, *args), go(ORACLE, fn, *args)


def communicator(backend, mesh):
    """``backend``'s communicator on ``mesh`` (BACKEND-COMM-1); a backend that refuses meshes
    (a BackendError: it runs single-device programs) makes the case unsupported."""
    try:
        return backends.get(backend).communicator(mesh)
    except BackendError as exc:
        unsupported(backend, exc, f"the mesh {mesh}")


def value_bits(a) -> np.ndarray:
    """The bit patterns of ``a``'s elements as unsigned integers of their width (the value's
    bits, most significant first when printed: 1.0 in f32 is 0x3f800000)."""
    a = np.asarray(a)
    if a.dtype.kind in "OUS":
        raise TypeError(f"no bit patterns for dtype {a.dtype}")
    flat = np.ascontiguousarray(a.reshape(-1))  # (ascontiguousarray makes a 0-d array 1-d)
    if a.dtype.itemsize in (1, 2, 4, 8):
        return flat.view(f"u{a.dtype.itemsize}").reshape(a.shape)
    return flat.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))


def _show(a, index) -> str:
    """Element ``index`` of ``a`` as its value and bit pattern."""
    v = a[index]
    bits = value_bits(a)[index]
    width = 2 * a.dtype.itemsize
    hexed = f"0x{int(bits):0{width}x}" if np.ndim(bits) == 0 else "0x" + bytes(np.asarray(bits)[::-1]).hex()
    return f"{v!s} ({hexed})"


def _inputs_at(index, shape) -> str:
    """The inputs of the last run at ``index`` of a result of ``shape``: each input of that
    shape (or broadcasting to it) by its value there, the others by their shape."""
    parts = []
    for i, x in enumerate(_INPUTS.get()):
        try:
            at = np.broadcast_to(x, shape)
            parts.append(f"input {i} = {_show(np.ascontiguousarray(at), index)}")
        except (ValueError, TypeError):
            parts.append(f"input {i}: {x.dtype}{list(x.shape)}")
    return "; the inputs there: " + ", ".join(parts) if parts else ""


def _where(what: str) -> str:
    ids = CLAUSES.get()
    return f"[{' '.join(ids)}] {what}" if ids else what


def assert_bits(got, want, what: str = "") -> None:
    """``got`` and ``want`` have the same dtype, shape and bits (NaN payloads and -0 included);
    the message names the case's clauses, the first differing element, both values with their
    bit patterns and the inputs there."""
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            count = len(got) if isinstance(got, (list, tuple)) else "not a list of"
            raise AssertionError(_where(f"{what}: {len(want)} results expected, got {count} results"))
        for i, (g, w) in enumerate(zip(got, want)):
            assert_bits(g, w, f"{what} result {i}")
        return
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        raise AssertionError(_where(f"{what}: dtype {got.dtype}, expected {want.dtype}"))
    if got.shape != want.shape:
        raise AssertionError(_where(f"{what}: shape {got.shape}, expected {want.shape}"))
    g, w = value_bits(got), value_bits(want)
    differ = g != w if g.shape == got.shape else np.any(g != w, axis=-1)
    if not np.any(differ):
        return
    if not got.ndim:
        raise AssertionError(_where(f"{what}: got {_show(got, ())}, expected {_show(want, ())}{_inputs_at((), ())}"))
    diff = np.nonzero(differ)
    index = tuple(int(d[0]) for d in diff)
    raise AssertionError(_where(
        f"{what}: {len(diff[0])} of {got.size} elements differ in their bits; the first at {index}: got "
        f"{_show(got, index)}, expected {_show(want, index)}{_inputs_at(index, got.shape)}"))


def assert_close(got, want, *, rel: float, what: str = "") -> None:
    """``|got - want| <= rel * max|want|`` elementwise in f64 (clauses that state a bound)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise AssertionError(_where(f"{what}: shape {got.shape}, expected {want.shape}"))
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    with np.errstate(invalid="ignore"):
        err = np.where(np.isnan(got) != np.isnan(want), np.inf, np.nan_to_num(np.abs(got - want), nan=0.0))
    worst = float(np.max(err)) if err.size else 0.0
    if worst > rel * scale:
        index = np.unravel_index(int(np.argmax(err)), err.shape) if err.ndim else ()
        raise AssertionError(_where(
            f"{what}: error {worst:.3g} exceeds {rel:g} of the largest |value| ({scale:.3g}); the worst at "
            f"{tuple(int(i) for i in index)}: got {got[index]!s}, expected {want[index]!s}"))
