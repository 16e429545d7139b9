"""A program whose rank 1 misbehaves as ``sys.argv[1]`` says (the launcher tests): ``kill``
(killed by signal 9 before a collective), ``raise`` (a Tessera error), ``skip`` (leaves the
collective out: rank 0 waits for it), ``kill-mid`` (the last rank kills itself in the middle
of a run of collectives), ``wait`` (every rank says it is ready in the folder ``sys.argv[2]``,
naming the launch's folder, then sleeps; with ``deaf``, ignoring SIGTERM), or ``none``."""
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
