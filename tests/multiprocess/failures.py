"""A program whose rank 1 misbehaves as ``sys.argv[1]`` says (the launcher tests): ``kill``
(killed by signal 9 before a collective), ``raise`` (a Tessera error), ``skip`` (leaves the
collective out: rank 0 waits for it), ``kill-mid`` (the last rank kills itself in the middle
of a run of collectives), ``wait`` (every rank says it is ready in the folder ``sys.argv[2]``,
naming the launch's folder, then sleeps; with ``deaf``, ignoring SIGTERM), ``none``, or one of
the collectives of :data:`MISMATCHES` that rank 1 calls differently from the others
(MESH-MP-10): every rank then raises a CollectiveError naming both calls."""
import os
import signal
import sys
import time

from tessera_ref import dist
from tessera_ref.dist.world import world

mesh = dist.Mesh(("r",), range(4))
x = dist.tensor((8,), dist.ShardSpec(("row",), ("r",)), mesh, init="randn")
how = sys.argv[1]
me = world()
odd = me.rank == 1


def pending(reduce):
    """A pending ``reduce`` over ``r`` of 4 elements a device."""
    return dist.from_shards([[d, -d, 0.5, 2.0] for d in range(4)], dist.ShardSpec(None, ("r",), reduce=reduce), mesh)


MISMATCHES = {
    # 8 elements a device against 16: rank 1 would receive 8 into 16 (uninitialised floats)
    "broadcast-size": lambda: dist.broadcast(dist.tensor((64 if odd else 32,), dist.ShardSpec(("row",), ("r",)),
                                                         mesh, init="randn"), axis="r", root=0),
    # a sum against a max: the "replicated" results would differ
    "reduce-op": lambda: dist.all_reduce(pending("max" if odd else "sum"), axis="r", op="max" if odd else "sum"),
    # an all-gather against a reduce-scatter: the received byte counts would differ
    "gather-scatter": lambda: (dist.collective.reduce_scatter(pending("sum"), axis="r", dim=0) if odd
                               else dist.all_gather(x, axis="r")),
}
if how in MISMATCHES:
    MISMATCHES[how]()
if how == "wait":
    if "deaf" in sys.argv[3:]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready = os.path.join(sys.argv[2], f"ready.{me.rank}")
    with open(ready + ".part", "w") as f:
        f.write(os.environ["TESSERA_LAUNCH_DIR"])
    os.replace(ready + ".part", ready)
    time.sleep(120)
if how == "kill-mid":
    for step in range(12):
        if me.rank == me.size - 1 and step == 5:
            os.kill(os.getpid(), 9)
        x.numpy()
if me.rank == 1:
    if how == "kill":
        os.kill(os.getpid(), 9)
    if how == "raise":
        x.shard(0)                # cuda:0 belongs to rank 0: a MeshError
    if how == "skip":
        time.sleep(30)            # neither answers nor dies in time
        sys.exit(0)
print("gathered", x.numpy().shape, flush=True)
