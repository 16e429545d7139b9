"""``tessera_ref.op``: every Graph IR op as a function (``op.matmul``, ``op.softmax``, ...).

Each function runs eagerly on NumPy data and :class:`~tessera_ref.Array` values, and records
the op when called inside a traced function (:func:`tessera_ref.graph.module`,
:func:`tessera_ref.jit`). The functions are defined next to their primitives in the family
modules of :mod:`tessera_ref.ops` (each lists its functions in ``__all__``); this module only
collects them.
"""
from .errors import checked_signature as _checked
from .ops import FUNCTIONS as _FUNCTIONS

# Called with arguments their signatures do not take, they raise UsageError, not TypeError.
globals().update({_name: _checked(_fn) for _name, _fn in vars(_FUNCTIONS).items()})
__all__ = list(vars(_FUNCTIONS))

from .frontend.schedule import op_kernel as _op_kernel  # noqa: E402 - after the op functions it uses

#: Seed 003's ``@op.kernel`` decorator (tessera_ref.frontend.schedule), not an op.
kernel = _checked(_op_kernel)
__all__.append("kernel")
