"""Pipeline parallelism over a mesh axis (MESH-PP-1 … MESH-PP-4).

``dist.pipeline(stages, mesh, mesh_axis="pp", microbatches=M, schedule="1f1b", loss=f)``
runs a model as stages over the ``pp`` axis of ``mesh``: stage (model chunk) ``k`` runs on the
sub-mesh ``mesh.sub(pp=k mod p)`` with its own parameters, the micro-batches of the input
(:func:`microbatches`) go forward and backward through the stages in the order the schedule
gives (:func:`tessera_ref.sim.pipeline.order`), and activations and their gradients cross
stage boundaries by ``dist.send``/``dist.recv`` (MESH-COLL-7), so the communicator carries them
and the simulated machine times them. Gradients are summed over micro-batches in ascending
micro-batch order (MESH-PP-3).

Differentiation comes from the autodiff layer, above this one: it registers its ``vjp`` here
(:func:`register_differentiation`) when it is imported.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import MeshError, SimError
from ..ir import TensorType
from ..sim.pipeline import order, timing
from . import events
from .collectives import mailbox_scope, recv, send
from .mesh import Mesh
from .tensor import DistTensor, stack_shape, tensor

__all__ = ["pipeline", "Pipeline", "PipelineResult", "microbatches", "register_differentiation"]

_AD: dict = {}  # "vjp", filled by tessera_ref.autodiff


def register_differentiation(vjp) -> None:
    """Give the pipeline the autodiff layer's ``vjp`` (called once by ``tessera_ref.autodiff``)."""
    _AD.update(vjp=vjp)


