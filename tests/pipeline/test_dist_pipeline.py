"""dist.pipeline (MESH-PP-1 … MESH-PP-4): the same bits as the model run stage after stage without a
pipeline, micro-batch by micro-batch with the gradients summed in micro-batch order; the bubble
on the simulated machine; the errors."""
import numpy as np
import pytest

from tessera_ref import dist, op, sim
from tessera_ref.autodiff import value_and_grad
from tessera_ref.errors import MeshError
from tessera_ref.sim.pipeline import order, timing

S = dist.ShardSpec
MESH = dist.Mesh(axes=["dp", "pp"], devices=range(4), shape=(2, 2))
F0 = lambda a, w: op.tanh(op.matmul(a, w))
F1 = lambda a, w: op.matmul(a, w)
LOSS = lambda y: op.sum(y * y)


def _bits(t):
    return np.asarray(t.numpy()).view(np.uint32)


def _model(mesh, chunks, seed=1):
    """A batch of 8 rows split over dp on stage 0, and chunk k's weight on stage k mod 2."""
    x = dist.tensor((8, 16), S(("batch",), ("dp",)), mesh.sub(pp=0), dtype="f32", init="randn", seed=seed)
    ws = [(dist.tensor((16, 16), None, mesh.sub(pp=k % 2), dtype="f32", init="randn", seed=seed + 1 + k),)
          for k in range(chunks)]
    return x, ws


def _unpipelined(x, ws, fns, m):
    """The reference: the whole model on stage 0's devices, one micro-batch at a time, its
    gradients summed in micro-batch order."""
    here = [dist.tensor(w.shape, None, x.mesh, dtype="f32", data=w.numpy()) for (w,) in ws]

    def model(xj):
        def loss(*weights):
            a = xj
            for f, w in zip(fns, weights):
                a = f(a, w)
            return LOSS(a)
        return loss

    losses, acc = [], None
    for xj in dist.microbatches(x, m):
        value, g = value_and_grad(model(xj), argnums=tuple(range(len(here))))(*here)
        losses.append(value)
        acc = g if acc is None else tuple(s + gi for s, gi in zip(acc, g))
    return losses, acc


@pytest.mark.parametrize("schedule,v,m", [("gpipe", 1, 2), ("1f1b", 1, 4), ("1f1b", 1, 1), ("interleaved", 2, 2)])
def test_bits_equal_the_unpipelined_microbatch_loop(schedule, v, m):
    fns = [F0, F1] * v
    x, ws = _model(MESH, 2 * v)
    result = dist.pipeline(fns, MESH, microbatches=m, schedule=schedule, virtual_stages=v, loss=LOSS).step(x, ws)
    losses, grads = _unpipelined(x, ws, fns, m)
    assert [_bits(a).tolist() for a in result.losses] == [_bits(b).tolist() for b in losses]
    for k, ((g,), ref) in enumerate(zip(result.grads, grads)):
        assert g.mesh == MESH.sub(pp=k % 2) and g.type == ws[k][0].type
        assert np.array_equal(_bits(g), _bits(ref))


def test_microbatches_by_hand():
    """Batch rows 0..7 split over dp=2 (rows 0-3 on rank 0, 4-7 on rank 1): micro-batch j of 2 is
    rows [2j, 2j+2) of each rank's block."""
    x = dist.tensor((8, 1), S(("batch",), ("dp",)), MESH.sub(pp=0), dtype="f32",
                    data=np.arange(8, dtype=np.float32).reshape(8, 1))
    parts = [p.numpy().ravel().tolist() for p in dist.microbatches(x, 2)]
    assert parts == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_full_batch_gradient_is_a_different_sum():
    """One backward over the whole batch folds the rows of each rank in one K chain; the pipeline
    sums per-micro-batch gradients. MESH-PP-3 promises the micro-batch loop's bits only: here the
    two differ in the last bits (and agree to rounding)."""
    x, ws = _model(MESH, 2, seed=7)
    (g0,), (g1,) = dist.pipeline([F0, F1], MESH, microbatches=4, loss=LOSS).step(x, ws).grads
    _, full = _unpipelined(x, ws, [F0, F1], 1)
    assert not np.array_equal(_bits(g0), _bits(full[0])) or not np.array_equal(_bits(g1), _bits(full[1]))
    np.testing.assert_allclose(g0.numpy(), full[0].numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g1.numpy(), full[1].numpy(), rtol=1e-4, atol=1e-4)


def test_forward_only_gives_the_losses():
    x, ws = _model(MESH, 2)
    pipe = dist.pipeline([F0, F1], MESH, microbatches=2, loss=LOSS)
    assert [_bits(a).tolist() for a in pipe(x, ws)] == [_bits(b).tolist() for b in pipe.step(x, ws).losses]


