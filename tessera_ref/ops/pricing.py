"""Single-device ops on the simulated machine (SIM-ACT-2): an op that runs on plain arrays
(eagerly, or in a ``jit`` function without distributed arguments) while a machine is current
runs on its first device, for the roofline time of its ``cost`` on that device's compute
stream. Host arrays are not charged to HBM (only distributed tensors are; SIM-MEM-1)."""
from __future__ import annotations

from .. import sim
from ..ir import TensorType
from .primitive import Call

__all__ = ["price"]

#: The device of the simulated machine that single-device programs run on.
DEVICE = 0


def price(call: Call) -> None:
    """Record ``call`` on device 0 of the current machine, if there is one."""
    machine = sim.current()
    if machine is None:
        return
    out = (call.out_types + call.in_types + (None,))[0]
    fmt = out.format.name if isinstance(out, TensorType) and out.element_kind is None else "f32"
    machine.record_compute(DEVICE, call.primitive.name, call.primitive.cost(call), fmt, location=call.location)
