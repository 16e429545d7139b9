"""Distributed tensors (MESH-TENSOR-1/2): global view ↔ per-device blocks, padding, abstract
tensors, Philox initialization, from_shards."""
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mesh_reference import expected_shard, same_bits
from tessera_ref import dist, op
from tessera_ref.errors import AbstractValueError, CollectiveError, LayoutError
from tessera_ref.ir import ShardLayout

S = dist.ShardSpec

MESHES = {
    "1": dist.Mesh(("x",), range(1), (1,)),
    "2x2": dist.Mesh(("dp", "tp"), range(4), (2, 2)),
    "2x3x2": dist.Mesh(("dp", "tp", "pp"), range(12), (2, 3, 2)),
    "4x9x2": dist.Mesh(("dp", "tp", "pp"), range(72), (4, 9, 2)),
}


def _special_data(rng, shape, dtype=np.float32):
    """Random values with the bit patterns that must survive: ±0, ±inf, NaN, subnormals."""
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(1e3)
    flat = x.reshape(-1)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39], np.float32)
    if flat.size:
        k = min(flat.size, len(specials))
        flat[rng.choice(flat.size, k, replace=False)] = specials[:k]
    return x.astype(dtype)


@st.composite
def layouts_on(draw, mesh, allow_pad=True):
    """A rank-1..3 shape and a layout of it on ``mesh``: each dimension split over some of the
    mesh axes (each axis used at most once), sizes multiples of the split unless padded."""
    rank = draw(st.integers(1, 3))
    axes = list(draw(st.permutations(mesh.axes)))
    dims = []
    for _ in range(rank):
        k = draw(st.integers(0, min(2, len(axes))))
        dims.append(tuple(axes[:k]))
        del axes[:k]
    padded = allow_pad and draw(st.booleans())
    shape = []
    for d in dims:  # padding applies to dimensions split over one axis (MESH-TENSOR-2)
        p = math.prod(mesh.axis_size(a) for a in d)
        shape.append(draw(st.integers(1, 2 * p + 3)) if padded and len(d) < 2 else p * draw(st.integers(1, 3)))
    return tuple(shape), ShardLayout(tuple(dims), padded=padded)


@pytest.mark.parametrize("name", list(MESHES))
@settings(max_examples=25)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_global_view_and_shards(name, data, seed):
    mesh = MESHES[name]
    shape, layout = data.draw(layouts_on(mesh))
    x = _special_data(np.random.default_rng(seed), shape)
    t = dist.tensor(shape, layout, mesh, data=x)
    assert t.type.layout == layout and t.shape == shape
    assert same_bits(t.numpy(), x)
    assert same_bits(np.asarray(t), x)
    for i in range(mesh.size):
        want = expected_shard(x, layout.dims, mesh.axes, mesh.shape, i, layout.padded)
        assert t.local_shape == want.shape
        assert same_bits(t.shard(i), want), (i, mesh.coords(i))
    assert same_bits(t.shard(mesh.devices[-1]), expected_shard(x, layout.dims, mesh.axes, mesh.shape,
                                                                mesh.size - 1, layout.padded))


@pytest.mark.parametrize("name", list(MESHES))
@settings(max_examples=10)
@given(data=st.data())
def test_pending_reduction_built_from_a_global_value_keeps_it(name, data):
    """dist.tensor(data=x) with a pending reduction: the global value is x, bit for bit."""
    mesh = MESHES[name]
    shape, layout = data.draw(layouts_on(mesh, allow_pad=False))
    free = [a for a in mesh.axes if a not in layout.split_axes]
    if not free:
        return
    op_ = data.draw(st.sampled_from(["sum", "max", "min", "prod"]))
    pending = layout.replace(partial=tuple(free[:data.draw(st.integers(1, len(free)))]), partial_op=op_)
    x = _special_data(np.random.default_rng(1), shape)
    t = dist.tensor(shape, pending, mesh, data=x)
    assert t.layout == pending
    assert same_bits(t.numpy(), x)


def test_storage_is_stacked_and_replicated_data_is_held_once():
    mesh = MESHES["2x3x2"]
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    t = dist.tensor((6, 4), S(("row",), ("tp",)), mesh, data=x)
    assert t.local.shape == (1, 3, 1, 2, 4)  # one copy along dp and pp
    r = dist.tensor((6, 4), None, mesh, data=x)
    assert r.local.shape == (1, 1, 1, 6, 4) and r.layout == ShardLayout.replicated(2)
    assert all(same_bits(r.shard(i), x) for i in range(12))


