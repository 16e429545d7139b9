"""The signature of a collective across processes (DESIGN §19; docs/spec/mesh.md MESH-MP-10).

Processes of a program match their collectives by program order (MESH-MP-4): nothing in the
messages says which call they belong to. A collective whose group spans several processes
therefore first exchanges its :class:`Signature` — kind, reduction op, format, this process's
local shape, mesh axes, the group's processes, the collective's own arguments (``dim``,
``root``, ``pairs``), a sequence number and the user's source line — with every other process
of its group, and moves data only when every signature agrees (:func:`check`). Ranks that
disagree all raise a :class:`~tessera_ref.errors.CollectiveError` naming both calls and both
lines; nothing has been moved, so no rank is left waiting for a payload.

A signature travels as :data:`SIGNATURE_BYTES` bytes (:meth:`Signature.encode`), so that the
receiver knows its size whatever the sender called — on NCCL, whose receives must know their
size, as on MPI.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

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

    def encode(self) -> np.ndarray:
        """The signature as :data:`SIGNATURE_BYTES` bytes (a long source path keeps its end)."""
        fields = {"kind": self.kind, "op": self.op, "dtype": self.dtype, "shape": list(self.shape),
                  "axes": list(self.axes), "group": list(self.group), "detail": self.detail, "seq": self.seq}

        def packed(location: str) -> bytes:
            return _MAGIC + json.dumps({**fields, "location": location}, separators=(",", ":")).encode()

        if len(packed("")) > SIGNATURE_BYTES:   # a detail or group too long to carry: digests stand for them
            fields["detail"] = "sha256:" + hashlib.sha256(self.detail.encode()).hexdigest()
            fields["group"] = ["sha256:" + hashlib.sha256(repr(self.group).encode()).hexdigest()]
        location = self.location or ""
        text = packed(location)
        while len(text) > SIGNATURE_BYTES and location:   # drop the excess and more from the front (5+ for "...")
            location = "..." + location[len(text) - SIGNATURE_BYTES + 4:] if len(location) > 3 else ""
            text = packed(location)
        out = np.zeros(SIGNATURE_BYTES, np.uint8)
        out[:len(text)] = np.frombuffer(text, np.uint8)
        return out

    @classmethod
    def decode(cls, data: np.ndarray) -> "Signature | None":
        """The signature in ``data``, or None when it is not one (a peer at another point of the
        program sent a payload where this process expects a signature)."""
        raw = np.asarray(data, np.uint8).tobytes().rstrip(b"\0")
        if not raw.startswith(_MAGIC):
            return None
        try:
            f = json.loads(raw[len(_MAGIC):].decode())
            return cls(f["kind"], f["op"], f["dtype"], tuple(f["shape"]), tuple(f["axes"]), tuple(f["group"]),
                       f["detail"], int(f["seq"]), f["location"])
        except (ValueError, KeyError, TypeError):
            return None



def check(mine: Signature, rank: int, received: dict) -> None:
    """A :class:`CollectiveError` on this process (``rank``) when any peer's signature in
    ``received`` (``{rank: bytes}``) differs from ``mine`` (MESH-MP-10); the first such peer, in
    rank order, is named with its call."""
    ours = Signature.decode(mine.encode()).key()   # as the peers read it (a long detail as its digest)
    for peer in sorted(received):
        theirs = Signature.decode(received[peer])
        if theirs is not None and theirs.key() == ours:
            continue
        said = ("sent data that is no collective's signature: it is at another point of the program"
                if theirs is None else f"called {theirs.describe()}")
        raise CollectiveError(f"rank {rank}: processes disagree on a collective, and no data was moved: this rank "
                              f"called {mine.describe()}; rank {peer} {said}",
                              fix="every process must issue the same collectives, in the same order, with the same "
                                  "operands' shapes, formats and layouts and the same arguments (SPMD): make the "
                                  "calls at these two lines agree", location=mine.location)
