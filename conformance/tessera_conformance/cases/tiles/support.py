"""What the tile cases share: launching on the backend under test, the report's checker and
counter parts (n/a where a backend has none, required of the oracle), exact rounding into a
format (NUM-CVT-2/3, computed here), and hardware.md's bank and sector rules."""
from __future__ import annotations

import contextlib
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tessera_ref import backends
from tessera_ref.errors import BackendError, BackendFinding
from tessera_ref.ir.launch import Launch
from tessera_conformance import ORACLE, not_applicable, unsupported

# -- launching -------------------------------------------------------------------------------


def _own_finding(backend, exc) -> None:
    """n/a: ``backend`` found the kernel's bug with a check of its own (a BackendFinding), so
    it does not make the tile interpreter's checks this case is about."""
    what = exc.what.split(":")[0]  # what it found and where, without addresses or values
    not_applicable(f"{backend} does not make the tile interpreter's checks; its own check found the kernel's bug: "
                   f"{what}")


@contextlib.contextmanager
def _launching(backend, options):
    """Around a launch on ``backend``: a refusal (BackendError) makes the case unsupported; a
    finding of the backend's own checks (BackendFinding) instead of the tile interpreter's
    listed ones (``on_error="collect"``) makes it n/a, and otherwise fails it."""
    try:
        yield
    except BackendFinding as exc:
        if options.get("on_error") != "collect":
            raise
        _own_finding(backend, exc)
    except BackendError as exc:
        unsupported(backend, exc, "the launch")


def launch(backend, kern, *args, **options):
    """``kern(*args, **options)`` — ``Kernel.__call__``, so the current backend's ``launch`` —
    inside ``backends.use(backend)``; the launch's report (see :func:`_launching`)."""
    with _launching(backend, options), backends.use(backend):
        return kern(*args, **options)


def launch_module(backend, module, buffers, *, grid=1, lanes=32, **options):
    """A hand-built Tile IR module launched by ``backend.launch`` (BACKEND-LAUNCH-1; see
    :func:`_launching`)."""
    with _launching(backend, options):
        return backends.get(backend).launch(Launch(module, None, grid, lanes, buffers, **options))


@contextlib.contextmanager
def tile_error(backend, error, match: str):
    """``pytest.raises(error, match=match)`` around the launch of a kernel with a bug the tile
    interpreter's checks report; a backend whose own check finds the bug first is n/a."""
    try:
        with pytest.raises(error, match=match) as info:
            yield info
    except BackendFinding as exc:
        _own_finding(backend, exc)


def part(backend, report, name: str):
    """``report.<name>`` (counters, coverage, roofline, grid ...); n/a on a backend whose launch
    reports do not have it (BACKEND-LAUNCH-1: a GPU counts nothing), but the oracle's must.
    Findings are :func:`findings`'."""
    got = getattr(report, name, None)
    if got is None:
        assert backend != ORACLE, f"the oracle's launch report has no {name}"
        not_applicable(f"{backend}'s launch reports have no {name}")
    return got


def semantic_checks(backend, report) -> None:
    """n/a unless ``backend`` makes the tile interpreter's semantic checks (TILE-CHECK-*,
    TILE-MODEL-2, TILE-MEM-3): a report saying ``checks=False`` (a GPU, the CUDA-on-CPU
    harness: the kernel runs as written) has none; the oracle must."""
    if getattr(report, "checks", True) is False:
        assert backend != ORACLE, "the oracle's launch report says checks=False"
        not_applicable(f"{backend} does not make the tile interpreter's semantic checks (its launch reports "
                       f"say checks=False): a kernel breaking them runs as written")


def findings(backend, report) -> list:
    """The report's checker findings: n/a where the report says ``checks=False`` whatever else
    it holds (:func:`semantic_checks`); a report that neither says so nor lists findings
    ignored the checks silently, which fails (BACKEND-LAUNCH-1)."""
    semantic_checks(backend, report)
    got = getattr(report, "findings", None)
    assert got is not None, (f"{backend}'s launch report neither lists findings nor says checks=False "
                             f"(BACKEND-LAUNCH-1): {report!r}")
    return list(got)


