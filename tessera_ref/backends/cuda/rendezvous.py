"""Rank 0's few bytes to every rank, over TCP at ``MASTER_ADDR:MASTER_PORT`` (DESIGN §14;
docs/spec/mesh.md MESH-MP-7): how the NCCL communicator's unique id reaches the ranks of a
program that torchrun started, where no MPI world exists to broadcast it. It moves one small
payload once and is no transport.

Rank 0 listens on the port and answers each rank that connects with the payload; every other
rank connects — retrying while rank 0 is not listening yet — and reads it. Every wait is
bounded by ``TESSERA_COMM_TIMEOUT`` seconds: rank 0 that never serves, or a rank that never
connects, is a :class:`~tessera_ref.errors.BackendError` naming the address and the ranks.

The port is ``TESSERA_RENDEZVOUS_PORT`` when set; else ``MASTER_PORT + 1`` when torchrun's
agent holds ``MASTER_PORT`` for its own store (``TORCHELASTIC_USE_AGENT_STORE=True``); else
``MASTER_PORT``.
"""
from __future__ import annotations

import os
import socket
import struct
import time

from ...errors import BackendError

__all__ = ["share_bytes", "address"]

_MAGIC = b"TSRV"   # both ends' first bytes: a stranger on the port is not taken for a rank
_FIX = ("start every rank with the same MASTER_ADDR and MASTER_PORT (torchrun sets them), check rank 0's "
        "output, and set TESSERA_COMM_TIMEOUT for a longer wait")


def address(env=None) -> tuple:
    """``(host, port)`` of the rendezvous (module docstring)."""
    env = os.environ if env is None else env
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in env]
    if missing:
        raise BackendError(f"{' and '.join(missing)} not set: the ranks cannot meet to share the NCCL unique id "
                           f"(no MPI world to broadcast it either)",
                           fix="start the ranks with torchrun (it sets MASTER_ADDR and MASTER_PORT), "
                               "tessera-ref launch, or mpiexec")
    try:
        port = int(env.get("TESSERA_RENDEZVOUS_PORT") or env["MASTER_PORT"])
    except ValueError:
        raise BackendError(f"MASTER_PORT={env['MASTER_PORT']!r} (or TESSERA_RENDEZVOUS_PORT) is not a port number",
                           fix="set it to an integer such as 29500") from None
    if "TESSERA_RENDEZVOUS_PORT" not in env and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        port += 1
    return env["MASTER_ADDR"], port


def share_bytes(payload: bytes | None, rank: int, size: int, timeout: float, env=None) -> bytes:
    """Rank 0's ``payload`` on every one of ``size`` ranks (``payload`` is ignored elsewhere)."""
    if size == 1:
        return payload
    host, port = address(env)
    if rank == 0:
        _serve(payload, host, port, size, timeout)
        return payload
    return _fetch(rank, host, port, timeout)


def _serve(payload: bytes, host: str, port: int, size: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    try:
        server = socket.create_server(("", port))
    except OSError as exc:
        raise BackendError(f"rank 0 cannot listen on port {port} for the other ranks ({exc})",
                           fix="pick a free MASTER_PORT, or set TESSERA_RENDEZVOUS_PORT to one") from None
    served = set()
    with server:
        while len(served) < size - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = sorted(set(range(1, size)) - served)
                raise BackendError(f"rank 0: rank(s) {waiting} did not come for the NCCL unique id at "
                                   f"{host}:{port} in {timeout:g} s — they died, did not start, or look elsewhere",
                                   fix=_FIX)
            server.settimeout(left)
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    hello = _read(conn, 8)
                except (OSError, EOFError):
                    continue
                if hello[:4] != _MAGIC:
                    continue
                conn.sendall(_MAGIC + struct.pack("!I", len(payload)) + payload)
                served.add(struct.unpack("!I", hello[4:])[0])


def _fetch(rank: int, host: str, port: int, timeout: float) -> bytes:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(2.0, deadline - time.monotonic()))) as c:
                c.settimeout(max(0.1, deadline - time.monotonic()))
                c.sendall(_MAGIC + struct.pack("!I", rank))
                head = _read(c, 8)
                if head[:4] != _MAGIC:
                    raise EOFError("not a tessera rendezvous")
                return _read(c, struct.unpack("!I", head[4:])[0])
        except (OSError, EOFError) as exc:  # rank 0 not listening yet: try again
            last = exc
            time.sleep(0.05)
    raise BackendError(f"rank {rank}: rank 0 did not serve the NCCL unique id at MASTER_ADDR:MASTER_PORT = "
                       f"{host}:{port} in {timeout:g} s ({last}) — it died, did not start, or listens elsewhere",
                       fix=_FIX)


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("the connection closed early")
        data += chunk
    return data
