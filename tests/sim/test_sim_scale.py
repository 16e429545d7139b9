"""The simulated machine's own cost on many devices (SIM-TL-1, DESIGN §18): an op on a mesh of
n devices looks up no device name and scans no list of the machine's devices; the lookups a
program makes do not grow with its number of ops. Counted, never timed."""
import pytest

from tessera_ref import dist, op, sim
from tessera_ref.errors import SimError
from tessera_ref.sim.devices import DeviceNames, device_names, resolve_device


class _Counting(dict):
    """A name -> index map that counts its lookups."""

    lookups = 0

    def get(self, key, default=None):
        type(self).lookups += 1
        return super().get(key, default)

    def __getitem__(self, key):
        type(self).lookups += 1
        return super().__getitem__(key)

    def __contains__(self, key):
        type(self).lookups += 1
        return super().__contains__(key)


def _run(n: int, layers: int, monkeypatch) -> int:
    """Name lookups of ``layers`` tensor-parallel MLP layers (forward) on ``n`` devices; fails
    on any scan of the machine's names (``in`` or ``.index`` on the tuple)."""
    def scan(*args):
        raise AssertionError("a per-device scan of the machine's device names")

    monkeypatch.setattr(DeviceNames, "__contains__", scan)
    monkeypatch.setattr(DeviceNames, "index", scan)
    monkeypatch.setattr(DeviceNames, "count", scan)
    machine = sim.machine("H100", devices=n)
    machine.device_names.positions = _Counting(machine.device_names.positions)
    _Counting.lookups = 0
    S = dist.ShardSpec
    with sim.use(machine):
        mesh = dist.Mesh(axes=["dp", "tp"], devices=range(n), shape=(n // 8, 8))
        x = dist.tensor((n // 8 * 4, 64), S(("batch",), ("dp",)), mesh, dtype="bf16")
        for _ in range(layers):
            w1 = dist.tensor((64, 256), S(("col",), ("tp",)), mesh, dtype="bf16")
            w2 = dist.tensor((256, 64), S(("row",), ("tp",)), mesh, dtype="bf16")
            x = x + dist.all_reduce(op.matmul(op.gelu(op.matmul(x, w1)), w2), axis="tp")
    assert len(machine.timeline.events) == layers * 5 * n  # matmul, gelu, matmul, all_reduce, add
    # the program-order schedule keeps no state per value and device (only the overlapped one reads it)
    in_order = machine._schedule(False)
    assert not in_order._ready and not in_order._lane_end and len(machine._schedule(True)._ready) >= layers * 4 * n
    return _Counting.lookups


def test_name_lookups_do_not_grow_with_the_number_of_ops(monkeypatch):
    one, four = _run(64, 1, monkeypatch), _run(64, 4, monkeypatch)
    # each device name of the mesh looked up a few times (for its memory, compute, collective groups),
    # whatever the program's length
    assert one == four <= 4 * 64
    assert _run(256, 4, monkeypatch) <= 4 * 256


def test_device_names_find_each_name_by_its_position():
    names = device_names(3, ["a", "b", "c"])
    assert isinstance(names, DeviceNames) and names == ("a", "b", "c") and names.positions == {"a": 0, "b": 1, "c": 2}
    assert [resolve_device(d, names) for d in ("c", 0, 2)] == [2, 0, 2]
    for bad in ("d", 3, -1, True, 1.0):
        with pytest.raises(SimError, match="is not in this simulated machine"):
            resolve_device(bad, names)
    with pytest.raises(SimError, match="distinct"):
        device_names(2, ["a", "a"])


def test_memory_samples_are_held_as_columns_and_read_as_tuples():
    from tessera_ref.sim.timeline import MemorySamples
    samples = MemorySamples()
    samples.append((3, 0.5, 1024))
    samples.append((0, 1.25, 2**70))  # past 2^63 bytes: kept exactly, as Python ints
    assert len(samples) == 2 and list(samples) == [(3, 0.5, 1024), (0, 1.25, 2**70)]
    assert samples[-1] == (0, 1.25, 2**70) and samples[:1] == [(3, 0.5, 1024)]
    m = sim.machine("H100", devices=2)
    h = m.alloc("cuda:1", 100, "t")
    m.free(h)
    assert list(m.timeline.memory_samples) == [(1, 0.0, 100), (1, 0.0, 0)]