def counters(backend, report):
    """The report's counters (see :func:`part`)."""
    return part(backend, report, "counters")


def copies(args):
    return [np.array(a) if isinstance(a, np.ndarray) else a for a in args]


def expect_error(backend, error, match: str, kern, *args, **options):
    """``kern`` launched on ``args`` raises ``error`` (message matching ``match``); on copies
    with ``on_error="collect"`` first, so a backend without checkers is n/a, not a failure.
    Returns the collected findings."""
    report = launch(backend, kern, *copies(args), on_error="collect", **options)
    found = findings(backend, report)
    with pytest.raises(error, match=match) as info:
        launch(backend, kern, *args, **options)
    return found, str(info.value)


def where(path, marker: str) -> str:
    """``"<file>:<line>"`` of the only line of ``path`` ending in ``marker`` (a kernel line's
    trailing comment), as kernel messages name it."""
    lines = [i + 1 for i, text in enumerate(Path(path).read_text().splitlines()) if text.rstrip().endswith(marker)]
    assert len(lines) == 1, f"{marker!r} marks {len(lines)} lines of {path}"
    return f"{Path(path).name}:{lines[0]}"


def line_of(path, marker: str) -> str:
    """:func:`where` as a regex."""
    return re.escape(where(path, marker)) + r"\b"


# -- formats and exact rounding (NUM-CVT-2, NUM-CVT-3 rne/native, computed here) ------------

#: name -> (dtype, significand bits p, emin, max finite, value on overflow)
FORMATS = {
    "f64": (np.dtype(np.float64), 53, -1022, float(np.finfo(np.float64).max), np.inf),
    "f32": (np.dtype(np.float32), 24, -126, float(np.finfo(np.float32).max), np.inf),
    "f16": (np.dtype(np.float16), 11, -14, 65504.0, np.inf),
    "bf16": (np.dtype(ml_dtypes.bfloat16), 8, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), np.inf),
    "fp8_e4m3": (np.dtype(ml_dtypes.float8_e4m3fn), 4, -6, 448.0, np.nan),
    "fp8_e5m2": (np.dtype(ml_dtypes.float8_e5m2), 3, -14, 57344.0, np.inf),
}


def dtype(fmt: str) -> np.dtype:
    return FORMATS[fmt][0]


def round_to(exact, fmt: str) -> np.ndarray:
    """The exact values ``exact`` (float64 arrays that hold them exactly) rounded once to
    nearest even into ``fmt`` with its native overflow: ``n·2^q`` with ``2^q`` the spacing at
    ``|x|`` (subnormals on their grid), computed with exact power-of-two scaling."""
    x = np.asarray(exact, np.float64)
    dt, p, emin, top, over = FORMATS[fmt]
    if fmt == "f64":
        return x.copy()
    ax = np.abs(x)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.frexp(ax)[1] - 1  # floor(log2 |x|) for finite non-zero |x|
        q = np.maximum(e, emin) - (p - 1)
        r = np.ldexp(np.rint(np.ldexp(ax, -q)), q)  # rint: half to even, exact on float64
        r = np.where(r > top, over, r)
        r = np.where(np.isnan(ax), np.nan, np.copysign(r, x))
    out = r.astype(dt)  # exact: every value is representable
    return out


def bits(a) -> np.ndarray:
    a = np.atleast_1d(np.asarray(a))
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# -- the canonical orders (NUM-RED-1, NUM-RED-2), computed here ------------------------------


def fma_chain(a, b, accum="f32", c=None):
    """NUM-RED-1 in float64: acc = round(acc + a[:, k] b[k, :]) for k ascending, from +0 (or
    ``c``). Exact before each rounding when a, b and c are multiples of 2^-4 below 2^7 (sums
    stay below 2^45); the caller rounds the result into storage."""
    acc = np.zeros((a.shape[0], b.shape[1])) if c is None else np.array(c, np.float64)
    for k in range(a.shape[1]):
        acc = round_to(acc + np.outer(a[:, k].astype(np.float64), b[k].astype(np.float64)), accum).astype(np.float64)
    return acc


