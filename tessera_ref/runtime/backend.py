"""One backend over any device (DESIGN §16; RUNTIME-BACKEND-1 … 3): ``cuda``, ``cuda-cpu`` and
``interp-tiles`` are :class:`DeviceBackend` over ``CudaDevice``, ``FiberDevice`` and
``TileInterpDevice``, each registered by its own package.

A function runs as its :class:`~.program.Program` (compiled once per signature and
directives, then replayed); an eager op as the program of that one op (also compiled once per
signature); a lowered program as its program; a ``@kernel`` launch on device buffers after the
one argument check of ``ir/launch.py``. Host data is copied in and results copied out (both
counted); :class:`~.memory.DeviceArray` arguments stay where they are and a function called
with any returns DeviceArrays. ``allow_host=True`` lets ops without a kernel run on the host
as counted host steps; without it they are a BackendError at compile time. A mesh is refused
(one device: the multi-device runtime is the communicator's).
"""
from __future__ import annotations

import threading

import numpy as np

from .. import context
from ..backends.base import Backend
from ..dist.tensor import DistTensor
from ..errors import BackendError
from ..ir import TensorType
from ..ir import tile as T
from ..ir.launch import kernel_arguments
from ..lowering import autotune
from ..ops.execute import bind_arguments
from ..counters import count
from .memory import DeviceArray
from .program import Program, kernel_smem, op_function

__all__ = ["DeviceBackend"]

#: How many eager ops' programs a backend keeps (the oldest goes first).
_EAGER_PROGRAMS = 1024


def _hashable(value):
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


