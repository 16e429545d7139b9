"""Random valid programs — on one device, and laid out on random simulated meshes — give the
oracle's bits on the backend under test (BACKEND-OP-1, BACKEND-RUN-1, BACKEND-COMM-1): a
disagreement is shrunk to a minimal program and written out as a script."""
import pytest
from hypothesis import HealthCheck, given, reject, settings

from tessera_ref import backends, jit
from tessera_ref.errors import BackendError, TesseraError
from tessera_conformance import ORACLE, clause, numpy_of
from tessera_conformance.fuzz import programs


def _outcome(program, backend, traced: bool):
    """The result's bytes, or the class of the TesseraError the program raised."""
    inputs = program.arrays()
    try:
        if traced:
            return numpy_of(jit(program, backend=backend)(*inputs)).tobytes()
        with backends.use(backend):
            return numpy_of(program(*inputs)).tobytes()
    except BackendError:
        raise
    except TesseraError as exc:
        return type(exc).__name__


@pytest.mark.parametrize("where", ["one-device", "mesh"])
@clause("BACKEND-OP-1", "BACKEND-RUN-1", "BACKEND-COMM-1")
def test_random_programs_agree_with_the_oracle(backend, where, fuzz_examples, fuzz_dir):
    @settings(max_examples=fuzz_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(programs(meshes=where == "mesh"))
    def check(program):
        try:
            got = _outcome(program, backend, traced=True)
        except BackendError:
            reject()  # the backend does not take this program: not a disagreement
        # the oracle, traced; on the oracle itself the eager run is the other side
        want = _outcome(program, ORACLE, traced=backend != ORACLE)
        if got != want:
            fuzz_dir.mkdir(parents=True, exist_ok=True)
            path = fuzz_dir / f"{backend}-{where}-disagreement.py"
            path.write_text(program.script(backend, ORACLE))
            raise AssertionError(f"{backend} and {ORACLE} disagree on a random program (shrunk reproducer: "
                                 f"python {path})")

    check()
