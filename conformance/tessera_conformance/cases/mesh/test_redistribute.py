"""MESH-REDIST-1: moving between layouts keeps the global value, by the plan the clause gives."""
import re

import numpy as np
import pytest

from tessera_ref import dist, jit
from tessera_ref.errors import LayoutError
from tessera_ref.ir import ShardLayout
from tessera_conformance import assert_bits, clause, eager, oracle_only

from ._reference import AXES, cancelling, expected_shard, fold, largest_axis, mesh_of, wide

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("redistribution plans are dist's (MESH-REDIST-1); the cases that move data run on the "
                      "backend")


def L(*dims, partial=(), op="sum", padded=False):  # noqa: N802 - a layout literal
    return ShardLayout(tuple(dims), partial, op, padded)


@LIBRARY
@pytest.mark.parametrize("current, target, steps", [
    (L((), (), partial=("tp",)), L(("tp",), ()), [("reduce_scatter", "tp", 0)]),
    (L(("dp",), (), partial=("tp",)), L(("dp", "tp"), ()), [("reduce_scatter", "tp", 0)]),
    (L((), (), partial=("tp",)), L((), ()), [("all_reduce", "tp", None)]),
    (L((), (), partial=("tp",)), L((), ("dp", "tp")), [("all_reduce", "tp", None), ("slice", "dp", 1),
                                                      ("slice", "tp", 1)]),
    (L((), (), partial=("tp", "dp")), L((), (), partial=("dp",)), [("all_reduce", "tp", None)]),
    (L(("dp", "tp"), ()), L(("dp",), ("tp",)), [("all_to_all", "tp", (1, 0))]),
    (L(("tp",), ("dp",)), L(("dp",), ("tp",)), [("all_gather", "tp", 0), ("all_to_all", "dp", (0, 1)),
                                                ("slice", "tp", 1)]),
    (L(("tp",), (), padded=True), L((), ("tp",), padded=True), [("all_gather", "tp", 0), ("slice", "tp", 1)]),
    (L(("tp",), ()), L(("tp", "pp"), ()), [("slice", "pp", 0)]),
    (L(("tp", "pp"), ()), L((), ()), [("all_gather", "pp", 0), ("all_gather", "tp", 0)]),
])
@clause("MESH-REDIST-1")
def test_plans(backend, current, target, steps):
    """reduce_scatter where the target splits the reduced axis next, else all_reduce; gathers
    minor first; one all_to_all for an axis moving to the dimension that takes it next (never
    when padded); local slices for the rest."""
    assert [tuple(s) for s in dist.redistribution_plan(current, target)] == steps


@LIBRARY
@pytest.mark.parametrize("current, target", [
    (L((), ()), L((), (), partial=("tp",))),                                 # a pending reduction it lacks
    (L((), (), partial=("tp",)), L((), (), partial=("tp",), op="max")),    # sum into max
])
@clause("MESH-REDIST-1")
def test_plan_errors(backend, current, target):
    """Asking for a pending reduction the tensor lacks, or changing its op, is a LayoutError."""
    with pytest.raises(LayoutError):
        dist.redistribution_plan(current, target)


def _layouts(axes):
    """Rank-2 layouts over the mesh axes (no pending reduction)."""
    out = [L((), ()), L((axes[-1],), ()), L((), (axes[0],)), L(axes, ()), L((), tuple(reversed(axes)))]
    if len(axes) > 1:
        out += [L((axes[0],), axes[1:]), L(axes[1:], (axes[0],))]
    return list(dict.fromkeys(out))


@clause("MESH-REDIST-1")
def test_any_layout_to_any_layout(backend, mesh_shape):
    """Every pair of a set of layouts: the global value and each device's block are right."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    g = wide(np.random.default_rng(50), (2 * mesh.size, mesh.size))
    for src in _layouts(axes):
        x = dist.tensor(g.shape, src, mesh, data=g)
        for dst in _layouts(axes):
            seen = {}

            def go():
                y = dist.redistribute(x, dst)
                seen.update(layout=y.layout, shards={d: y.shard(d) for d in range(mesh.size)})
                return y

            assert_bits(eager(backend, go), g, f"{src} -> {dst}")
            assert seen["layout"] == dst
            for d in range(mesh.size):
                assert_bits(seen["shards"][d], expected_shard(g, dst.dims, axes, mesh_shape, d), f"{src}->{dst} {d}")


@clause("MESH-REDIST-1")
def test_a_pending_sum_is_carried_out_in_rank_order(backend, mesh_shape):
    """Step 1 by reduce_scatter or all_reduce: the rank-order fold either way; kept when the
    target keeps it pending."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    c = cancelling(np.random.default_rng(51), p, (2 * mesh.size, mesh.size))
    x = dist.from_shards([c[mesh.coords(d)[axis]] for d in range(mesh.size)], L((), (), partial=(axis,)), mesh)
    want = fold(c)
    others = tuple(a for a in axes if a != axis)
    targets = [L((axis,), ()), L((), ()), L((), (axis,)), L(axes, ()), L((), (), partial=(axis,))]
    if others:
        targets.append(L((others[0],), (), partial=(axis,)))
    for dst in targets:
        assert_bits(eager(backend, lambda: x.redistribute(dst)), want, str(dst))


@clause("MESH-REDIST-1")
def test_padded_layouts(backend, mesh_shape):
    """``padded`` is set or cleared without moving data; uneven padded moves keep the value;
    clearing it needs even splits."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    p = mesh.axis_size(axis)
    n = 2 * p + 1
    g = wide(np.random.default_rng(52), (n, 3))
    x = dist.tensor(g.shape, L((), ()), mesh, data=g)
    padded = L((axis,), (), padded=True)
    for dst in (padded, L((), (axis,), padded=True), L((), (), padded=True), L((), ())):
        assert_bits(eager(backend, lambda: x.redistribute(padded).redistribute(dst)), g, str(dst))
    even = dist.tensor((2 * p, 3), L((axis,), ()), mesh, data=g[:2 * p])
    assert dist.redistribution_plan(L((axis,), ()), L((axis,), (), padded=True)) == []
    assert_bits(eager(backend, lambda: even.redistribute(L((axis,), (), padded=True))), g[:2 * p])
    if p > 1:
        with pytest.raises(LayoutError):
            eager(backend, lambda: x.redistribute(padded).redistribute(L((axis,), ())))


@clause("MESH-REDIST-1")
def test_a_traced_op_records_the_plan(backend, mesh_shape):
    """An op needing another layout records the plan's collectives before it in the trace."""
    mesh = mesh_of(mesh_shape)
    minor = AXES[len(mesh_shape) - 1]
    n = mesh.size
    a_, b_ = wide(np.random.default_rng(53), (2 * n, n)), wide(np.random.default_rng(54), (2 * n, n))
    a = dist.tensor(a_.shape, L((minor,), ()), mesh, data=a_)
    b = dist.tensor(b_.shape, L((), (minor,)), mesh, data=b_)
    f = jit(lambda u, v: u + v, backend=backend)
    assert_bits(eager(backend, f, a, b), a_ + b_)
    names = re.findall(r'"tessera\.graph\.(\w+)"', f.inspect_ir("graph"))
    assert names == ["all_to_all", "add"]