def warp_sum(rows):
    """NUM-RED-2 in f32 along the last axis of 2-D ``rows`` (converted exactly to f32): lane l
    folds x_l, x_{l+32}, ... from -0, then the butterfly 16 ... 1; shape [rows, 1]."""
    rows = np.asarray(rows).astype(np.float32)
    p = np.full((rows.shape[0], 32), -0.0, np.float32)
    for j in range(rows.shape[1]):
        p[:, j % 32] = p[:, j % 32] + rows[:, j]
    for off in (16, 8, 4, 2, 1):
        p = p + p[:, np.arange(32) ^ off]
    return p[:, :1]


# -- hardware.md's memory rules, computed here ---------------------------------------------


def bank_wavefronts(requests, access_bytes: int) -> tuple:
    """``(wavefronts, ideal)`` of shared requests: each request is the byte addresses of up
    to 32 lanes (or pieces) in lane order; phases of 32 / 16 / 8 lanes for accesses of at most
    4 / 8 / 16 bytes; per phase the largest number of distinct words in one bank, and the
    ideal ``ceil(distinct words / 32)``."""
    per = 32 if access_bytes <= 4 else 128 // access_bytes
    waves = ideal = 0
    for request in requests:
        for start in range(0, len(request), per):
            words = {a // 4 + w for a in request[start:start + per] for w in range(max(1, access_bytes // 4))}
            by_bank: dict = {}
            for w in words:
                by_bank.setdefault(w % 32, set()).add(w)
            waves += max(len(s) for s in by_bank.values())
            ideal += -(-len(words) // 32)
    return waves, ideal


def global_sectors(requests, access_bytes: int) -> int:
    """Distinct 32-byte sectors touched, summed over requests (byte addresses per request)."""
    return sum(len({b // 32 for a in request for b in (a, a + access_bytes - 1)}) for request in requests)


def warps(addresses) -> list:
    """Consecutive groups of 32 of an address list (the warps of a lane or piece order)."""
    addresses = list(addresses)
    return [addresses[i:i + 32] for i in range(0, len(addresses), 32)]


def swizzle(o: int) -> int:
    """CuTe's Swizzle<3,4,3> of a byte offset (TILE-MEM-2)."""
    return o ^ ((o & (7 << 7)) >> 3)


def pieces(src_rows, dst_rows, row_bytes: int, size: int, swizzled: bool = False):
    """TILE-VIS-3's split of a copy whose rows start at the byte addresses ``src_rows`` and
    ``dst_rows``: the largest of 16, 8 and 4 bytes whose pieces are contiguous and naturally
    aligned in both buffers, else elements; ``(piece, [(src, dst) byte address of each piece
    in order])``, the shared addresses swizzled when asked."""
    for piece in (16, 8, 4, size):
        if piece >= size and row_bytes % piece == 0 and all(a % piece == 0 for a in list(src_rows) + list(dst_rows)):
            break
    moves = [(s + o, d + o) for s, d in zip(src_rows, dst_rows) for o in range(0, row_bytes, piece)]
    return piece, [(s, swizzle(d) if swizzled else d) for s, d in moves]


#: A shared-memory transpose kernel (DSL text; ``f32``, ``PAD`` and ``SWIZZLE`` are substituted
#: by the cases that measure its bank conflicts).
TRANSPOSE = '''
@kernel
def transpose(X: f32[32, 32], Y: mut f32[32, 32]):
    s = tshared.alloc[f32](32, 32, pad=PAD, swizzle=SWIZZLE)
    l = tile.lane_id()
    for j in range(32):
        s[j, l] = X[j, l]
    tbarrier()
    for j in range(32):
        Y[j, l] = s[l, j]
'''
