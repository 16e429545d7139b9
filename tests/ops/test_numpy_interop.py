"""GRAPH-NUMPY-1: NumPy's reductions, ufuncs, dtype, len and DLPack on tensor values, and
NamedTuple / dataclass pytrees in grad and jit (AD-1, GRAPH-TRACE-1)."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist
from tessera_ref.errors import DTypeError, OpError

X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.5]], np.float32)


@pytest.mark.parametrize("fn, kwargs, want", [
    (np.sum, {}, 21.5), (np.mean, {"axis": 0}, [2.5, 3.5, 4.75]), (np.max, {"axis": 1}, [3.0, 6.5]),
    (np.min, {}, 1.0), (np.sum, {"axis": 1, "keepdims": True}, [[6.0], [15.5]]),
])
def test_numpy_reductions_run_the_op_and_return_a_tensor(fn, kwargs, want):
    got = fn(tr.asarray(X), **kwargs)
    assert isinstance(got, tr.Array)
    assert np.asarray(got).tolist() == want


def test_a_reduction_dtype_casts_first():
    got = np.sum(tr.asarray(X), dtype=np.float64)
    assert got.type.format.name == "f64" and float(got) == 21.5


@pytest.mark.parametrize("kwargs, words", [({"out": np.zeros(())}, "out="), ({"where": X > 2}, "where=")])
def test_out_and_numpy_only_arguments_are_op_errors_at_the_users_line(kwargs, words):
    with pytest.raises(OpError, match=words) as info:
        np.sum(tr.asarray(X), **kwargs)
    assert info.value.location.startswith(__file__)


def _mesh_tensor():
    mesh = dist.Mesh(("tp",), range(2), (2,))
    return dist.tensor((4,), dist.ShardSpec(("row",), ("tp",)), mesh, "f32",
                       data=np.array([0.0, 1.0, 2.0, 3.0], np.float32))


def test_a_ufunc_with_an_op_keeps_a_disttensors_layout():
    d = _mesh_tensor()
    e = np.exp(d)
    assert isinstance(e, dist.DistTensor) and e.layout == d.layout
    assert np.asarray(e).tolist() == [float(np.float32(v)) for v in
                                      (1.0, 2.718281828459045, 7.38905609893065, 20.085536923187668)]
    assert isinstance(np.sum(d), dist.DistTensor)


def test_a_ufunc_without_an_op_is_refused_on_a_disttensor_and_computed_by_numpy_on_an_array():
    with pytest.raises(OpError, match="numpy.arctan on a DistTensor"):
        np.arctan(_mesh_tensor())
    got = np.arctan(tr.asarray(X))
    assert isinstance(got, np.ndarray) and got.dtype == np.float32


def test_a_ufunc_is_traced_inside_jit():
    g = tr.jit(lambda x: np.exp(x))
    g(X)
    assert '"tessera.graph.exp"' in g.inspect_ir("graph")


def test_disttensor_dtype_and_len_are_like_arrays():
    d = _mesh_tensor()
    assert d.dtype == np.float32 and len(d) == 4
    a = tr.asarray(X)
    assert a.dtype == np.float32 and len(a) == 2


def test_dlpack_for_native_formats_and_a_clear_error_otherwise():
    a = tr.asarray(X)
    assert np.from_dlpack(a).tolist() == X.tolist()
    with pytest.raises(DTypeError, match="bf16.*no DLPack type"):
        np.from_dlpack(a.astype("bf16"))


class Params(NamedTuple):
    w: object
    b: object


@dataclasses.dataclass(frozen=True)
class ParamsDC:
    w: object
    b: object


def _loss(p, x):
    y = x * p.w + p.b
    return (y * y).sum()


@pytest.mark.parametrize("kind", [Params, ParamsDC])
def test_namedtuple_and_dataclass_parameters_work_in_grad_and_jit(kind):
    x = np.array([0.0, 1.0, 2.0], np.float32)
    p = kind(np.full(3, 2.0, np.float32), np.ones(3, np.float32))
    g = tr.grad(_loss)(p, x)
    assert type(g) is kind
    # d/dw sum((x w + b)^2) = 2 (x w + b) x, d/db = 2 (x w + b); x w + b = [1, 3, 5]
    assert np.asarray(g.w).tolist() == [0.0, 6.0, 20.0] and np.asarray(g.b).tolist() == [2.0, 6.0, 10.0]
    assert float(tr.jit(_loss)(p, x)) == 35.0
