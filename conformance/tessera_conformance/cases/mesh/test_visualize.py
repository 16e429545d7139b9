"""MESH-VIS-1: the block grid names, per block, the devices whose shard is that block."""
import io

import numpy as np
import pytest

from tessera_ref import dist
from tessera_ref.errors import LayoutError
from tessera_conformance import clause, oracle_only

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the picture of a layout is dist's; no backend takes part")

S = dist.ShardSpec


@LIBRARY
@clause("MESH-VIS-1")
def test_the_grid_of_a_2d_tensor_over_two_axes(backend):
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    data = np.arange(16, dtype=np.float32).reshape(4, 4)
    t = dist.tensor((4, 4), S(("row",), ("tp",)), mesh, data=data)
    text = dist.visualize(t, file=io.StringIO())
    lines = text.splitlines()
    assert lines[0].endswith("each device holds a block of 2 x 4")
    assert lines[1].split() == ["0:4"]
    rows = [line for line in lines if line.startswith("rows")]
    # rows split over tp (mesh coordinate 1): tp rank 0 = cuda:0 and cuda:2, rank 1 = cuda:1 and cuda:3
    assert [r.split("|")[0].strip() for r in rows] == ["rows 0:2", "rows 2:4"]
    assert [r.split("|")[1].strip() for r in rows] == ["cuda:0, cuda:2", "cuda:1, cuda:3"]
    assert np.array_equal(t.shard("cuda:2"), data[0:2]) and np.array_equal(t.shard("cuda:3"), data[2:4])


@LIBRARY
@clause("MESH-VIS-1")
def test_other_ranks_are_a_layout_error(backend):
    with pytest.raises(LayoutError):
        dist.visualize(dist.tensor((2, 2, 2), None, dist.Mesh(("x",), range(2))))
