"""Pipeline schedules (SIM-PP-1 … SIM-PP-3): the orders, and their bubble worked out by hand.

With every forward taking ``f`` and every backward ``b`` on every stage and free transfers,
GPipe and 1F1B end at ``(m + p − 1)(f + b)``: the last stage's first forward starts after
``p − 1`` forwards, its last backward leaves ``p − 1`` backwards for the stages before it
(Narayanan et al., SC'21, §2.2.1). The interleaved schedule's chunks take ``f/v`` and ``b/v``
and it ends at ``m(f + b) + (p − 1)(f + b)/v`` (§2.2.2).
"""
import pytest

from tessera_ref.errors import SimError
from tessera_ref.sim.pipeline import Action, bubble_fraction, order, timing


def _end(schedule, p, m, v=1, f=1.0, b=2.0, transfer=0.0):
    placed = timing(order(schedule, p, m, v), lambda d, a: (f if a.kind == "F" else b) / v, lambda a: transfer)
    return max(x.end for x in placed), placed


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (4, 8), (4, 2), (8, 16)])
def test_bubble_of_gpipe_and_1f1b(schedule, p, m):
    end, _ = _end(schedule, p, m)
    assert end == (m + p - 1) * 3.0
    assert bubble_fraction(schedule, p, m) == (p - 1) / m
    assert (end - m * 3.0) / (m * 3.0) == pytest.approx((p - 1) / m)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 3), (4, 4, 4), (8, 16, 4)])
def test_bubble_of_interleaved(p, m, v):
    end, _ = _end("interleaved", p, m, v)
    assert end == pytest.approx(m * 3.0 + (p - 1) * 3.0 / v)
    assert bubble_fraction("interleaved", p, m, v) == (p - 1) / (v * m)


def test_1f1b_order_by_hand():
    """p = 2, m = 3: device 0 warms up with one forward, device 1 with none."""
    F, B = (lambda j: Action("F", j, 0)), (lambda j: Action("B", j, 0))
    assert order("1f1b", 2, 3)[0] == [F(0), F(1), B(0), F(2), B(1), B(2)]
    F1, B1 = (lambda j: Action("F", j, 1)), (lambda j: Action("B", j, 1))
    assert order("1f1b", 2, 3)[1] == [F1(0), B1(0), F1(1), B1(1), F1(2), B1(2)]


def test_1f1b_keeps_at_most_p_microbatches_in_flight():
    """1F1B's point: device d holds at most p − d activations; GPipe holds all m."""
    for schedule, most in (("1f1b", lambda p, d, m: p - d), ("gpipe", lambda p, d, m: m)):
        for d, acts in enumerate(order(schedule, 4, 8)):
            live = peak = 0
            for a in acts:
                live += 1 if a.kind == "F" else -1
                peak = max(peak, live)
            assert peak == most(4, d, 8)


def test_every_device_runs_each_action_once_and_backwards_in_microbatch_order():
    for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        acts = order(schedule, 4, 8, v)
        for d, mine in enumerate(acts):
            assert sorted(mine) == sorted({(k, j, c * 4 + d) for k in "FB" for j in range(8) for c in range(v)})
            for c in range(v):
                backs = [a.microbatch for a in mine if a.kind == "B" and a.chunk == c * 4 + d]
                assert backs == sorted(backs)


def test_transfers_delay_the_pipeline():
    """p = 2, m = 2, f = 1, b = 2, transfers 0.25, by hand: device 0 runs F0 [0, 1], F1 [1, 2];
    device 1 F0 [1.25, 2.25], B0 [2.25, 4.25], F1 [4.25, 5.25], B1 [5.25, 7.25]; device 0 then
    B0 [4.5, 6.5] and B1 [7.5, 9.5]."""
    end, placed = _end("1f1b", 2, 2, transfer=0.25)
    spans = {(x.device, x.action.kind, x.action.microbatch): (x.start, x.end) for x in placed}
    assert spans == {(0, "F", 0): (0, 1), (0, "F", 1): (1, 2), (1, "F", 0): (1.25, 2.25), (1, "B", 0): (2.25, 4.25),
                     (1, "F", 1): (4.25, 5.25), (1, "B", 1): (5.25, 7.25), (0, "B", 0): (4.5, 6.5),
                     (0, "B", 1): (7.5, 9.5)}
    assert end == 9.5


@pytest.mark.parametrize("args,needle", [
    (("zigzag", 2, 4), "unknown pipeline schedule"),
    (("1f1b", 0, 4), "stages must be an int >= 1"),
    (("1f1b", 2, 4, 2), "one model chunk per stage"),
    (("interleaved", 4, 6, 2), "multiple of the stages"),
])
def test_bad_schedules(args, needle):
    with pytest.raises(SimError, match=needle):
        order(*args)
