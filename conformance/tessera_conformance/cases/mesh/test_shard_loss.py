"""MESH-SHARD-CE-1: cross_entropy and log_softmax over a split class axis all-reduce row
vectors only (the row max, the row sum of exp, the picked logit) — never the logits — and give
the unsharded values within the reordering of the sums."""
import re

import numpy as np

from tessera_ref import dist, grad, jit, op
from tessera_ref.autodiff import communication_plan
from tessera_conformance import assert_close, clause, eager

from ._reference import AXES, largest_axis, mesh_of

S = dist.ShardSpec


def _problem(mesh_shape):
    mesh, big = mesh_of(mesh_shape), largest_axis(mesh_shape)
    rows = next((a for a, n in zip(AXES, mesh_shape) if a != big and n > 1), None)
    v, b = 5 * mesh.axis_size(big), 2 * (mesh.axis_size(rows) if rows else 1)
    x = (np.random.default_rng(21).standard_normal((b, v)) * 3).astype(np.float32)
    labels = np.random.default_rng(22).integers(0, v, b).astype(np.int32)
    X = dist.tensor(x.shape, S((0, 1), (rows, big)) if rows else S((1,), (big,)), mesh, data=x)
    Y = dist.tensor(labels.shape, S((0,), (rows,)) if rows else None, mesh, data=labels)
    return mesh, big, x, labels, X, Y


@clause("MESH-SHARD-CE-1")
def test_vocab_parallel_cross_entropy_all_reduces_row_statistics_only(backend, mesh_shape):
    mesh, big, x, labels, X, Y = _problem(mesh_shape)
    facts = {}

    def go():
        f, g = jit(lambda a, t: op.cross_entropy(a, t)), grad(lambda a, t: op.cross_entropy(a, t))
        loss = f(X, Y)
        facts.update(text=f.inspect_ir("graph"), gx=g(X, Y), plan=communication_plan(g))
        return loss
    loss = eager(backend, go)
    text, gx = facts["text"], facts["gx"]
    moved = re.findall(r'"tessera\.graph\.(all_\w+|reduce_scatter|all_to_all)"\(%\d+\) \{axis = \["(\w+)"\], '
                       r'op = "(\w+)"\} : \(tensor<([^,>]+)', text)
    assert [(k, a, o) for k, a, o, _ in moved] == [("all_reduce", big, "max"), ("all_reduce", big, "sum"),
                                                   ("all_reduce", big, "sum")], text
    assert all(str(x.shape[1]) not in t.split("x") for *_, t in moved)  # no tensor with the class axis
    assert "all_gather" not in text
    ref = op.cross_entropy(x, labels)
    assert_close(loss, np.asarray(ref), rel=1e-6)
    assert gx.layout == X.layout
    for c in facts["plan"].collectives:
        assert x.shape[1] not in c.type.shape, c  # the backward never moves logits either


@clause("MESH-SHARD-CE-1")
def test_vocab_parallel_log_softmax_keeps_the_split(backend, mesh_shape):
    mesh, big, x, labels, X, Y = _problem(mesh_shape)
    facts = {}

    def go():
        f = jit(lambda a: op.log_softmax(a))
        y = f(X)
        facts.update(text=f.inspect_ir("graph"), dims=y.layout.dims)
        return y
    y = eager(backend, go)
    assert facts["dims"] == X.layout.dims and "all_gather" not in facts["text"]
    assert_close(y, np.asarray(op.log_softmax(x)), rel=1e-6)
