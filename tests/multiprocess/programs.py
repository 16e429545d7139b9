"""Programs the multi-process tests run on 1, 2 and 4 processes (``python programs.py NAME``
or under ``mpiexec``/``tessera-ref launch``). Rank 0 prints one line per result: a name and
the SHA-256 of its bits (or the bits themselves), which must not depend on the process count."""
from __future__ import annotations

import hashlib
import pickle
import sys

import numpy as np

from tessera_ref import dist, grad, jit, op
from tessera_ref.dist.tensor import DistTensor
from tessera_ref.dist.world import world
from tessera_ref.ir import TensorType
from tessera_ref.numerics import Policy

S = dist.ShardSpec


def emit(name: str, value) -> None:
    """Print ``name`` and the digest of ``value``'s bits, on rank 0."""
    value = np.ascontiguousarray(value)
    if world().rank == 0:
        print(name, value.dtype, value.shape, hashlib.sha256(value.tobytes()).hexdigest()[:16], flush=True)


def _world_transport():
    """This world's transport (the one the collectives use)."""
    from tessera_ref.backends.p2p import world_transport
    from tessera_ref.dist.world import transport_name
    return world_transport(transport_name())


def _at_rank_0(transport, value) -> dict:
    """Every process's ``value`` (a picklable object), by rank, on rank 0 (empty elsewhere)."""
    me, n = world().rank, world().size
    blobs = {0: np.frombuffer(pickle.dumps(value), np.uint8)} if me else {}
    got = transport.exchange_sized(blobs, [] if me else range(1, n), np.uint8)
    return {me: value, **{r: pickle.loads(b.tobytes()) for r, b in got.items()}}


def order() -> None:
    """A sum whose bits depend on the order: contributions (1, 2^-24, 2^-24, 2^-24) and their
    negations per element; printed as bits so that the test can check them by hand."""
    mesh = dist.Mesh(("r",), range(4))
    tiny = np.float32(2.0 ** -24)
    shards = [np.array([1.0, -1.0, tiny, tiny], np.float32), np.array([tiny, -tiny, 1.0, tiny], np.float32),
              np.array([tiny, -tiny, tiny, tiny], np.float32), np.array([tiny, -tiny, tiny, 1.0], np.float32)]
    x = dist.from_shards(shards, S(None, ("r",), reduce="sum"), mesh)
    out = dist.all_reduce(x, axis="r").numpy()
    if world().rank == 0:
        print("order", " ".join(f"{b:08x}" for b in out.view(np.uint32)), flush=True)


def order_scatter() -> None:
    """:func:`order`'s contributions as a reduce_scatter over 4 devices: each device keeps one
    element, whose bits depend on the order; then an uneven split (7 elements, padded) of sums
    of ±1 and ±2^-24, printed as bits."""
    mesh = dist.Mesh(("r",), range(4))
    tiny = np.float32(2.0 ** -24)
    shards = [np.array([1.0, -1.0, tiny, tiny], np.float32), np.array([tiny, -tiny, 1.0, tiny], np.float32),
              np.array([tiny, -tiny, tiny, tiny], np.float32), np.array([tiny, -tiny, tiny, 1.0], np.float32)]
    x = dist.from_shards(shards, S(None, ("r",), reduce="sum"), mesh)
    out = dist.collective.reduce_scatter(x, axis="r", dim=0).numpy()
    rng = np.random.default_rng(7)
    uneven = [(np.where(rng.random(7) < 0.5, 1.0, tiny) * rng.choice([-1, 1], 7)).astype(np.float32) for _ in range(4)]
    y = dist.from_shards(uneven, S(None, ("r",), reduce="sum"), mesh)
    y = DistTensor(TensorType(y.shape, y.policy, y.layout.replace(padded=True)), mesh, y.local)  # may pad
    padded = dist.collective.reduce_scatter(y, axis="r", dim=0).numpy()
    if world().rank == 0:
        print("order_scatter", " ".join(f"{b:08x}" for b in out.view(np.uint32)), flush=True)
        print("uneven_scatter", " ".join(f"{b:08x}" for b in padded.view(np.uint32)), flush=True)


