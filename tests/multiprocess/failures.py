"""A program whose rank 1 misbehaves as ``sys.argv[1]`` says (the launcher tests): ``kill``
(killed by signal 9 before a collective), ``raise`` (a Tessera error), ``skip`` (leaves the
collective out: rank 0 waits for it), or ``none``."""
import os
import sys
import time

from tessera_ref import dist
from tessera_ref.dist.world import world

mesh = dist.Mesh(("r",), range(4))
x = dist.tensor((8,), dist.ShardSpec(("row",), ("r",)), mesh, init="randn")
how = sys.argv[1]
if world().rank == 1:
    if how == "kill":
        os.kill(os.getpid(), 9)
    if how == "raise":
        x.shard(0)                # cuda:0 belongs to rank 0: a MeshError
    if how == "skip":
        time.sleep(30)            # neither answers nor dies in time
        sys.exit(0)
print("gathered", x.numpy().shape, flush=True)
