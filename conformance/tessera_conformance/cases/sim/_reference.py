"""The simulated machine's numbers typed in from docs/spec/sim.md, and its formulas re-derived
here (SIM-HW-2, SIM-COLL-2, SIM-COLL-3, SIM-ROOF-1, SIM-ROOF-2), without ``tessera_ref``.

Only :func:`mesh_of` builds a ``tessera_ref`` object (the mesh a case runs on).
"""
from __future__ import annotations

import math

KiB, MiB, GiB = 2 ** 10, 2 ** 20, 2 ** 30
GB, TB, T = 10 ** 9, 10 ** 12, 10 ** 12
AXES = ("dp", "tp", "pp")


def mesh_of(shape: tuple):
    """``dist.Mesh`` with axes ``("dp", "tp", "pp")[:len(shape)]`` over devices ``range(prod)``."""
    from tessera_ref import dist
    return dist.Mesh(AXES[:len(shape)], range(math.prod(shape)), shape)


#: SIM-HW-2, column by column: dense peaks in FLOP/s, bandwidths per direction.
_HOPPER = {"f64": 67 * T, "f32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "f16": 989.5 * T,
           "fp8": 1979 * T, "int8": 1979 * T}
PRESETS = {
    "A100": dict(sms=108, hbm=80 * GiB, hbm_bw=2039 * GB,
                 peaks={"f64": 19.5 * T, "f32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "f16": 312 * T,
                        "int8": 624 * T},
                 l2=40 * MiB, nvlink=300 * GB, nvlink_alpha=1e-6, domain=8, network=25 * GB, network_alpha=5e-6,
                 smem=(164 * KiB, 163 * KiB), fractions={"tensor_core": (0.8, 0.9), "other": (1.0, 0.9)}),
    "H100": dict(sms=132, hbm=80 * GiB, hbm_bw=3.35 * TB, peaks=_HOPPER, l2=50 * MiB, nvlink=450 * GB,
                 nvlink_alpha=1e-6, domain=8, network=50 * GB, network_alpha=5e-6),
    "H200": dict(sms=132, hbm=141 * GiB, hbm_bw=4.8 * TB, peaks=_HOPPER, l2=50 * MiB, nvlink=450 * GB,
                 nvlink_alpha=1e-6, domain=8, network=50 * GB, network_alpha=5e-6),
    "B200": dict(sms=148, hbm=180 * GiB, hbm_bw=7.7 * TB,
                 peaks={"f64": 37 * T, "f32": 75 * T, "tf32": 1100 * T, "bf16": 2250 * T, "f16": 2250 * T,
                        "fp8": 4500 * T, "fp6": 4500 * T, "fp4": 9000 * T, "int8": 4500 * T},
                 l2=126 * MiB, nvlink=900 * GB, nvlink_alpha=1e-6, domain=8, network=50 * GB, network_alpha=5e-6),
    "GB200-NVL72": dict(sms=148, hbm=186 * GiB, hbm_bw=8 * TB,
                        peaks={"f64": 40 * T, "f32": 80 * T, "tf32": 1250 * T, "bf16": 2500 * T, "f16": 2500 * T,
                               "fp8": 5000 * T, "fp6": 5000 * T, "fp4": 10000 * T, "int8": 5000 * T},
                        l2=126 * MiB, nvlink=900 * GB, nvlink_alpha=1e-6, domain=72, network=50 * GB,
                        network_alpha=5e-6),
}
SMEM_PER_SM, SMEM_PER_BLOCK, REGISTERS_PER_SM = 228 * KiB, 227 * KiB, 256 * KiB

#: SIM-COLL-2's algorithms of each kind, in the order that breaks ties (SIM-COLL-3).
ALGORITHMS = {"all_reduce": ("ring", "tree", "nvls"), "all_gather": ("ring", "tree"),
              "reduce_scatter": ("ring", "tree"), "broadcast": ("ring", "tree"), "all_to_all": ("direct",),
              "permute": ("direct",), "send": ("direct",), "recv": ("direct",)}


