"""Rank 0's few bytes to every rank, over TCP at ``MASTER_ADDR`` (DESIGN §14, §19;
docs/spec/mesh.md MESH-MP-7, MESH-MP-9): how the NCCL communicator's unique id reaches the ranks
of a program that torchrun started, where no MPI world exists to broadcast it. It moves one
small payload once and is no transport.

Rank 0 listens on the addresses ``MASTER_ADDR`` resolves to, and no others (loopback when it
names this machine's loopback); every other rank connects — retrying while rank 0 is not
listening yet — and reads the payload. Every peer proves it holds the job's token
(``TESSERA_JOB_TOKEN``, which ``tessera-ref launch`` generates), and so does rank 0, without
sending it: with ``k = HMAC-SHA256(token, "tessera rendezvous" | r | nonce_r | nonce_0)``,

- rank r → rank 0: ``MAGIC``, r (4 bytes), ``nonce_r`` (16 random bytes);
- rank 0 → rank r: ``MAGIC``, ``nonce_0`` (16 random bytes), ``HMAC(k, "rank 0")``;
- rank r → rank 0: ``HMAC(k, "rank r")``;
- rank 0 → rank r: the payload's length (4 bytes, at most :data:`MAX_PAYLOAD`), the payload
  XOR a key stream (``HMAC(k, "stream" | i)``, block ``i``), ``HMAC(k, "payload" | length |
  ciphertext)``.

Rank 0 serves connections concurrently, each within :data:`CONNECTION_SECONDS` and at most
:data:`MAX_CONNECTIONS` at once, so an idle or slow client never holds up the others; one that
fails the proof is turned away (and named if ranks are still missing at the end). A peer that
holds the token but claims a rank the world lacks, or a rank already served, is a
:class:`~tessera_ref.errors.CollectiveError` naming it, as is, on a rank, a reply that is not the
protocol's, lacks the proof, claims a length other than the one expected, is sealed wrongly or
arrives too slowly. Every wait is bounded by ``TESSERA_COMM_TIMEOUT`` seconds: a rank 0 that
never serves, or ranks that never come, are a :class:`~tessera_ref.errors.PeerError` naming the
address and the ranks.

The port is ``TESSERA_RENDEZVOUS_PORT`` when set; else ``MASTER_PORT + 1`` when torchrun's
agent holds ``MASTER_PORT`` for its own store (``TORCHELASTIC_USE_AGENT_STORE=True``); else
``MASTER_PORT``.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import os
import queue
import selectors
import socket
import struct
import threading
import time

from ...errors import BackendError, CollectiveError, PeerError
from ...settings import port as port_setting

__all__ = ["share_bytes", "address", "job_token", "MAX_PAYLOAD", "CONNECTION_SECONDS", "MAX_CONNECTIONS",
           "TOKEN_VARIABLE"]

MAGIC = b"TSR1"        # both ends' first bytes: a stranger on the port is not taken for a rank
MAX_PAYLOAD = 4096     # the most bytes a payload may have (NCCL's unique id: 256 as int16)
CONNECTION_SECONDS = 5.0
MAX_CONNECTIONS = 64
TOKEN_VARIABLE = "TESSERA_JOB_TOKEN"
_MIN_TOKEN = 16
_NONCE = 16
_MAC = 32
_FIX = ("start every rank with the same MASTER_ADDR, MASTER_PORT and TESSERA_JOB_TOKEN (torchrun sets the first two), "
        "check rank 0's output, and set TESSERA_COMM_TIMEOUT for a longer wait")
_WORLD_FIX = "start every rank with the same WORLD_SIZE and its own RANK in 0..WORLD_SIZE-1 (torchrun sets them)"


def address(env=None) -> tuple:
    """``(host, port)`` of the rendezvous (module docstring)."""
    env = os.environ if env is None else env
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in env]
    if missing:
        raise BackendError(f"{' and '.join(missing)} not set: the ranks cannot meet to share the NCCL unique id "
                           f"(no MPI world to broadcast it either)",
                           fix="start the ranks with torchrun (it sets MASTER_ADDR and MASTER_PORT), "
                               "tessera-ref launch, or mpiexec")
    name = "TESSERA_RENDEZVOUS_PORT" if env.get("TESSERA_RENDEZVOUS_PORT") else "MASTER_PORT"
    port = port_setting(name, env[name])
    if name == "MASTER_PORT" and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        if port == 65535:
            raise BackendError("MASTER_PORT=65535 is torchrun's store, and the rendezvous's port, MASTER_PORT + 1, "
                               "does not exist", fix="set TESSERA_RENDEZVOUS_PORT to a free port")
        port += 1
    return env["MASTER_ADDR"], port


def job_token(env=None) -> bytes:
    """The job's secret, ``TESSERA_JOB_TOKEN`` (at least 16 characters), as bytes."""
    env = os.environ if env is None else env
    text = env.get(TOKEN_VARIABLE, "")
    if len(text) < _MIN_TOKEN:
        state = "not set" if not text else f"only {len(text)} characters long"
        raise BackendError(f"{TOKEN_VARIABLE} is {state}: the ranks meet at MASTER_ADDR to share the NCCL unique id, "
                           f"and only processes that prove they hold the job's secret token may join (any user of "
                           f"the machine or the network could otherwise take the id or feed the ranks a false one)",
                           fix=f"set {TOKEN_VARIABLE} to one random secret of at least {_MIN_TOKEN} characters on "
                               f"every rank, e.g. export {TOKEN_VARIABLE}=$(python -c 'import secrets; "
                               f"print(secrets.token_hex(16))') before torchrun (tessera-ref launch sets it itself)")
    return text.encode()


