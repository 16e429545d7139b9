"""MESH-SHARD-1: how an op runs on distributed operands — operands made distributed, exact
pending sums carried out first, operands moved to the rule's layouts (recorded in a trace),
the rule families giving the unsharded bits."""
import re

import numpy as np
import pytest

from tessera_ref import dist, jit, op
from tessera_ref.errors import MeshError
from tessera_ref.numerics import Policy
from tessera_conformance import assert_bits, clause, eager, run

from ._reference import AXES, cancelling, exact_sum_f32, largest_axis, mesh_of, observe, wide

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")


def _oracle(fn, *args):
    """The unsharded program on the oracle."""
    return eager("interp", lambda: fn(*args))


def _two_axes(mesh_shape):
    axes = AXES[:len(mesh_shape)]
    return axes[0], axes[-1]


@pytest.mark.parametrize("name", ["softmax", "layernorm_safe", "rmsnorm_safe", "fft"])
@clause("MESH-SHARD-1")
def test_keep_whole_family(backend, mesh_shape, name):
    """The dimension the op works along is made whole, the other keeps its split; the values
    are the unsharded op's."""
    mesh = mesh_of(mesh_shape)
    a0, a1 = _two_axes(mesh_shape)
    x = wide(np.random.default_rng(90), (2 * mesh.size, 2 * mesh.size), -4, 5)
    fn = getattr(op, name)
    splits = S(("row", "col"), (a0, a1)) if a0 != a1 else S(("col",), (a1,))
    X = dist.tensor(x.shape, splits, mesh, data=x)
    value, facts = observe(backend, lambda: fn(X))
    assert facts["layout"].dims == ((a0,) if a0 != a1 else (), ())
    want = _oracle(fn, x)
    assert_bits(value, want)


@clause("MESH-SHARD-1")
def test_replicated_family(backend, mesh_shape):
    """cholesky and dropout (keyed by global indices) take whole operands and give replicated
    results with the unsharded bits."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    n = 2 * mesh.axis_size(axis)
    m = (np.arange(n * n, dtype=np.float32).reshape(n, n) % 7) / np.float32(7)
    spd = (m @ m.T + np.float32(n) * np.eye(n, dtype=np.float32)).astype(np.float32)
    X = dist.tensor(spd.shape, S(("row",), (axis,)), mesh, data=spd)
    for fn in (op.cholesky, lambda v: op.dropout(v, 0.25, seed=9)):
        value, facts = observe(backend, lambda: fn(X))
        assert facts["layout"].dims == ((), ()) and facts["partial"] == ()
        assert_bits(value, _oracle(fn, spd))


@clause("MESH-SHARD-1")
def test_batch_family(backend, mesh_shape):
    """flash_attention: the last two dimensions whole, the leading ones split like ``q``."""
    mesh = mesh_of(mesh_shape)
    a0, a1 = _two_axes(mesh_shape)
    rng = np.random.default_rng(91)
    b = mesh_shape[0]
    h = mesh_shape[-1] if a1 != a0 else 1
    q, k, v = (wide(rng, (b, h, 8, 4), -2, 3) for _ in range(3))
    spec = S((0, 1), (a0, a1)) if a1 != a0 else S((0,), (a0,))
    Q = dist.tensor(q.shape, spec, mesh, data=q)
    K = dist.tensor(k.shape, S((2,), (a1,)), mesh, data=k)  # a split the rule undoes
    V = dist.tensor(v.shape, None, mesh, data=v)
    value, facts = observe(backend, lambda: op.flash_attention(Q, K, V))
    assert facts["layout"].dims == ((a0,), (a1,) if a1 != a0 else (), (), ())
    assert_bits(value, _oracle(op.flash_attention, q, k, v))


@clause("MESH-SHARD-1")
def test_numpy_operands_become_replicated_and_meshes_must_agree(backend, mesh_shape):
    """A NumPy operand joins the mesh replicated; operands on two meshes are an error."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    x = wide(np.random.default_rng(92), (2 * mesh.axis_size(axis), 3))
    y = wide(np.random.default_rng(93), (3,))
    X = dist.tensor(x.shape, S(("row",), (axis,)), mesh, data=x)
    value, facts = observe(backend, lambda: op.add(X, y))
    assert facts["layout"].dims == ((axis,), ())
    assert_bits(value, (x + y).astype(np.float32))
    other = dist.Mesh(mesh.axes, range(mesh.size, 2 * mesh.size), mesh.shape)
    Y = dist.tensor(x.shape, None, other, data=x)
    with pytest.raises(MeshError):
        eager(backend, lambda: X + Y)


@clause("MESH-SHARD-1")
def test_exact_pending_sum_is_carried_out_before_an_op_uses_it(backend, mesh_shape):
    """Under exact mode an op sees the reduced value (rounded once), as on one device: ``P · w``
    is ``round(ΣP) · w``, not the fold of per-rank products."""
    mesh = mesh_of(mesh_shape)
    axis = largest_axis(mesh_shape)
    c = cancelling(np.random.default_rng(94), mesh.axis_size(axis), (6,))
    P = dist.from_shards([c[mesh.coords(d)[axis]] for d in range(mesh.size)], S(None, (axis,), reduce="sum"),
                         mesh, dtype=EXACT)
    w = 1.0 / 3.0  # a Python scalar: weakly typed, it takes P's policy
    value, facts = observe(backend, lambda: P * w)
    assert facts["partial"] == ()
    assert_bits(value, (exact_sum_f32(c) * np.float32(w)).astype(np.float32))


@clause("MESH-SHARD-1")
def test_a_trace_records_the_moves_before_the_op(backend, mesh_shape):
    """Traced, the collectives that move an operand are ops before it; the results are those
    of the eager run and of the unsharded program."""
    mesh = mesh_of(mesh_shape)
    a1 = AXES[len(mesh_shape) - 1]
    x = wide(np.random.default_rng(95), (2 * mesh.size, 2 * mesh.size), -4, 5)
    X = dist.tensor(x.shape, S(("col",), (a1,)), mesh, data=x)
    f = jit(lambda v: op.softmax(v, axis=-1), backend=backend)
    got = eager(backend, f, X)
    names = re.findall(r'"tessera\.graph\.(\w+)"', f.inspect_ir("graph"))
    assert names == ["all_gather", "softmax"]
    assert_bits(got, _oracle(op.softmax, x))
    assert_bits(run(backend, lambda v: op.softmax(v, axis=-1), X), got)
