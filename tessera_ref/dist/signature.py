"""The signature of a collective across processes (DESIGN §19; docs/spec/mesh.md MESH-MP-10).

Processes of a program match their collectives by program order (MESH-MP-4): nothing in the
messages says which call they belong to. A collective whose group spans several processes
therefore first exchanges its :class:`Signature` — kind, reduction op, format, this process's
local shape, mesh axes, the group's processes, the collective's own arguments (``dim``,
``root``, ``pairs``), a sequence number and the user's source line — with every other process
of its group, and moves data only when every signature agrees (:func:`check`). Ranks that
disagree all raise a :class:`~tessera_ref.errors.CollectiveError` naming both calls and both
lines; nothing has been moved, so no rank is left waiting for a payload.

A signature travels as :data:`SIGNATURE_BYTES` bytes (:attr:`Signature.wire`), so that the
receiver knows its size whatever the sender called — on NCCL, whose receives must know their
size, as on MPI; agreeing signatures are told apart from others by comparing bytes.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..context import COLLECTIVE_CALL, scoped
from ..errors import CollectiveError

__all__ = ["Signature", "SIGNATURE_BYTES", "calling", "user_call", "check"]

#: The size of a signature on the wire: a magic word, then JSON padded with zero bytes.
SIGNATURE_BYTES = 512
_MAGIC = b"TSIG1"


def calling(kind: str, op: str | None = None):
    """A block in which the communicator carries out the user's collective ``kind`` (with the
    reduction ``op`` as the user wrote it: ``avg`` folds a sum): the signature names it rather
    than the communicator's own step (an ``all_to_all`` moves data with an all-gather)."""
    return scoped(COLLECTIVE_CALL, (kind, op))


def user_call() -> tuple | None:
    """``(kind, op)`` of the collective of :func:`calling` in force, or None."""
    return COLLECTIVE_CALL.get()


@dataclass(frozen=True)
class Signature:
    """One process's description of one collective (module docstring). ``seq`` counts the
    collectives this process has exchanged signatures for over its transport (from 1)."""

    kind: str
    op: str
    dtype: str
    shape: tuple
    axes: tuple
    group: tuple
    detail: str
    seq: int
    location: str

    def key(self) -> tuple:
        """What must agree across the group: everything but the source line."""
        return (self.kind, self.op, self.dtype, self.shape, self.axes, self.group, self.detail, self.seq)

    def describe(self) -> str:
        op = f" op={self.op}" if self.op else ""
        detail = f" {self.detail}" if self.detail else ""
        return (f"{self.kind}({'+'.join(self.axes)}{op}{detail}) of {self.dtype} local shape {self.shape} among "
                f"processes {list(self.group)}, collective #{self.seq}, at {self.location or '?'}")

    @cached_property
    def wire(self) -> bytes:
        """The signature as sent: the magic word, the JSON of :meth:`key` (a detail or group too
        long to fit as its SHA-256), a newline, the source line (a long path keeps its end),
        padded with zero bytes to :data:`SIGNATURE_BYTES`."""
        kind, op, dtype, shape, axes, group, detail, seq = self.key()
        head = _MAGIC + json.dumps([kind, op, dtype, list(shape), list(axes), list(group), detail, seq],
                                   separators=(",", ":")).encode() + b"\n"
        if len(head) > SIGNATURE_BYTES:
            detail, group = (["sha256:" + hashlib.sha256(repr(v).encode()).hexdigest()] for v in (detail, group))
            head = _MAGIC + json.dumps([kind, op, dtype, list(shape), list(axes), group, detail[0], seq],
                                       separators=(",", ":")).encode() + b"\n"
        location = (self.location or "").encode()
        room = SIGNATURE_BYTES - len(head)
        if len(location) > room:
            location = b"..." + location[len(location) - room + 3:] if room > 3 else b""
        return (head + location).ljust(SIGNATURE_BYTES, b"\0")

    def encode(self) -> np.ndarray:
        """:attr:`wire` as an array of :data:`SIGNATURE_BYTES` bytes."""
        return np.frombuffer(self.wire, np.uint8)

    @classmethod
    def decode(cls, data) -> "Signature | None":
        """The signature in ``data``, or None when it is not one (a peer at another point of the
        program sent a payload where this process expects a signature)."""
        raw = np.asarray(data, np.uint8).tobytes().rstrip(b"\0")
        head, newline, location = raw.partition(b"\n")
        if not (head.startswith(_MAGIC) and newline):
            return None
        try:
            kind, op, dtype, shape, axes, group, detail, seq = json.loads(head[len(_MAGIC):].decode())
            return cls(kind, op, dtype, tuple(shape), tuple(axes), tuple(group), detail, int(seq),
                       location.decode(errors="replace"))
        except (ValueError, TypeError):
            return None


def check(mine: Signature, rank: int, received: dict) -> None:
    """A :class:`CollectiveError` on this process (``rank``) when any peer's signature in
    ``received`` (``{rank: bytes}``) differs from ``mine`` (MESH-MP-10); the first such peer, in
    rank order, is named with its call."""
    ours = mine.wire[:mine.wire.index(b"\n") + 1]   # all but the source line, as the peers send theirs
    for peer in sorted(received):
        if np.asarray(received[peer], np.uint8).tobytes().startswith(ours):
            continue
        theirs = Signature.decode(received[peer])
        said = ("sent data that is no collective's signature: it is at another point of the program"
                if theirs is None else f"called {theirs.describe()}")
        raise CollectiveError(f"rank {rank}: processes disagree on a collective, and no data was moved: this rank "
                              f"called {mine.describe()}; rank {peer} {said}",
                              fix="every process must issue the same collectives, in the same order, with the same "
                                  "operands' shapes, formats and layouts and the same arguments (SPMD): make the "
                                  "calls at these two lines agree", location=mine.location)
