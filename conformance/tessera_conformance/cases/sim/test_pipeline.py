"""SIM-PP-1 … SIM-PP-3 (pipeline orders, their timing and bubble) and SIM-GPT-1 … SIM-GPT-3 (the
abstract GPT iteration against Megatron-LM's published throughput). Every expected number is
worked out by hand from the clauses."""
from dataclasses import replace

import pytest

from tessera_ref.errors import SimError
from tessera_ref.sim.gpt import PUBLISHED, GPTConfig, iteration, layer_ops, model_flops
from tessera_ref.sim.pipeline import Action, bubble_fraction, order, timing
from tessera_conformance import clause, oracle_only

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the simulated machine's model (presets, costs, timelines, memory, reports) is the "
                      "library's; no backend computes it")


@LIBRARY
@clause("SIM-PP-1")
def test_orders_by_hand(backend):
    F, B = (lambda j, c=0: Action("F", j, c)), (lambda j, c=0: Action("B", j, c))
    assert order("gpipe", 2, 2)[1] == [F(0, 1), F(1, 1), B(0, 1), B(1, 1)]
    assert order("1f1b", 3, 4)[0] == [F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)]
    # interleaved p=2, m=2, v=2 on device 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 = every forward
    assert order("interleaved", 2, 2, 2)[0] == [F(0, 0), F(1, 0), F(0, 2), F(1, 2),
                                                  B(0, 2), B(1, 2), B(0, 0), B(1, 0)]
    for bad in (("zigzag", 2, 2), ("interleaved", 2, 3, 2), ("1f1b", 2, 2, 2)):
        with pytest.raises(SimError):
            order(*bad)


@LIBRARY
@clause("SIM-PP-2")
def test_timing_by_hand(backend):
    """GPipe, p = 2, m = 2, F = 1, B = 2, transfers 0.5: device 0 F0 [0,1] F1 [1,2]; device 1 F0
    [1.5,2.5] F1 [2.5,3.5] B0 [3.5,5.5] B1 [5.5,7.5]; device 0 B0 [6,8] B1 [8,10]."""
    placed = timing(order("gpipe", 2, 2), lambda d, a: 1.0 if a.kind == "F" else 2.0, lambda a: 0.5)
    got = {(x.device, x.action.kind, x.action.microbatch): (x.start, x.end) for x in placed}
    assert got == {(0, "F", 0): (0, 1), (0, "F", 1): (1, 2), (1, "F", 0): (1.5, 2.5), (1, "F", 1): (2.5, 3.5),
                   (1, "B", 0): (3.5, 5.5), (1, "B", 1): (5.5, 7.5), (0, "B", 0): (6, 8), (0, "B", 1): (8, 10)}
    assert [x.start for x in placed] == sorted(x.start for x in placed)


@LIBRARY
@clause("SIM-PP-3")
@pytest.mark.parametrize("schedule,p,m,v", [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 3, 5, 1),
                                            ("interleaved", 4, 8, 2), ("interleaved", 2, 6, 3)])
def test_bubble(backend, schedule, p, m, v):
    placed = timing(order(schedule, p, m, v), lambda d, a: (1.0 if a.kind == "F" else 2.0) / v)
    end = max(x.end for x in placed)
    assert end == pytest.approx(m * 3.0 + (p - 1) * 3.0 / v)
    assert bubble_fraction(schedule, p, m, v) == pytest.approx((end - 3.0 * m) / (3.0 * m))


@LIBRARY
@clause("SIM-GPT-1")
def test_layer_kernels(backend):
    """A layer's six forward GEMMs on one of t devices do (24·b·s·h² + 4·b·s²·h)/t FLOPs."""
    c = GPTConfig("c", layers=2, hidden=512, heads=8, t=4, p=1, gpus=4, batch=4, microbatch=2)
    gemms = [o for o in layer_ops(c) if o.name == "matmul"]
    assert len(gemms) == 6
    assert sum(o.flops for o in gemms) == (24 * 2 * 2048 * 512 ** 2 + 4 * 2 * 2048 ** 2 * 512) / 4


@LIBRARY
@clause("SIM-GPT-2")
def test_flops_and_throughput(backend):
    c = GPTConfig("c", layers=2, hidden=512, heads=8, t=1, p=2, gpus=4, batch=8)
    assert model_flops(c) == pytest.approx(96 * 8 * 2048 * 2 * 512 ** 2 * (1 + 2048 / 3072 + 51200 / 16384))
    it = iteration(c)
    assert it.tflops == pytest.approx(model_flops(c) / it.time / 4 / 1e12)
    assert it.time > it.gemm + it.other and it.bubble > 0
    assert iteration(replace(c, p=1, layers=2)).bubble == 0.0


@LIBRARY
@clause("SIM-GPT-3")
def test_upper_bound_of_every_published_row(backend):
    for c in PUBLISHED:
        assert c.published is not None and iteration(c).tflops > c.published, c.name
