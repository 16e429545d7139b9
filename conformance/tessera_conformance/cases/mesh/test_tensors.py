"""MESH-TENSOR-1, MESH-TENSOR-2: global view and shards, pending values, from_shards, padding,
abstract tensors and per-device bytes."""
import math

import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_ref.errors import AbstractValueError, CollectiveError, LayoutError
from tessera_conformance import assert_bits, clause, eager, not_applicable, oracle_only

from ._reference import AXES, BF16, expected_shard, mesh_of, wide

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("building and splitting a DistTensor is dist's; no backend takes part")

S = dist.ShardSpec
IDENTITY = {"sum": np.float32(-0.0), "max": np.float32(-np.inf), "min": np.float32(np.inf), "prod": np.float32(1.0)}


def _specials(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1)
    flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45]
    return x


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@clause("MESH-TENSOR-1")
def test_data_is_converted_then_split(backend, mesh_shape, dtype):
    """``data`` becomes the storage format (round to nearest even), each device holds its block,
    and the global value is the converted data bit for bit."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    x = _specials(wide(np.random.default_rng(4), (4 * mesh.size, 2 * mesh_shape[-1])))
    want = x.astype(BF16) if dtype == "bf16" else x
    layouts = [(S(("row",), (axes,)), (axes, ())), (S(("col",), (axes[-1],)), ((), (axes[-1],)))]
    if len(axes) > 1:
        layouts.append((S(("row", "col"), (axes[0], axes[-1])), ((axes[0],), (axes[-1],))))
    for spec, dims in layouts:
        t = dist.tensor(x.shape, spec, mesh, dtype=dtype, data=x)
        for d in range(mesh.size):
            assert_bits(t.shard(d), expected_shard(want, dims, axes, mesh_shape, d), f"{spec} device {d}")
    assert_bits(eager(backend, t.numpy), want)


@LIBRARY
@clause("MESH-TENSOR-1")
def test_replicated_values_are_stored_once(backend, mesh_shape):
    """Local values are stacked: size 1 along every mesh axis the tensor does not vary over."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    x = np.arange(4 * mesh_shape[-1], dtype=np.float32).reshape(-1, 1) * np.ones((1, 3), np.float32)
    t = dist.tensor(x.shape, S(("row",), (axes[-1],)), mesh, data=x)
    assert t.local.shape == (1,) * (len(axes) - 1) + (mesh_shape[-1], 4, 3)
    r = dist.tensor(x.shape, None, mesh, data=x)
    assert r.local.shape == (1,) * len(axes) + x.shape
    assert all(np.array_equal(r.shard(d), x) for d in range(mesh.size))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@clause("MESH-TENSOR-1")
def test_random_init_is_the_same_global_tensor_on_every_layout(backend, mesh_shape, dtype):
    """``init="randn"/"rand"`` hold the global bits of ``op.randn``/``op.rand`` with that seed."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    shape, seed = (2 * math.prod(mesh_shape), 6), 77
    want_n = eager(backend, lambda: op.randn(shape, seed=seed, dtype=dtype))
    want_u = eager(backend, lambda: op.rand(shape, seed=seed, dtype=dtype))
    for spec in (S(), S(("row",), (axes,)), S(("row",), (axes[-1],)), S(("col",), (axes[0],), pad=True)):
        tn = dist.tensor(shape, spec, mesh, dtype=dtype, init="randn", seed=seed)
        tu = dist.tensor(shape, spec, mesh, dtype=dtype, init="rand", seed=seed)
        assert_bits(eager(backend, tn.numpy), want_n, str(spec))
        assert_bits(eager(backend, tu.numpy), want_u, str(spec))
    other = dist.tensor(shape, S(), mesh, dtype=dtype, init="randn", seed=seed + 1)
    assert not np.array_equal(eager(backend, other.numpy), want_n)


@pytest.mark.parametrize("op_", ["sum", "max", "min", "prod"])
@clause("MESH-TENSOR-1")
def test_pending_from_a_global_value(backend, mesh_shape, op_):
    """Rank 0 of the pending axes holds the value, every other rank the identity; the global
    value is the given one bit for bit; ``shard`` is each device's contribution."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    pending = axes[-1:] if len(axes) == 1 else axes[1:]
    x = _specials(wide(np.random.default_rng(5), (2, 4)))
    lay = S(None, pending, reduce=op_).layout(2)
    t = dist.tensor(x.shape, lay, mesh, data=x)
    for d in range(mesh.size):
        c = mesh.coords(d)
        first = all(c[a] == 0 for a in pending)
        assert_bits(t.shard(d), x if first else np.full(x.shape, IDENTITY[op_]), f"device {d}")
    assert_bits(eager(backend, t.numpy), x)


