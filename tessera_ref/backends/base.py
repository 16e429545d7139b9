"""What an executor is (DESIGN §13; docs/spec/backends.md, the ``BACKEND-*`` clauses).

A :class:`Backend` runs Graph IR ops (:meth:`~Backend.run_op`), tile-kernel launches
(:meth:`~Backend.launch`) and moves data between the ranks of a mesh through its
:class:`Communicator`. Everything else — running a whole Graph IR function through the one
execution loop (:func:`tessera_ref.ops.execute.evaluate`), running a lowered program's host
steps and launches, lowering, inspecting and autotuning — is written once here in terms of
those three, and a backend may override any of it (a compiled backend runs a whole function
as one program). Outputs are NumPy arrays of the storage dtypes (DistTensors on a mesh),
whatever ran them.
"""
from __future__ import annotations

import abc
import numpy as np

from .. import context, sim
from ..dist.collectives import mailbox_scope, scatter_blocks
from ..dist.execute import check_sharded_arguments, sharded_step
from ..dist.tensor import DistTensor
from ..errors import OpError
from ..ir import FUNC, Operation
from ..ir.launch import Launch
from ..lowering import autotune, pipeline
from ..lowering.collective_matmul import apply_directive
from ..ops.execute import bind_arguments, call_of, replay_of
from ..ops.pricing import price

__all__ = ["Backend", "Communicator", "Launch"]


class Communicator(abc.ABC):
    """Moves and folds the local values of the ranks of one mesh (DESIGN §14, BACKEND-COMM-1).

    Local values are *stacked*: an array whose leading ``mesh.ndim`` axes index the devices
    (size 1 along a mesh axis the value does not vary on), followed by the local block. The
    collective semantics — which layouts are legal, what the result's layout is, the
    canonical order — are :mod:`tessera_ref.dist`'s; a communicator only carries them out.
    """

    name = ""

    def __init__(self, mesh):
        self.mesh = mesh

    @abc.abstractmethod
    def reduce(self, stacked, axes: tuple, op: str, policy):
        """Each group's contributions along the mesh ``axes`` folded in ascending rank order in
        the accum format and converted once to storage (NUM-RED-3); exactly held contributions
        (an ExactAccumulator) are summed exactly (NUM-RED-4). Size 1 along ``axes`` after."""

    def reduce_scatter(self, stacked, axis: str, dim: int, op: str, policy):
        """:meth:`reduce` over ``axis``, of which each device of this process keeps its block of
        dimension ``dim`` (``ceil(n/p)``, the last ones zero-padded; MESH-COLL-2). A
        communicator that moves data may fold only the blocks (the same bits, MESH-MP-4)."""
        return scatter_blocks(self.mesh, self.reduce(stacked, (axis,), op, policy), axis, dim)

    @abc.abstractmethod
    def all_gather(self, stacked, axis: str, dim: int):
        """Every rank's block of dimension ``dim`` joined in rank order along ``axis``."""

    @abc.abstractmethod
    def broadcast(self, stacked, axis: str, root: int):
        """Rank ``root``'s value along ``axis`` (size 1 along ``axis`` after)."""

    @abc.abstractmethod
    def permute(self, stacked, axis: str, pairs: list):
        """Rank ``d`` along ``axis`` receives rank ``s``'s value for each ``(s, d)``; others zeros."""

    @abc.abstractmethod
    def send(self, stacked, dst, tag: int):
        """Post device ``i``'s value of this mesh to device ``i`` of the sub-mesh ``dst``; returns
        what the matching :meth:`recv` needs (``dist`` pairs sends with receives, MESH-COLL-7)."""

    @abc.abstractmethod
    def recv(self, posted, src, tag: int):
        """The stacked values on this mesh of what ``send`` posted (``posted``) on ``src``."""

    def gather_boxes(self, stacked, axes: tuple):
        """Stacked values of this process's devices joined with every other process's along the
        mesh ``axes`` (MESH-MP-3); in one process, where every device lives, ``stacked`` itself."""
        return stacked


