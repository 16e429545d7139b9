"""Device meshes: named axes over a set of devices (MESH-1).

A :class:`Mesh` arranges ``N`` devices in an N-D grid with named axes (``dp``, ``tp``,
``pp``, any identifiers). Devices are numbered row-major over the axes in the order given:
the device at coordinates ``(c_0, …, c_{n−1})`` of a mesh of shape ``(p_0, …, p_{n−1})`` is
``devices[((c_0·p_1 + c_1)·p_2 + c_2)…]``.

**Shape rule when ``shape`` is omitted (MESH-1.2).** One axis takes every device. With
several axes, the prime factors of the device count are dealt out in ascending order: each
axis but the last takes factors while its size stays at most ``R^(1/k)`` (``R`` devices left
for ``k`` axes; at least one factor), the last axis takes the rest. Small (power-of-two)
factors so land on the leading axes, where they divide the power-of-two sizes of most
tensors: 8 devices over ``("tp", "dp")`` are ``tp=2, dp=4``; 72 over ``("tp", "pp", "dp")``
are ``(4, 2, 9)`` — which is why seed 002's 1,000,000 × 1,000,000 weight splits evenly over
``tp`` and ``pp``. The repr prints the chosen shape.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import MeshError
from .world import check_engine

__all__ = ["Mesh", "mesh", "default_shape"]


def default_shape(n: int, naxes: int) -> tuple:
    """The shape MESH-1.2 picks for ``n`` devices over ``naxes`` axes."""
    factors, m, p = [], n, 2
    while m > 1:
        while m % p == 0:
            factors.append(p)
            m //= p
        p += 1
    shape, rest = [], n
    for i in range(naxes - 1):
        target, size = rest ** (1.0 / (naxes - i)), 1
        while factors and (size == 1 or size * factors[0] <= target + 1e-9):
            size *= factors.pop(0)
        shape.append(size)
        rest //= size
    return tuple(shape) + (rest,)


def _device_name(d) -> str:
    if isinstance(d, str):
        return d
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
        return f"cuda:{int(d)}"
    raise MeshError(f"a device is a name like 'cuda:3' or a non-negative int, got {d!r}",
                    fix="pass devices=range(8) or devices=[f'cuda:{i}' for i in range(8)]")


@dataclass(frozen=True, eq=False)
class Mesh:
    """Named axes over devices: ``Mesh(axes=["tp", "dp"], devices=range(8))`` (shape by
    MESH-1.2) or ``Mesh(axes=("dp", "tp", "pp"), devices=..., shape=(4, 9, 2))``.

    ``devices`` holds device names (ints ``i`` are named ``"cuda:i"``). Two meshes are equal
    when their axes, shape and devices are.
    """

    axes: tuple
    devices: tuple
    shape: tuple = None

    def __init__(self, axes, devices, shape=None):
        axes = (axes,) if isinstance(axes, str) else tuple(axes)
        names = tuple(_device_name(d) for d in devices)
        if not axes:
            raise MeshError("a mesh needs at least one axis", fix='pass axes=("dp",)')
        for a in axes:
            if not isinstance(a, str) or not a.isidentifier():
                raise MeshError(f"mesh axis names are identifiers, got {a!r}", fix='name axes like "dp", "tp", "pp"')
        if len(set(axes)) != len(axes):
            raise MeshError(f"mesh axes {axes} repeat a name", fix="give every axis its own name")
        if not names:
            raise MeshError("a mesh needs at least one device", fix="pass devices=range(n)")
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise MeshError(f"device {dup!r} appears twice in the mesh", fix="list every device once")
        if shape is None:
            shape = default_shape(len(names), len(axes))
        else:
            shape = (shape,) if isinstance(shape, int) else tuple(shape)
            if len(shape) != len(axes) or any(not isinstance(s, (int, np.integer)) or s < 1 for s in shape):
                raise MeshError(f"mesh shape {shape} does not give one positive size per axis {axes}",
                                fix=f"pass a shape of {len(axes)} positive ints")
            shape = tuple(int(s) for s in shape)
            if math.prod(shape) != len(names):
                raise MeshError(f"mesh shape {shape} holds {math.prod(shape)} devices but {len(names)} were given",
                                fix=f"pass {math.prod(shape)} devices or a shape whose product is {len(names)}")
        object.__setattr__(self, "axes", axes)
        object.__setattr__(self, "devices", names)
        object.__setattr__(self, "shape", shape)
        check_engine()  # a world of several processes needs an engine to reach them (MESH-MP-7)

    # -- sizes and names -------------------------------------------------------------------
    @property
    def size(self) -> int:
        """The number of devices."""
        return len(self.devices)

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def sizes(self) -> dict:
        """``{axis: size}`` in axis order."""
        return dict(zip(self.axes, self.shape))

    def axis_index(self, axis: str) -> int:
        """The position of ``axis`` among the mesh axes; a :class:`MeshError` if it is not one."""
        try:
            return self.axes.index(axis)
        except ValueError:
            raise MeshError(f"{axis!r} is not an axis of {self!r}",
                            fix=f"use one of {', '.join(map(repr, self.axes))}") from None

    def axis_size(self, axis) -> int:
        """The size of one axis, or the product of the sizes of a tuple of axes."""
        if isinstance(axis, (tuple, list)):
            return math.prod(self.axis_size(a) for a in axis)
        return self.shape[self.axis_index(axis)]

    def index_of(self, device) -> int:
        """The flat index of a device given by index or name."""
        if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
            if 0 <= device < self.size:
                return int(device)
            raise MeshError(f"device index {device} is outside the mesh's {self.size} devices",
                            fix=f"use 0..{self.size - 1}")
        try:
            return self.devices.index(device)
        except ValueError:
            raise MeshError(f"device {device!r} is not in {self!r}",
                            fix=f"use an index 0..{self.size - 1} or a name like {self.devices[0]!r}") from None

    def coords(self, device) -> dict:
        """``{axis: coordinate}`` of a device (index or name)."""
        flat = self.index_of(device)
        return dict(zip(self.axes, (int(c) for c in np.unravel_index(flat, self.shape))))

    def device_at(self, **coords) -> str:
        """The name of the device at the given coordinates (every axis given)."""
        missing = [a for a in self.axes if a not in coords]
        for a in coords:
            self.axis_index(a)
        if missing:
            raise MeshError(f"device_at needs a coordinate for every axis; missing {missing}",
                            fix=f"pass {', '.join(f'{a}=...' for a in self.axes)}")
        for a, c in coords.items():
            if not 0 <= c < self.axis_size(a):
                raise MeshError(f"coordinate {a}={c} is outside 0..{self.axis_size(a) - 1}",
                                fix=f"pass {a}= a coordinate in 0..{self.axis_size(a) - 1}")
        return self.devices[int(np.ravel_multi_index(tuple(coords[a] for a in self.axes), self.shape))]

    # -- sub-meshes and groups ---------------------------------------------------------------
    def sub(self, **fixed) -> "Mesh":
        """The sub-mesh where the given axes are fixed, e.g. ``mesh.sub(pp=0)`` (the devices of
        pipeline stage 0, over the remaining axes, names kept)."""
        for a, c in fixed.items():
            i = self.axis_index(a)
            if not isinstance(c, (int, np.integer)) or not 0 <= c < self.shape[i]:
                raise MeshError(f"sub-mesh coordinate {a}={c!r} is outside 0..{self.shape[i] - 1}",
                                fix=f"fix {a} to an int in 0..{self.shape[i] - 1}")
        rest = [a for a in self.axes if a not in fixed]
        if not rest:
            raise MeshError("a sub-mesh needs at least one free axis",
                            fix="leave one axis unfixed, or use device_at(...) for one device")
        grid = np.arange(self.size).reshape(self.shape)
        index = tuple(fixed.get(a, slice(None)) for a in self.axes)
        picked = grid[index].reshape(-1)
        return Mesh(rest, [self.devices[i] for i in picked], tuple(self.axis_size(a) for a in rest))

    def groups(self, axes) -> list:
        """The device groups a collective over ``axes`` runs in: tuples of flat device
        indices that differ only in their coordinates along ``axes`` (ascending rank order
        within a group — row-major over the mesh axes, whatever order ``axes`` lists them in,
        the order NUM-RED-3 folds in — groups in row-major order of the other axes)."""
        axes = (axes,) if isinstance(axes, str) else tuple(axes)
        positions = sorted(self.axis_index(a) for a in axes)
        others = [i for i in range(self.ndim) if i not in positions]
        grid = np.arange(self.size).reshape(self.shape).transpose(others + positions)
        return [tuple(int(d) for d in row) for row in grid.reshape(-1, math.prod(self.shape[p] for p in positions))]

    # -- identity ------------------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Mesh) and (self.axes, self.shape, self.devices) == (other.axes, other.shape, other.devices)

    def __hash__(self) -> int:
        return hash((self.axes, self.shape, self.devices))

    def __repr__(self) -> str:
        sizes = ", ".join(f"{a}={s}" for a, s in zip(self.axes, self.shape))
        devs = self.devices[0] if self.size == 1 else f"{self.devices[0]}..{self.devices[-1]}"
        return f"Mesh({sizes}; {self.size} devices {devs})"


def mesh(devices, axes, shape=None) -> Mesh:
    """``dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"),
    shape=(4, 9, 2))`` — the seeds' spelling of :class:`Mesh`."""
    return Mesh(axes, devices, shape)
