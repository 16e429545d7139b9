"""Random valid programs — on one device, and laid out on random simulated meshes — give the
oracle's bits on the backend under test (BACKEND-OP-1, BACKEND-RUN-1, BACKEND-COMM-1): a
disagreement is shrunk to a minimal program and written out as a script."""
import pytest
from hypothesis import HealthCheck, given, settings

from tessera_conformance import ORACLE, clause
from tessera_conformance.fuzz import compare, programs


@pytest.mark.parametrize("where", ["one-device", "mesh"])
@clause("BACKEND-OP-1", "BACKEND-RUN-1", "BACKEND-COMM-1")
def test_random_programs_agree_with_the_oracle(backend, where, fuzz_examples, fuzz_dir):
    @settings(max_examples=fuzz_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(programs(meshes=where == "mesh"))
    def check(program):
        compare(program, backend, ORACLE, where, fuzz_dir)

    check()
