"""Effects and determinism in differentiated code (AD-EFFECT-1, AD-DET-1): the dropout mask of
the backward pass is the forward's, on one device and on a mesh; send/recv and ops with side
effects are rejected with an EffectError; gradients are bit-identical across runs, thread
counts and hash seeds."""
import hashlib

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op
from tessera_ref.errors import EffectError
from tessera_ref.ir import OPS, register_op
from tessera_ref.ops.values import current_trace

from determinism import digests_across_environments

X = np.linspace(-2.0, 2.0, 48, dtype=np.float32).reshape(6, 8)
W = np.linspace(0.5, 1.5, 48, dtype=np.float32).reshape(6, 8)


def _dropout_loss(x, w):
    return op.sum(op.dropout(op.tanh(x), 0.5, seed=7, stream=2) * w)


def test_the_backward_dropout_mask_is_the_forward_mask():
    gx = np.asarray(tr.grad(_dropout_loss)(X, W))
    forward = np.asarray(op.dropout(op.tanh(X), 0.5, seed=7, stream=2))
    kept = forward != 0
    assert 0 < kept.sum() < kept.size
    assert np.array_equal(gx != 0, kept)  # the same elements, by the replayed key
    t = np.tanh(X.astype(np.float64))
    assert np.allclose(gx[kept], (2 * W * (1 - t ** 2))[kept], rtol=1e-6)


def test_the_dropout_mask_is_the_same_on_a_mesh():
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    xd = dist.tensor(X.shape, dist.ShardSpec(("batch",), ("dp",)), mesh, data=X)
    wd = dist.tensor(W.shape, dist.ShardSpec(("col",), ("tp",)), mesh, data=W)
    gx = tr.grad(_dropout_loss)(xd, wd)
    assert np.array_equal(gx.numpy().view(np.uint32), np.asarray(tr.grad(_dropout_loss)(X, W)).view(np.uint32))


def test_send_and_recv_are_rejected_in_differentiated_code():
    mesh = dist.Mesh(("pp", "tp"), range(4), (2, 2))
    a, b = mesh.sub(pp=0), mesh.sub(pp=1)
    x = dist.tensor((4,), None, a, init="randn", seed=1)

    def sends(x):
        dist.send(x, b)
        return op.sum(x)

    with pytest.raises(EffectError, match="dist.send is a state/I-O effect inside code differentiated by grad"):
        tr.grad(sends)(x)
    with pytest.raises(EffectError, match="dist.recv"):
        tr.grad(lambda x: op.sum(x * dist.recv(a, b)))(x)
    dist.send(x, b)  # outside differentiated code both still work
    assert np.array_equal(dist.recv(a, b).numpy(), x.numpy())


def test_an_op_with_side_effects_is_rejected():
    if "adtest.log" not in OPS:
        register_op("adtest.log", side_effects=True)

    def logs(x):
        current_trace().emit("adtest.log", [x.value], [], {}, None)
        return op.sum(x * x)

    with pytest.raises(EffectError, match="adtest.log has side effects"):
        tr.grad(logs)(X)
    with pytest.raises(EffectError, match="differentiated by jvp"):
        tr.jvp(logs, (X,), (X,))


_DIGEST = """
import hashlib, numpy as np
import tessera_ref as tr
from tessera_ref import dist, op
mesh = dist.Mesh(("dp", "tp"), range(6), (2, 3))
S = dist.ShardSpec
x = dist.tensor((8, 6), S(("batch",), ("dp",)), mesh, init="randn", seed=1)
W1 = dist.tensor((6, 12), S(("col",), ("tp",)), mesh, init="randn", seed=2)
W2 = dist.tensor((12, 6), S(("row",), ("tp",)), mesh, init="randn", seed=3)
def loss(W1, W2):
    h = op.gelu(op.matmul(x, W1))
    return op.mean(op.softmax(op.matmul(h, W2)) * op.sin(x))
gs = tr.grad(loss, argnums=(0, 1))(W1, W2)
one = tr.grad(lambda a, b: op.sum(op.exp(op.matmul(a, b))), argnums=(0, 1))(W1.numpy(), W2.numpy())
h = hashlib.sha256()
for g in gs:
    h.update(g.numpy().tobytes())
for g in one:
    h.update(np.asarray(g).tobytes())
print(h.hexdigest())
"""


def test_gradients_are_bit_identical_across_runs_and_thread_counts():
    digests = digests_across_environments(_DIGEST)
    assert len(set(digests)) == 1


def test_gradients_are_bit_identical_across_calls():
    g = tr.grad(_dropout_loss, argnums=(0, 1))
    first = [np.asarray(a).tobytes() for a in g(X, W)]
    second = [np.asarray(a).tobytes() for a in g(X, W)]
    assert hashlib.sha256(b"".join(first)).digest() == hashlib.sha256(b"".join(second)).digest()
