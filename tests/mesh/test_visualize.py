"""``dist.visualize`` (MESH-VIS-1): the grid names, for each block, the devices whose shard is
that block of the global value — checked against the shards themselves."""
import re

import numpy as np
import pytest

from tessera_ref import dist
from tessera_ref.errors import LayoutError

S = dist.ShardSpec


def _cells(text: str):
    """``(row range or None, column range, [device names])`` for each cell of the grid."""
    lines = text.splitlines()
    cols = lines[1].split()
    out = []
    for line in lines[3::2]:
        label, *cells = line.split("|")
        m = re.match(r"rows (\d+):(\d+)", label.strip())
        rows = (int(m[1]), int(m[2])) if m else None
        for col, cell in zip(cols, cells[:-1]):
            a, b = map(int, col.split(":"))
            names = []
            for part in cell.strip().split(", "):
                first, _, last = part.partition("..")
                head = first.rstrip("0123456789")
                lo = int(first[len(head):])
                names += [f"{head}{k}" for k in range(lo, int(last or lo) + 1)]
            out.append((rows, (a, b), names))
    return out


CASES = [  # (shape, spec, mesh axes, mesh shape)
    ((8, 6), S((0, 1), ("dp", "tp")), ("dp", "tp"), (2, 3)),
    ((8, 6), S(("col",), ("tp",)), ("dp", "tp"), (2, 3)),
    ((12,), S((0,), ("tp",)), ("dp", "tp"), (2, 3)),
    ((8, 8), S(("row", "col"), ("tp", "pp")), ("dp", "tp", "pp"), (2, 2, 2)),
    ((16, 4), S((0,), (("dp", "tp"),)), ("dp", "tp", "pp"), (2, 2, 2)),
    ((6, 4), None, ("x",), (3,)),
    ((12,), S((0,), ("x",)), ("x",), (3,)),
]


@pytest.mark.parametrize("shape, spec, axes, mshape", CASES)
def test_every_cell_names_exactly_the_devices_holding_that_block(shape, spec, axes, mshape):
    mesh = dist.Mesh(axes, range(int(np.prod(mshape))), mshape)
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    t = dist.tensor(shape, spec, mesh, data=data)
    cells = _cells(dist.visualize(t))
    seen = []
    for rows, (a, b), names in cells:
        block = data[a:b] if rows is None else data[rows[0]:rows[1], a:b]
        for name in names:
            assert np.array_equal(t.shard(name), block), (name, rows, (a, b))
        seen += names
    assert sorted(seen) == sorted(mesh.devices)  # every device in exactly one cell


def test_the_grid_as_printed(capsys):
    mesh = dist.Mesh(("dp", "tp"), range(6), (2, 3))
    text = dist.visualize(dist.tensor((8, 6), S(("col",), ("tp",)), mesh))  # abstract: the layout is enough
    assert capsys.readouterr().out == text + "\n"
    assert text == "\n".join([
        "tensor<8x6xf32, #shard<[*, tp]>> on Mesh(dp=2, tp=3; 6 devices cuda:0..cuda:5): "
        "each device holds a block of 8 x 2",
        "                0:2              2:4              4:6       ",
        "         +----------------+----------------+----------------+",
        "rows 0:8 | cuda:0, cuda:3 | cuda:1, cuda:4 | cuda:2, cuda:5 |",
        "         +----------------+----------------+----------------+"])


def test_padding_and_pending_sums_are_said():
    mesh = dist.Mesh(("x",), range(4))
    text = dist.visualize(dist.tensor((10,), S((0,), ("x",), pad=True), mesh))
    assert "9:10" in text.splitlines()[1]  # the last block holds one element and padding
    W = dist.tensor((4, 6), S(("row",), ("x",)), mesh, init="randn")
    y = dist.tensor((2, 4), None, mesh, init="randn") @ W  # contracted over x: a pending sum
    assert "pending sum over x" in dist.visualize(y)


def test_what_it_cannot_draw_is_a_clear_error():
    mesh = dist.Mesh(("x",), range(2))
    with pytest.raises(LayoutError, match="rank 3"):
        dist.visualize(dist.tensor((2, 2, 2), None, mesh))
    with pytest.raises(LayoutError, match="needs a DistTensor"):
        dist.visualize(np.ones(3))
