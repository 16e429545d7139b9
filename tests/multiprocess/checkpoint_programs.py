"""Checkpoint programs the multi-process tests run (``python checkpoint_programs.py ACTION DIR``
or under ``tessera-ref launch``): ``save`` writes a dp x tp tree; ``restore`` reads it back on
the saved layouts and ``reshard`` onto tp=4 layouts; each prints, per rank, the digest of
every leaf's global bits (rank 0 only) and the bytes this process read."""
from __future__ import annotations

import hashlib
import sys

from tessera_ref import checkpoint, dist
from tessera_ref.dist.world import world
from tessera_ref.numerics.rng import RNGKey

S = dist.ShardSpec


def tree() -> dict:
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    def t(shape, spec, dtype, seed):
        return dist.tensor(shape, spec, mesh, dtype=dtype, init="randn", seed=seed)
    return {"w": t((8, 6), S(("row",), ("tp",)), "bf16", 1), "v": t((8, 4), S(("row", "col"), ("dp", "tp")), "f32", 2),
            "b": t((6,), None, "f32", 3), "key": RNGKey(9).fold(1), "lr": 0.25}


def digests(state: dict) -> list:
    out = []
    for name in sorted(state):
        x = state[name]
        data = x.numpy().tobytes() if isinstance(x, dist.DistTensor) else repr(x).encode()  # numpy(): a collective
        out.append(f"{name} {hashlib.sha256(data).hexdigest()[:16]}")
    return out


def main(action: str, path: str) -> None:
    if action == "save":
        state = tree()
        checkpoint.save(path, state, step=5)
    else:
        log = checkpoint.ReadLog()
        like = None
        if action == "reshard":
            like = {"w": S(("col",), ("tp",), pad=True), "v": S(("row",), ("tp",)), "b": S(("row",), ("tp",), pad=True),
                    "key": RNGKey(0), "lr": 0.0}
        mesh = dist.Mesh(("tp",), range(4)) if action == "reshard" else None
        state = checkpoint.restore(path, like=like, mesh=mesh, log=log)
        sys.stdout.write(f"rank {world().rank} read {log.bytes_read}\n")  # one write: ranks' lines do not mix
        sys.stdout.flush()
    lines = digests(state)
    if world().rank == 0:
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
