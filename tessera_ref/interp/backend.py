"""The exact interpreter as a backend: ``"interp"``, the default and the oracle (DESIGN §2, §13).

Graph IR ops run their primitive's ``impl`` (the reference semantics), tile kernels run in the
tile interpreter with its checkers and counters (:func:`tessera_ref.interp.tile.run`), and
collectives fold the stacked shards of a simulated mesh in one process
(:class:`~tessera_ref.interp.communicator.SimulatedCommunicator`), or of this process's devices
and the other processes' over MPI when the program runs as several (MESH-MP-4).
"""
from __future__ import annotations

from ..backends.base import Backend, Launch
from ..errors import OpError
from ..backends.registry import register
from .communicator import mesh_communicator
from .tile import run as run_tile

__all__ = ["InterpBackend", "INTERP", "run_function", "run_module"]


class InterpBackend(Backend):
    """The exact interpreter (see the module docstring)."""

    name = "interp"
    description = "the exact interpreter (the oracle): Graph IR by the primitives' impl, tile kernels with checkers"

    def run_op(self, call, *operands) -> tuple:
        return call.primitive.run(call, *operands)

    def launch(self, launch: Launch):
        return run_tile(launch.module, launch.buffers, grid=launch.grid, lanes=launch.lanes, checks=launch.checks,
                        counters=launch.counters, preset=launch.preset, func=launch.kernel, on_error=launch.on_error)

    def communicator(self, mesh):
        return mesh_communicator(mesh)


INTERP = InterpBackend()
register("interp", INTERP)


def run_function(func, *args) -> list:
    """Run the Graph IR ``tessera.func`` ``func`` on ``args`` in the interpreter (the oracle)."""
    return INTERP.run_function(func, list(args))


def run_module(module, name: str, *args) -> list:
    """Run the function ``@name`` of ``module`` in the interpreter."""
    func = module.lookup(name)
    if func is None:
        names = [op.attributes.get("sym_name") for op in module.body]
        raise OpError(f"the module has no function @{name}", fix=f"use one of {names}")
    return INTERP.run_function(func, list(args))
