"""Helpers the graph_ir cases share: building operands of a format and policy, and checking
a program's bits on the backend (traced and eager) and on the oracle against a reference."""
from __future__ import annotations

import contextlib

import numpy as np

import tessera_ref as tr
from tessera_ref import backends
from tessera_ref.errors import BackendError
from tessera_ref.ir import parse_module, verify
from tessera_conformance import ORACLE, assert_bits, eager, numpy_of, run, unsupported

from ._formats import FORMATS, round_values, values_of

__all__ = ["operand", "values", "normal_values", "policy", "check", "grid", "specials", "rng", "run_text", "skip_unsupported", "jit"]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def policy(storage: str, accum: str | None = None, **options):
    """A Policy (``reduction=``, ``rounding=``, ``overflow=`` as keywords)."""
    return tr.Policy(tr.numerics.get_format(storage), accum=None if accum is None else tr.numerics.get_format(accum),
                     **options)


def operand(x, fmt: str = "f32", pol=None, **policy_options):
    """An operand holding ``x`` (f64 values) rounded (RNE) into ``fmt`` by the independent
    reference; a tessera Array when a policy is given, else the NumPy storage array."""
    data = round_values(np.asarray(x, np.float64), fmt)
    if pol is None and policy_options:
        pol = policy(fmt, **policy_options)
    return data if pol is None else tr.asarray(data, policy=pol)


def values(a) -> np.ndarray:
    """The exact f64 values of an operand (Array or storage array)."""
    return values_of(np.asarray(a.numpy() if hasattr(a, "numpy") else a))


def normal_values(shape, fmt: str, seed: int, scale: float = 3.0) -> np.ndarray:
    """Normal values times ``scale`` held in ``fmt`` (as :func:`values` gives them)."""
    return values(operand(np.random.default_rng(seed).standard_normal(shape) * scale, fmt))


def check(backend, fn, args, want, *, traced: bool = True, eagerly: bool = True, what: str = "") -> None:
    """``fn(*args)`` on ``backend`` traced (``run``) and eagerly (``eager``), and on the oracle
    when the backend is another one: every result has ``want``'s bits."""
    names = [backend] + ([ORACLE] if backend != ORACLE else [])
    # eagerly, NumPy operands become Arrays so that Python operators (x + 0.1, x.T) are ops
    arrays = tuple(tr.asarray(a) if isinstance(a, np.ndarray) else a for a in args)
    for name in names:
        if traced:
            assert_bits(run(name, fn, *args), want, f"{what} traced on {name}")
        if eagerly:
            assert_bits(eager(name, fn, *arrays), want, f"{what} eager on {name}")


def specials(fmt: str = "f32") -> np.ndarray:
    """Signed zeros, infinities, NaN, the extremes and a subnormal of ``fmt`` (f64 values)."""
    f = FORMATS[fmt]
    tiny = 2.0 ** (f.emin - f.man_bits)
    vals = [0.0, -0.0, 1.0, -1.0, f.max, -f.max, tiny, -tiny, 2.0 ** f.emin]
    if f.kind == "ieee":
        vals += [np.inf, -np.inf, np.nan]
    return np.array(vals)


def grid(lo: float, hi: float, n: int, seed: int = 0) -> np.ndarray:
    """``n`` deterministic f64 values spread over [lo, hi]."""
    return rng(seed).uniform(lo, hi, n)


@contextlib.contextmanager
def skip_unsupported(backend):
    """Around a direct call of a jitted function: a program the backend refuses is skipped as
    unsupported (as ``run`` does)."""
    try:
        yield
    except BackendError as exc:
        unsupported(backend, exc)


def run_text(backend, text: str, *args):
    """The first function of the Graph IR module ``text``, parsed and verified, run on
    ``backend`` through the executor seam (``Backend.run_function``); NumPy results."""
    module = parse_module(text)
    verify(module)
    try:
        return numpy_of(backends.get(backend).run_function(module.body.first_op, list(args)))
    except BackendError as exc:
        unsupported(backend, exc)


class _Jitted:
    """``tr.jit(fn, backend=backend)`` whose calls skip a program the backend refuses."""

    def __init__(self, backend, fn, **options):
        self.backend, self.function = backend, tr.jit(fn, backend=backend, **options)

    def __call__(self, *args):
        with skip_unsupported(self.backend):
            return self.function(*args)

    def __getattr__(self, name):
        return getattr(self.function, name)


def jit(backend, fn, **options):
    """A jitted ``fn`` running on ``backend`` (refused programs are skipped as unsupported)."""
    return _Jitted(backend, fn, **options)
