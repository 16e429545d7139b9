"""Gradient reductions as soon as final (AD-MESH-4): where they sit, what they hide under, their bits."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op, sim
from tessera_ref.sim.overlap import comm_exposure

S = dist.ShardSpec


def _two_layers(mesh, x):
    def loss(w1, w2):
        return op.sum(op.matmul(op.matmul(x, w1), w2) ** 2.0)
    return tr.grad(loss, argnums=(0, 1))


def test_the_last_layers_gradient_is_reduced_before_the_first_layers_backward():
    """In the recorded program W2's all_reduce comes right after the matmul that finishes its
    gradient (x·W1)ᵀ·dY and before the matmul that finishes W1's, xᵀ·(dY·W2ᵀ)."""
    mesh = dist.mesh(devices=["cuda:0", "cuda:1"], axes=("dp",), shape=(2,))
    x = dist.tensor((4, 6), S(("batch",), ("dp",)), mesh, dtype="f32")
    W1, W2 = (dist.tensor((6, 6), None, mesh, dtype="f32") for _ in range(2))
    g = _two_layers(mesh, x)
    g(W1, W2)
    names = [line.split('"')[1].rsplit(".", 1)[-1] for line in g.inspect_ir().splitlines()
             if '= "tessera.graph.' in line]
    first, last = names.index("all_reduce"), len(names) - 1 - names[::-1].index("matmul")
    assert names.count("all_reduce") == 2 and names.count("matmul") == 5
    assert first < last and names[last + 1:] == ["all_reduce"]


def test_the_bits_are_the_gradients():
    """Small integers: every product and sum is exact in f32, so the gradients equal the f64
    formulas gW2 = (x·W1)ᵀ·2Y and gW1 = xᵀ·(2Y·W2ᵀ), Y = x·W1·W2, bit for bit."""
    rng = np.random.default_rng(11)
    xs, w1, w2 = (rng.integers(-2, 3, shape).astype(np.float32) for shape in ((4, 6), (6, 5), (5, 3)))
    mesh = dist.mesh(devices=["cuda:0", "cuda:1"], axes=("dp",), shape=(2,))
    x = dist.tensor((4, 6), S(("batch",), ("dp",)), mesh, dtype="f32", data=xs)
    W1 = dist.tensor((6, 5), None, mesh, dtype="f32", data=w1)
    W2 = dist.tensor((5, 3), None, mesh, dtype="f32", data=w2)
    g1, g2 = _two_layers(mesh, x)(W1, W2)
    X, A, B = (a.astype(np.float64) for a in (xs, w1, w2))
    dY = 2 * (X @ A @ B)
    assert np.array_equal(g2.numpy(), ((X @ A).T @ dY).astype(np.float32))
    assert np.array_equal(g1.numpy(), (X.T @ (dY @ B.T)).astype(np.float32))
    assert g1.layout == W1.layout and g2.layout == W2.layout


def test_the_overlapped_timeline_hides_a_reduction_under_the_backward():
    """On 2 H100s: W2's gradient all_reduce starts when its matmul ends and runs while the
    matmul of W1's gradient computes, so that matmul's whole duration is hidden; W1's
    reduction, the last op, is exposed. In program order nothing hides."""
    m = sim.machine("H100", devices=2, overlap=True)
    with sim.use(m):
        mesh = dist.mesh(devices=["cuda:0", "cuda:1"], axes=("dp",), shape=(2,))
        x = dist.tensor((512, 1024), S(("batch",), ("dp",)), mesh, dtype="bf16")
        W1, W2 = (dist.tensor((1024, 1024), None, mesh, dtype="bf16") for _ in range(2))
        _two_layers(mesh, x)(W1, W2)
    events = [e for e in m.timeline.events if e.device == 0]
    matmuls = [e for e in events if e.name == "matmul"]
    reduces = [e for e in events if e.name == "all_reduce[dp]"]
    assert len(matmuls) == 5 and len(reduces) == 2
    assert reduces[0].start == pytest.approx(matmuls[3].end) and matmuls[4].start == pytest.approx(matmuls[3].end)
    assert reduces[1].start == pytest.approx(reduces[0].end)  # one link, in turn
    exposed, hidden = comm_exposure(m.timeline)[0, "dp"]
    assert hidden == pytest.approx(matmuls[4].duration)
    assert exposed == pytest.approx(reduces[0].duration + reduces[1].duration - matmuls[4].duration)
    assert m.conservative_step_time - m.overlapped_step_time == pytest.approx(matmuls[4].duration)
