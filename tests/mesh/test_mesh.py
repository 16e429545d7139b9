"""Meshes (MESH-1): shapes, the default-shape rule, device names, coordinates, sub-meshes, groups."""
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera_ref import dist
from tessera_ref.errors import MeshError, TesseraError

from mesh_reference import coords_of


def _prime_factors(n: int) -> list:
    out, p = [], 2
    while n > 1:
        if n % p == 0:
            out.append(p)
            n //= p
        else:
            p += 1
    return out


def _rule(n: int, naxes: int) -> tuple:
    """MESH-1.2 in integer arithmetic: the prime factors, ascending, are dealt out; each axis
    but the last takes at least one factor and more while its size s satisfies s^k <= R
    (s <= R^(1/k) without floating point; R devices left for k axes)."""
    factors, shape, rest = _prime_factors(n), [], n
    for i in range(naxes - 1):
        k, size = naxes - i, 1
        while factors and (size == 1 or (size * factors[0]) ** k <= rest):
            size *= factors.pop(0)
        shape.append(size)
        rest //= size
    return tuple(shape) + (rest,)


@pytest.mark.parametrize("n, axes, expected", [
    (8, ("tp", "dp"), (2, 4)),          # seed 003 §3.5: Mesh(axes=["tp", "dp"], devices=range(8))
    (72, ("tp", "pp", "dp"), (4, 2, 9)),  # seed 002 §2.4: Mesh(axes=["tp", "pp", "dp"], devices=range(72))
    (72, ("a", "b"), (8, 9)),
    (64, ("a", "b", "c"), (4, 4, 4)),   # 64^(1/3) is 3.9999… in floating point
    (12, ("a", "b", "c"), (2, 2, 3)),
    (18, ("a", "b"), (2, 9)),
    (6, ("a", "b", "c"), (2, 3, 1)),
    (7, ("a", "b"), (7, 1)),            # a prime: everything on the first axis
    (13, ("a", "b", "c"), (13, 1, 1)),
    (1, ("a", "b"), (1, 1)),
    (5, ("a",), (5,)),
])
def test_default_shape_rule(n, axes, expected):
    m = dist.Mesh(axes=list(axes), devices=range(n))
    assert m.shape == expected
    assert dist.default_shape(n, len(axes)) == expected
    assert math.prod(m.shape) == n
    assert repr(m).startswith("Mesh(" + ", ".join(f"{a}={s}" for a, s in zip(axes, expected)))


@given(n=st.integers(1, 400), naxes=st.integers(1, 4))
def test_default_shape_matches_integer_rule(n, naxes):
    shape = dist.default_shape(n, naxes)
    assert shape == _rule(n, naxes)
    assert math.prod(shape) == n and len(shape) == naxes


def test_seed_nvl72_mesh():
    """Seed 004 §2.1 verbatim."""
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    assert (mesh.shape, mesh.axes, mesh.size, mesh.ndim) == ((4, 9, 2), ("dp", "tp", "pp"), 72, 3)
    assert mesh.sizes == {"dp": 4, "tp": 9, "pp": 2}
    assert mesh.axis_size("tp") == 9 and mesh.axis_size(("tp", "pp")) == 18
    # row-major numbering: (dp, tp, pp) = (1, 2, 1) is device (1*9 + 2)*2 + 1 = 23
    assert mesh.device_at(dp=1, tp=2, pp=1) == "cuda:23"
    assert mesh.coords("cuda:23") == {"dp": 1, "tp": 2, "pp": 1}


def test_device_names_from_ints_and_strings():
    assert dist.Mesh("x", range(3)).devices == ("cuda:0", "cuda:1", "cuda:2")
    m = dist.Mesh(("x",), ["gpu-a", "gpu-b"])
    assert m.devices == ("gpu-a", "gpu-b")
    assert m.index_of("gpu-b") == 1 and m.index_of(1) == 1
    mixed = dist.Mesh("x", [3, "cuda:0"])
    assert mixed.devices == ("cuda:3", "cuda:0")
    assert dist.Mesh("x", range(4)) == dist.Mesh("x", [f"cuda:{i}" for i in range(4)])
    assert dist.Mesh("x", range(4)) != dist.Mesh("y", range(4))
    assert hash(dist.Mesh("x", range(4))) == hash(dist.Mesh("x", range(4)))


@pytest.mark.parametrize("shape", [(1,), (2, 2), (2, 3, 2), (4, 9, 2), (3, 1, 5)])
def test_coords_device_at_round_trip(shape):
    axes = tuple("abcd"[: len(shape)])
    m = dist.Mesh(axes, range(math.prod(shape)), shape)
    for i, name in enumerate(m.devices):
        c = m.coords(i)
        assert c == coords_of(i, axes, shape)  # independent row-major division
        assert m.coords(name) == c
        assert m.device_at(**c) == name == f"cuda:{i}"
        assert m.index_of(name) == i


