"""One tensor- and data-parallel training step, the same program on 1 process or N
(docs/tutorials/multiprocess.md).

    python examples/multiprocess_step.py                     # one process, 8 simulated devices
    tessera-ref launch -n 4 examples/multiprocess_step.py    # 4 processes, 2 devices each

The mesh is tp=4 x dp=2. The MLP's first weight is split by columns and its second by rows
over tp (Megatron's layout), the batch over dp; ``jit`` traces the block once and ``grad``
differentiates the loss. With 4 processes each owns a box of 2 devices, so every tp
reduction crosses processes: the canonical reduce-scatter over point-to-point messages folds
the 4 devices' contributions in ascending order, as one process does — the printed digests
are the same.
"""
import hashlib

import numpy as np

from tessera_ref import dist, grad, jit, op
from tessera_ref.dist.world import placement

mesh = dist.Mesh(("tp", "dp"), devices=range(8), shape=(4, 2))
S = dist.ShardSpec
x = dist.tensor((4, 8, 16), S(("batch",), ("dp",)), mesh, init="randn", seed=1, name="x")
W1 = dist.tensor((16, 32), S(("col",), ("tp",)), mesh, init="randn", seed=2, name="W1")
W2 = dist.tensor((32, 16), S(("row",), ("tp",)), mesh, init="randn", seed=3, name="W2")


@jit
def block(x, W1, W2):
    """The MLP; its pending sum over tp reduce-scattered over the sequence."""
    return dist.collective.reduce_scatter(op.gemm(op.gelu(op.gemm(x, W1)), W2), axis="tp", dim=1)


def loss(W1, W2):
    return op.mean(block(x, W1, W2) ** 2.0)


gW1, gW2 = grad(loss, argnums=(0, 1))(W1, W2)
place = placement(mesh)
if place.rank == 0:
    print(f"{place.size} process(es), each owning {np.prod(place.box)} of {mesh.size} devices; "
          f"W1 held here: {W1.local.shape[:2]} devices x {W1.local.shape[2:]}")
for name, t in (("block", block(x, W1, W2)), ("gW1", gW1), ("gW2", gW2)):
    value = t.numpy()  # a collective: every process takes part, each gets the whole value
    if place.rank == 0:
        print(f"{name:6} {t.type}  sha256 {hashlib.sha256(value.tobytes()).hexdigest()[:16]}")
