"""The memory accountant: live/peak, the 80% warning, out of memory (SIM-MEM-1 … SIM-MEM-4)."""
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera_ref.errors import MemoryWarning, OutOfMemoryError, SimError
from tessera_ref.sim import MemoryAccountant

GiB = 2**30


def _acc(capacity=1000, n=2):
    return MemoryAccountant(capacity, tuple(f"cuda:{i}" for i in range(n)))


def _state(acc):
    n = len(acc.device_names)
    return ([acc.live(d) for d in range(n)], [acc.peak(d) for d in range(n)], acc.breakdown(), list(acc._warned))


def test_live_and_peak():
    acc = _acc()
    a = acc.alloc(0, 300, "a")
    b = acc.alloc(0, 400, "b")
    assert acc.live(0) == 700 and acc.peak(0) == 700 and acc.live(1) == 0
    acc.free(a)
    assert acc.live(0) == 400 and acc.peak(0) == 700
    acc.alloc("cuda:0", 200, "c")
    assert acc.live(0) == 600 and acc.peak(0) == 700
    acc.free(b)
    acc.alloc(0, 500, "d")
    assert acc.live(0) == 700 and acc.peak(0) == 700
    acc.alloc(0, 1, "e")
    assert acc.peak(0) == 701
    assert [a.name for a in acc.live_tensors(0)] == ["d", "c", "e"]
    assert acc.breakdown() == {"cuda:0": [("d", 500), ("c", 200), ("e", 1)], "cuda:1": []}


def test_warning_at_80_percent_exactly_once_per_device():
    acc = _acc()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.alloc(0, 800, "w0")  # exactly 80%: within the guideline
        assert caught == []
        acc.alloc(0, 1, "crosser")  # 80.1%
        acc.alloc(0, 100, "more")  # still above: no second warning
        acc.alloc(1, 900, "other")  # another device warns on its own
    assert [w.category for w in caught] == [MemoryWarning, MemoryWarning]
    first = str(caught[0].message)
    assert "cuda:0" in first and "801 B" in first and "80.1%" in first and "'crosser'" in first
    assert caught[0].filename == __file__
    assert "cuda:1" in str(caught[1].message) and "90.0%" in str(caught[1].message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.alloc(0, 50, "again")
    assert caught == []


def test_warning_is_once_even_after_freeing_below_and_crossing_again():
    acc = _acc()
    with pytest.warns(MemoryWarning):
        h = acc.alloc(0, 900, "x")
    acc.free(h)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.alloc(0, 900, "y")
    assert caught == []


def test_out_of_memory_names_everything_and_changes_nothing():
    acc = MemoryAccountant(80 * GiB, ("cuda:0", "cuda:1"))
    acc.alloc(0, 50 * GiB, "weights")
    acc.alloc(0, 10 * GiB, "activations")
    before = _state(acc)
    with pytest.raises(OutOfMemoryError) as info:
        acc.alloc(0, 30 * GiB, "W_big")
    err = info.value
    text = str(err)
    assert "'W_big'" in text and "cuda:0" in text
    assert f"{30 * GiB:,} B" in text  # requested
    assert f"{60 * GiB:,} B" in text  # live
    assert f"{80 * GiB:,} B" in text  # capacity
    assert f"{20 * GiB:,} B" in text  # free
    assert "'weights' (50 GiB)" in text
    assert "shard" in err.fix and "smaller format" in err.fix
    assert err.location.startswith(__file__ + ":")
    assert isinstance(err, MemoryError)
    assert _state(acc) == before
    with pytest.warns(MemoryWarning):
        acc.alloc(0, 20 * GiB, "fits_exactly")  # live may equal the capacity
    assert acc.live(0) == 80 * GiB


@pytest.mark.parametrize("device,nbytes", [(2, 10), ("cuda:9", 10), (0, -1), (0, True), (0, 1.5), (-1, 3)])
def test_bad_allocations_are_errors_and_change_nothing(device, nbytes):
    acc = _acc()
    acc.alloc(0, 100, "a")
    before = _state(acc)
    with pytest.raises(SimError):
        acc.alloc(device, nbytes, "bad")
    assert _state(acc) == before


def test_double_free_and_foreign_handles_are_errors():
    acc, other = _acc(), _acc()
    h = acc.alloc(0, 10, "a")
    g = other.alloc(0, 10, "g")
    acc.free(h)
    before = _state(acc)
    with pytest.raises(SimError, match="freed twice"):
        acc.free(h)
    with pytest.raises(SimError):
        acc.free(g)
    with pytest.raises(SimError):
        acc.free("a")
    assert _state(acc) == before


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 1), st.integers(0, 600)), max_size=40))
def test_accountant_agrees_with_a_simple_model(ops):
    """Random allocs and frees against a model: live = sum of held bytes, peak = max of live,
    an allocation past the capacity fails and changes nothing."""
    acc = _acc(capacity=1000)
    held = {0: [], 1: []}
    peak = {0: 0, 1: 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MemoryWarning)
        for is_alloc, d, n in ops:
            if is_alloc or not held[d]:
                if sum(h.nbytes for h in held[d]) + n > 1000:
                    with pytest.raises(OutOfMemoryError):
                        acc.alloc(d, n, "t")
                else:
                    held[d].append(acc.alloc(d, n, "t"))
            else:
                acc.free(held[d].pop(n % len(held[d])))
            live = sum(h.nbytes for h in held[d])
            peak[d] = max(peak[d], live)
            assert acc.live(d) == live and acc.peak(d) == peak[d]
