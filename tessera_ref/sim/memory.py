"""The memory accountant: live and peak HBM bytes per device (SIM-MEM-1 … SIM-MEM-4).

``alloc`` charges a tensor's bytes to one device and returns a handle; ``free`` gives them
back. Crossing 80% of a device's capacity issues one :class:`~tessera_ref.errors.MemoryWarning`
per device (the seeds' guideline, seed 000 §3.6); an allocation that does not fit raises
:class:`~tessera_ref.errors.OutOfMemoryError` and changes nothing.
"""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass
from fractions import Fraction

from ..errors import MemoryWarning, OutOfMemoryError, SimError, user_location
from .devices import DeviceNames, resolve_device
from .units import fmt_bytes

__all__ = ["Allocation", "MemoryAccountant", "WARN_FRACTION"]

#: The share of HBM above which a device warns once (seed 000 §3.6: "within 80%").
WARN_FRACTION = Fraction(4, 5)


@dataclass(frozen=True, slots=True)
class Allocation:
    """The handle of one live tensor on one device: what :meth:`MemoryAccountant.alloc`
    returns and :meth:`MemoryAccountant.free` takes."""

    id: int
    device: int
    nbytes: int
    name: str
    location: str | None


class MemoryAccountant:
    """Live and peak bytes of each device of a machine whose devices have ``capacity`` bytes
    of HBM each; ``device_names`` names them (devices are addressed by index or name)."""

    def __init__(self, capacity: int, device_names: tuple):
        self.capacity = int(capacity)
        self.device_names = device_names if isinstance(device_names, DeviceNames) else DeviceNames(device_names)
        n = len(self.device_names)
        self._live = [0] * n
        self._peak = [0] * n
        self._tensors = [{} for _ in range(n)]  # per device: allocation id -> Allocation
        self._warned = [False] * n
        self._next_id = 0

    def alloc(self, device, nbytes, name: str, location: str | None = None) -> Allocation:
        """Charge ``nbytes`` of the tensor ``name`` to ``device`` (SIM-MEM-1).

        Raises :class:`~tessera_ref.errors.OutOfMemoryError` when live bytes would exceed the
        capacity (SIM-MEM-3; nothing changes) and warns once per device when they first exceed
        80% of it (SIM-MEM-2). ``location`` (``file:line``) defaults to the user's calling line.
        """
        d = resolve_device(device, self.device_names)
        if type(nbytes) is not int and (not isinstance(nbytes, numbers.Integral) or isinstance(nbytes, bool)) \
                or nbytes < 0:
            raise SimError(f"alloc of {name!r} on {self.device_names[d]}: nbytes must be a non-negative "
                           f"integer, got {nbytes!r}", fix="pass the tensor's size in bytes per device")
        nbytes = int(nbytes)
        location = location if location is not None else user_location()
        live = self._live[d] + nbytes
        if live > self.capacity:
            raise self._oom(d, nbytes, str(name), location)
        handle = Allocation(self._next_id, d, nbytes, str(name), location)
        self._next_id += 1
        self._tensors[d][handle.id] = handle
        self._live[d] = live
        self._peak[d] = max(self._peak[d], live)
        if not self._warned[d] and live * WARN_FRACTION.denominator > self.capacity * WARN_FRACTION.numerator:
            self._warned[d] = True
            self._warn(d, handle)
        return handle

    def require(self, device, nbytes: int, name: str, location: str | None = None) -> None:
        """Raise the :class:`~tessera_ref.errors.OutOfMemoryError` that :meth:`alloc` of
        ``nbytes`` on ``device`` would raise, recording nothing (a check before computing)."""
        d = resolve_device(device, self.device_names)
        if self._live[d] + int(nbytes) > self.capacity:
            raise self._oom(d, int(nbytes), str(name), location if location is not None else user_location())

    def free(self, handle: Allocation) -> None:
        """Give back the bytes of ``handle`` (SIM-MEM-1). Freeing a handle that is not live
        (freed twice, or from another machine) is a :class:`~tessera_ref.errors.SimError`."""
        ok = isinstance(handle, Allocation) and 0 <= handle.device < len(self._tensors)
        if not ok or self._tensors[handle.device].get(handle.id) is not handle:
            raise SimError(f"{handle!r} is not a live allocation of this machine (freed twice, or "
                           "allocated on another machine)", fix="free each handle from alloc() exactly once")
        del self._tensors[handle.device][handle.id]
        self._live[handle.device] -= handle.nbytes

    # -- queries ------------------------------------------------------------------------------
    def live(self, device) -> int:
        """Bytes live on ``device`` now."""
        return self._live[resolve_device(device, self.device_names)]

    def peak(self, device) -> int:
        """The most bytes that were ever live on ``device`` at once."""
        return self._peak[resolve_device(device, self.device_names)]

    def live_tensors(self, device) -> list:
        """The live :class:`Allocation` s of ``device``, largest first (ties: oldest first)."""
        tensors = self._tensors[resolve_device(device, self.device_names)].values()
        return sorted(tensors, key=lambda a: (-a.nbytes, a.id))

    def breakdown(self) -> dict:
        """``{device name: [(tensor name, bytes), …]}`` of the live tensors, largest first."""
        return {name: [(a.name, a.nbytes) for a in self.live_tensors(i)]
                for i, name in enumerate(self.device_names)}

    # -- messages -----------------------------------------------------------------------------
    def _percent(self, nbytes: int) -> str:
        return f"{100 * nbytes / self.capacity:.1f}%" if self.capacity else "-"

    def _largest(self, d: int, k: int = 3) -> str:
        top = self.live_tensors(d)[:k]
        return ", ".join(f"{a.name!r} ({fmt_bytes(a.nbytes)})" for a in top) or "none"

    def _oom(self, d: int, nbytes: int, name: str, location) -> OutOfMemoryError:
        live, cap = self._live[d], self.capacity
        return OutOfMemoryError(
            f"out of memory on {self.device_names[d]}: {name!r} needs {_exact(nbytes)}, but "
            + (f"its HBM holds only {_exact(cap)} (all of it free)" if not live else
               f"only {_exact(cap - live)} of its {_exact(cap)} of HBM is free ({_exact(live)} in use by "
               f"{self._largest(d)})"),
            fix=f"shard {name!r} over more devices (a ShardSpec partition over a larger mesh axis divides its "
                "bytes per device), store it in a smaller format (bf16 -> fp8 halves it), free tensors that are "
                "no longer needed, or use a preset with more HBM (`tessera-ref sim --presets`)",
            location=location)

    def _warn(self, d: int, handle: Allocation) -> None:
        live = self._live[d]
        message = MemoryWarning(
            f"HBM use on {self.device_names[d]} crossed 80% of its capacity: {_exact(live)} of "
            f"{fmt_bytes(self.capacity)} live ({self._percent(live)}) after allocating {handle.name!r} "
            f"({fmt_bytes(handle.nbytes)}); the guideline is to keep per-GPU HBM use within 80% (seed 000 §3.6) "
            "- shard large tensors over more devices or use smaller formats. Warned once per device.")
        filename, _, line = (handle.location or "").rpartition(":")
        if filename and line.isdigit():
            warnings.warn_explicit(message, MemoryWarning, filename, int(line))
        else:
            warnings.warn(message, stacklevel=3)


def _exact(n: int) -> str:
    """``12 GiB (12,884,901,888 B)``: rounded and exact."""
    short = fmt_bytes(n)
    return short if short.endswith(" B") else f"{short} ({n:,} B)"