@clause("MESH-TENSOR-1")
def test_from_shards_by_index_and_by_name(backend, mesh_shape):
    """``from_shards`` takes a list by device index or a dict by name; blocks assemble by layout."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    blocks = [np.full((2, 3), d, np.float32) for d in range(mesh.size)]
    spec = S(("row",), (axes,))
    t = dist.from_shards(blocks, spec, mesh)
    u = dist.from_shards({f"cuda:{d}": b for d, b in enumerate(blocks)}, spec, mesh)
    want = np.concatenate(blocks)  # the blocks of dp+tp+pp in row-major device order
    assert_bits(eager(backend, t.numpy), want)
    assert_bits(eager(backend, u.numpy), want)


@LIBRARY
@clause("MESH-TENSOR-1")
def test_from_shards_disagreements_are_collective_errors(backend, mesh_shape):
    """Shapes that differ, or replicated devices that differ (even −0 against +0), are
    CollectiveErrors naming the devices."""
    mesh = mesh_of(mesh_shape)
    if mesh.size < 2:
        not_applicable("needs two devices to disagree")
    a = np.zeros((2, 3), np.float32)
    bad = [a] * (mesh.size - 1) + [np.zeros((3, 3), np.float32)]
    with pytest.raises(CollectiveError) as info:
        dist.from_shards(bad, S(), mesh)
    assert f"cuda:{mesh.size - 1}" in str(info.value)
    neg = a.copy()
    neg[0, 0] = -0.0
    with pytest.raises(CollectiveError):
        dist.from_shards([a] * (mesh.size - 1) + [neg], S(), mesh)


# -- MESH-TENSOR-2 ---------------------------------------------------------------------------------

@LIBRARY
@clause("MESH-TENSOR-2")
def test_uneven_split_needs_pad(backend, mesh_shape):
    """``p`` not dividing ``n`` is a LayoutError whose fix names ``pad=True`` and the block size."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    p = mesh_shape[-1]
    if p == 1:
        not_applicable("every size divides over one device")
    n = 3 * p + 1
    with pytest.raises(LayoutError) as info:
        dist.tensor((n, 2), S(("row",), (axes[-1],)), mesh, data=np.ones((n, 2), np.float32))
    assert "pad=True" in info.value.fix and str(-(-n // p)) in info.value.fix


@clause("MESH-TENSOR-2")
def test_padded_blocks_hold_their_slice_and_positive_zeros(backend, mesh_shape):
    """Block ``b`` holds elements ``b·ceil(n/p)…``; the end of the last blocks is +0."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    for axis, p in zip(axes, mesh_shape):
        n = 2 * p - 1 if p > 2 else p + 1
        x = -np.arange(1, n + 1, dtype=np.float32)  # negative: a −0 fill would show
        t = dist.tensor((n,), S((0,), (axis,), pad=True), mesh, data=x)
        length = -(-n // p)
        assert t.local_shape == (length,)
        for d in range(mesh.size):
            b = mesh.coords(d)[axis]
            want = np.zeros(length, np.float32)
            piece = x[b * length:(b + 1) * length]
            want[:len(piece)] = piece
            assert_bits(t.shard(d), want, f"{axis} device {d}")
        assert_bits(eager(backend, t.numpy), x)


@LIBRARY
@clause("MESH-TENSOR-2")
def test_uneven_split_over_several_axes_is_an_error(backend, mesh_shape):
    """Padding applies to a dimension split over one axis only."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    if len(axes) < 2:
        not_applicable("needs two mesh axes")
    n = math.prod(mesh_shape) + 1
    with pytest.raises(LayoutError):
        dist.tensor((n,), S((0,), (axes,), pad=True), mesh, data=np.ones(n, np.float32))


@pytest.mark.parametrize("dtype, bits", [("f32", 32), ("bf16", 16), ("fp8", 8), ("fp4", 4), ("fp6", 6)])
@clause("MESH-TENSOR-2")
def test_abstract_tensors_have_bytes_but_no_values(backend, mesh_shape, dtype, bits):
    """Abstract: local shapes and packed bytes per device work; values raise AbstractValueError."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    p = mesh_shape[-1]
    t = dist.tensor((8 * p, 16), S(("row",), (axes[-1],)), mesh, dtype=dtype)
    assert t.is_abstract and t.local_shape == (8, 16)
    assert t.nbytes_per_device == 8 * 16 * bits // 8 and t.nbytes == 8 * p * 16 * bits // 8
    y = op.matmul(t, dist.tensor((16, 4), None, mesh, dtype=dtype))
    assert y.is_abstract and y.shape == (8 * p, 4) and y.layout.dims == ((axes[-1],), ())
    for what in (t.numpy, lambda: t.shard(0), y.numpy):
        with pytest.raises(AbstractValueError):
            eager(backend, what)


@LIBRARY
@clause("MESH-TENSOR-2")
def test_the_seeds_examples(backend):
    """Seed 000 §3.3 and seed 002's 2 TB weight: the bytes per device the clause gives."""
    mesh = dist.Mesh(axes=["tp", "dp"], devices=range(8), shape=(4, 2))
    x = dist.tensor((1024, 1024), S(("row",), ("tp",)), mesh, dtype="fp32")
    assert x.nbytes_per_device == 256 * 1024 * 4 == 1_048_576
    seed002 = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))
    w = dist.tensor((1_000_000, 1_000_000), S(("row", "col"), ("tp", "pp")), seed002, dtype="bf16")
    assert w.nbytes_per_device == 250_000 * 500_000 * 2 == 250 * 10**9 and w.nbytes == 2 * 10**12
    nvl72 = dist.Mesh(("dp", "tp", "pp"), range(72), (4, 9, 2))
    with pytest.raises(LayoutError) as info:
        dist.tensor((1_000_000, 1_000_000), S(("row", "col"), ("tp", "pp")), nvl72, dtype="bf16")
    assert "pad=True" in info.value.fix and "111112" in info.value.fix.replace(",", "")
    w = dist.tensor((1_000_000, 1_000_000), S(("row", "col"), ("tp", "pp"), pad=True), nvl72, dtype="bf16")
    assert w.local_shape == (111_112, 500_000)
