"""AD-EFFECT-1, AD-DET-1: randomness is replayed (dropout's backward mask is its forward mask,
on one device and on a mesh), state and I/O are rejected with an EffectError naming the
transform and the line, and gradients are bit-identical across runs, processes, thread counts
and hash seeds."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op
from tessera_ref.errors import EffectError
from tessera_conformance import assert_bits, clause, eager, unsupported

from ._reference import raw_op  # noqa: F401 (fixture)

X = np.linspace(-2.0, 2.0, 48, dtype=np.float32).reshape(6, 8)
W = np.linspace(0.5, 1.5, 48, dtype=np.float32).reshape(6, 8)
HERE = __file__.rsplit("/", 1)[-1]


def _dropout_loss(x, w):
    return op.sum(op.dropout(op.tanh(x), 0.5, seed=7, stream=2) * w)


@clause("AD-EFFECT-1")
def test_dropout_backward_drops_what_the_forward_dropped(backend):
    """grad through dropout is nonzero exactly where the forward kept, ``2·w·(1 − tanh²)`` there."""
    gx = eager(backend, tr.grad(_dropout_loss), X, W)
    kept = eager(backend, lambda x: op.dropout(op.tanh(x), 0.5, seed=7, stream=2), X) != 0
    assert 0 < kept.sum() < kept.size
    assert np.array_equal(gx != 0, kept)
    t = eager(backend, op.tanh, X)
    assert_bits(gx[kept], (W * (np.float32(1) - t * t) * np.float32(2))[kept])


@clause("AD-EFFECT-1")
def test_dropout_masks_are_the_same_on_a_mesh(backend):
    """On a dp×tp mesh the dropout gradient has the single-device gradient's bits."""
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    xd = dist.tensor(X.shape, dist.ShardSpec(("batch",), ("dp",)), mesh, data=X)
    wd = dist.tensor(W.shape, dist.ShardSpec(("col",), ("tp",)), mesh, data=W)
    try:
        with tr.backends.use(backend):
            gd = tr.grad(_dropout_loss)(xd, wd)
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)
    assert_bits(gd.numpy(), eager(backend, tr.grad(_dropout_loss), X, W))


@clause("AD-EFFECT-1")
def test_send_and_recv_inside_differentiated_code_are_effect_errors(backend):
    """send/recv while a transform traces its function: EffectError naming the transform and line."""
    mesh = dist.Mesh(("pp", "tp"), range(4), (2, 2))
    a, b = mesh.sub(pp=0), mesh.sub(pp=1)
    x = dist.tensor((4,), None, a, data=np.arange(4.0, dtype=np.float32))

    def sends(x):
        dist.send(x, b)  # the line named
        return op.sum(x)
    with tr.backends.use(backend):
        with pytest.raises(EffectError, match="dist.send .*differentiated by grad") as info:
            tr.grad(sends)(x)
        assert f"{HERE}:{sends.__code__.co_firstlineno + 1}" in str(info.value)
        with pytest.raises(EffectError, match="dist.recv"):
            tr.grad(lambda x: op.sum(x * dist.recv(a, b)))(x)
        with pytest.raises(EffectError, match="dist.send"):
            tr.jvp(sends, (x,), (x,))
        dist.send(x, b)
        assert_bits(dist.recv(a, b).numpy(), x.numpy())


@clause("AD-EFFECT-1")
@pytest.mark.parametrize("transform", ["grad", "jvp"])
def test_ops_with_side_effects_are_effect_errors(backend, raw_op, transform):  # noqa: F811
    """A recorded op with side effects is an EffectError naming it and the transform."""
    def logs(x):
        raw_op("log", x)
        return op.sum(x * x)
    call = (lambda: tr.grad(logs)(X)) if transform == "grad" else (lambda: tr.jvp(logs, (X,), (X,)))
    with pytest.raises(EffectError, match=f"cadtest.log has side effects .*differentiated by {transform}"):
        eager(backend, call)


# -- AD-DET-1 ----------------------------------------------------------------------------------
_DIGEST = """
import hashlib, sys
import numpy as np
import tessera_ref as tr
from tessera_ref import dist, op
backend = sys.argv[1]
S = dist.ShardSpec
mesh = dist.Mesh(("dp", "tp"), range(6), (2, 3))
x = dist.tensor((8, 6), S(("batch",), ("dp",)), mesh, init="randn", seed=1)
W1 = dist.tensor((6, 12), S(("col",), ("tp",)), mesh, init="randn", seed=2)
W2 = dist.tensor((12, 6), S(("row",), ("tp",)), mesh, init="randn", seed=3)
def loss(W1, W2):
    h = op.gelu(op.matmul(x, W1))
    return op.mean(op.softmax(op.matmul(h, W2)) * op.sin(x))
h = hashlib.sha256()
with tr.backends.use(backend):
    for g in tr.grad(loss, argnums=(0, 1))(W1, W2):
        h.update(g.numpy().tobytes())
    for g in tr.grad(lambda a, b: op.sum(op.exp(op.matmul(a, b))), argnums=(0, 1))(W1.numpy(), W2.numpy()):
        h.update(np.asarray(g).tobytes())
print(h.hexdigest())
"""


def _digest_here(backend):
    namespace = {"__name__": "digest"}
    import contextlib
    import io
    out = io.StringIO()
    argv = sys.argv
    try:
        sys.argv = ["digest", backend]
        with contextlib.redirect_stdout(out):
            exec(compile(_DIGEST, "digest", "exec"), namespace)
    finally:
        sys.argv = argv
    return out.getvalue().strip()


@clause("AD-DET-1")
def test_gradients_are_bit_identical_across_runs_processes_threads_and_hash_seeds(backend):
    """Gradient digests agree across runs, processes, 1/2 threads and hash seeds."""
    try:
        here = [_digest_here(backend), _digest_here(backend)]
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)
    assert here[0] == here[1] and len(here[0]) == 64
    path = os.pathsep.join(p for p in sys.path if p)
    for threads, hashseed in (("1", "0"), ("2", "12345")):
        env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads,
                   NUMBA_NUM_THREADS=threads, PYTHONHASHSEED=hashseed, PYTHONPATH=path)
        out = subprocess.run([sys.executable, "-c", _DIGEST, backend], env=env, capture_output=True, text=True)
        if out.returncode and "no backend named" in out.stderr:
            pytest.skip(f"n/a: the backend {backend!r} is not registered in a fresh interpreter")
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == here[0], f"threads={threads}, PYTHONHASHSEED={hashseed}"


@clause("AD-DET-1")
def test_repeated_calls_give_the_same_bits(backend):
    """The same gradient twice, eagerly and inside jit, on one device and on a mesh."""
    g = tr.grad(_dropout_loss, argnums=(0, 1))
    first, second = eager(backend, g, X, W), eager(backend, g, X, W)
    assert_bits(first, second)
    mesh = dist.Mesh(("dp",), range(2), (2,))
    xd = dist.tensor(X.shape, dist.ShardSpec(("batch",), ("dp",)), mesh, data=X)
    try:
        with tr.backends.use(backend):
            a, b = (tr.grad(lambda x: op.sum(op.softmax(x) * W))(xd).numpy() for _ in range(2))
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)
    assert_bits(a, b)
