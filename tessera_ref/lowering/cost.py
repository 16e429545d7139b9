"""The schedule cost model: shared memory, HBM bytes, FLOPs and a time for a scheduled kernel.

:func:`kernel_cost` prices a ``tessera.schedule.kernel`` with its kernel family's cost rule
(LOWER-COST-1), counting what the family's tile kernel does without running it; the result
is a :class:`~.family.KernelCost`:

- ``smem_bytes`` — the shared buffers the kernel allocates, padding included;
- ``hbm_bytes`` — the 32-byte sectors the kernel's global accesses touch, each time (no
  cache model, as the tile interpreter counts them);
- ``flops`` — for matmul and FlashAttention what the tile interpreter counts for the lowered
  kernel (TILE-COUNT-4); row and elementwise kernels get a nominal count;
- ``seconds`` — :func:`~.family.kernel_seconds`: compute with wave quantization and memory
  time, overlapped when loads are asynchronous with at least two stages, added otherwise.

Each family's module states its formulas (:mod:`.matmul`, :mod:`.rows`, :mod:`.elementwise`,
:mod:`.attention`); the ones that take sizes rather than an op — :func:`matmul_cost`,
:func:`attention_cost` and :func:`naive_attention_bytes` — are importable from here too.
For aligned shapes (rows a multiple of 32 elements) ``hbm_bytes`` equals the tile
interpreter's HBM counter; the tests check that for every family.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..ir import schedule as S
from .attention import attention_cost, naive_attention_bytes
from .family import KernelCost, family_of
from .matmul import matmul_cost
from .plan import the_op

__all__ = ["KernelCost", "kernel_cost", "matmul_cost", "attention_cost", "naive_attention_bytes"]


def kernel_cost(kop, preset="H100") -> KernelCost:
    """The cost of a ``tessera.schedule.kernel`` op under its schedule."""
    if kop.name != S.KERNEL:
        raise LoweringError(f"kernel_cost takes a '{S.KERNEL}', got '{kop.name}'")
    ops = S.body_ops(kop)
    family = family_of(ops[0]) if ops else None
    if family is None:
        raise LoweringError(f"kernel_cost: '{ops[0].name if ops else 'an empty kernel'}' has no kernel family",
                            location=kop.location, fix="schedule ops of a kernel family only")
    return family.cost(kop if family.fuses else the_op(kop), kop.attributes, preset)