def formula(kind: str, algorithm: str, p: int, n: float, alpha: float, beta: float) -> tuple:
    """``(T, S)`` of SIM-COLL-2's table; a group of one costs nothing."""
    if p <= 1:
        return 0.0, 0.0
    L = math.ceil(math.log2(p))
    share = (p - 1) / p * n
    table = {
        ("all_reduce", "ring"): (2 * (p - 1) * alpha + 2 * (p - 1) / p * n / beta, 2 * share),
        ("all_reduce", "tree"): (L * alpha + L * n / beta, L * n),
        ("all_reduce", "nvls"): (2 * alpha + n / beta, n),
        ("all_gather", "ring"): ((p - 1) * alpha + share / beta, share),
        ("all_gather", "tree"): (L * alpha + share / beta, share),
        ("reduce_scatter", "ring"): ((p - 1) * alpha + share / beta, share),
        ("reduce_scatter", "tree"): (L * alpha + share / beta, share),
        ("broadcast", "ring"): ((p - 1) * alpha + n / beta, n),
        ("broadcast", "tree"): (L * (alpha + n / beta), L * n),
        ("all_to_all", "direct"): ((p - 1) * alpha + share / beta, share),
    }
    if kind in ("permute", "send", "recv"):
        return alpha + n / beta, n
    return table[(kind, algorithm)]


def tier(group, domain: int) -> str:
    """SIM-COLL-1: NVLink when every device is in one domain ``k·D … k·D + D − 1``."""
    return "nvlink" if len({d // domain for d in group}) == 1 else "network"


def choose(kind: str, group, n: int, preset: str) -> tuple:
    """SIM-COLL-3: ``(algorithm, tier, T, S)`` with the least T on the group's tier (no nvls on
    the network), ties to the first listed."""
    spec = PRESETS[preset]
    t = tier(group, spec["domain"])
    alpha, beta = ((spec["nvlink_alpha"], spec["nvlink"]) if t == "nvlink"
                   else (spec["network_alpha"], spec["network"]))
    best = None
    for alg in ALGORITHMS[kind]:
        if alg == "nvls" and t == "network":
            continue
        time, sent = formula(kind, alg, len(group), n, alpha, beta)
        if best is None or time < best[2]:
            best = (alg, t, time, sent)
    return best


#: SIM-ROOF-2: the rate key of each storage format, and the next wider rate.
KEY_OF = {"f64": "f64", "f32": "f32", "f16": "f16", "bf16": "bf16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
          "fp6_e2m3": "fp6", "fp6_e3m2": "fp6", "fp4_e2m1": "fp4", "int8": "int8", "int4": "int4", "tf32": "tf32"}
WIDER = {"fp4": "fp6", "fp6": "fp8", "fp8": "bf16", "int4": "int8", "int8": "bf16", "f16": "f32", "tf32": "f32",
         "bf16": "f32"}


def rate_key(preset: str, fmt: str) -> str:
    key = KEY_OF[fmt]
    while key not in PRESETS[preset]["peaks"]:
        key = WIDER[key]
    return key


def roofline_time(flops: float, nbytes: float, preset: str, fmt: str, overhead: float = 0.0) -> tuple:
    """SIM-ROOF-1: ``(T, bound)``, ``T = max(F/peak, B/bw) + overhead``; ties are memory-bound."""
    spec = PRESETS[preset]
    compute, memory = flops / spec["peaks"][rate_key(preset, fmt)], nbytes / spec["hbm_bw"]
    return max(compute, memory) + overhead, ("compute" if compute > memory else "memory")


def groups_of(shape: tuple, group_axes) -> list:
    """The device groups over ``group_axes`` of a mesh with axes ``AXES[:len(shape)]``."""
    axes = AXES[:len(shape)]
    group_axes = (group_axes,) if isinstance(group_axes, str) else tuple(group_axes)
    by_key: dict = {}
    for d in range(math.prod(shape)):
        coords, rest = {}, d
        for a, s in zip(reversed(axes), reversed(shape)):
            coords[a], rest = rest % s, rest // s
        key = tuple(coords[a] for a in axes if a not in group_axes)
        by_key.setdefault(key, []).append(d)
    return [tuple(g) for g in by_key.values()]
