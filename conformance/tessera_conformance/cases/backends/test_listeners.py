"""BACKEND-EVENT-1: each collective, transfer and sharded computation is told to the listeners
— the machine in use and the objects of ``dist.listen`` — except inside ``sim.paused()``."""
import threading

import numpy as np

from tessera_ref import dist, op, sim
from tessera_conformance import clause, eager

S = dist.ShardSpec
MESH = dist.Mesh(("dp", "tp", "pp"), range(12), (2, 3, 2))


class Ear:
    """A listener: notes what it is told."""

    def __init__(self):
        self.heard = []

    def record_collective(self, kind, groups, nbytes, axis=None):
        self.heard.append(("collective", kind, tuple(tuple(g) for g in groups), nbytes, axis))

    def record_transfer(self, src, dst, nbytes):
        self.heard.append(("transfer", tuple(src), tuple(dst), nbytes))

    def record_compute(self, devices, name, cost, fmt, location=None):
        self.heard.append(("compute", tuple(devices), name, tuple(cost), fmt))


def _program():
    """A K-split matmul, its all_reduce over tp, a send between the pp stages."""
    a = dist.tensor((4, 48), S(("col",), ("tp",)), MESH, data=np.ones((4, 48), np.float32))
    b = dist.tensor((48, 2), S(("row",), ("tp",)), MESH, data=np.ones((48, 2), np.float32))
    y = dist.all_reduce(op.matmul(a, b), "tp")
    s0, s1 = MESH.sub(pp=0), MESH.sub(pp=1)
    with dist.mailbox_scope():
        dist.send(dist.tensor((4, 3), None, s0, data=np.ones((4, 3), np.float32)), s1)
        dist.recv(s0, s1)
    return y


def _expected():
    names = MESH.devices
    tp_groups = tuple(tuple(f"cuda:{(d * 3 + t) * 2 + p}" for t in range(3)) for d in range(2) for p in range(2))
    return [("compute", names, "matmul", (2 * 4 * 2 * 16, (4 * 16 + 16 * 2 + 4 * 2) * 4), "f32"),
            ("collective", "all_reduce", tp_groups, 4 * 2 * 4, "tp"),
            ("transfer", tuple(f"cuda:{2 * k}" for k in range(6)), tuple(f"cuda:{2 * k + 1}" for k in range(6)),
             4 * 3 * 4)]


@clause("BACKEND-EVENT-1")
def test_listeners_hear_each_collective_transfer_and_computation(backend):
    """In a ``dist.listen`` block: the matmul (per-device cost), the all_reduce (its groups by
    device name, per-rank bytes, axis) and the send (paired devices, bytes), in order."""
    ear = Ear()

    def go():
        with dist.listen(ear):
            return _program()

    eager(backend, go)
    assert sorted(ear.heard, key=str) == sorted(_expected(), key=str)
    assert [h[0] for h in ear.heard] == ["compute", "collective", "transfer"]


@clause("BACKEND-EVENT-1")
def test_the_machine_is_one_listener_among_others_and_paused_silences_all(backend):
    """With a machine in use and a listener both hear; inside ``sim.paused()`` neither does;
    outside the block and in another thread nothing is told to the listener."""
    ear, machine, other = Ear(), sim.Machine("H100", 12), Ear()

    def go():
        with sim.use(machine), dist.listen(ear):
            _program()
            with sim.paused():
                _program()
        _program()
        t = threading.Thread(target=lambda: dist.all_gather(
            dist.tensor((6, 2), S(("row",), ("tp",)), MESH, data=np.ones((6, 2), np.float32)), "tp"))
        with dist.listen(other):
            t.start()
            t.join()
        return np.zeros(1, np.float32)

    eager(backend, go)
    assert len(ear.heard) == 3 and other.heard == []
    kinds = {e.name.split("[")[0] for e in machine.timeline.events}
    assert kinds == {"matmul", "all_reduce", "send/recv"}
    assert len([e for e in machine.timeline.events if e.name == "matmul"]) == 12
