"""The abstract GPT iteration against Megatron-LM's published throughput (SIM-GPT-1 … SIM-GPT-3)."""
from dataclasses import replace

import pytest

from tessera_ref.errors import SimError
from tessera_ref.sim.gpt import PUBLISHED, GPTConfig, backward_ops, iteration, layer_ops, main, model_flops

SMALL = GPTConfig("tiny", layers=4, hidden=1024, heads=16, t=2, p=2, gpus=8, batch=16)


def test_model_flops_by_hand():
    """Eq. 3 for the paper's 1.7B row, by hand: 96·512·2048·24·2304²·(1 + 2048/13824 + 51200/884736)."""
    c = PUBLISHED[0]
    by_hand = 96 * 512 * 2048 * 24 * 2304 ** 2 * (1 + 2048 / 13824 + 51200 / 884736)
    assert model_flops(c) == pytest.approx(by_hand, rel=1e-12)
    no_recompute = 72 * 512 * 2048 * 24 * 2304 ** 2 * (1 + 2048 / 13824) + 6 * 512 * 2048 * 2304 * 51200
    assert model_flops(replace(c, recompute=False)) == pytest.approx(no_recompute, rel=1e-12)


def test_layer_gemm_flops_match_the_paper():
    """A layer's forward GEMMs on one of t devices: (24·b·s·h² + 4·b·s²·h)/t (the paper's §5.1)."""
    b, s, h, t = SMALL.microbatch, SMALL.seq, SMALL.hidden, SMALL.t
    gemms = sum(o.flops for o in layer_ops(SMALL) if o.name == "matmul")
    assert gemms == (24 * b * s * h * h + 4 * b * s * s * h) / t
    assert sum(o.flops for o in backward_ops(layer_ops(SMALL)) if o.name == "matmul") == 2 * gemms


def test_a_pipeline_of_one_stage_has_no_bubble():
    it = iteration(replace(SMALL, p=1, layers=4))
    assert it.bubble == 0.0 and it.time > it.gemm


def test_more_microbatches_shrink_the_bubble():
    """Same model and GPUs, batch 16 vs 64 (m = 4 vs 16 per pipeline): the bubble's share falls
    about as (p − 1)/m says."""
    few, many = iteration(SMALL), iteration(replace(SMALL, batch=64))
    assert few.bubble / few.time > 2 * many.bubble / many.time > 0


def test_gemm_time_is_the_roofline_of_its_flops():
    """A stage of p=1 runs every GEMM of 2 layers × m micro-batches forward, twice backward and once
    recomputed: 4× the forward GEMM time, and the logits GEMM (2·s·h·V FLOPs) 3×, each GEMM at the
    A100's 0.8 × 312 TFLOP/s (all compute-bound here)."""
    c = replace(SMALL, p=1, layers=2, t=1, heads=4, gpus=4, batch=8)  # head size 256: Q·Kᵀ compute-bound too
    rate = 0.8 * 312e12
    s, h, V = 2048, 1024, 51200
    layer = (24 * s * h * h + 4 * s * s * h) / rate
    logits = 2 * s * h * V / rate
    assert iteration(c).gemm == pytest.approx(c.m * (c.layers * 4 * layer + 3 * logits), rel=1e-12)


def test_predictions_are_upper_bounds_of_the_published_measurements():
    """The model leaves out real costs (launches, imperfect overlap, the GEMMs' real efficiency on
    their shapes), so it must predict more than Selene measured, for every row it is given."""
    for c in PUBLISHED:
        assert iteration(c).tflops > c.published, c


def test_bad_configuration():
    with pytest.raises(SimError, match="do not divide evenly"):
        iteration(replace(SMALL, gpus=6))
    with pytest.raises(SimError, match="do not divide"):
        iteration(replace(SMALL, layers=5))


@pytest.mark.slow
def test_the_command_prints_every_row(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for c in PUBLISHED:
        assert f"{c.published:>9.0f}" in out and c.name in out
