"""Shared pieces of the checkpoint tests: a mixed tree on a dp x tp mesh, bit comparison of
(Dist)Tensors and arrays, and the checks of CKPT-RESTORE-3 on a read log."""
from __future__ import annotations

import numpy as np

from tessera_ref import dist
from tessera_ref.numerics.rng import RNGKey
from tessera_ref.ops.values import Array, asarray

S = dist.ShardSpec


def dp_tp(dp: int = 2, tp: int = 2) -> dist.Mesh:
    return dist.Mesh(("dp", "tp"), range(dp * tp), (dp, tp))


def mixed_tree(mesh: dist.Mesh) -> dict:
    """Parameters (bf16 split over tp, f32 split over dp and tp, replicated f16), optimizer-like
    state, an fp8 Array, a NumPy array and scalar, an RNG key and Python scalars with awkward bits."""
    def t(shape, spec, dtype, seed):
        return dist.tensor(shape, spec, mesh, dtype=dtype, init="randn", seed=seed)
    return {"params": {"w": t((8, 6), S(("row",), ("tp",)), "bf16", 1),
                       "v": t((8, 4), S(("row", "col"), ("dp", "tp")), "f32", 2),
                       "b": t((6,), None, "f16", 3)},
            "opt": {"m": [t((8, 6), S(("row",), ("tp",)), "f32", 4)], "count": 3, "lr": 0.1},
            "scales": asarray(np.array([0.5, -2.0, 448.0]), dtype="fp8_e4m3"),
            "table": np.arange(12, dtype=np.int64).reshape(3, 4), "loss": np.float32(-0.0),
            "key": RNGKey(7, 1).fold(3), "odd": (float("-0.0"), float("nan"), 2 ** 70, True, None, "text")}


def bits(x) -> tuple:
    """The kind, type and raw bytes of a leaf (DistTensors by their global value, on any layout)."""
    if isinstance(x, dist.DistTensor):
        return "dist", x.shape, str(x.policy), np.ascontiguousarray(x.numpy()).tobytes()
    if isinstance(x, Array):
        return "array", str(x.type), np.ascontiguousarray(x.data).tobytes()
    if isinstance(x, (np.ndarray, np.generic)):
        return type(x).__name__, x.dtype.str, np.shape(x), np.ascontiguousarray(x).tobytes()
    if isinstance(x, float):
        return "float", x.hex()
    return type(x).__name__, x


def assert_same_leaves(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert bits(g) == bits(w)


def reads_are_disjoint(log) -> bool:
    """No byte of a saved block is read twice (CKPT-RESTORE-3): the read boxes of each
    (file, tensor) do not overlap."""
    seen = {}
    for file, tensor, box, _ in log.reads:
        for other in seen.setdefault((file, tensor), []):
            if all(lo < ohi and olo < hi for (lo, hi), (olo, ohi) in zip(box, other)):
                return False
        seen[(file, tensor)].append(box)
    return True
