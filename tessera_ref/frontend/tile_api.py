"""The names a ``@kernel`` body uses: ``tile``, ``tshared``, ``cp_async``, ``tbarrier``, ``mut``.

A kernel body is never run by Python: :mod:`tessera_ref.frontend.kernel` reads its source
and turns these names into Tile IR (docs/spec/tiles.md, TILE-FE). The objects exist so
that ``from tessera import tile, tshared, cp_async, tbarrier`` works, and calling one outside
a kernel says so — except ``tile.mma_sync(a, b)``, which seed 001 also writes in Python schedule
code (``with schedule.pipeline(...)``): there it is ``op.matmul(a, b)`` (SCHED-FE-2).
"""
from __future__ import annotations

from ..errors import KernelError

__all__ = ["tile", "tshared", "cp_async", "tbarrier", "mut", "symbols", "Size"]


class _KernelOnly:
    """A name that only means something inside a ``@kernel`` body."""

    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _KernelOnly(f"{self._path}.{name}")

    def __getitem__(self, item):
        return self

    def __call__(self, *args, **kwargs):
        raise KernelError(f"{self._path}(...) runs only inside a @kernel body, which Tessera compiles "
                          "to Tile IR; Python never calls it directly",
                          fix="decorate the function with @kernel and launch it: k(*arrays, grid=..., lanes=...)")

    def __repr__(self) -> str:
        return f"<tessera kernel name {self._path}>"


class _Tile(_KernelOnly):
    """``tile``: kernel-only names, plus ``mma_sync`` in seed 001's schedule form."""

    def mma_sync(self, a, b):
        """Seed 001's ``C_tile = tile.mma_sync(A_tile, B_tile)`` run by Python — in an
        ``@op.kernel`` or ``@jit`` body, usually under ``with schedule.pipeline(...)``, or
        eagerly — is :meth:`schedule.mma_sync <tessera_ref.frontend.schedule._Schedule.mma_sync>`:
        ``op.matmul(a, b)`` (SCHED-FE-2). Inside a ``@kernel`` body, which Python never runs,
        the front end reads ``tile.mma_sync`` from the source as the Tile IR ``mma`` instead."""
        from .schedule import schedule
        return schedule.mma_sync(a, b)


tile = _Tile("tile")
tshared = _KernelOnly("tshared")
cp_async = _KernelOnly("cp_async")
tbarrier = _KernelOnly("tbarrier")
#: ``y: mut[f32[n]]`` marks a global buffer the kernel writes (the DSL writes ``mut f32[n]``).
mut = _KernelOnly("mut")


class Size(str):
    """A symbolic size name (``n``) for a Python kernel's annotations; see :func:`symbols`."""

    __slots__ = ()


def symbols(names: str):
    """Symbolic sizes for Python kernels' annotations: ``n = symbols("n")``,
    ``M, N, K = symbols("M N K")`` (one :class:`Size` for one name, else a tuple).

    Python 3.11–3.13 evaluates a parameter's annotation when the ``def`` runs — before
    ``@kernel`` sees the function — so ``x: f32[n]`` needs ``n`` defined, or the module must
    start with ``from __future__ import annotations`` (or the annotation be quoted,
    ``x: "f32[n]"``). A size is its own name as a string, so ``f32[n]`` evaluates to the
    tensor annotation ``f32["n"]``; the front end reads the sizes from the source, where
    each is bound from the shape of the argument whose annotation names it (TILE-FE-1).
    """
    sizes = tuple(Size(name) for name in names.replace(",", " ").split())
    if not sizes or not all(name.isidentifier() for name in sizes):
        raise KernelError(f"symbols({names!r}): expected size names separated by spaces",
                          fix='e.g. M, N, K = symbols("M N K")')
    return sizes[0] if len(sizes) == 1 else sizes
