"""Which devices of a mesh this process owns, when one program runs as several processes
(DESIGN §14; docs/spec/mesh.md, MESH-MP-1 … MESH-MP-3). Pure arithmetic on the launcher's
variables: nothing here talks to another process.

**The world (MESH-MP-1).** The rank and the number of processes come from the first of these
that is set: ``RANK``/``WORLD_SIZE`` (torchrun, ``tessera-ref launch``), ``PMI_RANK``/``PMI_SIZE``
(MPICH's ``mpiexec``), ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE`` (Open MPI),
``SLURM_PROCID``/``SLURM_NTASKS`` (``srun``); with none, the world is this one process.
``TESSERA_DEVICES_PER_PROCESS``, when set, fixes how many devices each process owns.

**The engine (MESH-MP-7).** Collectives between processes run on an existing engine — MPI by
default, NCCL with ``TESSERA_TRANSPORT=nccl`` — never on one of the package's own. A world of
several processes taken from ``RANK``/``WORLD_SIZE`` (torchrun's variables) whose collectives
go over MPI needs an MPI runtime to have started the processes (:data:`MPI_VARIABLES`);
:func:`check_engine` says so when a mesh is made, naming the variables seen and the fix.

**The box (MESH-MP-2).** The mesh's devices, in flat (row-major) order, are cut into
``world size`` contiguous blocks of equal size; process ``r`` owns block ``r``. The block must
be a *box* of the mesh — whole trailing axes, a run of one axis, one coordinate of each leading
axis — so that every process's stacked values are an ordinary stacked array of the box's shape,
and the processes form a grid of their own (the *process grid*: the mesh's shape divided by the
box's, axis by axis). A world that does not tile a mesh this way is a MeshError.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from ..errors import MeshError
from ..settings import integer

__all__ = ["World", "world", "Placement", "placement", "ENV_PAIRS", "MPI_VARIABLES", "mpi_started", "transport_name",
           "check_engine"]

#: (rank variable, size variable) pairs, in the order they are looked for.
ENV_PAIRS = (("RANK", "WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
             ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))

#: Variables an MPI runtime sets in the processes it starts: MPICH's Hydra and Slurm's PMI,
#: Open MPI, PMIx. Without any of them MPI's ``COMM_WORLD`` is this process alone.
MPI_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


@dataclass(frozen=True)
class World:
    """This process's rank among ``size`` processes; ``devices_per_process`` if fixed (else None)."""

    rank: int = 0
    size: int = 1
    devices_per_process: int | None = None
    source: str = "one process"


def world(env=None) -> World:
    """The world of MESH-MP-1 read from ``env`` (default ``os.environ``)."""
    env = os.environ if env is None else env
    per = env.get("TESSERA_DEVICES_PER_PROCESS")
    per = None if per in (None, "") else integer("TESSERA_DEVICES_PER_PROCESS", per, 1, error=MeshError)
    for rank_var, size_var in ENV_PAIRS:
        if rank_var in env and size_var in env:
            rank = integer(rank_var, env[rank_var], 0, error=MeshError)
            size = integer(size_var, env[size_var], 1, error=MeshError)
            if rank >= size:
                raise MeshError(f"{rank_var}={rank} and {size_var}={size} do not name a rank of the world",
                                fix=f"{rank_var} lies in 0..{size - 1} ({size_var} - 1); the launcher sets both")
            return World(rank, size, per, f"{rank_var}/{size_var}")
    return World(0, 1, per)


def mpi_started(env=None) -> bool:
    """True when an MPI runtime started this process (one of :data:`MPI_VARIABLES` is set)."""
    env = os.environ if env is None else env
    return any(v in env for v in MPI_VARIABLES)


def transport_name(env=None) -> str:
    """The transport collectives between processes run on: ``TESSERA_TRANSPORT``, default ``mpi``."""
    env = os.environ if env is None else env
    return env.get("TESSERA_TRANSPORT", "mpi")


def check_engine(env=None) -> None:
    """MESH-MP-7: a :class:`MeshError` when ``RANK``/``WORLD_SIZE`` make a world of several
    processes whose collectives go over MPI (``TESSERA_TRANSPORT``, default ``mpi``) but no MPI
    runtime started this process — torchrun, say: its collectives could reach no other rank."""
    env = os.environ if env is None else env
    w = world(env)
    if w.size == 1 or w.source != "RANK/WORLD_SIZE" or transport_name(env) != "mpi" or mpi_started(env):
        return
    seen = ", ".join(f"{v}={env[v]}" for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
                     if v in env)
    raise MeshError(f"this process is rank {w.rank} of {w.size} by torchrun-style variables ({seen}), but no MPI "
                    f"runtime started it (none of {', '.join(MPI_VARIABLES)} is set), so MPI's COMM_WORLD holds "
                    f"this process alone (size 1 while WORLD_SIZE={w.size}) and the collectives, which run over "
                    f"MPI, could reach no other rank: tessera_ref runs processes on MPI or NCCL, not on an engine "
                    f"of its own",
                    fix=f"start the program with `tessera-ref launch -n {w.size} SCRIPT` or `mpiexec -n {w.size} "
                        f"python SCRIPT`; on GPUs under torchrun, set TESSERA_TRANSPORT=nccl (the NCCL "
                        f"communicator: one GPU a process)")


