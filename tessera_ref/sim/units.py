"""Human-readable sizes and times for the simulator's tables and reports."""
from __future__ import annotations

__all__ = ["KiB", "MiB", "GiB", "GB", "TB", "fmt_bytes", "fmt_time", "device_ranges"]

KiB, MiB, GiB = 2**10, 2**20, 2**30
GB, TB = 10**9, 10**12


def _num(v: float) -> str:
    """``v`` with about three significant digits and no exponent: ``1.5``, ``14.2``, ``1020``."""
    text = f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fmt_bytes(n: float) -> str:
    """``n`` bytes in binary units: ``1.5 GiB``, ``14.2 MiB``, ``512 B``."""
    for unit, size in (("TiB", 2**40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{_num(n / size)} {unit}"
    return f"{n:.0f} B"


def fmt_time(t: float) -> str:
    """``t`` seconds in s, ms, us or ns: ``547 us``, ``2.39 ms``; ``0`` for zero."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= scale:
            return f"{_num(t / scale)} {unit}"
    return f"{_num(t / 1e-9)} ns" if t else "0"


def device_ranges(names, indices: list) -> str:
    """The devices ``indices`` (ascending) named compactly: runs of consecutive indices become
    ``first..last``, the common prefix of the two names written once (``cuda:0..7, cuda:16``)."""
    runs, start = [], None
    for i, d in enumerate(indices):
        if start is None:
            start = d
        if i + 1 == len(indices) or indices[i + 1] != d + 1:
            runs.append(names[start] if start == d else _span(names[start], names[d]))
            start = None
    return ", ".join(runs)


def _span(first: str, last: str) -> str:
    """``cuda:0..7`` for ``cuda:0`` and ``cuda:7``; ``a..b`` when the names share no prefix."""
    head_f, head_l = first.rstrip("0123456789"), last.rstrip("0123456789")
    if head_f == head_l and head_f != first and head_l != last:
        return f"{first}..{last[len(head_l):]}"
    return f"{first}..{last}"
