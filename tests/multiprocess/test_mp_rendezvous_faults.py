"""The NCCL unique id's rendezvous under faults and attacks (MESH-MP-9), ranks being threads of
this process and the attackers sockets of the test: an idle or dripping connection holds up
nobody; a wrong token, a made-up or duplicate rank, a stranger on the port, a short or huge
claimed length — each is turned away or is a named error within its time limit; rank 0
listens on MASTER_ADDR's address only; and the protocol is the documented one (a client written
here from the module docstring with hmac/hashlib gets the payload)."""
from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import sys
import threading
import time

import numpy as np
import pytest

from tessera_ref.backends.cuda import rendezvous
from tessera_ref.backends.cuda.nccl import _shared_unique_id
from tessera_ref.backends.cuda.rendezvous import share_bytes
from tessera_ref.cli.launch import _free_port
from tessera_ref.dist.world import World
from tessera_ref.errors import BackendError, CollectiveError, PeerError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="rank 0's socket is seen in /proc")

TOKEN = "0123456789abcdef0123456789abcdef"
PAYLOAD = os.urandom(256)


def _env(port: int, token: str = TOKEN) -> dict:
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TESSERA_JOB_TOKEN": token}


class Rank(threading.Thread):
    """``share_bytes`` as rank ``rank`` of ``size`` (``result``: its bytes or its exception, and
    ``took``: the seconds it took)."""

    def __init__(self, rank: int, size: int, wait: float, env: dict, length=None):
        super().__init__(daemon=True)
        self.args = (PAYLOAD if rank == 0 else None, rank, size, wait, env)
        self.length, self.result, self.took = length, None, None

    def start(self) -> "Rank":
        super().start()
        return self

    def run(self):
        start = time.monotonic()
        try:
            self.result = share_bytes(*self.args, length=self.length)
        except Exception as exc:  # the test looks at it
            self.result = exc
        self.took = time.monotonic() - start

    def outcome(self, limit: float = 30):
        self.join(limit)
        assert not self.is_alive(), "a rank hung"
        return self.result


