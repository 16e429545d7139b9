"""MESH-COLL-7: send/recv between sub-meshes, first in first out per (src, dst, tag), mailboxes."""
import contextlib
import io
import re
import threading

import numpy as np
import pytest

from tessera_ref import dist, jit, op
from tessera_ref.cli import main as cli_main
from tessera_ref.errors import CollectiveError
from tessera_conformance import assert_bits, clause, eager, not_applicable

from ._reference import AXES, mesh_of, wide

S = dist.ShardSpec


def _stages(mesh_shape):
    """The mesh and its first two sub-meshes along the last axis (pipeline stages)."""
    if len(mesh_shape) < 2:
        not_applicable("send/recv pairs sub-meshes of a mesh with two axes or more")
    mesh = mesh_of(mesh_shape)
    last = AXES[len(mesh_shape) - 1]
    return mesh, mesh.sub(**{last: 0}), mesh.sub(**{last: 1})


def _on(stage, seed, scale=1.0):
    first = stage.axes[0]
    g = wide(np.random.default_rng(seed), (2 * stage.axis_size(first), 3)) * np.float32(scale)
    return g, dist.tensor(g.shape, S(("row",), (first,)), stage, data=g)


@clause("MESH-COLL-7")
def test_device_i_sends_to_device_i(backend, mesh_shape):
    """``recv`` returns the tensor on ``dst``: same type, same local values, device by device."""
    _, s0, s1 = _stages(mesh_shape)
    g, a = _on(s0, 30)
    seen = {}

    def go():
        with dist.mailbox_scope():
            assert dist.send(a, s1) is None
            b = dist.recv(s0, s1)
        seen.update(mesh=b.mesh, type=b.type, shards=[b.shard(i) for i in range(s1.size)])
        return b

    assert_bits(eager(backend, go), g)
    assert seen["mesh"] == s1 and seen["type"] == a.type
    for i in range(s0.size):
        assert_bits(seen["shards"][i], a.shard(i), f"device {i}")


@clause("MESH-COLL-7")
def test_first_in_first_out_per_tag(backend, mesh_shape):
    """Sends are received in order per (src, dst, tag); tags are separate queues."""
    _, s0, s1 = _stages(mesh_shape)
    values = [_on(s0, 31 + k, scale=k + 1) for k in range(3)]

    def go():
        with dist.mailbox_scope():
            dist.send(values[0][1], s1, tag=1)
            dist.send(values[1][1], s1, tag=1)
            dist.send(values[2][1], s1, tag=2)
            return [dist.recv(s0, s1, tag=2), dist.recv(s0, s1, tag=1), dist.recv(s0, s1, tag=1)]

    got = eager(backend, go)
    assert_bits(got, [values[2][0], values[0][0], values[1][0]])


@clause("MESH-COLL-7")
def test_recv_without_send_and_check_pending(backend, mesh_shape):
    """A recv with no matching send fails at once; check_pending lists unmatched sends, then
    forgets them."""
    _, s0, s1 = _stages(mesh_shape)
    _, a = _on(s0, 34)

    def go():
        with dist.mailbox_scope():
            with pytest.raises(CollectiveError):
                dist.recv(s0, s1)
            dist.send(a, s1, tag=5)
            with pytest.raises(CollectiveError):
                dist.recv(s1, s0, tag=5)  # the other direction
            with pytest.raises(CollectiveError) as info:
                dist.check_pending()
            assert "tag 5" in str(info.value)
            dist.check_pending()  # forgotten
        return np.zeros(1, np.float32)

    eager(backend, go)


@clause("MESH-COLL-7")
def test_sub_meshes_must_match_and_be_disjoint(backend, mesh_shape):
    """Sending to the same devices or to a sub-mesh of another shape is an error."""
    mesh, s0, _ = _stages(mesh_shape)
    _, a = _on(s0, 35)
    for dst in (s0, mesh):
        with pytest.raises(CollectiveError):
            with dist.mailbox_scope():
                eager(backend, lambda: dist.send(a, dst))


@clause("MESH-COLL-7")
def test_a_scope_reports_its_unmatched_sends_and_keeps_to_itself(backend, mesh_shape):
    """Unmatched sends are a CollectiveError when the scope ends, naming source, destination,
    tag and the sending line; an outer send is not received inside; a raising block drops its
    sends and its own error propagates."""
    _, s0, s1 = _stages(mesh_shape)
    g, a = _on(s0, 36)

    def go():
        with dist.mailbox_scope():
            dist.send(a, s1)  # the outer scope's
            with pytest.raises(CollectiveError) as info:
                with dist.mailbox_scope():
                    with pytest.raises(CollectiveError):
                        dist.recv(s0, s1)  # not delivered into the inner scope
                    dist.send(a, s1, tag=3)
            text = str(info.value)
            assert f"from {s0.devices[0]}" in text and f"to {s1.devices[0]}" in text and "tag 3" in text
            assert "test_send_recv.py:" in text
            with pytest.raises(ZeroDivisionError):
                with dist.mailbox_scope():
                    dist.send(a, s1)
                    1 / 0
            return dist.recv(s0, s1)  # the outer send is still there

    assert_bits(eager(backend, go), g)


@clause("MESH-COLL-7")
def test_sends_stay_in_their_thread(backend, mesh_shape):
    """Outside every scope each thread has its own mailbox: another thread cannot receive."""
    _, s0, s1 = _stages(mesh_shape)
    g, a = _on(s0, 37)
    outcome = {}

    def other():
        try:
            eager(backend, lambda: dist.recv(s0, s1))
            outcome["other"] = "received"
        except CollectiveError:
            outcome["other"] = "no matching send"

    def go():
        with dist.mailbox_scope():
            dist.send(a, s1)
            t = threading.Thread(target=other)
            t.start()
            t.join()
            return dist.recv(s0, s1)

    assert_bits(eager(backend, go), g)
    assert outcome == {"other": "no matching send"}


@clause("MESH-COLL-7")
def test_a_traced_run_is_a_scope_of_its_own(backend, mesh_shape):
    """A traced sharded function runs in its own mailbox: an outer pending send is neither
    reported nor taken by it, and is received afterwards."""
    _, s0, s1 = _stages(mesh_shape)
    g, a = _on(s0, 38)
    f = jit(lambda v: op.exp(v), backend=backend)

    def go():
        with dist.mailbox_scope():
            dist.send(a, s1)
            f(a)
            return dist.recv(s0, s1)

    assert_bits(eager(backend, go), g)


@clause("MESH-COLL-7")
def test_a_script_run_is_a_scope(backend, mesh_shape, tmp_path):
    """``tessera-ref run FILE``: a send the script never receives is an error naming its line."""
    _stages(mesh_shape)
    script = tmp_path / "sends.py"
    script.write_text("import numpy as np\nfrom tessera import dist\n"
                      f"mesh = dist.Mesh({AXES[:len(mesh_shape)]!r}, range({int(np.prod(mesh_shape))}), "
                      f"{tuple(mesh_shape)!r})\n"
                      f"x = dist.tensor((2,), None, mesh.sub({AXES[len(mesh_shape) - 1]}=0), "
                      "data=np.ones(2, np.float32))\n"
                      f"dist.send(x, mesh.sub({AXES[len(mesh_shape) - 1]}=1))\n")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), dist.mailbox_scope():  # the command reports it as one line
        status = eager(backend, lambda: cli_main(["run", str(script)]))
    assert status == 1
    assert re.search(r"error: CollectiveError: unmatched sends: .*sends\.py:5", stderr.getvalue()), stderr.getvalue()
