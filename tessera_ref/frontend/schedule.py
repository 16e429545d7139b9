"""The user-facing ``schedule`` namespace and seed 003's ``@op.kernel`` (docs/spec/lowering.md, SCHED-FE).

``schedule.tile((128, 128, 32))``, ``schedule.vectorize(4)``,
``schedule.use_shared_memory(True, padding=1)``, ``schedule.async_copy(True)``,
``schedule.pipeline_stages(3)``, ``schedule.swizzle("xor")`` and ``schedule.lanes(256)`` are
*directives*: inside an ``@op.kernel`` body they set the schedule of that kernel's ops; at top
level they set the defaults that every kernel traced later starts from (``schedule.reset()``
clears them). The defaults are the calling thread's (``tessera_ref.context``): a new thread
starts with none. Seed 001's form runs as the seed prints it::

    with schedule.pipeline(double_buffer=True):
        A_tile = schedule.prefetch(A, scope="shared")
        B_tile = schedule.prefetch(B, scope="shared")
        C_tile = tile.mma_sync(A_tile, B_tile)

``pipeline`` turns on shared-memory staging with cp.async and 2 stages (``stages=`` for more):
in a kernel body for the whole kernel (directives are kernel-wide, not scoped to the ``with``
block); at top level as the defaults inside the ``with`` block, restored when it ends;
``prefetch`` returns its operand (staging changes where data lives, not its value) and
``tile.mma_sync`` (or ``schedule.mma_sync``) is the matmul of the staged tiles. The Schedule
IR shows each staged operand as
``"tessera.schedule.prefetch"(%A) {double_buffer = true, scope = "shared"}``.

``@op.kernel`` traces the function like :func:`~tessera_ref.jit` (once per argument
signature), applies the directives, lowers Graph IR -> Schedule IR -> Tile IR
(:mod:`tessera_ref.lowering`) and runs the tile kernels on the current backend. Outputs are
the returned values and the parameters assigned whole (``C[:] = A + B``, seed 003), which are
also written back into the caller's array when it is a writable NumPy array.
"""
from __future__ import annotations

import contextlib
import functools
from types import MappingProxyType

import numpy as np

from .. import context
from ..context import KERNEL_ASSIGNED, KERNEL_DIRECTIVES, SCHEDULE_DEFAULTS, scoped
from ..errors import KernelError, TraceError
from ..ops.linalg import matmul
from ..ops.values import Array, Trace, Tracer, asarray

__all__ = ["schedule", "op_kernel", "ScheduledKernel"]


def _with_defaults(**directives) -> MappingProxyType:
    """The thread's top-level defaults with ``directives`` added (a new read-only mapping)."""
    return MappingProxyType({**SCHEDULE_DEFAULTS.get(), **directives})


def _set(**directives) -> None:
    """Set ``directives`` in the kernel body being traced, else in the thread's defaults."""
    kernel = KERNEL_DIRECTIVES.get()
    if kernel is not None:
        kernel.update(directives)
    else:
        SCHEDULE_DEFAULTS.set(_with_defaults(**directives))


def _positive(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise KernelError(f"schedule.{name}({value!r}): expected a positive int", fix=f"e.g. schedule.{name}(2)")
    return int(value)


class _Schedule:
    """The ``schedule`` namespace (see the module docstring)."""

    def tile(self, shape) -> None:
        """The tile shape: (BM, BN, BK) for matmul and attention, (rows,) for row kernels."""
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        _set(tile=[_positive("tile", s) for s in shape])

    def vectorize(self, n: int) -> None:
        """Elements per lane in elementwise kernels (seed 003: ``schedule.vectorize(4)``)."""
        _set(vectorize=_positive("vectorize", n))

    def lanes(self, n: int) -> None:
        """Lanes (threads) per tile."""
        _set(lanes=_positive("lanes", n))

    def use_shared_memory(self, enabled: bool = True, padding: int = 0) -> None:
        """Stage operand tiles in shared memory, each row padded by ``padding`` elements."""
        if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)) or padding < 0:
            raise KernelError(f"schedule.use_shared_memory(padding={padding!r}): expected an int >= 0",
                              fix="padding=1 adds one element per row (seed 003)")
        _set(shared=bool(enabled), padding=int(padding))

    def swizzle(self, kind: str) -> None:
        """``"xor"`` swizzles shared-memory tiles (or ``"none"``)."""
        if kind not in ("none", "xor"):
            raise KernelError(f"schedule.swizzle({kind!r}): expected 'none' or 'xor'", fix='schedule.swizzle("xor")')
        _set(swizzle=kind)

    def async_copy(self, enabled: bool = True) -> None:
        """Copy global -> shared with cp.async so loads overlap compute."""
        _set(async_copy=bool(enabled))

    def pipeline_stages(self, n: int) -> None:
        """Shared-memory buffers per operand (2 = double, 3 = triple buffering)."""
        _set(stages=_positive("pipeline_stages", n))

    @contextlib.contextmanager
    def pipeline(self, double_buffer: bool = True, stages: int | None = None):
        """Seed 001's ``with schedule.pipeline(double_buffer=True):`` — shared staging with
        cp.async and ``stages`` buffers (2 with ``double_buffer``, else 1): for the whole kernel
        in a kernel body; at top level for the ``with`` block (the defaults are restored on exit)."""
        n = _positive("pipeline", stages) if stages is not None else (2 if double_buffer else 1)
        staging = dict(shared=True, async_copy=True, stages=n)
        if KERNEL_DIRECTIVES.get() is not None:
            _set(**staging)
            yield self
        else:
            with scoped(SCHEDULE_DEFAULTS, _with_defaults(**staging)):
                yield self

    def prefetch(self, x, scope: str = "shared"):
        """Stage ``x`` in ``scope`` memory (seed 001); returns ``x`` (same value)."""
        if scope not in ("shared", "register"):
            raise KernelError(f"schedule.prefetch(scope={scope!r}): expected 'shared' or 'register'",
                              fix='scope="shared"')
        if scope == "shared":
            _set(shared=True)
        return x

    def mma_sync(self, a, b):
        """The matmul of two (prefetched) tiles: ``op.matmul(a, b)``; seed 001 spells it
        ``tile.mma_sync``, which is this function outside a ``@kernel`` body."""
        return matmul(a, b)

    def collective_matmul(self, chunks: int = 4) -> None:
        """Cut the tensor-parallel ``matmul → reduce_scatter`` and ``all_gather → matmul`` of
        sharded functions into ``chunks`` pipelined steps (LOWER-CM-1; ``chunks=1`` turns it
        off). A top-level directive: it applies to sharded functions run or inspected later."""
        _set(collective_matmul=_positive("collective_matmul", chunks))

    def defaults(self) -> dict:
        """The directives this thread set at top level (a copy)."""
        return dict(SCHEDULE_DEFAULTS.get())

    def reset(self) -> None:
        """Forget the directives this thread set at top level."""
        SCHEDULE_DEFAULTS.set(MappingProxyType({}))

    def __repr__(self) -> str:
        return "<tessera schedule namespace>"