def _box_shape(shape: tuple, per: int):
    """The box of ``per`` consecutive devices of a mesh of ``shape`` (row-major), or None."""
    box, rest = [1] * len(shape), per
    for i in reversed(range(len(shape))):
        if rest == 1:
            break
        if rest >= shape[i]:
            if rest % shape[i]:
                return None
            box[i], rest = shape[i], rest // shape[i]
        else:
            if shape[i] % rest:
                return None
            box[i], rest = rest, 1
    return tuple(box) if rest == 1 else None


@dataclass(frozen=True)
class Placement:
    """Where a mesh's devices live (MESH-MP-2): this process's ``rank`` in a world of ``size``,
    the ``box`` shape each process owns, the process ``grid`` shape, this process's grid
    ``coords`` and the mesh coordinates where its box starts (``start``)."""

    rank: int
    size: int
    box: tuple
    grid: tuple
    coords: tuple
    start: tuple

    @property
    def single(self) -> bool:
        """True when this process owns the whole mesh."""
        return self.size == 1

    def rank_at(self, coords) -> int:
        """The world rank of the process at process-grid coordinates ``coords``."""
        return int(np.ravel_multi_index(tuple(coords), self.grid))

    def owner(self, mesh_coords) -> int:
        """The world rank that owns the device at mesh coordinates ``mesh_coords``."""
        return self.rank_at(tuple(c // b for c, b in zip(mesh_coords, self.box)))

    def owns(self, mesh_coords) -> bool:
        return self.owner(mesh_coords) == self.rank

    def group(self, positions) -> list:
        """The world ranks of the processes that hold a collective group with this process over
        the mesh axes at ``positions`` (row-major over those axes of the process grid: the
        ascending order of the devices they own)."""
        positions = sorted(positions)
        ranks = []
        for sub in np.ndindex(*[self.grid[p] for p in positions]):
            c = list(self.coords)
            for p, s in zip(positions, sub):
                c[p] = s
            ranks.append(self.rank_at(c))
        return ranks

    def box_slices(self, stacked_shape) -> tuple:
        """Index into a whole-mesh stacked array that keeps this process's box (axes of size 1 —
        replicated — stay whole)."""
        return tuple(slice(s, s + b) if n > 1 else slice(None)
                     for s, b, n in zip(self.start, self.box, stacked_shape))


def placement(mesh, w: World | None = None) -> Placement:
    """The :class:`Placement` of ``mesh`` in the world ``w`` (default: :func:`world`)."""
    w = world() if w is None else w
    shape = tuple(mesh.shape)
    if w.size == 1:
        return Placement(0, 1, shape, (1,) * len(shape), (0,) * len(shape), (0,) * len(shape))
    per = mesh.size // w.size
    if w.devices_per_process is not None and w.devices_per_process * w.size != mesh.size:
        raise MeshError(f"{mesh!r} has {mesh.size} devices, but the world is {w.size} processes x "
                        f"{w.devices_per_process} devices per process = {w.size * w.devices_per_process}",
                        fix=f"build the mesh over {w.size * w.devices_per_process} devices, or launch with "
                            f"--devices-per-process {mesh.size // w.size if mesh.size % w.size == 0 else 'K'} "
                            f"(so that processes x K = {mesh.size})")
    box = _box_shape(shape, per) if mesh.size % w.size == 0 else None
    if box is None:
        raise MeshError(f"{w.size} processes cannot each own a box of {mesh!r} (shape {shape}): its "
                        f"{mesh.size} devices in row-major order must cut into {w.size} blocks that are each whole "
                        f"trailing axes and a run of one axis (MESH-MP-2)",
                        fix=f"launch a number of processes that divides the leading axes, e.g. one of "
                            f"{_good_sizes(shape)}, or reorder the mesh axes")
    grid = tuple(n // b for n, b in zip(shape, box))
    coords = tuple(int(c) for c in np.unravel_index(w.rank, grid))
    return Placement(w.rank, w.size, box, grid, coords, tuple(c * b for c, b in zip(coords, box)))


def _good_sizes(shape: tuple) -> list:
    n = math.prod(shape)
    return [p for p in range(1, n + 1) if n % p == 0 and _box_shape(shape, n // p) is not None][:8]
