"""LOWER-TUNE-4 (the winner of a kernel sweep is checked) and LOWER-TUNE-5 (space parameters
nothing depends on are named)."""
import warnings

import numpy as np
import pytest

from tessera_ref import backends, kernel
from tessera_ref.errors import AutotuneWarning
from tessera_conformance import clause

# SHIFT=1: each lane reads the element its neighbour wrote in the same barrier phase (a race);
# SHIFT=0 reads its own. Both cost the same, so space order alone would pick the racy one.
SHIFTED = '''
@kernel.autotune(space=dict(SHIFT=[1, 0], UNUSED=[3, 4]))
def shifted(X: f32[m], Y: mut f32[m]):
    s = tshared.alloc[f32](129)
    l = tile.lane_id()
    s[l] = X[l]
    Y[l] = s[l + SHIFT]
'''


def _tune(backend, **problem_options):
    k = kernel.from_source(SHIFTED)
    problem = {"args": [np.arange(128, dtype=np.float32), np.zeros(128, np.float32)], "grid": 1, "lanes": 128,
               **problem_options}
    with backends.use(backend):
        return k.tune(problem, "H100", cache=False, progress=False)


@clause("LOWER-TUNE-4")
def test_a_configuration_with_a_race_is_never_the_winner(backend, recwarn):
    result = _tune(backend)
    assert result.best["SHIFT"] == 0
    racy = [t for t in result.trials if t.config["SHIFT"] == 1 and t.config["UNUSED"] == 3]
    assert racy[0].seconds is None and "race" in racy[0].reason


@clause("LOWER-TUNE-5")
def test_a_parameter_nothing_depends_on_is_a_warning_naming_it(backend):
    with pytest.warns(AutotuneWarning, match="'UNUSED'") as caught:
        _tune(backend)
    assert len(caught) == 1 and "SHIFT" not in str(caught[0].message).split("changes nothing")[0]
    with warnings.catch_warnings(record=True) as caught:  # read by the launch: used
        warnings.simplefilter("always")
        _tune(backend, key="lanes-depend", lanes=lambda c: 64 * (c["UNUSED"] - 2))
    assert not [w for w in caught if issubclass(w.category, AutotuneWarning)]