#: ``from tessera import schedule``.
schedule = _Schedule()


def active() -> bool:
    """True while an ``@op.kernel`` body is being traced."""
    return KERNEL_DIRECTIVES.get() is not None


class _Param(Tracer):
    """A kernel parameter: a tracer that may be assigned whole (``C[:] = value``)."""

    __slots__ = ()

    def __setitem__(self, key, value) -> None:
        if key != slice(None) and key != Ellipsis:
            raise KernelError(f"an @op.kernel parameter is assigned whole (C[:] = ...), got an index {key!r}",
                              fix="compute the full result and assign it with C[:] = value")
        KERNEL_ASSIGNED.get().append((self, value))


class _Traced:
    def __init__(self, module, directives, outputs, assigned_params):
        self.module, self.directives = module, directives
        self.outputs, self.assigned_params = outputs, assigned_params
        self._program = None

    @property
    def program(self):
        if self._program is None:
            self._program = context.backend().lower(self.module, self.directives)
        return self._program


class ScheduledKernel:
    """``@op.kernel``: a traced function with a schedule, run as tile kernels (module docstring)."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        self.cache: dict = {}
        self._last: _Traced | None = None
        self.reports: list = []
        functools.update_wrapper(self, fn)

    def trace(self, *args) -> _Traced:
        arrays = [asarray(a) for a in args]
        key = tuple(a.type for a in arrays)
        entry = self.cache.get(key)
        if entry is None:
            entry = self._record(arrays)
            self.cache[key] = entry
        self._last = entry
        return entry

    def _record(self, arrays) -> _Traced:
        code = self.fn.__code__
        trace = Trace(self.name, location=f"{code.co_filename}:{code.co_firstlineno}")
        params = [_Param(t.value, trace) for t in trace.arguments([a.type for a in arrays])]
        directives = dict(SCHEDULE_DEFAULTS.get())
        assigned: list = []
        with scoped(KERNEL_DIRECTIVES, directives), scoped(KERNEL_ASSIGNED, assigned), trace:
            out = self.fn(*params)
        returned = [] if out is None else list(out) if isinstance(out, (tuple, list)) else [out]
        assigned_index = [next(i for i, q in enumerate(params) if q is p) for p, _ in assigned]
        results = returned + [value for _, value in assigned]
        if not results:
            raise TraceError(f"@op.kernel {self.name!r} neither returns a value nor assigns a parameter",
                             fix="return the result, or assign an output parameter whole: C[:] = A + B")
        return _Traced(trace.finish(results), directives, len(returned), assigned_index)

    def __call__(self, *args, checks: bool = True, preset: str = "H100"):
        entry = self.trace(*args)
        arrays = [np.asarray(asarray(a).data) for a in args]
        results, self.reports = entry.program.run(*arrays, checks=checks, preset=preset)
        func = entry.module.body.first_op
        types = [v.type for v in func.regions[0].entry.last_op.operands]
        for index, value in zip(entry.assigned_params, results[entry.outputs:]):
            if isinstance(args[index], np.ndarray) and args[index].flags.writeable:
                args[index][...] = value
        out = [Array(v, t) for v, t in zip(results, types)]
        return out[0] if len(out) == 1 else tuple(out)

    def reference(self, *args):
        """The Graph IR interpreter's results for ``args`` (what the kernels must reproduce)."""
        entry = self.trace(*args)
        return context.backend("interp").run_function(entry.module.body.first_op,
                                                      [np.asarray(asarray(a).data) for a in args])

    def inspect_ir(self, level: str = "tile") -> str:
        """The most recent trace at ``level``: ``"graph"``, ``"schedule"``, ``"tile"`` or ``"target"``."""
        if self._last is None:
            raise TraceError(f"@op.kernel {self.name!r} has not been traced yet",
                             fix=f"call it once, or {self.name}.trace(*example_args)")
        if level == "graph":
            return str(self._last.module)
        return context.backend().inspect_program(self._last.program, level)

    def __repr__(self) -> str:
        return f"<tessera op.kernel {self.name!r}>"


def op_kernel(fn):
    """``@op.kernel`` (seed 003): see :class:`ScheduledKernel`."""
    if not callable(fn):
        raise KernelError(f"@op.kernel decorates a function, got {fn!r}", fix="put @op.kernel on a def")
    return ScheduledKernel(fn)
