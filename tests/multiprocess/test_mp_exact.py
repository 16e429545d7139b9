"""Exact partial sums (``reduction="exact"``, NUM-RED-4) across processes (MESH-MP-4): each
rank a thread, messages through queues (``test_mp_p2p_threads``). The sums travel as their
digits (``ExactAccumulator.to_words``); an all-reduce and a reduce-scatter give every rank its
box of the one-process result, and a reduce-scatter sends only the owners' rows — a ring's
bytes of the digits, no all-gather."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tessera_ref import dist
from tessera_ref.backends.p2p import P2PCommunicator
from tessera_ref.dist.world import World, placement
from tessera_ref.numerics import ExactAccumulator, Policy

from test_mp_p2p_threads import MESH, WHOLE, on_threads

EXACT = Policy("f32", reduction="exact")


def _exact(values: np.ndarray) -> ExactAccumulator:
    """Every element its own exact partial sum (the stacked values of a pending exact sum)."""
    return ExactAccumulator(values.shape).add(values)


def _box(acc: ExactAccumulator, comm) -> ExactAccumulator:
    for i, (start, size) in enumerate(zip(comm.place.start, comm.place.box)):
        acc = acc.take(np.arange(start, start + size), i)
    return acc


def test_words_take_and_concatenate_keep_the_exact_sums():
    """Sums far apart in magnitude, negative, NaN and infinite, checked against Fractions."""
    terms = np.array([[1.0, 2.0 ** -100, -3.5, np.inf, 0.0], [2.0 ** 90, -(2.0 ** -120), -1.0, 1.0, np.nan]],
                     np.float32)
    acc = ExactAccumulator((5,)).add(terms, axis=0)
    want = [Fraction(1) + Fraction(2) ** 90, Fraction(2) ** -100 - Fraction(2) ** -120, Fraction(-9, 2)]
    back = ExactAccumulator.from_words(acc.to_words(), (5,))
    got = back.as_fractions()
    assert list(got[:3]) == want and got[3] == np.inf and np.isnan(got[4])
    parts = [acc.take([4, 0], 0), acc.take([2], 0), ExactAccumulator((1,)), acc.take([1], 0)]
    joined = ExactAccumulator.concatenate(parts, 0).as_fractions()
    assert np.isnan(joined[0]) and list(joined[1:]) == [want[0], want[2], 0, want[1]]
    empty = ExactAccumulator((2, 3))
    assert ExactAccumulator.from_words(empty.to_words(), (2, 3)).as_fractions().tolist() == [[0] * 3] * 2


@pytest.mark.parametrize("size", [2, 4, 8])
@pytest.mark.parametrize("axes", [("tp",), ("dp",), ("dp", "tp")])
def test_exact_all_reduce_on_every_rank_is_its_box_of_the_one_process_sum(size, axes):
    whole = _exact(WHOLE)
    want = P2PCommunicator(MESH).reduce(whole.copy(), axes, "sum", EXACT).round("f32")
    positions = [MESH.axis_index(a) for a in axes]
    results = on_threads(size, MESH, lambda comm: comm.reduce(_box(whole, comm), axes, "sum", EXACT).round("f32"))
    for r, got in enumerate(results):
        place = placement(MESH, World(r, size))
        index = tuple(slice(None) if i in positions else slice(s, s + b)
                      for i, (s, b) in enumerate(zip(place.start, place.box)))
        np.testing.assert_array_equal(got.view(np.uint32), want[index].view(np.uint32))


@pytest.mark.parametrize("size", [2, 4, 8])
@pytest.mark.parametrize("axis, dim", [("tp", 0), ("tp", 1), ("dp", 0), ("dp", 1)])
def test_exact_reduce_scatter_on_every_rank_is_its_box_of_the_one_process_result(size, axis, dim):
    """5 rows over tp=4 pad to blocks of 2; 3 columns over dp=2 pad to blocks of 2. The one
    process's result is also the rounded float reduce-scatter's under exact mode."""
    whole = _exact(WHOLE)
    want = P2PCommunicator(MESH).reduce_scatter(whole, axis, dim, "sum", EXACT)
    floats = P2PCommunicator(MESH).reduce_scatter(WHOLE, axis, dim, "sum", EXACT)
    np.testing.assert_array_equal(want.view(np.uint32), floats.view(np.uint32))
    results = on_threads(size, MESH, lambda comm: comm.reduce_scatter(_box(whole, comm), axis, dim, "sum", EXACT))
    for r, got in enumerate(results):
        place = placement(MESH, World(r, size))
        index = tuple(slice(s, s + b) for s, b in zip(place.start, place.box))
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint32),
                                      np.ascontiguousarray(want[index]).view(np.uint32))


@pytest.mark.parametrize("size", [2, 4])
def test_exact_sums_move_a_rings_bytes_of_their_digits(size):
    """One device per process, 1200 sums each, ``w`` digits in use: a reduce-scatter sends
    (p−1)/p of its digits — 4 bytes each, 8 for the signed top one — and a 20-byte header a
    message (the length, low, top, special); an all-reduce twice that, or a digit more a sum."""
    mesh = dist.Mesh(("r",), range(size))
    rng = np.random.default_rng(3)
    values = (rng.standard_normal((size, 1200)) * np.exp2(rng.integers(-8, 8, (size, 1200)))).astype(np.float32)
    whole = _exact(values)
    words = {r: whole.take([r], 0).to_words() for r in range(size)}
    digits = {r: words[r][0 + 1] + 1 - words[r][0] for r in range(size)}  # top + 1 - low: digits in use
    sent = {}

    def work(kind):
        def run(comm):
            before = comm.transport.bytes_sent
            acc = whole.take([comm.transport.rank], 0)
            if kind == "scatter":
                comm.reduce_scatter(acc, "r", 0, "sum", EXACT)
            else:
                comm.reduce(acc, ("r",), "sum", EXACT)
            sent[kind, comm.transport.rank] = comm.transport.bytes_sent - before
        return run

    on_threads(size, mesh, work("scatter"))
    for r in range(size):
        ring = (size - 1) * 4 * (digits[r] + 1) * 1200 // size
        assert sent["scatter", r] == ring + (size - 1) * 20
    on_threads(size, mesh, work("all"))
    for r in range(size):
        assert sent["all", r] >= 2 * ring + 2 * (size - 1) * 20
        assert sent["all", r] <= 2 * (size - 1) * 4 * (digits[r] + 2) * 1200 // size + 2 * (size - 1) * 20
