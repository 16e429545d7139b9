"""The Tessera conformance suite (DESIGN §15, docs/conformance.md).

Cases live in :mod:`tessera_conformance.cases`, one folder per chapter of the spec; each is
tagged with the clauses it checks (:func:`clause`) and runs its program on the backend under
test (the ``backend`` fixture, ``--backend NAME``) through the executor seam, comparing with
the oracle (``"interp"``) and with an independent reference computed in the case itself.
The pytest plugin (:mod:`.plugin`, registered through the ``pytest11`` entry point) adds the
options, the fixtures and the clause × backend report; ``tessera-ref conformance`` runs it.
"""
from .harness import (GOLDEN, ORACLE, assert_bits, assert_close, clause, communicator, eager, golden,
                      not_applicable, numpy_of, oracle_and, oracle_only, run, unsupported)

__all__ = ["ORACLE", "clause", "oracle_only", "run", "eager", "oracle_and", "numpy_of", "assert_bits",
           "assert_close", "not_applicable", "unsupported", "communicator", "golden", "GOLDEN"]
