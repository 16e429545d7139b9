"""A tile-kernel launch, as every executor receives it (BACKEND-LAUNCH-1), and the check of
its arguments against the kernel's parameters that every executor applies (TILE-EXEC-1)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KernelError
from .core import Module
from .types import IndexType, TensorType

__all__ = ["Launch", "kernel_arguments"]


@dataclass
class Launch:
    """One tile-kernel launch (BACKEND-LAUNCH-1): ``grid`` tiles of ``lanes`` lanes of the kernel
    ``kernel`` (its ``sym_name``; None for the module's only kernel) of the Tile IR ``module``
    on ``buffers`` — a list in parameter order or a dict by name; ``mut`` buffers are written
    in place. ``checks``/``counters``/``preset``/``on_error`` are the tile interpreter's
    options; a backend that cannot honour one says so in its report, never silently."""

    module: Module
    kernel: str | None
    grid: object
    lanes: int
    buffers: object
    checks: bool = True
    counters: bool = True
    preset: str = "H100"
    on_error: str = "raise"


def _scalar(name, t, value):
    """A scalar argument: an integer for ``index``, a real number for a format."""
    integral = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if isinstance(t, IndexType):
        if integral and -2 ** 63 <= value < 2 ** 63:
            return value
        want = "an integer (int64)"
    elif integral or isinstance(value, (float, np.floating)):
        return value
    else:
        want = "a real number"
    raise KernelError(f"argument {name!r} ({t}) must be {want}, got {value!r}",
                      fix=f"pass {'an int' if isinstance(t, IndexType) else 'a float'} for {name!r}")


def kernel_arguments(func, args) -> tuple[list, dict]:
    """``(values in parameter order, {symbolic size: value})`` of the arguments ``args`` (a
    list in parameter order or a dict by name) of the tile kernel ``func``; a KernelError
    naming the parameter when one is missing or extra, a buffer is not a C-contiguous NumPy
    array of the parameter's dtype, rank and sizes (writeable when ``mut``; symbolic sizes
    agreeing across parameters), or a scalar is not a number of its kind."""
    attrs = func.attributes
    names, mut = list(attrs["tile.params"]), set(attrs["tile.mut"])
    if isinstance(args, dict):
        missing = [n for n in names if n not in args]
        if missing or len(args) != len(names):
            raise KernelError(f"kernel @{attrs['sym_name']} takes {names}, got {sorted(args)}",
                              fix="pass one value per parameter")
        args = [args[n] for n in names]
    args = list(args)
    if len(args) != len(names):
        raise KernelError(f"kernel @{attrs['sym_name']} takes {len(names)} arguments {names}, got {len(args)}",
                          fix="pass one value per parameter, in order")
    sizes: dict = {}
    values = []
    for name, param, value in zip(names, func.regions[0].entry.args, args):
        t = param.type
        if not isinstance(t, TensorType):
            values.append(_scalar(name, t, value))
            continue
        dtype = t.dtype
        if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != t.rank:
            raise KernelError(f"argument {name!r} must be a rank-{t.rank} NumPy array of dtype {dtype} "
                              f"(for {t}), got {getattr(value, 'dtype', type(value).__name__)} "
                              f"of shape {getattr(value, 'shape', None)}",
                              fix=f"pass np.asarray(x, dtype=np.{dtype})")
        for axis, (d, n) in enumerate(zip(t.shape, value.shape)):
            if isinstance(d, int) and d != n or isinstance(d, str) and sizes.setdefault(d, n) != n:
                raise KernelError(f"argument {name!r} has shape {value.shape} but {t} needs "
                                  f"{d if isinstance(d, int) else f'{d}={sizes[d]}'} in axis {axis}",
                                  fix="pass arrays whose sizes agree with the annotations")
        if not value.flags.c_contiguous or name in mut and not value.flags.writeable:
            raise KernelError(f"argument {name!r} must be a C-contiguous"
                              f"{', writable' if name in mut else ''} array",
                              fix="pass np.ascontiguousarray(x) (and keep it to read the results)")
        values.append(value)
    return values, sizes