def test_conversion_into_the_storage_format():
    mesh = MESHES["2x2"]
    x = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    t = dist.tensor((4, 6), S(("col",), ("tp",)), mesh, dtype="bf16", data=x)
    assert same_bits(t.numpy(), x.astype(ml_dtypes.bfloat16))  # round to nearest even (ml_dtypes)
    t = dist.tensor((4, 6), S(("col",), ("tp",)), mesh, dtype="fp32", data=x.astype(np.float64))
    assert same_bits(t.numpy(), x)


def test_padded_blocks():
    mesh = MESHES["2x3x2"]
    x = np.arange(1, 8, dtype=np.float32)
    t = dist.tensor((7,), S((0,), ("tp",), pad=True), mesh, data=x)
    assert t.local_shape == (3,)  # ceil(7 / 3)
    blocks = [t.shard(mesh.device_at(dp=0, tp=c, pp=1)) for c in range(3)]
    assert [b.tolist() for b in blocks] == [[1, 2, 3], [4, 5, 6], [7, 0, 0]]
    assert same_bits(t.numpy(), x)
    t = dist.tensor((12,), S((0,), (("tp", "pp"),), pad=True), mesh, data=np.arange(12.0))
    assert t.local_shape == (2,)  # an even split is allowed over several axes
    with pytest.raises(LayoutError) as info:  # an uneven one is not: padding is per single axis
        dist.tensor((7,), S((0,), (("tp", "pp"),), pad=True), mesh, data=x)
    assert "one axis" in info.value.fix


# -- abstract tensors ---------------------------------------------------------------------------------

def test_seed_000_abstract_tensor():
    """Seed 000 §3.3: a 1024x1024 fp32 tensor, rows over tp."""
    mesh = dist.Mesh(axes=["tp", "dp"], devices=range(8), shape=(4, 2))
    X = dist.tensor(shape=(1024, 1024), layout=dist.ShardSpec(partition=("row",), mesh_axes=("tp",)),
                    mesh=mesh, dtype="fp32")
    assert X.is_abstract and X.local_shape == (256, 1024)
    assert X.nbytes_per_device == 256 * 1024 * 4 == 1_048_576
    assert X.nbytes == 1024 * 1024 * 4
    assert str(X.type) == "tensor<1024x1024xf32, #shard<[tp, *]>>"
    with pytest.raises(AbstractValueError) as info:
        X.numpy()
    assert "init=" in info.value.fix
    with pytest.raises(AbstractValueError):
        X.shard(0)
    with pytest.raises(AbstractValueError):
        np.asarray(X)