def microbatches(x: DistTensor, m: int) -> list:
    """``x`` cut into ``m`` micro-batches along dimension 0 (MESH-PP-2): on every device,
    micro-batch ``j`` is rows ``[j·b/m, (j+1)·b/m)`` of its local block of ``b`` rows, so a
    batch split over data-parallel ranks gives each rank its own share of every micro-batch.
    A local slice: no communication, no compute."""
    if not isinstance(x, DistTensor):
        raise MeshError(f"microbatches needs a distributed tensor, got {type(x).__name__}",
                        fix="create the batch with dist.tensor(...) on the first stage's sub-mesh")
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise MeshError(f"microbatches must be an int >= 1, got {m!r}", fix="pass e.g. microbatches=4")
    if x.ndim == 0 or x.layout.partial:
        raise MeshError(f"cannot cut {x.type} into micro-batches: it needs a batch dimension 0 and no pending "
                        "reduction", fix="pass the batch itself (dimension 0 is the batch)")
    rows = x.local_shape[0]
    split = x.layout.dims[0]
    global_rows = rows * (x.mesh.axis_size(split) if split else 1)
    if x.layout.padded or global_rows != x.shape[0]:
        raise MeshError(f"the batch {x.type} is padded over {split}", fix="use a batch the mesh axes divide evenly")
    if rows % m:
        where = f"each device's {rows} rows (batch {x.shape[0]} split over {split})" if split else f"batch {rows}"
        raise MeshError(f"{m} micro-batches do not divide {where}",
                        fix=f"pick microbatches among the divisors of {rows}, or change the batch size")
    b = rows // m
    lead = (slice(None),) * len(stack_shape(x.layout, x.mesh))
    vid = events.value_id(x)
    ty = TensorType((x.shape[0] // m,) + tuple(x.shape[1:]), x.type.policy, x.layout)
    out = []
    for j in range(m):
        local = None if x.is_abstract else x.local[lead + (slice(j * b, (j + 1) * b),)]
        out.append(events.bind(DistTensor(ty, x.mesh, local, f"{x.name or 'batch'}[mb {j}]"), vid))
    return out


class PipelineResult(NamedTuple):
    """What a training step of a :class:`Pipeline` returns: ``losses``, one per micro-batch (on the
    last stage's sub-mesh), and ``grads``, per stage (model chunk) the tuple of its parameters'
    gradients summed over the micro-batches (MESH-PP-3)."""

    losses: list
    grads: list


class _State:
    """What a run of a pipeline holds between actions: inputs waiting for their stage, pullbacks and
    cotangents waiting for their backward, the losses and the summed gradients."""

    def __init__(self, inputs, targets, losses, grads):
        self.inputs, self.targets, self.losses, self.grads = inputs, targets, losses, grads
        self.pullbacks: dict = {}
        self.cotangents: dict = {}


class Pipeline:
    """A model as pipeline stages over one mesh axis (MESH-PP-1); made by :func:`pipeline`."""

    def __init__(self, stages, mesh: Mesh, mesh_axis: str, microbatches: int, schedule: str, virtual_stages: int,
                 loss):
        if not isinstance(mesh, Mesh):
            raise MeshError(f"pipeline needs mesh=a dist.Mesh, got {mesh!r}", fix="pass the mesh with the pp axis")
        if mesh_axis not in mesh.axes:
            raise MeshError(f"pipeline over mesh axis {mesh_axis!r}, but {mesh!r} has axes {mesh.axes}",
                            fix=f"name one of {mesh.axes} as mesh_axis")
        if len(mesh.axes) < 2:
            raise MeshError(f"pipeline over {mesh_axis!r} needs a mesh with another axis besides it (each stage "
                            "is a sub-mesh)", fix=f"add an axis, e.g. dist.Mesh(axes=['dp', '{mesh_axis}'], ...)")
        p = mesh.axis_size(mesh_axis)
        try:
            self.order = order(schedule, p, microbatches, virtual_stages)
        except SimError as e:
            raise MeshError(e.what, fix=e.fix) from None
        chunks = p * virtual_stages
        if callable(stages):
            stages = [stages] * chunks
        stages = list(stages) if isinstance(stages, (list, tuple)) else [stages]
        if len(stages) != chunks or not all(callable(s) for s in stages):
            per = f" ({virtual_stages} virtual stages each)" if virtual_stages > 1 else ""
            raise MeshError(f"pipeline over {mesh_axis}={p}{per} needs {chunks} stage functions, got "
                            f"{len(stages)}" + ("" if all(callable(s) for s in stages) else " (not all callable)"),
                            fix=f"pass stages=[f0, ..., f{chunks - 1}] or one function for every stage")
        if not callable(loss):
            raise MeshError(f"pipeline needs loss=a function of the last stage's output, got {loss!r}",
                            fix="pass e.g. loss=lambda y: op.mean(y ** 2.0)")
        self.stages, self.mesh, self.axis, self.m, self.schedule = stages, mesh, mesh_axis, microbatches, schedule
        self.p, self.v, self.loss = p, virtual_stages, loss
        self.subs = [mesh.sub(**{mesh_axis: d}) for d in range(p)]

    def __repr__(self) -> str:
        v = f", {self.v} virtual stages" if self.v > 1 else ""
        return f"Pipeline({self.schedule}, {self.axis}={self.p}{v}, {self.m} micro-batches)"

    def sub_mesh(self, chunk: int) -> Mesh:
        """The sub-mesh that runs stage (model chunk) ``chunk``."""
        return self.subs[chunk % self.p]

    def _check(self, x, params, targets) -> None:
        first, last = self.sub_mesh(0), self.sub_mesh(len(self.stages) - 1)
        for what, t, where in (("the input", x, first), ("the targets", targets, last)):
            if t is not None and not (isinstance(t, DistTensor) and t.mesh == where):
                got = t.mesh if isinstance(t, DistTensor) else type(t).__name__
                raise MeshError(f"{what} of the pipeline must be a distributed tensor on {where!r}, got {got!r}",
                                fix=f"create it with dist.tensor(..., mesh=mesh.sub({self.axis}=...)) on that stage")
        if not isinstance(params, (list, tuple)) or len(params) != len(self.stages):
            raise MeshError(f"the pipeline has {len(self.stages)} stages but params has "
                            f"{len(params) if isinstance(params, (list, tuple)) else type(params).__name__} entries",
                            fix="pass params=[params of stage 0 (a tuple), params of stage 1, ...]")
        for k, ps in enumerate(params):
            for i, w in enumerate(ps if isinstance(ps, (list, tuple)) else (ps,)):
                if not (isinstance(w, DistTensor) and w.mesh == self.sub_mesh(k)):
                    got = w.mesh if isinstance(w, DistTensor) else type(w).__name__
                    raise MeshError(f"parameter {i} of stage {k} must live on {self.sub_mesh(k)!r}, got {got!r}",
                                    fix=f"create stage {k}'s parameters on mesh.sub({self.axis}={k % self.p})")

    def _move(self, y, chunk: int, to: int, tag: int):
        """``y`` sent from stage ``chunk``'s sub-mesh to stage ``to``'s (unchanged when they share one)."""
        src, dst = self.sub_mesh(chunk), self.sub_mesh(to)
        if src == dst:
            return y
        send(y, dst, tag=tag)
        return recv(src, dst, tag=tag)

    def _run(self, x, params, targets, train: bool):
        self._check(x, params, targets)
        params = [tuple(ps) if isinstance(ps, (list, tuple)) else (ps,) for ps in params]
        xs = microbatches(x, self.m)
        ts = microbatches(targets, self.m) if targets is not None else [None] * self.m
        state = _State({(j, 0): xs[j] for j in range(self.m)}, ts, [None] * self.m, [None] * len(self.stages))
        with mailbox_scope():
            for placed in timing(self.order, lambda d, a: 1.0 if a.kind == "F" else 2.0):
                j, k = placed.action.microbatch, placed.action.chunk
                if placed.action.kind == "F":
                    self._forward(j, k, params[k], state, train)
                elif train:
                    self._backward(j, k, state)
        return PipelineResult(state.losses, state.grads)

    def _nums(self, k: int, params) -> tuple:
        """The arguments of stage ``k`` to differentiate: its parameters, and its input but on stage 0."""
        return tuple(range(1 if k == 0 else 0, 1 + len(params)))

    def _forward(self, j: int, k: int, params, state, train: bool) -> None:
        a = state.inputs.pop((j, k))
        last = k == len(self.stages) - 1
        if last:
            target = () if state.targets[j] is None else (state.targets[j],)
            fn = lambda a_, *ws: self.loss(self.stages[k](a_, *ws), *target)
        else:
            fn = self.stages[k]
        if train:
            y, state.pullbacks[j, k] = _AD["vjp"](fn, a, *params, argnums=self._nums(k, params))
        else:
            y = fn(a, *params)
        if last:
            state.losses[j] = y
        else:
            state.inputs[j, k + 1] = self._move(y, k, k + 1, tag=k)

    def _backward(self, j: int, k: int, state) -> None:
        if k == len(self.stages) - 1:
            loss = state.losses[j]  # d loss / d loss = 1, replicated (a pending sum's every term has slope 1)
            ct = tensor(loss.shape, None, loss.mesh, dtype=loss.type.policy,
                        data=None if loss.is_abstract else np.ones(loss.shape))
        else:
            ct = self._move(state.cotangents.pop((j, k + 1)), k + 1, k, tag=len(self.stages) + k)
        g = state.pullbacks.pop((j, k))(ct)
        if k > 0:
            state.cotangents[j, k], g = g[0], g[1:]
        acc = state.grads[k]
        state.grads[k] = tuple(g) if acc is None else tuple(s + gi for s, gi in zip(acc, g))

    def __call__(self, x, params, targets=None) -> list:
        """The forward pass only: the loss of each micro-batch (MESH-PP-1)."""
        return self._run(x, params, targets, train=False).losses

    def step(self, x, params, targets=None) -> PipelineResult:
        """Forward and backward of every micro-batch in the schedule's order: the losses and the
        gradients summed over micro-batches (MESH-PP-3)."""
        return self._run(x, params, targets, train=True)


def pipeline(stages, mesh: Mesh, mesh_axis: str = "pp", microbatches: int = 1, schedule: str = "1f1b",
             virtual_stages: int = 1, loss=None) -> Pipeline:
    """``stages`` (a list of ``p · virtual_stages`` functions ``f(x, *params) -> y``, or one function for
    every stage) as a pipeline over ``mesh_axis`` of ``mesh`` with ``microbatches`` micro-batches,
    run in ``schedule`` order (``"gpipe"``, ``"1f1b"`` or ``"interleaved"``); ``loss(y[, target])``
    turns the last stage's output into the micro-batch's loss (MESH-PP-1)."""
    return Pipeline(stages, mesh, mesh_axis, microbatches, schedule, virtual_stages, loss)