def test_targets_reach_the_last_stage():
    """loss(y, target) with target = y's own value for micro-batch 0 and 0 for micro-batch 1."""
    x, ws = _model(MESH, 2)
    y = [F1(F0(xj, ws[0][0]), dist.tensor((16, 16), None, MESH.sub(pp=0), dtype="f32", data=ws[1][0].numpy()))
         for xj in dist.microbatches(x, 2)]
    rows = np.concatenate([y[0].numpy()[:2], np.zeros((2, 16), np.float32), y[0].numpy()[2:], np.zeros((2, 16), np.float32)])
    t = dist.tensor((8, 16), S(("batch",), ("dp",)), MESH.sub(pp=1), dtype="f32", data=rows)
    losses = dist.pipeline([F0, F1], MESH, microbatches=2, loss=lambda y, target: LOSS(y - target))(x, ws, t)
    assert float(losses[0].numpy()) == 0.0
    assert _bits(losses[1]).tolist() == _bits(LOSS(y[1])).tolist()


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_machine_shows_the_bubble(schedule):
    """Four stages of one compute-bound bf16 GEMM each (abstract tensors), 8 micro-batches, on an A100
    machine with overlap. A forward takes T (one GEMM), a backward two GEMMs (stage 0: one, no
    input gradient) plus the gradient sum. The step lies between the busiest device's work plus the
    p − 1 forwards before the last stage starts, and the action-level schedule of SIM-PP-2 with each
    stage's measured times (the machine may send a backward's input gradient before the action's
    last op)."""
    p, m, rows = 4, 8, 4096
    mesh = dist.Mesh(axes=["dp", "pp"], devices=range(p), shape=(1, p))
    x = dist.tensor((rows * m, 8192), None, mesh.sub(pp=0), dtype="bf16")
    ws = [(dist.tensor((8192, 8192), None, mesh.sub(pp=s), dtype="bf16"),) for s in range(p)]
    machine = sim.Machine("A100", p, overlap=True)
    with sim.use(machine):
        dist.pipeline(F1, mesh, microbatches=m, schedule=schedule, loss=lambda y: op.sum(y)).step(x, ws)
    preset = sim.get_preset("A100")
    T = sim.roofline((2 * rows * 8192 * 8192, 2 * (2 * rows * 8192 + 8192 * 8192)), "bf16", preset, 0.0, "matmul").time
    busy = [sum(e.duration for e in machine.timeline.events if e.device == d and e.stream == "compute")
            for d in range(p)]
    assert busy[1] == pytest.approx(m * 3 * T, rel=0.05) and busy[0] == pytest.approx(m * 2 * T, rel=0.05)
    transfer = sim.collective_cost("send", (0, 1), rows * 8192 * 2, preset).time
    placed = timing(order(schedule, p, m), lambda d, a: T if a.kind == "F" else busy[d] / m - T, lambda a: transfer)
    assert max(busy) + (p - 1) * T < machine.step_time <= max(x.end for x in placed)


@pytest.mark.parametrize("kwargs,call,needle", [
    (dict(microbatches=3), None, "3 micro-batches do not divide each device's 4 rows"),
    (dict(stages=[F0]), None, "needs 2 stage functions, got 1"),
    (dict(stages=3), None, "needs 2 stage functions, got 1 \\(not all callable\\)"),
    (dict(microbatches=2.0), None, "must be an int >= 1"),
    (dict(schedule="zigzag"), None, "unknown pipeline schedule"),
    (dict(mesh_axis="tp"), None, "has axes"),
    (dict(schedule="interleaved", virtual_stages=2, microbatches=1, stages=[F0, F1] * 2), None, "multiple of the stages"),
    (dict(loss=None), None, "needs loss="),
    ({}, "wrong-mesh", "must live on"),
    ({}, "input-on-stage-1", "input of the pipeline must be a distributed tensor on"),
    ({}, "params-count", "has 2 stages but params has 1"),
])
def test_errors(kwargs, call, needle):
    args = dict(stages=[F0, F1], mesh=MESH, microbatches=2, loss=LOSS)
    args.update(kwargs)
    x, ws = _model(MESH, 2)
    with pytest.raises(MeshError, match=needle):
        pipe = dist.pipeline(**args)
        if call == "wrong-mesh":
            ws = [ws[1], ws[0]]
        elif call == "input-on-stage-1":
            x = dist.tensor((8, 16), None, MESH.sub(pp=1), dtype="f32")
        elif call == "params-count":
            ws = ws[:1]
        pipe.step(x, ws)
