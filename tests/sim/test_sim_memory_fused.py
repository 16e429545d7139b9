"""AD-FLASHATTENTION-1, AD-LAYERNORMSAFE-1 on the simulated machine (SIM-MEM-1): one attention layer's forward and
backward on abstract tensors keeps q, k, v, o and the row log-sum-exp — its per-device peak is
linear in the sequence length, with no [s, s] tensor anywhere."""
import pytest

import tessera_ref as tr
from tessera_ref import dist, op, sim

B, HEADS, D, TP = 4, 48, 128, 8


def _layer_peak(s: int):
    """Peak bytes on cuda:0 and the types of everything allocated there, for ``vjp`` of causal
    bf16 attention with the heads split over tp=8 and a cotangent in the output's layout."""
    m = sim.machine("H100", devices=TP)
    names = []
    alloc = m.memory.alloc

    def recording(device, nbytes, name, location=None):
        handle = alloc(device, nbytes, name, location)
        if handle.device == 0:
            names.append(name)
        return handle
    m.memory.alloc = recording
    with sim.use(m):
        mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(TP)], axes=("tp",), shape=(TP,))
        spec = dist.ShardSpec((1,), ("tp",))
        q, k, v, do = (dist.tensor((B, HEADS, s, D), spec, mesh, dtype="bf16") for _ in range(4))
        _, pullback = tr.vjp(lambda q, k, v: op.flash_attention(q, k, v, causal=True), q, k, v)
        bars = pullback(do)
        assert [b.layout for b in bars] == [q.layout] * 3
        return m.memory.peak(0), names


@pytest.mark.parametrize("s", [2048, 4096])
def test_attention_layer_peak_is_the_saved_values(s):
    """Per device (6 of 48 heads): the operands q, k, v and the cotangent, the output o twice
    (the caller's, and the pullback's forward — ``vjp`` runs the function again), the row
    log-sum-exp (f32) and the three gradients: 9 bf16 [4, 6, s, 128] tensors and one f32
    [4, 6, s]. Before FA-2's backward (main 8872ae4) s=2048 peaked at 1,346,568,196 B: three f32
    [4, 6, s, s] matrices (P, P̄, S̄) of 402,653,184 B each."""
    peak, names = _layer_peak(s)
    x = B * HEADS // TP * s * D * 2
    lse = B * HEADS // TP * s * 4
    assert peak == 9 * x + lse
    assert not [n for n in names if f"{s}x{s}" in n], "an [s, s] tensor was allocated"
    assert "tensor<4x48x%dxf32, #shard<[*, tp, *]>>" % s in names  # the row log-sum-exp, split like the heads


def test_attention_layer_peak_is_linear_in_the_sequence():
    assert _layer_peak(4096)[0] == 2 * _layer_peak(2048)[0]


def test_layernorm_backward_keeps_no_full_width_f32_value():
    """AD-LAYERNORMSAFE-1: ``vjp`` of a bf16 layer norm [4, 2048, 6144] replicated over tp=8
    peaks at x, the cotangent, the caller's output and x̄ (4 bf16 tensors) plus four [6144]
    vectors (weight, bias and their cotangents); the row statistics live inside
    ``norm_safe_bwd``. The decomposed rule (main 8872ae4) peaked at 13 times x's bytes
    (1,308,680,192 B): f32 copies of x and g and its intermediates."""
    b, s, h = 4, 2048, 6144
    m = sim.machine("H100", devices=TP)
    with sim.use(m):
        mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(TP)], axes=("tp",), shape=(TP,))
        x, g = (dist.tensor((b, s, h), None, mesh, dtype="bf16") for _ in range(2))
        w, bias = (dist.tensor((h,), None, mesh, dtype="bf16") for _ in range(2))
        _, pullback = tr.vjp(lambda x, w, bias: op.layernorm_safe(x, w, bias), x, w, bias)
        pullback(g)
    assert m.memory.peak(0) == 4 * (b * s * h * 2) + 4 * (h * 2)
