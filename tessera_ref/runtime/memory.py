"""Values on a device and where a program keeps them (DESIGN §16; RUNTIME-MEM-1 … 3).

:class:`DeviceArray` is a buffer of a device with its :class:`~tessera_ref.ir.TensorType`;
:func:`device_put` makes one from host data (counted host→device bytes) and
:meth:`DeviceArray.numpy` (or ``np.asarray``) is the only way back (counted device→host
bytes). Its buffer returns to the device's pool when the array is collected.

:class:`MemoryPlan` is a program's memory: every value's bytes and live range (defined at
one step, last used at another) and, for the intermediates, offsets in one arena such that
no two values live at once overlap (first fit, largest first). ``peak_bytes`` is the most
bytes live at any step — arguments for the whole program, outputs from their step on — what
the simulated machine charges for the same program run once (RUNTIME-MEM-3).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .. import context
from ..errors import BackendError, OutOfMemoryError
from ..frontend.graph import RESIDENT
from ..ir import TensorType
from ..ops.values import asarray
from ..sim.units import fmt_bytes

__all__ = ["DeviceArray", "device_put", "MemoryPlan", "PlanEntry", "nbytes_of"]


def nbytes_of(t: TensorType) -> int:
    """The bytes of a value of type ``t`` on a device (its storage dtype, row-major)."""
    return int(np.prod(t.shape, dtype=np.int64)) * t.dtype.itemsize


class DeviceArray:
    """A value on a device (RUNTIME-MEM-1): ``device``, ``buffer`` and ``type``."""

    __slots__ = ("device", "buffer", "type", "_finalizer", "__weakref__")

    def __init__(self, device, buffer, type: TensorType):
        self.device, self.buffer, self.type = device, buffer, type
        self._finalizer = weakref.finalize(self, buffer.allocator.free, buffer) if buffer.owner else None

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return self.type.rank

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.type)

    def numpy(self) -> np.ndarray:
        """A host copy (counted device→host bytes)."""
        host = np.empty(self.shape, self.dtype)
        self.device.synchronize()
        self.device.allocator.copyout(host, self.buffer)
        return host

    def __array__(self, dtype=None, copy=None):
        host = self.numpy()
        return host if dtype is None else host.astype(dtype)

    def __repr__(self) -> str:
        return f"DeviceArray({self.type} on {self.device.name})"


RESIDENT.append(DeviceArray)  # jit passes device values through (frontend.graph.RESIDENT)


def device_put(x, device) -> DeviceArray:
    """``x`` (host data, an Array, or a DeviceArray) as a :class:`DeviceArray` of ``device`` (a
    Device, a device backend, or its registered name); data already there is returned as is."""
    device = _device_of(device)
    if isinstance(x, DeviceArray):
        if x.device is device:
            return x
        out = device_put(x.numpy(), device)
        out.type = x.type
        return out
    array = asarray(x)
    host = np.ascontiguousarray(array.data)
    buf = device.allocator.alloc(host.nbytes)
    device.allocator.copyin(buf, host)
    return DeviceArray(device, buf, array.type)


def _device_of(device):
    if isinstance(device, str):
        device = context.backend(device)
    device = getattr(device, "device", device)
    if not hasattr(device, "allocator"):
        raise BackendError(f"device_put puts data on a device or a device backend, got {device!r}",
                           fix="pass 'cuda', 'cuda-cpu' or 'interp-tiles' (or their backends' .device)")
    return device


@dataclass(frozen=True)
class PlanEntry:
    """One value of a plan: its name, kind (``argument``, ``constant``, ``intermediate``,
    ``output``), bytes, the steps it is live from and to, its arena offset (intermediates)."""

    name: str
    kind: str
    nbytes: int
    first: int
    last: int
    offset: int | None = None


@dataclass(frozen=True)
class MemoryPlan:
    """A program's memory (see the module docstring)."""

    entries: tuple
    steps: int
    arena_bytes: int
    peak_bytes: int

    @classmethod
    def of(cls, values: list, steps: int, align: int = 256) -> "MemoryPlan":
        """The plan of ``values``: ``(name, kind, nbytes, first, last)`` over ``steps`` steps;
        arena offsets are multiples of ``align`` bytes."""
        placed, entries = [], {}
        order = sorted(range(len(values)), key=lambda i: (-values[i][2], values[i][3], i))
        for i in order:
            name, kind, nbytes, first, last = values[i]
            offset = None
            if kind == "intermediate":
                size = -(-max(nbytes, 1) // align) * align
                offset = _first_fit(placed, size, first, last)
                placed.append((offset, size, first, last))
            entries[i] = PlanEntry(name, kind, nbytes, first, last, offset)
        arena = max((o + n for o, n, _, _ in placed), default=0)
        live = [0] * (steps + 1)
        for _, _, nbytes, first, last in values:
            for t in range(first, last + 1):
                live[t] += nbytes
        return cls(tuple(entries[i] for i in range(len(values))), steps, arena, max(live, default=0))

    def check(self, device, extra: int = 0) -> None:
        """An OutOfMemoryError naming the largest value when the plan (arena, arguments, outputs,
        constants) does not fit ``device``'s memory (RUNTIME-MEM-2)."""
        capacity = getattr(device, "capacity", None)
        need = self.arena_bytes + sum(e.nbytes for e in self.entries if e.kind != "intermediate") + extra
        if capacity is None or need <= capacity:
            return
        big = max(self.entries, key=lambda e: e.nbytes)
        raise OutOfMemoryError(f"the program needs {fmt_bytes(need)} on {device.name} ({fmt_bytes(self.arena_bytes)} "
                               f"of intermediates at their peak, the rest arguments, outputs and constants), more than "
                               f"its {fmt_bytes(capacity)}; the largest value is {big.name} ({fmt_bytes(big.nbytes)}, "
                               f"{big.kind})", fix="use smaller shapes, or shard the program over a mesh")

    def __str__(self) -> str:
        rows = [f"memory plan: {len(self.entries)} values over {self.steps} steps, arena {self.arena_bytes:,} B, "
                f"peak {self.peak_bytes:,} B live"]
        rows += [f"  {e.name:<12} {e.kind:<12} {e.nbytes:>12,} B  steps {e.first}..{e.last}"
                 + (f"  at +{e.offset:,}" if e.offset is not None else "") for e in self.entries]
        return "\n".join(rows)


def _first_fit(placed, nbytes: int, first: int, last: int) -> int:
    """The lowest offset where ``nbytes`` overlap no placed value live at the same time."""
    busy = sorted((o, o + n) for o, n, f, l in placed if not (l < first or last < f))
    offset = 0
    for start, end in busy:
        if offset + nbytes <= start:
            break
        offset = max(offset, end)
    return offset
