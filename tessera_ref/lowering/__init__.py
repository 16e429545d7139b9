"""Lowering: Graph IR -> Schedule IR -> Tile IR -> target text, and autotuning (docs/spec/lowering.md).

- the kernel families (:mod:`.family`; :mod:`.matmul`, :mod:`.rows`, :mod:`.elementwise`,
  :mod:`.attention`) hold, each in its module, what the lowering knows about their ops, and
  register themselves on their primitives when imported (here);
- :func:`graph_to_schedule` wraps each op with a tile lowering in a scheduled kernel
  (:mod:`tessera_ref.ir.schedule`) whose attributes say how it is tiled, after
  :mod:`.collective_matmul` cut a sharded function's collectives next to GEMMs into
  pipelined chunks when ``schedule.collective_matmul`` asks for it;
- :func:`schedule_to_tile` turns each scheduled kernel into a Tile IR kernel and returns a
  :class:`LoweredProgram` that the current backend runs (the tile interpreter on ``interp``);
- :func:`lower` does both; :func:`inspect` prints one level (``"schedule"``, ``"tile"``,
  ``"target"``) of a lowered program, :func:`inspect_graph` of a Graph IR module;
  :func:`run_schedule` executes Schedule IR with Graph IR semantics;
- :func:`register_target` is how a backend's renderer (:mod:`tessera_ref.backends.cuda`)
  becomes the ``"target"`` level, here and for ``@kernel`` objects;
- :mod:`.autotune` sweeps schedule or kernel spaces with the cost model.
"""
from . import matmul, rows, elementwise, attention, random  # noqa: F401 - the kernel families register themselves
from .family import KernelFamily, family_of
from .graph_to_schedule import graph_to_schedule, fit_schedule
from .schedule_to_tile import LoweredProgram, schedule_to_tile
from .pipeline import inspect, inspect_graph, lower, register_target, run_schedule

__all__ = ["KernelFamily", "family_of", "graph_to_schedule", "fit_schedule", "schedule_to_tile", "LoweredProgram",
           "lower", "inspect", "inspect_graph", "run_schedule", "register_target"]
