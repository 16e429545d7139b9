"""The simulated mesh: meshes, layouts, distributed tensors and collectives (DESIGN §7).

``from tessera import dist`` in the seeds' programs is this module (``tessera-ref run``)::

    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    W = dist.tensor(shape=(8192, 8192), layout=dist.ShardSpec(partition=("col",), mesh_axes=("tp",)),
                    mesh=mesh, dtype="bf16")
    y = dist.all_gather(x @ W, axis="tp")

``dist.send``/``dist.recv`` pair up in a mailbox: ``with dist.mailbox_scope(): ...`` gives the
block its own (sends never received are an error when it ends); each run of a traced sharded
function and of a ``tessera-ref run`` script is such a scope, and outside every scope each
thread has its own mailbox.

``dist.pipeline(stages, mesh, microbatches=M, schedule="1f1b", loss=f)`` runs a model as
stages over the ``pp`` axis, forward and backward, with send/recv at the stage boundaries.

The normative rules are the ``MESH-*`` clauses of ``docs/spec/mesh.md``.
"""
from inspect import isfunction
from types import SimpleNamespace

from ..errors import CollectiveError, CollectiveWarning, LayoutError, MeshError, checked_signature
from ..ir import redistribution_plan

from ..ops.collective import all_gather, all_reduce, all_to_all, reduce_scatter
from ..ops.collective import collective_permute as permute
from .collectives import REDUCE_OPS, broadcast, check_pending, mailbox_scope, recv, send
from .events import listen
from .execute import run_sharded  # importing it registers DistTensor with the op dispatcher
from .mesh import Mesh, default_shape, mesh
from .pipeline import Pipeline, PipelineResult, microbatches, pipeline
from .redistribute import redistribute
from .spec import PARTITION_NAMES, ShardSpec
from .tensor import DistTensor, arange, from_shards, full, ones, tensor, zeros
from .visualize import visualize

__all__ = ["Mesh", "mesh", "default_shape", "ShardSpec", "PARTITION_NAMES", "DistTensor", "tensor", "from_shards",
           "full", "zeros", "ones", "arange",
           "redistribute", "redistribution_plan", "all_reduce", "all_gather", "reduce_scatter", "broadcast",
           "all_to_all", "permute", "send", "recv", "check_pending", "mailbox_scope", "collective", "REDUCE_OPS",
           "run_sharded", "listen", "visualize", "pipeline", "Pipeline", "PipelineResult", "microbatches", "MeshError", "LayoutError", "CollectiveError", "CollectiveWarning"]

# Called with arguments their signatures do not take, the functions raise UsageError, not TypeError.
globals().update({_name: checked_signature(_fn) for _name, _fn in list(globals().items())
                  if _name in __all__ and isfunction(_fn)})

#: The seeds' ``dist.collective.reduce_scatter(...)`` spelling of the collectives.
collective = SimpleNamespace(all_reduce=all_reduce, all_gather=all_gather, reduce_scatter=reduce_scatter,
                             broadcast=broadcast, all_to_all=all_to_all, permute=permute, send=send, recv=recv)