class DeviceBackend(Backend):
    """A backend that runs whole programs on one device (see the module docstring)."""

    def __init__(self, device, name: str | None = None, description: str = "", *, allow_host: bool = False):
        self.device, self.allow_host = device, bool(allow_host)
        self.name = name or device.name
        self.description = description
        self._ops: dict = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        options = getattr(self.device, "options_text", "")
        return f"<tessera backend {self.name!r}{' ' + options if options else ''}" \
               f"{' allow_host' if self.allow_host else ''}>"

    def communicator(self, mesh):
        """The device's communicator for a mesh in this process, where it has one (the tile
        interpreter's device: the simulated mesh's); otherwise a BackendError."""
        communicator = getattr(self.device, "communicator", None)
        if communicator is None:
            raise BackendError(f"the {self.name} backend runs single-device programs; got a mesh {mesh}",
                               fix="run mesh programs on the 'interp' backend")
        return communicator(mesh)

    # -- whole programs -------------------------------------------------------------------
    def program(self, func, arg_types, directives: dict | None = None) -> Program:
        """The :class:`Program` of ``func`` for ``arg_types`` on this backend's device."""
        return Program.compile(func, arg_types, self.device, directives, allow_host=self.allow_host)

    def run_function(self, func, args) -> list:
        if any(isinstance(a, DistTensor) for a in args):
            return super().run_function(func, args)  # refused at its first collective (communicator)
        args = [a if isinstance(a, DeviceArray) else np.asarray(a) for a in args]
        bind_arguments(func, args)  # BACKEND-RUN-1: dtype, rank, static and symbolic sizes, count
        directives = dict(context.SCHEDULE_DEFAULTS.get()) or None
        types = tuple(a.type if isinstance(a, DeviceArray) else TensorType(a.shape, p.type.policy)
                      for a, p in zip(args, func.regions[0].entry.args))
        program = self.program(func, types, directives)
        results = program(*args)
        if any(isinstance(a, DeviceArray) for a in args):
            return results
        return [r.numpy() for r in results]

    def run_program(self, program, arrays, *, checks: bool = False, counters: bool = True,
                    preset: str = "H100") -> tuple:
        compiled = Program.compile(program.func, [a.type for a in program.func.regions[0].entry.args], self.device,
                                   allow_host=True, lowered=program)
        results, reports = compiled.run(list(arrays), dict(checks=checks, counters=counters, preset=preset))
        return [r.numpy() for r in results], reports

    def run_op(self, call, *operands) -> tuple:
        in_types = tuple(TensorType(np.shape(x), t.policy) for x, t in zip(operands, call.in_types))
        key = (call.primitive.name, _hashable(call.attrs), in_types)
        with self._lock:
            func = self._ops.get(key)
        if func is None:
            func = op_function(call, in_types)
            with self._lock:
                if len(self._ops) >= _EAGER_PROGRAMS:  # a bounded cache: its programs go with their functions
                    self._ops.pop(next(iter(self._ops)))
                func = self._ops.setdefault(key, func)
        return tuple(r.numpy() for r in self.program(func, in_types)(*operands))

    def autotune(self, variants, problem: dict, preset="H100", **options):
        """The interpreter's ranking (:meth:`Backend.autotune`), after the device's screen (a GPU
        rejects configurations over its register budget: CUDA-TUNE-1) where it has one."""
        screen = getattr(self.device, "screen", None)
        if screen is None:
            return super().autotune(variants, problem, preset, **options)
        return autotune.autotune_kernel(variants, problem, preset, screen=screen(options), **options)

    # -- one kernel launch ----------------------------------------------------------------
    def launch(self, launch):
        """A ``@kernel`` launch: the arguments checked once (TILE-EXEC-1), buffers copied in,
        the kernel launched, ``mut`` buffers copied back (RUNTIME-BACKEND-2)."""
        kernels = [op for op in launch.module.body if T.is_kernel(op)]
        func = next((k for k in kernels if launch.kernel in (None, k.attributes["sym_name"])), None)
        if func is None:
            raise BackendError(f"the module has no kernel {launch.kernel!r}", fix="name one of its kernels")
        values, sizes = kernel_arguments(func, launch.buffers)
        count(launches=1)
        device, alloc = self.device, self.device.allocator
        source = device.render(launch.module)
        kernel = device.load(device.compiler.compile(source), source, launch.module)[func.attributes["sym_name"]]
        args, owned = [], []
        for param, value in zip(func.regions[0].entry.args, values):
            if isinstance(param.type, TensorType) and param.type.rank > 0:
                buf = alloc.alloc(value.nbytes)
                alloc.copyin(buf, value)
                owned.append((buf, value))
                args.append(alloc.array(buf, value.dtype, value.shape))
            else:
                args.append(value)
        args += [np.int64(sizes[s]) for s in func.attributes.get("tile.sizes", {})]
        grid = tuple(launch.grid) if np.ndim(launch.grid) else (launch.grid,)
        names = [p for p, a in zip(func.attributes["tile.params"], func.regions[0].entry.args)
                 if isinstance(a.type, TensorType) and a.type.rank > 0]
        mut = set(func.attributes.get("tile.mut", []))
        try:
            report = kernel(args, grid, (launch.lanes, 1, 1), kernel_smem(func), None,
                            dict(checks=launch.checks, counters=launch.counters, preset=launch.preset,
                                 on_error=launch.on_error))
            device.synchronize()
        except BaseException:
            self._copy_back(owned, names, mut, quiet=True)  # what the kernel wrote before its finding
            raise
        self._copy_back(owned, names, mut)
        outputs = getattr(report, "outputs", None)  # a report naming its buffers names the caller's
        if isinstance(outputs, dict):
            outputs.update((name, value) for (_, value), name in zip(owned, names) if name in outputs)
        return report

    def _copy_back(self, owned, names, mut, quiet: bool = False) -> None:
        """The ``mut`` buffers back into the caller's arrays, every buffer freed; ``quiet``: after
        a failed launch, where the device may refuse the copy."""
        alloc = self.device.allocator
        for (buf, value), name in zip(owned, names):
            try:
                if name in mut and value.flags.writeable:
                    alloc.copyout(value, buf)
            except BackendError:
                if not quiet:
                    raise
            alloc.free(buf)