def test_seed_002_two_terabyte_weight():
    """Seed 002 §2.4/§2.5 (and seed 001 §4.5): a 1,000,000 x 1,000,000 bf16 weight over tp and pp."""
    mesh = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))
    W = dist.tensor(shape=(1_000_000, 1_000_000),
                    layout=dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp")),
                    mesh=mesh, dtype="bf16")
    tp, pp = mesh.axis_size("tp"), mesh.axis_size("pp")
    assert W.local_shape == (1_000_000 // tp, 1_000_000 // pp)
    assert W.nbytes == 2 * 10**12
    assert W.nbytes_per_device == (1_000_000 // tp) * (1_000_000 // pp) * 2
    assert (tp, pp) == (4, 2) and W.nbytes_per_device == 250_000_000_000


def test_weight_on_nvl72_needs_padding():
    """On the 4x9x2 NVL72 mesh tp=9 does not divide 1,000,000: an error, or padded blocks."""
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    with pytest.raises(LayoutError) as info:
        dist.tensor((1_000_000, 1_000_000), dist.ShardSpec(("row", "col"), ("tp", "pp")), mesh, dtype="bf16")
    assert "pad=True" in info.value.fix and "111112" in info.value.fix
    W = dist.tensor((1_000_000, 1_000_000), dist.ShardSpec(("row", "col"), ("tp", "pp"), pad=True), mesh,
                    dtype="bf16")
    assert W.local_shape == (111_112, 500_000)
    assert W.nbytes_per_device == 111_112 * 500_000 * 2


def test_packed_bytes_per_device():
    mesh = MESHES["2x2"]
    assert dist.tensor((8, 6), S(("col",), ("tp",)), mesh, dtype="fp8").nbytes_per_device == 8 * 3
    assert dist.tensor((8, 6), S(("col",), ("tp",)), mesh, dtype="fp4").nbytes_per_device == 8 * 3 // 2
    assert dist.tensor((8, 6), S(("col",), ("tp",)), mesh, dtype="f16").nbytes_per_device == 8 * 3 * 2


# -- Philox initialization (NUM-RNG) -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_randn_is_the_same_global_tensor_on_every_mesh(dtype):
    shape, seed = (12, 10), 1234
    want = np.asarray(op.randn(shape, seed=seed, dtype=dtype))
    cases = [(MESHES["1"], S()), (MESHES["2x2"], S(("row",), ("tp",))),
             (MESHES["2x2"], S(("row", "col"), ("dp", "tp"))),
             (MESHES["2x3x2"], S(("row", "col"), (("dp", "tp"), "pp"))),
             (MESHES["4x9x2"], S(("row", "col"), ("dp", "tp"), pad=True)),
             (MESHES["4x9x2"], S(("col",), ("pp",)))]
    for mesh, spec in cases:
        t = dist.tensor(shape, spec, mesh, dtype=dtype, init="randn", seed=seed)
        assert same_bits(t.numpy(), want), (mesh, spec)
    other = dist.tensor(shape, S(), MESHES["2x2"], dtype=dtype, init="randn", seed=seed + 1)
    assert not same_bits(other.numpy(), want)
    u = dist.tensor(shape, S(("row",), ("tp",)), MESHES["2x2"], dtype=dtype, init="rand", seed=seed)
    assert same_bits(u.numpy(), np.asarray(op.rand(shape, seed=seed, dtype=dtype)))


def test_tensor_argument_errors():
    mesh = MESHES["2x2"]
    with pytest.raises(LayoutError):
        dist.tensor((4,), S(), mesh, data=np.zeros(4), init="randn")
    with pytest.raises(LayoutError):
        dist.tensor((4,), S(), mesh, init="normal")
    with pytest.raises(LayoutError):
        dist.tensor((4,), S(), mesh, data=np.zeros(5))
    with pytest.raises(LayoutError):
        dist.tensor((4, -1), S(), mesh)


# -- from_shards ----------------------------------------------------------------------------------------

def test_from_shards_assembles_blocks():
    mesh = MESHES["2x2"]  # device = 2*dp + tp
    blocks = [np.full((2, 3), i, np.float32) for i in range(4)]
    t = dist.from_shards(blocks, S(("row", "col"), ("dp", "tp")), mesh)
    want = np.block([[blocks[0], blocks[1]], [blocks[2], blocks[3]]])
    assert t.shape == (4, 6) and same_bits(t.numpy(), want)
    by_name = dist.from_shards({f"cuda:{i}": b for i, b in enumerate(blocks)}, S(("row", "col"), ("dp", "tp")), mesh)
    assert same_bits(by_name.numpy(), want)
    rep = dist.from_shards([blocks[0], blocks[0], blocks[2], blocks[2]], S(("row",), ("dp",)), mesh)
    assert same_bits(rep.numpy(), np.concatenate([blocks[0], blocks[2]]))


def test_from_shards_errors():
    mesh = MESHES["2x2"]
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(CollectiveError) as info:
        dist.from_shards([a, a, a, np.zeros((3, 3), np.float32)], S(("row",), ("dp",)), mesh)
    assert "cuda:3" in str(info.value) and info.value.fix
    with pytest.raises(CollectiveError) as info:  # replicated over tp, but tp ranks differ
        dist.from_shards([a, a + 1, a, a], S(("row",), ("dp",)), mesh)
    assert "'tp'" in str(info.value) and info.value.fix
    b = a.copy()
    b[0, 0] = -0.0  # -0 and +0 are different bits
    with pytest.raises(CollectiveError):
        dist.from_shards([a, b, a, a], S(), mesh)
    with pytest.raises(CollectiveError):
        dist.from_shards([a, a, a], S(), mesh)
    with pytest.raises(CollectiveError):
        dist.from_shards({"cuda:0": a}, S(), mesh)
    with pytest.raises(LayoutError):
        dist.from_shards([a] * 4, S(("row",), ("dp",), pad=True), mesh)


def test_a_0d_tensor_has_a_0d_global_value_and_numpy_returns_a_fresh_array():
    mesh = MESHES["2x2"]
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    t = dist.tensor(x.shape, S(("row",), ("dp",)), mesh, data=x)
    total = op.sum(t)  # a 0-d pending sum over dp, folded by numpy()
    assert total.shape == () and total.numpy().shape == () and float(total.numpy()) == 28.0
    got = t.numpy()
    got[0, 0] = 99  # the caller's copy: the tensor's storage is not touched
    assert t.numpy()[0, 0] == 0
