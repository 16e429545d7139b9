"""The numeric settings the package reads from the environment, parsed and checked here and
nowhere else (DESIGN §19; docs/spec/mesh.md MESH-MP-8). A value that is not a number, not
finite, or outside its range is an error naming the variable, its value, the range and the fix
— never a wait that never ends, nor a healthy peer blamed for a wait too short to answer in.

- ``TESSERA_COMM_TIMEOUT`` and ``tessera-ref launch --timeout``: seconds, 1 … 604800 (a week);
  default 120 (unset or empty);
- ``TESSERA_DEVICES_PER_PROCESS``: an integer ≥ 1;
- ``RANK``/``WORLD_SIZE`` and the MPI runtimes' and Slurm's pairs: integers, 0 ≤ rank < size;
- ``LOCAL_RANK``: an integer ≥ 0;
- ``MASTER_PORT`` and ``TESSERA_RENDEZVOUS_PORT``: a TCP port, 1 … 65535.
"""
from __future__ import annotations

import math
import os

from .errors import BackendError

__all__ = ["COMM_TIMEOUT", "TIMEOUT_RANGE", "seconds", "comm_timeout", "integer", "port"]

COMM_TIMEOUT = "TESSERA_COMM_TIMEOUT"
#: The waits a transport accepts, in seconds: under a second a busy but healthy peer (a slow
#: start, a page of swap, a loaded machine) is taken for a dead one; over a week is no bound.
TIMEOUT_RANGE = (1.0, 604800.0)
_DEFAULT_TIMEOUT = "120"


def seconds(name: str, text: str, error=BackendError) -> float:
    """``text`` (the value of ``name``) as a wait in seconds within :data:`TIMEOUT_RANGE`."""
    low, high = TIMEOUT_RANGE
    fix = f"set {name} to a number of seconds from {low:g} to {high:g}, e.g. 60 (the default is {_DEFAULT_TIMEOUT})"
    try:
        value = float(text)
    except ValueError:
        raise error(f"{name}={text!r} is not a number of seconds", fix=fix) from None
    if not math.isfinite(value):
        raise error(f"{name}={text!r} is not a finite number of seconds: no wait between processes is "
                    f"unbounded", fix=fix)
    if not low <= value <= high:
        why = (f"under {low:g} s a busy but healthy peer is taken for a dead one" if value < low
               else f"more than {high:g} s (a week) is no bound")
        raise error(f"{name}={text!r} is out of range: {why}", fix=fix)
    return value


def comm_timeout(env=None) -> float:
    """Seconds a rank waits for a peer: ``TESSERA_COMM_TIMEOUT`` (default 120), checked."""
    env = os.environ if env is None else env
    return seconds(COMM_TIMEOUT, env.get(COMM_TIMEOUT) or _DEFAULT_TIMEOUT)


def integer(name: str, text: str, low: int, high: int | None = None, error=BackendError, fix: str | None = None) -> int:
    """``text`` (the value of ``name``) as an integer from ``low`` to ``high`` (no upper bound
    when None); ``fix`` replaces the default advice."""
    limits = f"from {low} to {high}" if high is not None else f"of at least {low}"
    fix = fix or f"unset {name} or set it to an integer {limits} (the launcher sets it)"
    try:
        value = int(text.strip())
    except ValueError:
        raise error(f"the environment variable {name}={text!r} is not an integer", fix=fix) from None
    if value < low or (high is not None and value > high):
        raise error(f"the environment variable {name}={text!r} is out of range: an integer {limits}", fix=fix)
    return value


def port(name: str, text: str) -> int:
    """``text`` (the value of ``name``) as a TCP port, 1 … 65535."""
    return integer(name, text, 1, 65535, fix=f"set {name} to a free TCP port such as 29500")
