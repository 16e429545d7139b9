"""tessera_ref: the reference implementation of the Tessera GPU programming model.

What exists today: the number formats with bit-exact conversions, numerics policies and
tensor annotations, block scaling and the counter-based RNG (:mod:`tessera_ref.numerics`);
the IR infrastructure (:mod:`tessera_ref.ir`); the Graph IR primitives (:mod:`tessera_ref.op`,
:mod:`tessera_ref.ops`), tracing (:mod:`tessera_ref.graph`, :func:`jit`) and the exact
interpreter (:mod:`tessera_ref.interp`); the simulated mesh and machine
(:mod:`tessera_ref.dist`, :mod:`tessera_ref.sim`); derivatives (:mod:`tessera_ref.autodiff`);
tile kernels, Schedule and Tile IR, the tile interpreter and the lowering
(:func:`kernel`, :data:`schedule`, :mod:`tessera_ref.lowering`).
"""
from . import dist, graph, numerics, op
from .errors import TesseraError
from .frontend import jit
from . import autodiff
from .autodiff import grad, jvp, value_and_grad, vjp
from .frontend.kernel import kernel
from .frontend.tile_api import cp_async, mut, symbols, tbarrier, tile, tshared
from .frontend.schedule import schedule
from . import lowering
from . import backends, interp  # the interpreter registers itself as the backend "interp"
from . import runtime
from . import optim
from .runtime import device_put
from .ops import Array, asarray
from .numerics import (
    Policy,
    Tensor,
    accum,
    bf16,
    e8m0,
    f16,
    f32,
    f64,
    fp4,
    fp4_e2m1,
    fp6,
    fp6_e2m3,
    fp6_e3m2,
    fp8,
    fp8_e4m3,
    fp8_e5m2,
    fp16,
    fp32,
    fp64,
    int4,
    int8,
)
from .backends import cuda as _cuda  # noqa: F401 - registers the CUDA C text as the "target" IR level
from .backends import mpi as _mpi  # noqa: F401 - registers the "mpi" transport of multi-process programs
from .backends.cuda import nccl as _nccl  # noqa: F401 - registers the "nccl" transport (needs CuPy when opened)

__version__ = "0.1.0"

__all__ = [
    "numerics", "op", "graph", "dist", "jit", "autodiff", "grad", "value_and_grad", "vjp", "jvp",
    "kernel", "schedule", "lowering", "optim", "backends", "runtime", "device_put", "tile", "tshared", "cp_async", "tbarrier", "mut", "symbols",
    "Array", "asarray", "TesseraError", "Policy", "Tensor", "accum",
    "f64", "fp64", "f32", "fp32", "f16", "fp16", "bf16", "fp8_e4m3", "fp8", "fp8_e5m2",
    "fp6_e2m3", "fp6", "fp6_e3m2", "fp4_e2m1", "fp4", "e8m0", "int8", "int4",
]
