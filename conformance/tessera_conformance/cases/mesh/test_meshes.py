"""MESH-1, MESH-1.2: meshes, device numbering, sub-meshes, groups and rank order, the default shape."""
import math

import numpy as np
import pytest

from tessera_ref import dist
from tessera_ref.errors import MeshError
from tessera_conformance import assert_bits, clause, eager, not_applicable, oracle_only

from ._reference import AXES, coords_of, default_shape_rule, flat_of, fold, groups_of, mesh_of

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("meshes, their device numbering and default shapes are dist's; no backend takes part")


@LIBRARY
@clause("MESH-1")
def test_devices_are_numbered_row_major(backend, mesh_shape):
    """Device names, coordinates and equality follow the row-major numbering."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    assert (mesh.axes, mesh.shape, mesh.size) == (axes, mesh_shape, math.prod(mesh_shape))
    assert mesh.devices == tuple(f"cuda:{i}" for i in range(mesh.size))
    for i in range(mesh.size):
        c = coords_of(i, axes, mesh_shape)
        assert mesh.coords(i) == c and mesh.coords(f"cuda:{i}") == c
        assert mesh.device_at(**c) == f"cuda:{i}" and flat_of(c, axes, mesh_shape) == i
    assert mesh == dist.mesh(devices=[f"cuda:{i}" for i in range(mesh.size)], axes=axes, shape=mesh_shape)
    assert mesh != dist.Mesh(axes, range(1, mesh.size + 1), mesh_shape)
    assert mesh != dist.Mesh(tuple(a + "2" for a in axes), range(mesh.size), mesh_shape)


@LIBRARY
@clause("MESH-1")
def test_sub_mesh_keeps_the_other_axes_in_order(backend, mesh_shape):
    """``mesh.sub(a=c)`` holds the devices with that coordinate over the remaining axes."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    if len(axes) < 2:
        not_applicable("a sub-mesh keeps at least one axis")
    last = axes[-1]
    for c in range(mesh_shape[-1]):
        sub = mesh.sub(**{last: c})
        assert sub.axes == axes[:-1] and sub.shape == mesh_shape[:-1]
        want = tuple(f"cuda:{d}" for d in range(mesh.size) if coords_of(d, axes, mesh_shape)[last] == c)
        assert sub.devices == want


@clause("MESH-1")
def test_groups_and_rank_order(backend, mesh_shape):
    """Groups differ only along the named axes; ranks are ascending device index whatever order
    the axes are listed in; a pending sum over reversed axes folds in that rank order."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    for k in range(1, len(axes) + 1):
        for group_axes in (axes[-k:], tuple(reversed(axes[-k:]))):
            assert [tuple(g) for g in mesh.groups(group_axes)] == groups_of(axes, mesh_shape, group_axes)
    rng = np.random.default_rng(1)
    c = [(rng.standard_normal(3) * 2.0 ** rng.integers(-24, 25, 3)).astype(np.float32) for _ in range(mesh.size)]
    reversed_axes = tuple(reversed(axes))
    x = dist.from_shards(c, dist.ShardSpec(None, reversed_axes, reduce="sum"), mesh)
    got = eager(backend, lambda: dist.all_reduce(x, reversed_axes))
    assert_bits(got, fold(c))  # ascending device index, not the listed axis order


@LIBRARY
@pytest.mark.parametrize("make, needle", [
    (lambda m: m.axis_size("ep"), "'ep'"),
    (lambda m: dist.Mesh(m.axes, range(m.size + 1), m.shape), None),
    (lambda m: dist.Mesh(m.axes, [0] + list(range(m.size - 1)) + [0], None), "cuda:0"),
    (lambda m: m.device_at(**{a: s for a, s in zip(m.axes, m.shape)}), None),
    (lambda m: m.coords(m.size), None),
    (lambda m: m.groups("ep"), "'ep'"),
    (lambda m: m.sub(ep=0), None),
])
@clause("MESH-1")
def test_mistakes_are_mesh_errors_with_a_fix(backend, mesh_shape, make, needle):
    """Unknown axis, wrong device count, a device twice, a coordinate out of range: MeshError."""
    mesh = mesh_of(mesh_shape)
    with pytest.raises(MeshError) as info:
        make(mesh)
    assert info.value.fix
    if needle:
        assert needle in str(info.value)


@LIBRARY
@pytest.mark.parametrize("n, axes, shape", [
    (8, ("tp", "dp"), (2, 4)),
    (72, ("tp", "pp", "dp"), (4, 2, 9)),
    (72, ("a", "b"), (8, 9)),
    (12, ("a", "b", "c"), (2, 2, 3)),
    (7, ("a", "b"), (7, 1)),
    (5, ("a",), (5,)),
])
@clause("MESH-1.2")
def test_default_shape_table(backend, n, axes, shape):
    """The spec's table, and the repr prints the chosen shape."""
    mesh = dist.Mesh(axes=list(axes), devices=range(n))
    assert mesh.shape == shape == default_shape_rule(n, len(axes))
    sizes = ", ".join(f"{a}={s}" for a, s in zip(axes, shape))
    assert repr(mesh).startswith(f"Mesh({sizes}")
    if (n, axes) == (8, ("tp", "dp")):
        assert repr(mesh) == "Mesh(tp=2, dp=4; 8 devices cuda:0..cuda:7)"


@LIBRARY
@clause("MESH-1.2")
def test_default_shape_follows_the_integer_rule(backend):
    """Every device count up to 130 over one to four axes follows the factor-dealing rule."""
    for n in range(1, 131):
        for k in range(1, 5):
            shape = dist.Mesh(AXES[:k] if k <= 3 else AXES + ("ep",), range(n)).shape
            assert shape == default_shape_rule(n, k), (n, k)
