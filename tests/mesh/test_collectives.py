"""Collectives (MESH-COLL-1 … MESH-COLL-8) against references folded by hand in rank order."""
import warnings

import ml_dtypes
import numpy as np
import pytest

from mesh_reference import expected_shard, fold_f32, same_bits
import tessera_ref as tr
from tessera_ref import dist
from tessera_ref.errors import CollectiveError, CollectiveWarning, LayoutError, TesseraError
from tessera_ref.runner import run_path

S = dist.ShardSpec


def mesh23():
    return dist.Mesh(("dp", "tp"), range(6), (2, 3))  # device = 3*dp + tp


def _partial(mesh, contributions, axis="tp", reduce="sum", dtype=None):
    """A pending reduction over ``axis`` whose rank-r contribution is ``contributions[r]``
    (replicated over the other axes), built from per-device arrays."""
    shards = [contributions[mesh.coords(i)[axis]] for i in range(mesh.size)]
    return dist.from_shards(shards, S(None, (axis,), reduce=reduce), mesh, dtype=dtype)


def _wide(rng, shape):
    """f32 values of mixed magnitudes and signs: rounding depends on the order."""
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 7, shape)).astype(np.float32)


def _all_ranks_equal(t, want):
    for i in range(t.mesh.size):
        assert same_bits(t.shard(i), want), (i, t.mesh.coords(i))


# -- all_reduce (MESH-COLL-1, NUM-RED-3) ---------------------------------------------------------------

@pytest.mark.parametrize("op", ["sum", "avg", "max", "min", "prod"])
def test_all_reduce_folds_in_rank_order(op):
    mesh = mesh23()
    rng = np.random.default_rng(7)
    c = [_wide(rng, (4, 5)) for _ in range(3)]
    c[1][0, 0], c[2][0, 1], c[0][0, 2], c[1][0, 2] = np.nan, np.inf, -0.0, 0.0
    if op == "prod":
        c = [np.float32(1) + x / np.float32(1e7) for x in c]
    x = _partial(mesh, c, reduce="sum" if op == "avg" else op)
    y = dist.all_reduce(x, axis="tp", op=op)
    if op == "avg":
        want = fold_f32(c, "sum") / np.float32(3)  # one correctly rounded f32 division
    else:
        want = fold_f32(c, op)
    assert y.layout == S().layout(2) and y.shape == (4, 5)
    assert same_bits(y.numpy(), want)
    _all_ranks_equal(y, want)
    assert same_bits(x.numpy(), fold_f32(c, "sum" if op == "avg" else op))  # the pending value itself


def test_rank_order_is_visible_in_the_bits():
    """1 + 2^-24 + 2^-24: ((1 + e) + e) = 1 but (1 + (e + e)) = 1 + 2^-23."""
    mesh = dist.Mesh(("tp",), range(3), (3,))
    e = np.float32(2.0 ** -24)
    c_first = [np.array([1.0], np.float32), np.array([e]), np.array([e])]
    c_last = [np.array([e], np.float32), np.array([e]), np.array([1.0], np.float32)]
    assert dist.all_reduce(_partial(mesh, c_first), "tp").numpy()[0] == np.float32(1.0)
    assert dist.all_reduce(_partial(mesh, c_last), "tp").numpy()[0] == np.float32(1.0) + np.float32(2.0 ** -23)


def test_all_reduce_bf16_accumulates_in_f32_and_rounds_once():
    mesh = mesh23()
    rng = np.random.default_rng(8)
    c = [_wide(rng, (16,)).astype(ml_dtypes.bfloat16) for _ in range(3)]
    # 1 + 2^-8 + 2^-9 rounds once to 1 + 2^-7 (bf16 ulp); rounded after each add it stays 1
    c[0][0], c[1][0], c[2][0] = 1.0, 2.0 ** -8, 2.0 ** -9
    y = dist.all_reduce(_partial(mesh, c, dtype="bf16"), "tp")
    want = fold_f32([v.astype(np.float32) for v in c]).astype(ml_dtypes.bfloat16)
    assert same_bits(y.numpy(), want) and y.numpy()[0] == 1 + 2.0 ** -7
    twice = fold_f32([fold_f32(c[:2]).astype(ml_dtypes.bfloat16).astype(np.float32), c[2].astype(np.float32)])
    assert not same_bits(want, twice.astype(ml_dtypes.bfloat16))  # the data tells the two apart


