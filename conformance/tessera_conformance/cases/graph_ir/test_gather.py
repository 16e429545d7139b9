"""GRAPH-TAKE-1 and GRAPH-SCATTER-1: take copies entries bit for bit; scatter_add sums in
ascending source index in the accum format and rounds once. References: NumPy indexing and a
Python loop of IEEE additions."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError
from tessera_conformance import clause, oracle_only

from ._cases import check


def _table():
    t = np.random.default_rng(3).standard_normal((7, 5)).astype(np.float32)
    t[2, 1], t[4, 0] = -0.0, np.float32("nan")
    t[5, 3] = np.frombuffer(np.uint32(0x7FC0_1234).tobytes(), np.float32)[0]  # a NaN with a payload
    return t


@clause("GRAPH-TAKE-1")
@pytest.mark.parametrize("kind", [np.int32, np.int64, np.uint8])
def test_take_copies_entries_bit_for_bit(backend, kind):
    t = _table()
    ids = np.array([[6, 2, 2], [0, 5, 4]], kind)
    check(backend, lambda a, i: op.take(a, i), (t, ids), t[ids.astype(np.int64)], what="axis 0")
    check(backend, lambda a, i: a[i], (t, ids), t[ids.astype(np.int64)], what="E[ids]")
    cols = np.array([4, 0, 4], kind)
    check(backend, lambda a, i: op.take(a, i, axis=1), (t, cols), t[:, cols.astype(np.int64)], what="axis 1")
    check(backend, lambda a, i: a[:, i], (t, cols), t[:, cols.astype(np.int64)], what="E[:, ids]")


@clause("GRAPH-TAKE-1")
@oracle_only('take checks its ids when it is called, before any backend runs')
def test_take_out_of_range_names_the_largest_id_and_the_size(backend):
    t = tr.asarray(_table())
    with pytest.raises(OpError, match=r"largest index is 9.*\[0, 7\)"):
        op.take(t, np.array([1, 9, 3], np.int32))
    with pytest.raises(OpError, match="index -1 is out of range"):
        op.take(t, np.array([1, -1], np.int64))
    with pytest.raises(DTypeError, match="integer tensor"):
        op.take(t, np.array([1.0, 2.0], np.float32))


def _ordered_sum(rows: list, accum, storage):
    """The first contribution, then one rounded addition per next one, in accum; one rounding into storage."""
    acc = accum(rows[0])
    for r in rows[1:]:
        acc = accum(acc + accum(r))
    return np.asarray(acc).astype(storage)


@clause("GRAPH-SCATTER-1")
def test_scatter_add_sums_in_ascending_source_index(backend):
    """Contributions whose f32 sum depends on the order: 1e8, 1, −1e8, 1 gives 1 in this order only."""
    u = np.array([[1e8], [5.0], [1.0], [-1e8], [1.0], [-0.0]], np.float32)
    ids = np.array([2, 0, 2, 2, 2, 4], np.int32)
    want = np.zeros((5, 1), np.float32)
    for r in range(5):
        rows = [u[j] for j in range(len(ids)) if ids[j] == r]
        if rows:
            want[r] = _ordered_sum(rows, np.float32, np.float32)
    assert want[2, 0] == 1.0 and np.signbit(want[4, 0]) and not np.signbit(want[1, 0])
    check(backend, lambda a, i: op.scatter_add(a, i, 5), (u, ids), want)


@clause("GRAPH-SCATTER-1")
def test_scatter_add_rounds_once_into_bf16(backend):
    """bf16 updates summed in f32, rounded once: not the bf16 running sum."""
    bf = ml_dtypes.bfloat16
    u = np.array([1.0, 2.0 ** -9, 2.0 ** -9, 2.0 ** -9], bf).reshape(4, 1)
    ids = np.zeros((4,), np.int64)
    want = _ordered_sum([np.float32(v) for v in u[:, 0]], np.float32, bf).reshape(1, 1)
    assert want[0, 0] != bf(1.0)  # the bf16 running sum would stay at 1.0
    check(backend, lambda a, i: op.scatter_add(a, i, 1), (u, ids), want)


@clause("GRAPH-SCATTER-1")
def test_scatter_add_axis_and_errors(backend):
    u = np.random.default_rng(4).standard_normal((3, 2, 2)).astype(np.float32)
    ids = np.array([[1, 1], [0, 3]], np.uint8)
    want = np.zeros((3, 4), np.float32)
    for a in range(3):
        for j, r in enumerate(ids.reshape(-1)):
            want[a, r] = np.float32(want[a, r] + u[a].reshape(-1)[j])
    check(backend, lambda x, i: op.scatter_add(x, i, 4, axis=1), (u, ids), want)
    with pytest.raises(OpError, match="largest index is 3"):
        op.scatter_add(tr.asarray(u), ids, 3, axis=1)
