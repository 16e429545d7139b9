"""The NCCL transport (MESH-MP-4) on a GPU: a world of one process exchanges with itself, and a
reduction through the transport's collectives gives the simulated fold's bits. Without CuPy and
a GPU the transport says so clearly."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref.errors import BackendError


def _cupy_gpu() -> bool:
    try:
        import cupy
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


def test_without_a_gpu_opening_nccl_is_a_backend_error():
    if _cupy_gpu():
        pytest.skip("this machine has a GPU")
    from tessera_ref.backends.cuda.nccl import NCCLTransport
    with pytest.raises(BackendError, match="CuPy|GPU"):
        NCCLTransport()


@pytest.mark.gpu
def test_nccl_world_of_one_exchanges_with_itself_and_folds_as_one_process(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    from tessera_ref import dist
    from tessera_ref.backends.cuda.nccl import NCCLTransport
    from tessera_ref.backends.p2p import P2PCommunicator
    from tessera_ref.numerics import as_policy
    t = NCCLTransport()
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = t.exchange({0: a}, {0: (a.shape, a.dtype)})
    np.testing.assert_array_equal(got[0], a)
    assert t.bytes_sent == a.nbytes
    mesh = dist.Mesh(("r",), range(4))
    tiny = np.float32(2.0 ** -24)
    stacked = np.array([[1.0], [tiny], [tiny], [tiny]], np.float32)
    # contributions of 4 devices: ((1 + e) + e) + e = 1 in f32 (each a tie to even)
    out = P2PCommunicator(mesh, t).reduce(stacked, ("r",), "sum", as_policy("f32"))
    assert out.view(np.uint32).tolist() == [[0x3F800000]]