class Backend(abc.ABC):
    """An executor (see the module docstring). Subclasses set ``name`` and implement
    :meth:`run_op`, :meth:`launch` and :meth:`communicator`; instances must be safe to use
    from several threads (keep per-run state in locals or context variables)."""

    name = ""
    description = ""

    def __repr__(self) -> str:
        return f"<tessera backend {self.name!r}>"

    # -- what an executor provides ----------------------------------------------------------
    @abc.abstractmethod
    def run_op(self, call, *operands) -> tuple:
        """The results of one Graph IR op (``call``: its primitive, attributes and types) on
        storage-dtype arrays, as a tuple (BACKEND-OP-1). Operands may carry leading axes the
        primitive's ``impl`` treats as batch axes (stacked shards of a mesh)."""

    @abc.abstractmethod
    def launch(self, launch: Launch):
        """Run one tile-kernel :class:`Launch`; returns a report (counters, findings) or None."""

    @abc.abstractmethod
    def communicator(self, mesh) -> Communicator:
        """The :class:`Communicator` that carries out collectives on ``mesh``."""

    # -- written once in terms of the above -------------------------------------------------
    def run_function(self, func: Operation, args) -> list:
        """Run the Graph IR ``tessera.func`` ``func`` on ``args`` — storage-dtype arrays, or
        DistTensors on one mesh (in a ``dist.mailbox_scope`` of its own) — through the one
        execution loop (BACKEND-RUN-1); returns its results (arrays or DistTensors). A sharded
        function runs after the rewrite of a ``schedule.collective_matmul`` directive in force."""
        if func.name != FUNC:
            raise OpError(f"run_function runs a '{FUNC}', got '{func.name}'", fix="pass a function op")
        with context.scoped(context.BACKEND, self):
            dist = next((a for a in args if isinstance(a, DistTensor)), None)
            if dist is not None:
                func = apply_directive(func, context.SCHEDULE_DEFAULTS.get())  # LOWER-CM-1
                check_sharded_arguments(func, dist.mesh, args)
                with mailbox_scope():
                    return replay_of(func).run(args, lambda op, call, values: sharded_step(op, values, dist.mesh, call))
            bind_arguments(func, args)
            run_op = self.run_op
            if sim.current() is None:
                step = lambda op, call, values: run_op(call, *values)  # noqa: E731
            else:
                step = lambda op, call, values: _priced(run_op, call, values)  # noqa: E731
            return replay_of(func).run([np.asarray(a) for a in args], step)

    def run_program(self, program, arrays, *, checks: bool = False, counters: bool = True,
                    preset: str = "H100") -> tuple:
        """Run a :class:`~tessera_ref.lowering.LoweredProgram` on arrays of its argument types
        (BACKEND-PROGRAM-1): host ops (constants) by :meth:`run_op`, each kernel by
        :meth:`launch` on fresh zeroed output buffers. Returns ``(results, reports)``."""
        block = program.func.regions[0].entry
        env = {arg: np.ascontiguousarray(a) for arg, a in zip(block.args, arrays)}
        reports = []
        with context.scoped(context.BACKEND, self):
            for op, plan in program.steps:
                if plan is None:
                    env.update(zip(op.results, self.run_op(call_of(op))))
                    continue
                args = [np.ascontiguousarray(env[v]).reshape(shape) for v, shape in zip(op.operands, plan.in_shapes)]
                outs = [np.zeros(shape, dtype=r.type.dtype) for shape, r in zip(plan.out_shapes, op.results)]
                reports.append(self.launch(Launch(program.tile, plan.func.attributes["sym_name"], plan.grid,
                                                  plan.lanes, args + outs, checks, counters, preset)))
                for res, out in zip(op.results, outs):
                    env[res] = out.reshape(res.type.shape)
        return [env[v] for v in block.last_op.operands], reports

    def lower(self, graph, directives: dict | None = None):
        """Graph IR -> a lowered program this backend runs (:func:`tessera_ref.lowering.lower`)."""
        return pipeline.lower(graph, directives)

    def inspect(self, graph, level: str, directives: dict | None = None) -> str:
        """The text of a Graph IR module at ``level`` (``"schedule"``, ``"tile"``, ``"target"``)."""
        return pipeline.inspect_graph(graph, level, directives)

    def inspect_program(self, program, level: str) -> str:
        """The text of a lowered program at ``level``."""
        return pipeline.inspect(program, level)

    def autotune(self, variants, problem: dict, preset="H100", **options):
        """Pick the best of ``variants`` of a kernel (:func:`tessera_ref.lowering.autotune.autotune_kernel`)."""
        return autotune.autotune_kernel(variants, problem, preset, **options)


def _priced(run_op, call, values) -> tuple:
    """``run_op(call, *values)``, then the op priced on the current simulated machine (SIM-ACT-2)."""
    results = run_op(call, *values)
    price(call)
    return results
