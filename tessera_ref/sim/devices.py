"""Naming the devices of a simulated machine: indices ``0..n-1`` and their names (SIM-TL-1)."""
from __future__ import annotations

import numbers

from ..errors import SimError

__all__ = ["DeviceNames", "device_names", "resolve_device"]


#: The most devices a simulated machine has (the largest GPU clusters built are ~10^5 GPUs).
MAX_DEVICES = 1 << 17


class DeviceNames(tuple):
    """The names of a machine's devices in index order (a tuple), with :attr:`positions`, the
    index of each name: looking a device up costs the same on 8 devices and on 100,000 (SIM-TL-1)."""

    def __new__(cls, names=()):
        self = super().__new__(cls, names)
        self.positions = {name: i for i, name in enumerate(self)}
        return self


def device_names(n_devices, names=None) -> DeviceNames:
    """The names of ``n_devices`` devices: ``names`` checked (distinct strings, one per device),
    or ``("cuda:0", "cuda:1", …)`` when ``names`` is None."""
    if not isinstance(n_devices, numbers.Integral) or isinstance(n_devices, bool) or n_devices < 1:
        raise SimError(f"a simulated machine needs a positive number of devices, got {n_devices!r}",
                       fix="pass n_devices=8 (or leave it out for the preset's NVLink domain size)")
    if n_devices > MAX_DEVICES:
        raise SimError(f"a simulated machine has at most {MAX_DEVICES} devices, got {n_devices} (each device keeps "
                       "its own memory and timeline records)", fix=f"simulate {MAX_DEVICES} devices or fewer")
    if names is None:
        return DeviceNames(f"cuda:{i}" for i in range(int(n_devices)))
    names = DeviceNames(names)
    if len(names) != n_devices or not all(isinstance(x, str) for x in names) or len(names.positions) != len(names):
        raise SimError(f"device_names must be {n_devices} distinct strings, got {names!r}",
                       fix="pass one distinct name per device, or leave device_names out for cuda:0..")
    return names


def resolve_device(device, names: DeviceNames) -> int:
    """The index of ``device``, given as an index ``0 <= device < len(names)`` or as a name."""
    if type(device) is int:  # the common case first: an index
        if 0 <= device < len(names):
            return device
    elif isinstance(device, str):
        i = names.positions.get(device)
        if i is not None:
            return i
    elif isinstance(device, numbers.Integral) and not isinstance(device, bool) and 0 <= device < len(names):
        return int(device)
    span = f"{names[0]}..{names[-1]}" if len(names) > 1 else names[0]
    raise SimError(f"device {device!r} is not in this simulated machine ({len(names)} devices: {span})",
                   fix=f"use an index 0..{len(names) - 1} or a device name")
