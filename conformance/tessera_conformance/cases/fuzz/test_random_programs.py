"""Random valid programs give the oracle's bits on the backend under test (BACKEND-OP-1,
BACKEND-RUN-1): a disagreement is shrunk to a minimal program and written out as a script."""
import numpy as np
from hypothesis import HealthCheck, given, reject, settings

from tessera_ref import backends, jit
from tessera_ref.errors import BackendError, TesseraError
from tessera_conformance import ORACLE, clause
from tessera_conformance.fuzz import programs


def _outcome(program, backend, traced: bool):
    """The result's bytes, or the class of the TesseraError the program raised."""
    inputs = program.arrays()
    try:
        if traced:
            return np.asarray(jit(program, backend=backend)(*inputs)).tobytes()
        with backends.use(backend):
            return np.asarray(program(*inputs)).tobytes()
    except BackendError:
        raise
    except TesseraError as exc:
        return type(exc).__name__


@clause("BACKEND-OP-1", "BACKEND-RUN-1")
def test_random_programs_agree_with_the_oracle(backend, fuzz_examples, fuzz_dir):
    @settings(max_examples=fuzz_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(programs())
    def check(program):
        try:
            got = _outcome(program, backend, traced=True)
        except BackendError:
            reject()  # the backend does not take this program: not a disagreement
        # the oracle, traced; on the oracle itself the eager run is the other side
        want = _outcome(program, ORACLE, traced=backend != ORACLE)
        if got != want:
            fuzz_dir.mkdir(parents=True, exist_ok=True)
            path = fuzz_dir / f"{backend}-disagreement.py"
            path.write_text(program.script(backend, ORACLE))
            raise AssertionError(f"{backend} and {ORACLE} disagree on a random program (shrunk reproducer: "
                                 f"python {path})")

    check()
