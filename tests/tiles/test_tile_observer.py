"""TILE-CHECK-7: the shared-memory accesses the checkers see, as the observer receives them."""
import numpy as np
from tile_dsl import AXPY_DB

from tessera_ref import kernel
from tessera_ref.interp.tile.executor import run
from tessera_ref.interp.tile.memory import ALL_LANES


def _run(trailing: str, observer=None):
    k = kernel.from_source(AXPY_DB.replace("TRAILING", trailing))
    rng = np.random.default_rng(4)
    X, Y = rng.standard_normal(384).astype(np.float16), rng.standard_normal(384).astype(np.float16)
    return run(k.module, [X, Y, np.float16(2)], grid=1, lanes=128, on_error="collect", observer=observer)


def test_the_double_buffered_loop_as_the_checkers_see_it():
    """Three chunks, without the trailing barrier, worked out from the loop: iteration t
    issues a copy into the buffer then named s1 (a cp.async wait(1) before its barrier retires
    the previous one), reads the buffer named s0 when t > 0, and swaps the names; the third
    iteration's copy refills, in phase 2, the buffer "s1" every lane read in phase 2."""
    seen = []
    report = _run("pass", seen.append)
    want = [(0, "cp.async writes", "s1"), (1, "cp.async writes", "s0"), (1, "cp.async lands in", "s1"),
            (2, "reads", "s1"), (2, "cp.async writes", "s1"), (2, "cp.async lands in", "s0"),
            (3, "reads", "s0"), (3, "cp.async lands in", "s1"), (4, "reads", "s1")]
    assert [(a.phase, a.verb, a.buffer) for a in seen] == want
    for n, a in enumerate(seen):  # line 8 copies (and its copies land), lines 11 and 17 read
        assert a.tile == (0,) and a.index.shape == (128, 1)
        assert np.array_equal(a.index[:, 0], np.arange(128))
        if a.verb == "reads":
            assert np.array_equal(a.lanes, np.arange(128))
            assert a.location.endswith(":17" if n == len(seen) - 1 else ":11")
        else:
            assert (a.lanes == ALL_LANES).all() and a.location.endswith(":8")
    assert [bool(a.conflicts.all()) for a in seen] == [a == (2, "cp.async writes", "s1") for a in want]
    assert not any(a.conflicts.any() and not a.conflicts.all() for a in seen)
    (finding,) = report.findings
    assert finding.kind == "race" and finding.location.endswith(":8")


def test_observing_changes_nothing():
    seen = []
    quiet, watched = _run("tbarrier()"), _run("tbarrier()", seen.append)
    assert quiet.findings == watched.findings == [] and len(seen) == 9
    assert quiet.counters == watched.counters
    assert np.array_equal(quiet.outputs["Y"].view(np.uint16), watched.outputs["Y"].view(np.uint16))
    assert not any(a.conflicts.any() for a in seen)
