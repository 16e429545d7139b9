"""NUM-RED: the canonical orders of sums."""
import numpy as np

from tessera_ref import op
from tessera_conformance import assert_bits, clause, run


@clause("NUM-RED-2")
def test_sum_of_ones_is_exact(backend):
    x = np.ones(1000, np.float32)
    assert_bits(run(backend, lambda v: op.sum(v), x), np.float32(1000))
