"""Stage ``nccl`` (CUDA-CHECK-1): NCCL in a world of one process (NCCL refuses two ranks on one
GPU) — a raw all-reduce on device memory and the project's ``nccl`` transport sending a message
to itself; the bits must come back unchanged."""
from __future__ import annotations

import numpy as np

from ..dist.world import World
from .device import Skip, compare_bits

__all__ = ["items", "run"]


def items(arch: str, quick: bool) -> list:
    return ["nccl_world_of_one"]


def run(ctx, item: str) -> dict:
    if ctx.dry_run:
        raise Skip("dry run: the stand-in has no NCCL")
    try:
        from cupy.cuda import nccl
    except Exception as e:  # CuPy built without NCCL, or libnccl missing
        raise Skip(f"CuPy cannot load NCCL: {type(e).__name__}: {e}") from None
    from ..backends.cuda.nccl import NCCLTransport
    cp = ctx.cp
    x = np.random.default_rng(3).standard_normal(1 << 20).astype(np.float32)
    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    src, dst = cp.asarray(x), cp.empty(x.size, dtype=np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    comm.allReduce(src.data.ptr, dst.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    raw = compare_bits(cp.asnumpy(dst), x)
    transport = NCCLTransport(World(0, 1))
    got = transport.exchange({0: x.reshape(1024, 1024)}, {0: ((1024, 1024), np.float32)})[0]
    sent = compare_bits(got.reshape(-1), x)
    status = "pass" if raw["status"] == sent["status"] == "pass" else "differ"
    return {"status": status, "nccl": str(nccl.get_version()),
            "detail": f"allReduce of {x.size} f32 in a world of one: {raw['status']}; the nccl transport's message "
                      f"to itself: {sent['status']}"}
