"""Alpha-beta cost of collectives (SIM-COLL-1 … SIM-COLL-4).

A collective over a group of ``p`` ranks moving ``n`` bytes costs a number of message
latencies ``α`` plus bytes over the per-direction bandwidth ``β`` of the tier it runs on:
NVLink when every rank of the group is in one NVLink domain, the network otherwise
(SIM-COLL-1). :func:`alpha_beta` holds the formulas (SIM-COLL-2), :func:`collective_cost`
picks the tier and the algorithm (SIM-COLL-3).

``n`` is the size of the collective's full buffer on one rank, as NCCL counts it: the buffer
reduced (all_reduce), gathered *output* (all_gather), scattered *input* (reduce_scatter),
broadcast, exchanged (all_to_all), or sent to one peer (permute, send/recv).
"""
from __future__ import annotations

import numbers
from typing import NamedTuple

from ..errors import SimError
from .presets import get_preset

__all__ = ["ALGORITHMS", "CollectiveCost", "alpha_beta", "collective_cost", "tier_of"]

#: The algorithms of each collective kind, in the order that breaks ties (SIM-COLL-2).
ALGORITHMS = {
    "all_reduce": ("ring", "tree", "nvls"),
    "all_gather": ("ring", "tree"),
    "reduce_scatter": ("ring", "tree"),
    "broadcast": ("ring", "tree"),
    "all_to_all": ("direct",),
    "permute": ("direct",),
    "send": ("direct",),
    "recv": ("direct",),
}


class CollectiveCost(NamedTuple):
    """What one collective over one group costs: ``time`` (seconds, every rank) and
    ``bytes_sent`` (by the busiest rank), with the ``algorithm`` and the ``tier``
    (``"nvlink"``, ``"network"``, or ``"local"`` for a group of one) it ran on."""

    kind: str
    algorithm: str
    tier: str
    ranks: int
    nbytes: int
    time: float
    bytes_sent: float
    alpha: float
    beta: float


def _check_kind(kind: str, algorithm=None) -> None:
    if kind not in ALGORITHMS:
        raise SimError(f"unknown collective {kind!r}", fix=f"use one of {', '.join(ALGORITHMS)}")
    if algorithm is not None and algorithm not in ALGORITHMS[kind]:
        raise SimError(f"{kind} has no algorithm {algorithm!r}",
                       fix=f"use one of {', '.join(ALGORITHMS[kind])}, or leave algorithm out to pick the fastest")


def alpha_beta(kind: str, algorithm: str, p: int, n: float, alpha: float, beta: float) -> tuple:
    """``(time, bytes sent per rank)`` of ``kind`` by ``algorithm`` over ``p`` ranks of ``n``
    bytes on links of latency ``alpha`` (s) and bandwidth ``beta`` (bytes/s per direction)
    (SIM-COLL-2). ``L = ceil(log2 p)``; a group of one costs nothing."""
    _check_kind(kind, algorithm)
    if p <= 1:
        return 0.0, 0.0
    L = (p - 1).bit_length()
    share = (p - 1) / p * n  # what a rank sends in a bandwidth-optimal gather or scatter
    if kind == "all_reduce":
        sent = {"ring": 2 * share, "tree": L * n, "nvls": n}[algorithm]
        steps = {"ring": 2 * (p - 1), "tree": L, "nvls": 2}[algorithm]
    elif kind in ("all_gather", "reduce_scatter"):
        sent, steps = share, (p - 1 if algorithm == "ring" else L)
    elif kind == "broadcast":
        if algorithm == "ring":  # pipelined chain: every rank but the last forwards the buffer
            return (p - 1) * alpha + n / beta, float(n)
        return L * (alpha + n / beta), float(L * n)  # binomial tree: the root sends L times
    elif kind == "all_to_all":
        sent, steps = share, p - 1
    else:  # permute, send, recv: one message to one peer
        sent, steps = float(n), 1
    return steps * alpha + sent / beta, float(sent)


def tier_of(group, preset) -> str:
    """``"nvlink"`` if every device of ``group`` is in one NVLink domain (devices
    ``k·D … k·D + D − 1`` for ``D`` devices per domain), ``"network"`` otherwise, ``"local"``
    for a group of one (SIM-COLL-1)."""
    preset = get_preset(preset)
    if len(set(group)) <= 1:
        return "local"
    domains = {d // preset.devices_per_domain for d in group}
    return "nvlink" if len(domains) == 1 else "network"


def collective_cost(kind: str, group, nbytes: int, preset, algorithm: str | None = None) -> CollectiveCost:
    """The cost of ``kind`` over the devices ``group`` (indices of the machine) on ``nbytes``
    (the full per-rank buffer, see the module docstring) on ``preset`` (SIM-COLL-3).

    The tier is NVLink or the network by :func:`tier_of`. ``algorithm=None`` picks the
    algorithm of :data:`ALGORITHMS` with the least time (``nvls`` only inside one NVLink
    domain whose switches reduce), ties going to the one listed first; a named algorithm is
    used as asked.
    """
    preset = get_preset(preset)
    _check_kind(kind, algorithm)
    if not isinstance(nbytes, numbers.Integral) or isinstance(nbytes, bool) or nbytes < 0:
        raise SimError(f"{kind}: nbytes must be a non-negative integer, got {nbytes!r}",
                       fix="pass the collective's per-rank buffer size in bytes")
    group = tuple(group)
    tier = tier_of(group, preset)
    link = preset.network if tier == "network" else preset.nvlink
    candidates = ALGORITHMS[kind] if algorithm is None else (algorithm,)
    if tier == "network" or not preset.in_switch_reduction:
        if algorithm == "nvls":
            why = (f"the group {group} spans domains of {preset.devices_per_domain} devices" if tier == "network"
                   else f"the {preset.name}'s NVLink switches do not reduce (no NVLink SHARP)")
            raise SimError(f"{kind} with algorithm 'nvls' needs every rank in one NVLink domain whose switches "
                           f"reduce, but {why}", fix="use 'ring' or 'tree', or leave algorithm out")
        candidates = tuple(a for a in candidates if a != "nvls")
    costs = [(alpha_beta(kind, a, len(group), nbytes, link.latency, link.bandwidth), a) for a in candidates]
    (time, sent), best = min(costs, key=lambda c: c[0][0])  # min keeps the first of equal times
    return CollectiveCost(kind, best, tier, len(group), int(nbytes), time, sent, link.latency, link.bandwidth)