def test_sub_meshes():
    m = dist.Mesh(("dp", "tp", "pp"), range(12), (2, 3, 2))
    s0, s1 = m.sub(pp=0), m.sub(pp=1)
    assert s0.axes == s1.axes == ("dp", "tp") and s0.shape == (2, 3)
    # device (dp, tp, pp) is (dp*3 + tp)*2 + pp
    assert s0.devices == tuple(f"cuda:{(d * 3 + t) * 2}" for d in range(2) for t in range(3))
    assert s1.devices == tuple(f"cuda:{(d * 3 + t) * 2 + 1}" for d in range(2) for t in range(3))
    assert not set(s0.devices) & set(s1.devices)
    t = m.sub(dp=1, pp=0)
    assert t.axes == ("tp",) and t.devices == ("cuda:6", "cuda:8", "cuda:10")
    assert s0.sub(dp=1) == t


def test_groups_of_a_2x3_mesh():
    m = dist.Mesh(("a", "b"), range(6), (2, 3))  # device = 3a + b
    assert m.groups("a") == [(0, 3), (1, 4), (2, 5)]
    assert m.groups("b") == [(0, 1, 2), (3, 4, 5)]
    assert m.groups(("a", "b")) == [(0, 1, 2, 3, 4, 5)]
    # the rank order of a multi-axis group is row-major over the mesh axes (ascending device),
    # whatever order the axes are named in (the fold order of NUM-RED-3, MESH-COLL-1)
    assert m.groups(("b", "a")) == [(0, 1, 2, 3, 4, 5)]


def test_groups_of_nvl72_cover_every_device_once():
    m = dist.Mesh(("dp", "tp", "pp"), range(72), (4, 9, 2))
    for axes, size in (("dp", 4), ("tp", 9), ("pp", 2), (("dp", "pp"), 8)):
        groups = m.groups(axes)
        assert len(groups) == 72 // size and all(len(g) == size for g in groups)
        assert sorted(d for g in groups for d in g) == list(range(72))
        names = (axes,) if isinstance(axes, str) else axes
        for g in groups:  # members differ only along the group's axes
            others = {tuple(v for a, v in m.coords(d).items() if a not in names) for d in g}
            assert len(others) == 1
            assert list(g) == sorted(g)


def _raises_with_fix(exc_type, fn):
    with pytest.raises(exc_type) as info:
        fn()
    assert isinstance(info.value, TesseraError)
    assert info.value.fix, f"{type(info.value).__name__} without a fix: {info.value}"
    assert "test_mesh.py" in (info.value.location or "")  # names the user's line
    return info.value


def test_mesh_errors_are_tessera_errors_with_a_fix():
    m = dist.Mesh(("dp", "tp"), range(8), (2, 4))
    e = _raises_with_fix(MeshError, lambda: m.axis_size("pp"))
    assert "'pp'" in str(e) and "'dp'" in e.fix
    e = _raises_with_fix(MeshError, lambda: dist.Mesh(("dp", "tp"), range(8), (3, 3)))
    assert "(3, 3)" in str(e) and "8" in str(e)
    e = _raises_with_fix(MeshError, lambda: dist.Mesh("x", [0, 1, "cuda:1"]))
    assert "cuda:1" in str(e)
    _raises_with_fix(MeshError, lambda: dist.Mesh(("x", "x"), range(4)))
    _raises_with_fix(MeshError, lambda: dist.Mesh(("x", "y"), range(4), (4,)))
    _raises_with_fix(MeshError, lambda: dist.Mesh("x", []))
    _raises_with_fix(MeshError, lambda: dist.Mesh("x", [-1]))
    _raises_with_fix(MeshError, lambda: dist.Mesh("x", [True]))
    _raises_with_fix(MeshError, lambda: dist.Mesh("1x", range(2)))
    _raises_with_fix(MeshError, lambda: m.sub(pp=0))
    _raises_with_fix(MeshError, lambda: m.sub(dp=2))
    _raises_with_fix(MeshError, lambda: m.sub(dp=0, tp=0))
    _raises_with_fix(MeshError, lambda: m.device_at(dp=0))
    _raises_with_fix(MeshError, lambda: m.device_at(dp=0, tp=4))
    _raises_with_fix(MeshError, lambda: m.coords(8))
    _raises_with_fix(MeshError, lambda: m.coords("cuda:9"))
    _raises_with_fix(MeshError, lambda: m.groups("pp"))