def share_bytes(payload: bytes | None, rank: int, size: int, timeout: float, env=None,
                length: int | None = None) -> bytes:
    """Rank 0's ``payload`` on every one of ``size`` ranks (``payload`` is ignored elsewhere);
    ``length``, when given, is the only payload length a rank accepts."""
    if size == 1:
        return payload
    host, port = address(env)
    token = job_token(env)
    if rank == 0:
        if len(payload) > MAX_PAYLOAD:
            raise BackendError(f"a rendezvous payload of {len(payload)} bytes: at most {MAX_PAYLOAD} travel this way",
                               fix="send large data over the transport, not the rendezvous")
        _Server(payload, token, host, port, size, timeout).run()
        return payload
    return _fetch(rank, token, host, port, timeout, length)


# -- the protocol ---------------------------------------------------------------------------------

def _key(token: bytes, rank: int, nonce_r: bytes, nonce_0: bytes) -> bytes:
    return hmac.new(token, b"tessera rendezvous" + struct.pack("!I", rank) + nonce_r + nonce_0,
                    hashlib.sha256).digest()


def _mac(key: bytes, text: bytes) -> bytes:
    return hmac.new(key, text, hashlib.sha256).digest()


def _stream(key: bytes, data: bytes) -> bytes:
    """``data`` XOR the key stream of ``key`` (its own inverse)."""
    pad = b"".join(_mac(key, b"stream" + struct.pack("!I", i)) for i in range(-(-len(data) // _MAC)))
    return bytes(a ^ b for a, b in zip(data, pad))


def _sealed(key: bytes, payload: bytes) -> bytes:
    head = struct.pack("!I", len(payload))
    body = _stream(key, payload)
    return head + body + _mac(key, b"payload" + head + body)


class _Short(Exception):
    """A connection that closed, failed or stalled before ``want`` bytes came (``got`` did)."""

    def __init__(self, got: int, want: int, why: str):
        super().__init__(f"sent {got} of {want} bytes, then {why}")
        self.got = got


def _recv(conn: socket.socket, want: int, until: float) -> bytes:
    """Exactly ``want`` bytes from ``conn`` by the time ``until`` (``time.monotonic``)."""
    data = b""
    while len(data) < want:
        left = until - time.monotonic()
        if left <= 0:
            raise _Short(len(data), want, f"stalled past the connection's deadline ({CONNECTION_SECONDS:g} s a "
                                          f"connection, TESSERA_COMM_TIMEOUT in all)")
        conn.settimeout(left)
        try:
            chunk = conn.recv(want - len(data))
        except socket.timeout:
            continue
        except OSError as exc:
            raise _Short(len(data), want, f"the connection failed ({exc.strerror or exc})") from None
        if not chunk:
            raise _Short(len(data), want, "closed the connection")
        data += chunk
    return data


def _send(conn: socket.socket, data: bytes, until: float) -> None:
    conn.settimeout(max(0.001, until - time.monotonic()))
    conn.sendall(data)


def _peer_name(conn: socket.socket) -> str:
    try:
        host, port = conn.getpeername()[:2]
    except OSError:
        return "an unknown address"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- rank 0 ----------------------------------------------------------------------------------------

def _listen(host: str, port: int) -> list:
    """Listening sockets on every address ``host`` resolves to (an address this machine lacks
    is skipped; at least one must be its own)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BackendError(f"rank 0 cannot resolve MASTER_ADDR={host!r} to listen for the other ranks ({exc})",
                           fix="set MASTER_ADDR to rank 0's host name or address") from None
    listeners, problems = [], []
    for family, sockaddr in dict.fromkeys((i[0], i[4]) for i in infos):
        try:
            listeners.append(socket.create_server(sockaddr, family=family))
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                for s in listeners:
                    s.close()
                raise BackendError(f"rank 0 cannot listen at {sockaddr[0]}:{port} (MASTER_ADDR={host}) for the other "
                                   f"ranks ({exc.strerror or exc})",
                                   fix="pick a free MASTER_PORT, or set TESSERA_RENDEZVOUS_PORT to one") from None
            problems.append(sockaddr[0])
    if not listeners:
        raise BackendError(f"rank 0 cannot listen at MASTER_ADDR={host} (port {port}): its address(es) "
                           f"{', '.join(problems)} are not this machine's",
                           fix="run rank 0 on the machine MASTER_ADDR names, or set MASTER_ADDR to this machine's "
                               "address (torchrun: --master-addr)")
    return listeners


class _Server:
    """Rank 0's side: serves ``payload`` to ranks 1 … size-1 (module docstring)."""

    def __init__(self, payload: bytes, token: bytes, host: str, port: int, size: int, timeout: float):
        self.payload, self.token, self.host, self.port, self.size, self.timeout = \
            payload, token, host, port, size, timeout
        self.deadline = time.monotonic() + timeout
        self.results: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.claimed: dict = {}     # rank -> the peer that proved it holds the token and claimed it
        self.active = 0

    def run(self) -> None:
        listeners = _listen(self.host, self.port)
        served, refused = set(), []
        with selectors.DefaultSelector() as sel:
            for s in listeners:
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ)
            try:
                while len(served) < self.size - 1:
                    while not self.results.empty():
                        kind, *what = self.results.get()
                        if kind == "served":
                            served.add(what[0])
                        elif kind == "refused":
                            refused.append(what)
                        else:
                            raise CollectiveError(what[0], fix=_WORLD_FIX)
                    left = self.deadline - time.monotonic()
                    if left <= 0:
                        raise self._missing(sorted(set(range(1, self.size)) - served), refused)
                    for key, _ in sel.select(timeout=min(left, 0.05)):
                        self._accept(key.fileobj)
            finally:
                for s in listeners:
                    s.close()

    def _missing(self, waiting: list, refused: list) -> PeerError:
        turned = "".join(f"; turned away {peer} ({why})" for peer, why in refused[:4])
        more = f" and {len(refused) - 4} more" if len(refused) > 4 else ""
        return PeerError(f"rank 0: rank(s) {waiting} did not come for the NCCL unique id at {self.host}:{self.port} "
                         f"in {self.timeout:g} s — they died, did not start, or look elsewhere{turned}{more}",
                         fix=_FIX)

    def _accept(self, listener) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:   # gone before it was taken, or no file descriptor left: the rank tries again
            return
        with self.lock:
            busy = self.active >= MAX_CONNECTIONS
            self.active += not busy
        if busy:
            self.results.put(("refused", _peer_name(conn), f"more than {MAX_CONNECTIONS} connections at once"))
            conn.close()
            return
        threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        peer = _peer_name(conn)
        try:
            with conn:
                self._handshake(conn, peer, min(self.deadline, time.monotonic() + CONNECTION_SECONDS))
        except _Short as short:
            self.results.put(("refused", peer, str(short)))
        except OSError as exc:
            self.results.put(("refused", peer, f"the connection failed ({exc.strerror or exc})"))
        finally:
            with self.lock:
                self.active -= 1

    def _handshake(self, conn: socket.socket, peer: str, until: float) -> None:
        hello = _recv(conn, len(MAGIC) + 4 + _NONCE, until)
        if hello[:4] != MAGIC:
            self.results.put(("refused", peer, "not a rank of a tessera rendezvous"))
            return
        rank = struct.unpack("!I", hello[4:8])[0]
        nonce_0 = os.urandom(_NONCE)
        key = _key(self.token, rank, hello[8:], nonce_0)
        _send(conn, MAGIC + nonce_0 + _mac(key, b"rank 0"), until)
        try:
            proof = _recv(conn, _MAC, until)
        except _Short as short:
            self.results.put(("refused", peer, f"{short}, instead of proving it holds this job's token"))
            return
        if not hmac.compare_digest(proof, _mac(key, b"rank %d" % rank)):
            self.results.put(("refused", peer, "it does not hold this job's TESSERA_JOB_TOKEN"))
            return
        if not 1 <= rank < self.size:
            self.results.put(("fatal", f"rank 0: the process at {peer} holds this job's token but claims rank {rank}, "
                                       f"which a world of {self.size} ranks (WORLD_SIZE) does not have"))
            return
        with self.lock:
            first = self.claimed.setdefault(rank, peer)
        if first != peer:
            self.results.put(("fatal", f"rank 0: two processes claim rank {rank} for the NCCL unique id: {first} and "
                                       f"{peer}"))
            return
        _send(conn, _sealed(key, self.payload), until)
        self.results.put(("served", rank))


# -- the other ranks -------------------------------------------------------------------------------

class _Again(Exception):
    """Rank 0 closed or reset the connection before its first byte: not listening yet, or done."""


def _fetch(rank: int, token: bytes, host: str, port: int, timeout: float, length: int | None) -> bytes:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            conn = socket.create_connection((host, port), timeout=max(0.05, min(1.0, deadline - time.monotonic())))
        except OSError as exc:   # rank 0 not listening yet: try again
            last = exc.strerror or exc
            time.sleep(0.05)
            continue
        with conn:
            try:
                return _ask(conn, rank, token, host, port, min(deadline, time.monotonic() + CONNECTION_SECONDS),
                            length)
            except _Again as again:
                last = again
                time.sleep(0.05)
    raise PeerError(f"rank {rank}: rank 0 did not serve the NCCL unique id at MASTER_ADDR:MASTER_PORT = "
                    f"{host}:{port} in {timeout:g} s ({last}) — it died, did not start, or listens elsewhere",
                    fix=_FIX)


def _ask(conn: socket.socket, rank: int, token: bytes, host: str, port: int, until: float,
         length: int | None) -> bytes:
    """One try at the payload over ``conn`` (module docstring)."""
    peer = _peer_name(conn)
    where = f"rank {rank}: the process at MASTER_ADDR:port = {host}:{port}" + (
        f" ({peer})" if peer != f"{host}:{port}" else "")

    def wrong(what: str) -> CollectiveError:
        return CollectiveError(f"{where} {what}", fix=_FIX)

    nonce_r = os.urandom(_NONCE)
    try:
        _send(conn, MAGIC + struct.pack("!I", rank) + nonce_r, until)
        head = _recv(conn, len(MAGIC) + _NONCE + _MAC, until)
    except _Short as short:
        if short.got == 0 and time.monotonic() < until:
            raise _Again(f"{_peer_name(conn)} {short}") from None
        raise wrong(f"{short}: not a tessera rendezvous's rank 0, or a stalled one") from None
    except OSError as exc:
        raise _Again(f"{_peer_name(conn)}: {exc.strerror or exc}") from None
    if head[:4] != MAGIC:
        raise wrong(f"is not a tessera rendezvous's rank 0 (its first bytes are {head[:4]!r})")
    key = _key(token, rank, nonce_r, head[4:4 + _NONCE])
    if not hmac.compare_digest(head[4 + _NONCE:], _mac(key, b"rank 0")):
        raise wrong("does not prove it holds this job's TESSERA_JOB_TOKEN: another job's rank 0, a rank 0 given "
                    "another token, or a stranger on the port")
    try:
        _send(conn, _mac(key, b"rank %d" % rank), until)
        size = struct.unpack("!I", _recv(conn, 4, until))[0]
        if size > MAX_PAYLOAD or (length is not None and size != length):
            want = f"exactly {length}" if length is not None else f"at most {MAX_PAYLOAD}"
            raise wrong(f"claims a payload of {size} bytes, where {want} are expected")
        body = _recv(conn, size + _MAC, until)
    except (_Short, OSError) as exc:
        raise wrong(f"proved it holds the token but then {exc}") from None
    if not hmac.compare_digest(body[size:], _mac(key, b"payload" + struct.pack("!I", size) + body[:size])):
        raise wrong("sent a payload whose seal does not match: it was altered on the way")
    return _stream(key, body[:size])
