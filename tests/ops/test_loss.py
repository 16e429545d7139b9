"""log_softmax, cross_entropy and stop_gradient (GRAPH-LOGSOFTMAX-1, GRAPH-CROSSENTROPY-1,
GRAPH-STOPGRAD-1, MESH-SHARD-CE-1) against float64 NumPy and PyTorch."""
import numpy as np
import pytest
torch = pytest.importorskip("torch")  # the references below are torch's; not in the test extra

import tessera_ref as tr
from tessera_ref import dist, grad, jit, op
from tessera_ref.autodiff import communication_plan
from tessera_ref.errors import OpError


def _logits(shape, seed=0, dtype=np.float32):
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)


def test_log_softmax_is_within_an_ulp_or_two_of_float64():
    x = _logits((7, 300))
    x64 = x.astype(np.float64)
    want = x64 - x64.max(-1, keepdims=True)
    want = want - np.log(np.exp(want).sum(-1, keepdims=True))
    got = op.log_softmax(tr.asarray(x)).data
    assert got.dtype == np.float32 and np.allclose(got, want, rtol=3e-7, atol=3e-7)


@pytest.mark.parametrize("kind", [np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(kind, reduction):
    x = _logits((3, 5, 40), 1)
    labels = np.random.default_rng(2).integers(0, 40, (3, 5)).astype(kind)
    got = op.cross_entropy(tr.asarray(x), labels, reduction=reduction).data
    want = torch.nn.functional.cross_entropy(torch.tensor(x).permute(0, 2, 1), torch.tensor(labels).long(),
                                             reduction=reduction).numpy()
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=1e-6)


def test_bf16_logits_compute_in_f32_and_round_once():
    x = tr.asarray(_logits((4, 64), 3), dtype="bf16")
    labels = np.array([0, 63, 7, 7])
    got = op.cross_entropy(x, labels).data
    x32 = np.asarray(x.data, np.float32)
    want = torch.nn.functional.cross_entropy(torch.tensor(x32), torch.tensor(labels)).numpy()
    assert got.dtype == x.data.dtype and abs(float(got) - float(want)) <= 2 ** -8 * abs(float(want))


def test_a_bad_label_names_the_line_the_label_and_the_classes():
    with pytest.raises(OpError) as info:
        op.cross_entropy(tr.asarray(_logits((2, 10))), np.array([3, 12]))
    assert "label 12 is out of range for 10 classes" in str(info.value) and "test_loss.py" in str(info.value)


def test_gradient_through_jit_matches_torch():
    x, labels = _logits((6, 9), 4), np.array([0, 8, 3, 3, 1, 2], np.int32)
    g = jit(grad(lambda a, t: op.cross_entropy(a, t, reduction="sum")))(tr.asarray(x), labels)
    t = torch.tensor(x, requires_grad=True)
    torch.nn.functional.cross_entropy(t, torch.tensor(labels).long(), reduction="sum").backward()
    assert np.allclose(np.asarray(g), t.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_stop_gradient_blocks_the_derivative_and_keeps_the_bits():
    x = tr.asarray(_logits((3, 4), 5))
    assert op.stop_gradient(x).data.tobytes() == x.data.tobytes()
    g = grad(lambda a: op.sum(op.stop_gradient(a) * 3.0))(x)
    assert not np.asarray(g).any()


def test_vocab_parallel_loss_on_abstract_tensors_moves_row_vectors_only():
    """A 128k vocabulary over tp=8: no values, only types and the collectives' bytes."""
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(16)], axes=("dp", "tp"), shape=(2, 8))
    X = dist.tensor((4096, 131072), dist.ShardSpec(("row", "col"), ("dp", "tp")), mesh, dtype="bf16")
    Y = dist.tensor((4096,), dist.ShardSpec((0,), ("dp",)), mesh, dtype="i32")
    g = grad(lambda a, t: op.cross_entropy(a, t))
    gx = g(X, Y)
    assert gx.is_abstract and gx.layout == X.layout
    plan = communication_plan(g)
    assert all(131072 not in c.type.shape for c in plan.collectives), plan
    f = jit(lambda a, t: op.cross_entropy(a, t))
    f(X, Y)
    text = f.inspect_ir("graph")
    over_tp = [line for line in text.splitlines() if 'axis = ["tp"]' in line]
    assert len(over_tp) == 3 and all("tensor<4096xf32" in r or "tensor<4096x1xf32" in r for r in over_tp), text
    assert "all_gather" not in text  # (the bf16 result's cast all-reduces the f32 scalar over dp first)


@pytest.mark.parametrize("split", [(0, 2), (0,)], ids=["rows-dp-classes-tp", "rows-dp"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_fused_derivative_has_the_bits_of_the_vocab_parallel_one(reduction, split):
    """AD-CROSSENTROPY-1 with MESH-SHARD-CE-1: on one device the fused vjp and on a dp x tp mesh
    (classes split over tp: the expansion into ops, differentiated op by op; or rows only over
    dp: the fused op per device) give the same loss and gradient bits under reduction="exact"
    — a model's gradient does not depend on its mesh. (Rows over dp with "sum"/"none" raised a
    ShapeError: the rule gathered the logits' rows but not the labels'.)"""
    from tessera_ref.numerics import Policy
    exact = Policy("f32", reduction="exact")
    rng = np.random.default_rng(3)
    x = (3 * rng.standard_normal((4, 5, 16))).astype(np.float32)
    labels = rng.integers(0, 16, (4, 5)).astype(np.int32)
    w = rng.standard_normal((4, 5)).astype(np.float32)

    def f(v, y):
        loss = op.cross_entropy(v, y, reduction=reduction)
        return op.sum(loss * tr.asarray(w, policy=exact)) if reduction == "none" else loss
    one = tr.value_and_grad(f)(tr.asarray(x, policy=exact), labels)
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    mx = dist.tensor(x.shape, dist.ShardSpec(split, ("dp", "tp")[:len(split)]), mesh, exact, data=x)
    my = dist.tensor(labels.shape, dist.ShardSpec((0,), ("dp",)), mesh, data=labels)
    got = tr.value_and_grad(f)(mx, my)
    assert [np.asarray(v).tobytes() for v in one] == [v.numpy().tobytes() for v in got]