def test_all_reduce_over_two_axes_folds_row_major_over_the_mesh():
    mesh = mesh23()
    rng = np.random.default_rng(9)
    c = [_wide(rng, (8,)) for _ in range(6)]  # device i contributes c[i]
    for spec_axes in (("dp", "tp"), ("tp", "dp")):
        x = dist.from_shards(c, S(None, spec_axes, reduce="sum"), mesh)
        assert same_bits(x.numpy(), fold_f32(c))
        for axes in (("dp", "tp"), ("tp", "dp")):
            _all_ranks_equal(dist.all_reduce(x, axes), fold_f32(c))
    # one axis at a time: over tp first (per dp row), then over dp
    x = dist.from_shards(c, S(None, ("dp", "tp"), reduce="sum"), mesh)
    step = dist.all_reduce(x, "tp")
    assert step.layout.partial == ("dp",)
    rows = [fold_f32(c[0:3]), fold_f32(c[3:6])]
    for i in range(6):
        assert same_bits(step.shard(i), rows[i // 3])
    _all_ranks_equal(dist.all_reduce(step, "dp"), fold_f32(rows))


# -- reduce_scatter, all_gather, broadcast, all_to_all (MESH-COLL-2 … 5) -----------------------------

def test_reduce_scatter_is_a_slice_of_all_reduce():
    mesh = mesh23()
    rng = np.random.default_rng(10)
    c = [_wide(rng, (6, 4)) for _ in range(3)]
    x = _partial(mesh, c)
    full = dist.all_reduce(x, "tp").numpy()
    for dim in (0, None):
        y = dist.reduce_scatter(x, "tp", dim=dim)
        assert y.layout.dims == (("tp",), ()) and not y.layout.partial
        assert same_bits(y.numpy(), full)
        for i in range(6):
            assert same_bits(y.shard(i), expected_shard(full, (("tp",), ()), mesh.axes, mesh.shape, i))
    with pytest.raises(LayoutError):  # 4 columns do not split over 3 ranks
        dist.reduce_scatter(x, "tp", dim=1)


def test_all_gather_and_broadcast():
    mesh = mesh23()
    g = np.arange(24, dtype=np.float32).reshape(6, 4)
    x = dist.tensor((6, 4), S(("row",), ("tp",)), mesh, data=g)
    y = dist.all_gather(x, "tp")
    assert y.layout == S().layout(2) and same_bits(y.numpy(), g)
    _all_ranks_equal(y, g)
    # broadcast of a split tensor: every rank gets the root's block (the global shape is the block's)
    b = dist.broadcast(x, "tp", root=2)
    assert b.shape == (2, 4)
    _all_ranks_equal(b, g[4:6])
    assert dist.broadcast(y, "tp", root=1) is y  # replicated: unchanged
    c = [np.full((2,), r, np.float32) for r in range(3)]
    p = dist.broadcast(_partial(mesh, c), "tp", root=1)  # a pending sum: the root's contribution
    assert not p.layout.partial
    _all_ranks_equal(p, c[1])
    with pytest.raises(CollectiveError):
        dist.broadcast(x, "tp", root=3)


def test_gather_of_a_two_axis_split_minor_first():
    mesh = mesh23()
    g = np.arange(36, dtype=np.float32).reshape(12, 3)
    x = dist.tensor((12, 3), S((0,), (("dp", "tp"),)), mesh, data=g)
    with pytest.raises(LayoutError):
        dist.all_gather(x, "dp")  # dp is the major axis of dimension 0
    y = dist.all_gather(x, "tp")
    assert y.layout.dims == (("dp",), ())
    for i in range(6):
        assert same_bits(y.shard(i), g[6 * (i // 3): 6 * (i // 3) + 6])
    assert same_bits(dist.all_gather(y, "dp").numpy(), g)


def test_all_to_all_keeps_the_global_value():
    mesh = mesh23()
    g = np.random.default_rng(11).standard_normal((6, 9)).astype(np.float32)
    x = dist.tensor((6, 9), S(("row",), ("tp",)), mesh, data=g)
    y = dist.all_to_all(x, "tp", split_dim=1, concat_dim=0)
    assert y.layout.dims == ((), ("tp",))
    assert same_bits(y.numpy(), g)
    for i in range(6):
        assert same_bits(y.shard(i), expected_shard(g, ((), ("tp",)), mesh.axes, mesh.shape, i))
    with pytest.raises(TesseraError):
        dist.all_to_all(x, "tp", split_dim=0, concat_dim=1)


# -- permute, send/recv (MESH-COLL-6, 7) ----------------------------------------------------------------

def test_permute_with_a_shift():
    mesh = mesh23()
    g = np.arange(12, dtype=np.float32).reshape(6, 2)
    x = dist.tensor((6, 2), S(("row",), ("tp",)), mesh, data=g)
    y = dist.permute(x, "tp", 1)  # rank r sends to r + 1 mod 3
    assert y.layout == x.layout
    for i in range(6):
        src = (mesh.coords(i)["tp"] - 1) % 3
        assert same_bits(y.shard(i), g[2 * src: 2 * src + 2])
    assert same_bits(y.numpy(), np.concatenate([g[4:6], g[0:2], g[2:4]]))
    z = dist.permute(x, "tp", [(0, 2)])  # ranks that receive nothing hold zeros
    assert same_bits(z.numpy(), np.concatenate([np.zeros((4, 2), np.float32), g[0:2]]))
    with pytest.raises(CollectiveError):
        dist.permute(x, "tp", [(0, 1), (2, 1)])
    with pytest.raises(TesseraError):
        dist.permute(x, "tp", [(0, 3)])


def test_send_recv_between_pipeline_stages():
    mesh = dist.Mesh(("dp", "tp", "pp"), range(12), (2, 3, 2))
    stage0, stage1 = mesh.sub(pp=0), mesh.sub(pp=1)
    g = np.random.default_rng(12).standard_normal((4, 6)).astype(np.float32)
    a = dist.tensor((4, 6), S(("row", "col"), ("dp", "tp")), stage0, data=g)
    assert dist.send(a, stage1) is None
    b = dist.recv(stage0, stage1)
    assert b.mesh == stage1 and b.type == a.type and same_bits(b.numpy(), g)
    for i in range(6):
        assert same_bits(b.shard(i), a.shard(i))
    dist.check_pending()  # nothing left over
    # first in, first out per tag; tags are separate queues
    dist.send(a, stage1, tag=1)
    dist.send(dist.tensor((4, 6), S(), stage0, data=g * 2), stage1, tag=1)
    dist.send(dist.tensor((4, 6), S(), stage0, data=g * 3), stage1, tag=2)
    assert same_bits(dist.recv(stage0, stage1, tag=2).numpy(), g * 3)
    assert same_bits(dist.recv(stage0, stage1, tag=1).numpy(), g)
    assert same_bits(dist.recv(stage0, stage1, tag=1).numpy(), g * 2)
    dist.check_pending()


def test_recv_without_send_fails_at_once_and_unmatched_sends_are_reported():
    mesh = dist.Mesh(("tp", "pp"), range(4), (2, 2))
    s0, s1 = mesh.sub(pp=0), mesh.sub(pp=1)
    with pytest.raises(CollectiveError) as info:
        dist.recv(s0, s1)
    assert "no matching send" in str(info.value) and info.value.fix
    dist.send(dist.tensor((2,), S(), s0, data=np.ones(2, np.float32)), s1)
    with pytest.raises(CollectiveError) as info:
        dist.recv(s1, s0)  # the other direction
    with pytest.raises(CollectiveError) as info:
        dist.check_pending()
    assert "unmatched" in str(info.value)
    dist.check_pending()  # reported once, then forgotten
    with pytest.raises(CollectiveError):
        dist.send(dist.tensor((2,), S(), s0, data=np.ones(2, np.float32)), s0)  # same devices
    with pytest.raises(CollectiveError):
        dist.send(dist.tensor((2,), S(), s0, data=np.ones(2, np.float32)), mesh)  # other shape


def test_a_mailbox_scope_reports_its_unmatched_sends_and_keeps_them_to_itself():
    mesh = dist.Mesh(("tp", "pp"), range(4), (2, 2))
    s0, s1 = mesh.sub(pp=0), mesh.sub(pp=1)
    one = dist.tensor((2,), S(), s0, data=np.ones(2, np.float32))
    dist.send(one, s1)  # waits in the enclosing mailbox (this test's)
    with pytest.raises(CollectiveError) as info:
        with dist.mailbox_scope():
            with pytest.raises(CollectiveError, match="no matching send"):
                dist.recv(s0, s1)  # the outer send is not delivered into the scope
            dist.send(one, s1, tag=3)
            dist.send(one, s1, tag=3)
    text = str(info.value)
    assert "unmatched sends: 2 from cuda:0.. to cuda:1.. (tag 3) sent at " in text and "test_collectives.py:" in text
    assert info.value.fix and "mailbox_scope" in info.value.fix
    with pytest.raises(ZeroDivisionError):
        with dist.mailbox_scope():
            dist.send(one, s1)
            1 / 0  # the block's own error, not the unmatched send, propagates
    assert same_bits(dist.recv(s0, s1).numpy(), np.ones(2, np.float32))  # the outer send is still there


def test_a_script_run_is_a_mailbox_scope(tmp_path):
    script = tmp_path / "sends.py"
    script.write_text("import numpy as np\nfrom tessera import dist\n"
                      "mesh = dist.Mesh(('tp', 'pp'), range(4), (2, 2))\n"
                      "x = dist.tensor((2,), None, mesh.sub(pp=0), data=np.ones(2, np.float32))\n"
                      "dist.send(x, mesh.sub(pp=1))\n")
    with pytest.raises(CollectiveError, match=r"unmatched sends: .*sends\.py:5"):
        run_path(str(script))
    dist.check_pending()  # nothing reached the caller's mailbox


# -- misuse (MESH-COLL-8) ---------------------------------------------------------------------------

def test_all_reduce_of_a_split_tensor_raises():
    mesh = mesh23()
    x = dist.tensor((6, 4), S(("row",), ("tp",)), mesh, data=np.ones((6, 4), np.float32))
    with pytest.raises(CollectiveError) as info:
        dist.all_reduce(x, "tp")
    assert "split" in str(info.value) and "all_gather" in info.value.fix


def test_all_reduce_of_a_replicated_tensor_warns_and_keeps_the_value():
    mesh = mesh23()
    g = np.random.default_rng(13).standard_normal((6, 4)).astype(np.float32)
    x = dist.tensor((6, 4), S(("row",), ("tp",)), mesh, data=g)
    with pytest.warns(CollectiveWarning, match="returned unchanged") as record:
        y = dist.all_reduce(x, "dp")
    assert record[0].filename == __file__  # attributed to the user's line
    assert y.layout == x.layout and same_bits(y.numpy(), g)
    with pytest.warns(CollectiveWarning):
        z = dist.reduce_scatter(dist.all_gather(x, "tp"), "tp", dim=0)  # nothing reduced, only split
    assert same_bits(z.numpy(), g) and z.layout == x.layout
    with pytest.warns(CollectiveWarning):
        dist.all_gather(x, "dp")


def test_reduce_scatter_of_an_already_split_tensor_checks_dim():
    """Issue 31: reduce_scatter(dim=7) of a tensor already split over the axis only warned and
    never looked at dim; a dim that is not a dimension, or not the split one, is an error."""
    x = dist.tensor((6, 4), S(("row",), ("tp",)), mesh23(), data=np.ones((6, 4), np.float32))
    with pytest.raises(CollectiveError, match=r"reduce_scatter: dim=7 is not a dimension of tensor<6x4xf32") as info:
        dist.reduce_scatter(x, "tp", dim=7)
    assert info.value.fix == "use 0..1"
    with pytest.raises(CollectiveError, match="already split over 'tp' along dimension 0, so it cannot be split "
                                              "along dimension 1") as info:
        dist.reduce_scatter(x, "tp", dim=-1)
    assert "all_gather(x, axis='tp')" in info.value.fix
    with pytest.raises(LayoutError, match="so it cannot be split along dimension 1"):  # traced: the type rule
        tr.jit(lambda x: dist.reduce_scatter(x, "tp", dim=1))(x)
    for dim in (None, 0, -2):
        with pytest.warns(CollectiveWarning, match="already split"):
            assert dist.reduce_scatter(x, "tp", dim=dim) is x
    with pytest.warns(CollectiveWarning, match="already split"):
        assert tr.jit(lambda x: dist.reduce_scatter(x, "tp"))(x).layout == x.layout


def test_misuse_errors():
    mesh = mesh23()
    c = [np.ones(3, np.float32)] * 3
    x = _partial(mesh, c)
    with pytest.raises(CollectiveError) as info:
        dist.all_reduce(x, "pp")
    assert "'pp'" in str(info.value) and info.value.fix
    with pytest.raises(CollectiveError):
        dist.all_reduce(x, "tp", op="max")  # the pending reduction is a sum
    with pytest.raises(TesseraError):
        dist.all_reduce(x, "tp", op="mean")
    with pytest.raises(CollectiveError):
        dist.all_gather(x, "tp")  # gathering contributions is not the value
    with pytest.raises(CollectiveError):
        dist.permute(x, "tp", 1)
    with pytest.raises(TesseraError):
        dist.all_reduce(np.ones(3, np.float32), "tp")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert same_bits(dist.all_reduce(x, "tp").numpy(), np.full(3, 3, np.float32))


def test_abstract_tensors_move_through_collectives():
    mesh = mesh23()
    x = dist.tensor((6, 4), S(None, ("tp",), reduce="sum"), mesh)
    y = dist.reduce_scatter(x, "tp", dim=0)
    assert y.is_abstract and y.layout.dims == (("tp",), ()) and y.nbytes_per_device == 2 * 4 * 4
    z = dist.all_gather(y, "tp")
    assert z.is_abstract and z.local_shape == (6, 4)


def test_folding_a_stochastically_rounded_pending_sum_is_a_collective_error():
    from tessera_ref import op
    from tessera_ref.numerics import as_policy
    policy = as_policy("bf16").with_(rounding="stochastic")
    mesh = dist.Mesh(("tp",), range(2), (2,))
    x = dist.tensor((4,), dist.ShardSpec(("row",), ("tp",)), mesh, dtype=policy, data=np.arange(4.0), seed=1)
    s = op.sum(x, seed=3)  # a pending sum over tp
    for fold in (lambda: dist.all_reduce(s, "tp"), s.numpy):
        with pytest.raises(CollectiveError, match="needs a random key") as info:
            fold()
        assert "rounds to nearest" in info.value.fix
