"""Automatic differentiation on Graph IR (DESIGN §3; the AD clauses of ``docs/spec/autodiff.md``).

``tessera_ref.grad(loss_fn)(W)``, :func:`value_and_grad`, :func:`vjp`, :func:`jvp` and the
decorator ``@autodiff`` (also as seed 004 writes it, ``@jit @autodiff``). Every transform
records the function into Graph IR and appends its derivative, built from the ``vjp``/``jvp``
rules of the primitive registry, to the same function — so the backward pass is Graph IR,
``inspect_ir`` shows it, and on a mesh it carries layouts and collectives like any traced
program. :func:`communication_plan` lists the collectives of a derivative with their bytes.

This module object is itself the decorator: ``from tessera import autodiff`` then
``@autodiff`` or ``@jit @autodiff`` (the expression ``jit @ autodiff``).
"""
import sys
import types

from ..dist.pipeline import register_differentiation
from ..frontend import pytree
from . import effects
from .plan import CommunicationPlan, PlannedCollective, communication_plan
from .transforms import AutodiffFunction, Transformed, autodiff as _decorator, grad, jvp, value_and_grad, vjp

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "AutodiffFunction", "Transformed", "communication_plan", "CommunicationPlan", "PlannedCollective",
           "effects", "pytree"]

register_differentiation(vjp)  # dist.pipeline differentiates its stages with it


class _DecoratorModule(types.ModuleType):
    """The package, callable as the ``@autodiff`` decorator and composable as ``jit @ autodiff``."""

    def __call__(self, fn):
        return _decorator(fn)

    def __rmatmul__(self, other):
        return _decorator.__rmatmul__(other)


sys.modules[__name__].__class__ = _DecoratorModule
