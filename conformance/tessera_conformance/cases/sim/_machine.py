"""Running a case's program on the backend under a simulated machine."""
import numpy as np

from tessera_ref import sim
from tessera_conformance import eager


def run_on(backend, machine, fn) -> list:
    """Run ``fn()`` on ``backend`` inside ``sim.use(machine)``; the machine's timeline events."""
    def go():
        with sim.use(machine):
            fn()
        return np.zeros(1, np.float32)

    eager(backend, go)
    return machine.timeline.events
