"""MESH-PP-1 … MESH-PP-4: pipelines over a mesh axis — stages on sub-meshes, micro-batches, the
bits of the unpipelined micro-batch loop, the errors."""
import numpy as np
import pytest

from tessera_ref import dist, op
from tessera_ref.autodiff import value_and_grad
from tessera_ref.errors import MeshError
from tessera_conformance import assert_bits, clause, eager, oracle_only

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("these pipeline mistakes are found by dist before anything runs")

S = dist.ShardSpec
MESH = dist.Mesh(axes=["dp", "pp"], devices=range(4), shape=(2, 2))
STAGES = [lambda a, w: op.tanh(op.matmul(a, w)), lambda a, w: op.matmul(a, w)]


def loss(y):
    return op.sum(y * y)


def _batch(seed=0):
    g = np.random.default_rng(seed).standard_normal((8, 6)).astype(np.float32)
    return g, dist.tensor(g.shape, S(("batch",), ("dp",)), MESH.sub(pp=0), data=g)


def _weights(seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((6, 6)).astype(np.float32) for _ in STAGES]


@clause("MESH-PP-1", "MESH-PP-3")
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_losses_and_gradients_are_the_unpipelined_loops(backend, schedule):
    """Stage k's weight lives on pp=k; the losses and summed gradients equal the two stages
    composed on one sub-mesh, micro-batch by micro-batch, gradients summed in ascending order."""
    _, x = _batch()
    ws = _weights()

    def pipelined():
        params = [(dist.tensor(w.shape, None, MESH.sub(pp=k), data=w),) for k, w in enumerate(ws)]
        r = dist.pipeline(STAGES, MESH, microbatches=2, schedule=schedule, loss=loss).step(x, params)
        assert [g.mesh for (g,) in r.grads] == [MESH.sub(pp=0), MESH.sub(pp=1)]
        return [*r.losses, *(g for (g,) in r.grads)]

    def loop():
        here = [dist.tensor(w.shape, None, MESH.sub(pp=0), data=w) for w in ws]
        losses, acc = [], None
        for xj in dist.microbatches(x, 2):
            value, g = value_and_grad(lambda a, b: loss(STAGES[1](STAGES[0](xj, a), b)), argnums=(0, 1))(*here)
            losses.append(value)
            acc = g if acc is None else tuple(s + gi for s, gi in zip(acc, g))
        return [*losses, *acc]

    assert_bits(eager(backend, pipelined), eager(backend, loop))


@clause("MESH-PP-2")
def test_microbatches_take_each_ranks_share(backend):
    """Rows 0-3 on dp rank 0 and 4-7 on rank 1: micro-batch j of 2 is rows 2j, 2j+1 of each block."""
    g, x = _batch()
    parts = eager(backend, lambda: dist.microbatches(x, 2))
    assert_bits(parts, [g[[0, 1, 4, 5]], g[[2, 3, 6, 7]]])
    with pytest.raises(MeshError, match="3 micro-batches do not divide"):
        dist.microbatches(x, 3)


@LIBRARY
@clause("MESH-PP-4")
@pytest.mark.parametrize("kwargs,needle", [
    (dict(microbatches=0), "must be an int >= 1"),
    (dict(stages=STAGES[:1]), "needs 2 stage functions"),
    (dict(schedule="zigzag"), "unknown pipeline schedule"),
    (dict(mesh_axis="tp"), "has axes"),
    (dict(virtual_stages=2, stages=STAGES * 2), "one model chunk per stage"),
    (dict(loss="mean"), "needs loss="),
])
def test_errors(backend, kwargs, needle):
    args = dict(stages=STAGES, mesh=MESH, microbatches=2, loss=loss)
    args.update(kwargs)
    with pytest.raises(MeshError, match=needle):
        dist.pipeline(**args)


@LIBRARY
@clause("MESH-PP-4")
def test_parameters_on_the_wrong_stage(backend):
    _, x = _batch()
    ws = [(dist.tensor(w.shape, None, MESH.sub(pp=0), data=w),) for w in _weights()]
    with pytest.raises(MeshError, match="parameter 0 of stage 1 must live on"):
        dist.pipeline(STAGES, MESH, microbatches=2, loss=loss).step(x, ws)