def scatter_bytes() -> None:
    """Bytes each process sends for a reduce_scatter of 4000 bytes (f32) and of 4000 bytes
    (bf16, 2000 elements) over one device per process, printed by rank 0 for every rank."""
    n = world().size
    mesh = dist.Mesh(("r",), range(n))
    for policy, count in (("f32", 1000), (Policy("bf16", accum="f32"), 2000)):
        x = dist.from_shards([np.full(count, d + 1, np.float32) for d in range(n)], S(None, ("r",), reduce="sum"),
                             mesh, dtype=policy)
        if n == 1:
            emit("scatter_bytes one process", dist.collective.reduce_scatter(x, axis="r", dim=0).numpy())
            continue
        transport = _world_transport()
        before = transport.bytes_sent
        dist.collective.reduce_scatter(x, axis="r", dim=0)
        sent = transport.bytes_sent - before
        got = _at_rank_0(transport, sent)
        if world().rank == 0:
            print("scatter_bytes sent", " ".join(str(got[r]) for r in range(n)), flush=True)


def exact_bytes() -> None:
    """Bytes each process sends to reduce-scatter and to all-reduce an exact pending sum (a K
    split matmul under ``reduction="exact"``, 48 x 40 sums, one device per process), and the
    digits in use per sum on each process; printed by rank 0 for every rank (MESH-MP-4)."""
    n = world().size
    mesh = dist.Mesh(("r",), range(n))
    exact = Policy("f32", reduction="exact")
    a = dist.tensor((48, 64), S(("col",), ("r",)), mesh, dtype=exact, init="randn", seed=31)
    b = dist.tensor((64, 40), S(("row",), ("r",)), mesh, dtype=exact, init="randn", seed=32)
    c = op.matmul(a, b)
    scatter, reduce = dist.collective.reduce_scatter, dist.all_reduce
    if n == 1:
        emit("exact_bytes reduce_scatter", scatter(c, axis="r", dim=0).numpy())
        emit("exact_bytes all_reduce", reduce(c, axis="r").numpy())
        return
    transport = _world_transport()
    words = c.local.to_words()
    counts = [int(words[1] + 1 - words[0])]
    for name, collective in (("reduce_scatter", lambda: scatter(c, axis="r", dim=0)),
                             ("all_reduce", lambda: reduce(c, axis="r"))):
        before = transport.bytes_sent
        done = collective()
        counts.append(transport.bytes_sent - before)
        emit(f"exact_bytes {name}", done.numpy())
    got = _at_rank_0(transport, counts)
    if world().rank == 0:
        for k, what in enumerate(("digits", "reduce_scatter", "all_reduce")):
            print("exact_bytes", what, " ".join(str(got[r][k]) for r in range(n)), flush=True)


def partial(mesh, axes, reduce, policy, seed):
    """A pending ``reduce`` over ``axes`` of (8, 16) values, each device's contribution its own
    (drawn for its coordinates along ``axes``; the same along the other axes)."""
    shards = []
    for d in range(mesh.size):
        c = mesh.coords(d)
        key = sum(c[a] * 10 ** k for k, a in enumerate(axes))
        shards.append(np.random.default_rng(seed * 1000 + key).standard_normal((8, 16)).astype(np.float32))
    return dist.from_shards(shards, S(None, axes, reduce=reduce), mesh, dtype=policy)