def _listening(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` (Linux's /proc/net/tcp: state 0A)."""
    with open("/proc/net/tcp") as f:
        return any(line.split()[1] == f"0100007F:{port:04X}" and line.split()[3] == "0A" for line in f.readlines()[1:])


def _rank_0(size: int, wait: float, env: dict) -> Rank:
    rank0 = Rank(0, size, wait, env).start()
    deadline = time.monotonic() + 10
    while not _listening(int(env["MASTER_PORT"])):
        assert time.monotonic() < deadline, "rank 0 did not listen"
        time.sleep(0.01)
    return rank0


def _recv(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        assert chunk, "closed early"
        data += chunk
    return data


def _squatter(behaviour) -> tuple:
    """A stranger listening on a free port, answering one connection with ``behaviour(conn)``."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        with server:
            conn, _ = server.accept()
            with conn:
                try:
                    behaviour(conn)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def _false_rank_0(claim: int, body: bytes, token: str = TOKEN):
    """A rank 0 that holds the token (proves it, as a misbehaving or compromised rank 0 would)
    and then claims ``claim`` bytes and sends ``body``."""
    def behaviour(conn):
        hello = _recv(conn, 24)
        nonce_0 = os.urandom(16)
        key = rendezvous._key(token.encode(), struct.unpack("!I", hello[4:8])[0], hello[8:], nonce_0)
        conn.sendall(b"TSR1" + nonce_0 + rendezvous._mac(key, b"rank 0"))
        _recv(conn, 32)
        conn.sendall(struct.pack("!I", claim) + body)
        time.sleep(3)
    return behaviour


def test_an_idle_connection_holds_up_nobody():
    """The idle client is served concurrently: with one connection at a time, rank 1 would wait
    out its 5 s per connection, past the 3 s the whole rendezvous has."""
    port = _free_port()
    rank0 = _rank_0(2, 3, _env(port))
    with socket.create_connection(("127.0.0.1", port)):   # connects and says nothing
        rank1 = Rank(1, 2, 3, _env(port)).start()
        assert rank1.outcome() == PAYLOAD and rank0.outcome() == PAYLOAD


def test_a_wrong_token_is_refused_on_both_sides_and_the_true_rank_is_served():
    port = _free_port()
    rank0 = _rank_0(2, 4, _env(port))
    stranger = Rank(1, 2, 4, _env(port, token="not the job's token, but long")).start()
    error = stranger.outcome()
    assert isinstance(error, CollectiveError) and stranger.took < 3
    assert f"rank 1: the process at MASTER_ADDR:port = 127.0.0.1:{port} does not prove it holds this job's " \
           f"TESSERA_JOB_TOKEN" in error.what
    rank1 = Rank(1, 2, 4, _env(port)).start()
    assert rank1.outcome() == PAYLOAD and rank0.outcome() == PAYLOAD


def test_strangers_are_turned_away_and_named_when_ranks_are_missing():
    port = _free_port()
    rank0 = _rank_0(2, 2, _env(port))
    with socket.create_connection(("127.0.0.1", port)) as c:   # a hello with a made-up rank, no proof
        c.sendall(b"TSR1" + struct.pack("!I", 1) + os.urandom(16))
        _recv(c, 52)
        c.sendall(os.urandom(32))
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    error = rank0.outcome()
    assert isinstance(error, PeerError) and rank0.took < 10
    assert error.what.startswith(f"rank 0: rank(s) [1] did not come for the NCCL unique id at 127.0.0.1:{port} in 2 s")
    assert "(it does not hold this job's TESSERA_JOB_TOKEN)" in error.what
    assert "(not a rank of a tessera rendezvous)" in error.what


@pytest.mark.parametrize("ranks, words", [
    ((7,), "holds this job's token but claims rank 7, which a world of 3 ranks (WORLD_SIZE) does not have"),
    ((0,), "holds this job's token but claims rank 0, which a world of 3 ranks (WORLD_SIZE) does not have"),
    ((1, 1), "two processes claim rank 1 for the NCCL unique id: 127.0.0.1:"),
])
def test_a_made_up_or_duplicate_rank_with_the_token_is_a_collective_error_naming_the_peer(ranks, words):
    port = _free_port()
    rank0 = _rank_0(3, 5, _env(port))
    for r in ranks:   # a rank's side of the exchange, whatever rank it claims (rank 0's included)
        try:
            rendezvous._fetch(r, TOKEN.encode(), "127.0.0.1", port, 5, None)
        except CollectiveError:
            pass   # rank 0 closed the connection on it
    error = rank0.outcome()
    assert isinstance(error, CollectiveError) and rank0.took < 5, error
    assert error.what.startswith("rank 0: ") and words in error.what


@pytest.mark.parametrize("behaviour, wait, words", [
    (lambda c: c.sendall(b"HTTP/1.1 400 Bad Request\r\n" * 3), 5,
     "is not a tessera rendezvous's rank 0 (its first bytes are b'HTTP')"),
    (lambda c: time.sleep(8), 2, "sent 0 of 52 bytes, then stalled past the connection's deadline"),
    (lambda c: [time.sleep(0.4) or c.sendall(b"T") for _ in range(20)], 2, "of 52 bytes, then stalled past"),
    (lambda c: (c.sendall(b"TSR1" + os.urandom(48)), time.sleep(3)), 5,
     "does not prove it holds this job's TESSERA_JOB_TOKEN"),
    (_false_rank_0(0xFFFFFFFF, b"x" * 64), 5, "claims a payload of 4294967295 bytes, where at most 4096 are expected"),
    (_false_rank_0(10, b"x" * 42), 5, "sent a payload whose seal does not match"),
    (_false_rank_0(300, b"x" * 10), 2, "proved it holds the token but then sent 10 of 332 bytes, then stalled"),
])
def test_a_squatter_on_the_port_is_a_collective_error_naming_it_within_the_time_limit(behaviour, wait, words):
    port = _squatter(behaviour)
    rank1 = Rank(1, 2, wait, _env(port)).start()
    error = rank1.outcome()
    assert isinstance(error, CollectiveError), error
    assert rank1.took < wait + 2
    assert error.what.startswith(f"rank 1: the process at MASTER_ADDR:port = 127.0.0.1:{port} ") and words in error.what


def test_a_short_nccl_id_is_a_collective_error_not_a_value_error(monkeypatch):
    """A rank 0 with the token that sends 10 bytes where the id has 256 (``nccl.py`` used to
    raise NumPy's ValueError), or 256 bytes that are not 128 C chars."""
    for key, value in _env(_squatter(_false_rank_0(10, b"x" * 42))).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(CollectiveError, match="claims a payload of 10 bytes, where exactly 256 are expected"):
        _shared_unique_id(None, World(1, 2), 5)
    bad = np.full(128, 1000, np.int16).tobytes()

    def sealed_bad(conn):
        hello = _recv(conn, 24)
        nonce_0 = os.urandom(16)
        key = rendezvous._key(TOKEN.encode(), 1, hello[8:], nonce_0)
        conn.sendall(b"TSR1" + nonce_0 + rendezvous._mac(key, b"rank 0"))
        _recv(conn, 32)
        conn.sendall(rendezvous._sealed(key, bad))
        time.sleep(2)

    port = _squatter(sealed_bad)
    monkeypatch.setenv("MASTER_PORT", str(port))
    with pytest.raises(CollectiveError, match=f"rank 1: rank 0 at 127.0.0.1:{port} sent an NCCL unique id that is "
                                              f"not 128 C chars"):
        _shared_unique_id(None, World(1, 2), 5)


@pytest.mark.parametrize("token, words", [("", "TESSERA_JOB_TOKEN is not set"),
                                          ("short", "TESSERA_JOB_TOKEN is only 5 characters long")])
@pytest.mark.parametrize("rank", [0, 1])
def test_no_rendezvous_without_a_job_token(rank, token, words):
    with pytest.raises(BackendError, match=words) as caught:
        share_bytes(PAYLOAD if rank == 0 else None, rank, 2, 1, _env(_free_port(), token=token))
    assert "export TESSERA_JOB_TOKEN=$(python -c 'import secrets" in caught.value.fix


def test_rank_0_listens_on_master_addrs_address_only():
    """127.0.0.2 is this machine's too (Linux routes 127/8 to loopback): a rank 0 listening on
    every address would answer there."""
    port = _free_port()
    rank0 = _rank_0(2, 4, _env(port))
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=2).close()
    rank1 = Rank(1, 2, 4, _env(port)).start()
    assert rank1.outcome() == PAYLOAD and rank0.outcome() == PAYLOAD


def test_a_master_addr_of_another_machine_is_refused_by_rank_0():
    error = Rank(0, 2, 2, dict(_env(_free_port()), MASTER_ADDR="192.0.2.1"))   # TEST-NET-1: nobody's
    error.run()
    assert isinstance(error.result, BackendError)
    assert "rank 0 cannot listen at MASTER_ADDR=192.0.2.1" in error.result.what and "are not this machine's" in \
        error.result.what


def test_the_protocol_is_the_documented_one():
    """A rank written here from the module docstring alone, with hmac and hashlib, gets rank 0's
    payload: the key, both proofs, the key stream and the seal are as documented."""
    port = _free_port()
    rank0 = _rank_0(2, 5, _env(port))

    def mac(key, text):
        return hmac.new(key, text, hashlib.sha256).digest()

    with socket.create_connection(("127.0.0.1", port)) as c:
        nonce_r = os.urandom(16)
        c.sendall(b"TSR1" + (1).to_bytes(4, "big") + nonce_r)
        head = _recv(c, 52)
        assert head[:4] == b"TSR1"
        key = mac(TOKEN.encode(), b"tessera rendezvous" + (1).to_bytes(4, "big") + nonce_r + head[4:20])
        assert head[20:] == mac(key, b"rank 0")
        c.sendall(mac(key, b"rank 1"))
        n = int.from_bytes(_recv(c, 4), "big")
        body = _recv(c, n + 32)
    assert body[n:] == mac(key, b"payload" + n.to_bytes(4, "big") + body[:n])
    stream = b"".join(mac(key, b"stream" + i.to_bytes(4, "big")) for i in range(n // 32 + 1))
    assert bytes(a ^ b for a, b in zip(body[:n], stream)) == PAYLOAD
    assert rank0.outcome() == PAYLOAD
