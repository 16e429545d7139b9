"""Run a digest script in fresh interpreters that differ in thread count and hash seed.

The script must print one sha256 hex digest of the bits it computed. The determinism
contract (DESIGN §6) says the digests agree; the tests assert that.
"""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETTINGS = (("1", "0"), ("2", "12345"))  # (threads for OpenMP/BLAS, PYTHONHASHSEED)


def digests_across_environments(script: str) -> list[str]:
    """The digest printed by ``script`` under each of :data:`SETTINGS`."""
    digests = []
    for threads, hashseed in SETTINGS:
        env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
                   MKL_NUM_THREADS=threads, PYTHONHASHSEED=hashseed,
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, check=True)
        digests.append(out.stdout.strip())
    assert all(len(d) == 64 for d in digests), digests  # each printed one sha256
    return digests