def collectives() -> None:
    """Every collective on an 8-device (dp=2, tp=4) mesh and its (tp=4, dp=2) twin."""
    for axes, shape in ((("dp", "tp"), (2, 4)), (("tp", "dp"), (4, 2))):
        mesh = dist.Mesh(axes, range(8), shape)
        tag = "".join(axes)
        for policy in ("f32", Policy("bf16", accum="f32"), Policy("f32", reduction="exact")):
            pname = policy if isinstance(policy, str) else f"{policy.storage.name}-{policy.reduction}"
            for op_ in ("sum", "max", "min", "prod", "avg"):
                if op_ != "sum" and pname.endswith("exact"):
                    continue
                base = "sum" if op_ == "avg" else op_
                y = partial(mesh, ("tp",), base, policy, seed=11)
                emit(f"{tag} {pname} all_reduce(tp) {op_}", dist.all_reduce(y, axis="tp", op=op_).numpy())
                emit(f"{tag} {pname} reduce_scatter(tp) {op_}",
                     dist.collective.reduce_scatter(y, axis="tp", dim=1, op=op_).numpy())
            z = partial(mesh, ("dp", "tp"), "sum", policy, seed=13)
            emit(f"{tag} {pname} all_reduce(dp,tp)", dist.all_reduce(z, axis=("dp", "tp")).numpy())
            if not pname.endswith("exact"):
                emit(f"{tag} {pname} reduce_scatter(tp)", dist.collective.reduce_scatter(z, axis="tp", dim=0).numpy())
        exact = Policy("f32", reduction="exact")  # a K split under exact mode: partial sums held exactly
        a = dist.tensor((8, 16), S(("col",), ("tp",)), mesh, dtype=exact, init="randn", seed=16)
        b = dist.tensor((16, 8), S(("row",), ("tp",)), mesh, dtype=exact, init="randn", seed=17)
        emit(f"{tag} exact matmul all_reduce(tp)", dist.all_reduce(op.matmul(a, b), axis="tp").numpy())
        emit(f"{tag} exact matmul reduce_scatter(tp)",
             dist.collective.reduce_scatter(op.matmul(a, b), axis="tp", dim=0).numpy())
        w = dist.tensor((8, 16), S(("row", "col"), ("tp", "dp")), mesh, init="randn", seed=15)
        emit(f"{tag} all_gather(dp)", dist.all_gather(w, axis="dp").numpy())
        emit(f"{tag} broadcast(tp, 3)", dist.broadcast(w, axis="tp", root=3).numpy())
        emit(f"{tag} permute(tp, +1)", dist.permute(w, axis="tp", perm=1).numpy())
        emit(f"{tag} permute(tp, pairs)", dist.permute(w, axis="tp", perm=[(0, 3), (3, 1)]).numpy())
        emit(f"{tag} all_to_all(tp)", dist.all_to_all(w, axis="tp", split_dim=1, concat_dim=0).numpy())
        emit(f"{tag} numpy", w.numpy())


def train() -> None:
    """A TP+DP training step (an MLP: W1 by columns and W2 by rows over tp, the batch over dp):
    the loss and both gradients, traced once with jit, on both axis orders."""
    for axes, shape in ((("dp", "tp"), (2, 4)), (("tp", "dp"), (4, 2))):
        mesh = dist.Mesh(axes, range(8), shape)
        x = dist.tensor((4, 8, 16), S(("batch",), ("dp",)), mesh, init="randn", seed=1)
        W1 = dist.tensor((16, 32), S(("col",), ("tp",)), mesh, init="randn", seed=2)
        W2 = dist.tensor((32, 16), S(("row",), ("tp",)), mesh, init="randn", seed=3)

        @jit
        def block(x, W1, W2):
            return dist.collective.reduce_scatter(op.gemm(op.gelu(op.gemm(x, W1)), W2), axis="tp", dim=1)

        def loss(W1, W2):
            return op.mean(block(x, W1, W2) ** 2.0)

        g1, g2 = grad(loss, argnums=(0, 1))(W1, W2)
        tag = "".join(axes)
        emit(f"{tag} block", block(x, W1, W2).numpy())
        emit(f"{tag} gW1", g1.numpy())
        emit(f"{tag} gW2", g2.numpy())


def stages() -> None:
    """Two pipeline stages (sub-meshes pp=0 and pp=1 of a pp=2 x tp=4 mesh): stage 0 computes,
    sends to stage 1 (MESH-COLL-7), which computes on what it received."""
    mesh = dist.Mesh(("pp", "tp"), range(8), (2, 4))
    first, second = mesh.sub(pp=0), mesh.sub(pp=1)
    x = dist.tensor((8, 16), S(("row",), ("tp",)), first, init="randn", seed=21)
    W = dist.tensor((16, 16), S(("col",), ("tp",)), second, init="randn", seed=22)
    with dist.mailbox_scope():
        dist.send(op.gelu(x), second)
        h = dist.recv(first, second)
    y = dist.all_gather(h, axis="tp") @ W
    emit("stages", y.numpy())


def small_rounds() -> None:
    """Reductions from here on move at most 64 bytes of contributions per round."""
    from tessera_ref.backends import p2p
    p2p.ROUND_BYTES = 64


if __name__ == "__main__":
    for name in sys.argv[1:]:
        globals()[name]()
