"""Optimizers as Graph IR functions (DESIGN §17; the ``OPTIM-*`` clauses of docs/spec/optim.md).

``opt = optim.adamw(lr=3e-4)``, ``state = opt.init(params)``, ``params, state =
opt.update(grads, state, params)`` — pure functions over pytrees of NumPy arrays, Arrays and
DistTensors (real or abstract), built from ``op.*`` so they trace under ``jit``, lower to
kernels and are priced by the simulated machine. The state keeps each parameter's layout.
"""
from inspect import isfunction

from ..errors import checked_signature
from .adam import AdamW, AdamWState, adamw
from .base import Chain, GradientTransform, Optimizer, chain
from .clip import ClipByGlobalNorm, clip_by_global_norm, global_norm
from .schedules import Schedule, constant, linear_warmup, warmup_cosine
from .momentum import SGD, SGDState, sgd

__all__ = ["adamw", "sgd", "clip_by_global_norm", "global_norm", "chain", "constant", "linear_warmup",
           "warmup_cosine", "Schedule", "Optimizer", "GradientTransform", "Chain", "AdamW", "AdamWState",
           "SGD", "SGDState", "ClipByGlobalNorm"]

# Called with arguments their signatures do not take, the functions raise UsageError, not TypeError.
globals().update({_name: checked_signature(_fn) for _name, _fn in list(globals().items())
                  if _name in __all__ and isfunction(_fn)})
