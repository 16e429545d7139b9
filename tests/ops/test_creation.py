"""op.zeros / ones / full / arange (GRAPH-INIT-1) and their distributed forms
(MESH-TENSOR-INIT-1), float()/int() of 0-d tensors (MESH-TENSOR-SCALAR-1)."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, jit, op
from tessera_ref.errors import AbstractValueError, OpError, TraceError


def test_creation_values_and_types():
    assert op.zeros((2, 3)).type == tr.asarray(np.zeros((2, 3), np.float32)).type
    assert op.full(3, -2.5, "f16").data.tolist() == [-2.5] * 3
    assert op.arange(1, 10, 4, dtype="ui8").data.tolist() == [1, 5, 9]
    assert op.arange(0).shape == (0,)


def test_a_traced_full_is_one_scalar_constant_broadcast():
    f = jit(lambda x: x * op.full(x.shape, 2.0))
    assert f(tr.asarray(np.ones((64, 64), np.float32))).data.sum() == 2 * 64 * 64
    text = f.inspect_ir("graph", optimized=False)
    assert "tessera.graph.broadcast_to" in text and "tensor<f32>" in text


def test_dist_full_fills_blocks_without_the_global_tensor():
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(8)], axes=("dp", "tp"), shape=(2, 4))
    t = dist.full((6, 8), 3, dist.ShardSpec(("col",), ("tp",)), mesh, "i32")
    assert t.local.shape == (1, 4, 6, 2) and (t.numpy() == 3).all() and t.numpy().dtype == np.int32


def test_float_and_int_of_distributed_scalars():
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("dp", "tp"), shape=(2, 2))
    x = dist.tensor((4, 4), dist.ShardSpec(("row", "col"), ("dp", "tp")), mesh, data=np.full((4, 4), 0.75, np.float32))
    s = op.sum(x)
    assert s.layout.partial and float(s) == 12.0 and int(op.mean(x)) == 0
    with pytest.raises(AbstractValueError, match="float"):
        float(dist.zeros((), None, mesh, abstract=True))
    with pytest.raises(TraceError):
        jit(lambda v: op.full((2,), float(v)))(tr.asarray(np.float32(1)))


def test_arange_refuses_floats_and_zero_steps():
    with pytest.raises(OpError, match="integer"):
        op.arange(0, 1, 0.25)
    with pytest.raises(OpError, match="step 0"):
        op.arange(0, 3, 0)
