"""Hardware presets: the numbers the simulated machine charges time and memory with (SIM-HW-1).

A :class:`Preset` describes one GPU part and the system it sits in: SM count, HBM capacity
and bandwidth, dense peak FLOP/s per number format, L2 and shared memory, the NVLink tier
(bandwidth per direction and latency per message, and how many GPUs share one NVLink
domain) and the network tier that joins domains. Every number, its source and which ones
are estimates are listed in ``docs/spec/sim.md`` (SIM-HW-2); :data:`PRESETS` holds the
presets and :func:`get_preset` looks one up by name (SIM-HW-3). A preset may state the
fractions of peak an op class achieves (SIM-HW-5); those without are pure roofline.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from ..errors import SimError
from .units import GB, TB, GiB, KiB, MiB, fmt_bytes

__all__ = ["Link", "MemoryTier", "Preset", "PRESETS", "ALIASES", "get_preset", "presets_table", "preset_card"]


@dataclass(frozen=True)
class Link:
    """One interconnect tier: ``bandwidth`` in bytes/s per GPU per direction (half the
    bidirectional datasheet figure) and ``latency`` in seconds per message (α)."""

    name: str
    bandwidth: float
    latency: float


@dataclass(frozen=True)
class MemoryTier:
    """One row of the memory-hierarchy table of the seeds (seed 000 §3.2, seed 001 §4.2).

    ``capacity`` (bytes) and ``bandwidth`` (bytes/s) are ``None`` where the tier has no single
    number; ``latency`` is text because the seeds give on-chip latencies in cycles."""

    level: str
    scope: str
    tessera: str
    capacity: int | None
    bandwidth: float | None
    latency: str


@dataclass(frozen=True)
class Preset:
    """A GPU part in its system (SIM-HW-1). Sizes are bytes, bandwidths bytes/s, times seconds.

    ``peak_flops`` is a tuple of ``(format key, dense FLOP/s)`` pairs: the part's best dense
    rate for operands of that format (tensor cores where it has them, without structured
    sparsity); keys are ``f64 f32 tf32 bf16 f16 fp8 fp6 fp4 int8``, and a part lacks the keys
    it has no rate for. ``estimates`` names the fields that are estimates, not datasheet
    numbers. ``efficiency`` holds ``(op class, fraction of peak FLOP/s, fraction of HBM
    bandwidth)`` triples (SIM-HW-5; classes in :data:`~tessera_ref.sim.roofline.OP_CLASSES`);
    empty, every op runs at the full peaks. ``in_switch_reduction``: the NVLink switches reduce
    (NVLink SHARP, the ``nvls`` algorithm; NVSwitch 3 and later, not the A100's NVSwitch 2).
    """

    name: str
    gpu: str
    sm_count: int
    hbm_capacity: int
    hbm_bandwidth: float
    hbm_kind: str
    peak_flops: tuple
    l2_bytes: int
    smem_per_sm: int
    smem_per_block: int
    registers_per_sm: int
    nvlink: Link
    devices_per_domain: int
    network: Link
    source: str
    estimates: tuple = ()
    efficiency: tuple = ()
    in_switch_reduction: bool = True

    def fractions(self, op_class: str) -> tuple:
        """``(compute, memory)``: the fractions of peak FLOP/s and HBM bandwidth ops of
        ``op_class`` achieve on this preset (SIM-HW-5); ``(1.0, 1.0)`` if it states none."""
        return next(((c, m) for k, c, m in self.efficiency if k == op_class), (1.0, 1.0))

    @property
    def peaks(self) -> dict:
        """``peak_flops`` as a dict."""
        return dict(self.peak_flops)

    @property
    def memory_tiers(self) -> tuple:
        """The seeds' memory-hierarchy table filled in with this part's numbers (SIM-HW-4)."""
        return (
            MemoryTier("registers", "thread (file per SM)", "tile-local scalars, Tile IR fragments",
                       self.registers_per_sm, None, "1-2 cycles"),
            MemoryTier("shared memory", "tile (per SM)", "tile-local buffers, Schedule IR staging",
                       self.smem_per_sm, None, "~20 cycles"),
            MemoryTier("L2 cache", "all SMs", "cross-SM tensor reuse", self.l2_bytes, None, "~200 cycles"),
            MemoryTier(f"HBM ({self.hbm_kind})", "one GPU", "tensor shards (Graph IR tensors)",
                       self.hbm_capacity, self.hbm_bandwidth, "200-1000 cycles"),
            MemoryTier(self.nvlink.name, f"NVLink domain of {self.devices_per_domain} GPUs",
                       "mesh collectives", None, self.nvlink.bandwidth, _seconds(self.nvlink.latency)),
            MemoryTier(self.network.name, "between NVLink domains", "collectives spanning domains",
                       None, self.network.bandwidth, _seconds(self.network.latency)),
        )


def _seconds(t: float) -> str:
    return f"{t * 1e6:g} us"


# Hopper (H100, H200) and Blackwell (B200) share these per-SM sizes; CUDA C++ Programming
# Guide, "Technical Specifications per Compute Capability" (9.0 and 10.0); hardware.md.
_SMEM_PER_SM, _SMEM_PER_BLOCK, _REGS_PER_SM = 228 * KiB, 227 * KiB, 256 * KiB

# NVLink: α from seed 000 §3.2 ("~500 ns-1 µs"), upper end. Bandwidth per direction is half the
# datasheet's bidirectional total (H100/H200: 900 GB/s, NVLink 4; B200: 1.8 TB/s, NVLink 5).
_NVLINK4 = Link("NVLink 4 / NVSwitch", 450 * GB, 1e-6)
_NVLINK5 = Link("NVLink 5 / NVSwitch", 900 * GB, 1e-6)
# One ConnectX-7 InfiniBand NIC of 400 Gb/s per GPU (DGX H100/H200/B200; GB200 NVL72 compute
# trays); the 5 µs message latency is an estimate.
_NETWORK = Link("InfiniBand (ConnectX-7 400G)", 400 * GB / 8, 5e-6)

# NVLink 3 (A100): 600 GB/s bidirectional per GPU over NVSwitch. DGX A100: eight single-port
# 200 Gb/s HDR InfiniBand adapters for the compute fabric, one per GPU.
_NVLINK3 = Link("NVLink 3 / NVSwitch", 300 * GB, 1e-6)
_HDR = Link("InfiniBand (HDR 200G)", 200 * GB / 8, 5e-6)

_HOPPER_PEAKS = (  # H100 SXM5 datasheet, tensor-core figures "with sparsity" halved
    ("f64", 67e12), ("f32", 67e12), ("tf32", 494.5e12), ("bf16", 989.5e12), ("f16", 989.5e12),
    ("fp8", 1979e12), ("int8", 1979e12),
)

PRESETS: dict = {
    "A100": Preset(
        # NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB column): FP64 9.7 TF, FP64 Tensor
        # Core 19.5 TF, FP32 19.5 TF, TF32 156 TF, BF16/FP16 312 TF, INT8 624 TOPS (dense; the
        # datasheet's 312/624/1,248 are with sparsity), 80 GB HBM2e at 2,039 GB/s, NVLink 600 GB/s;
        # NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs, 40 MB L2, 164 KB shared
        # memory per SM (163 KB per block), 256 KB registers per SM; DGX A100 user guide and
        # datasheet: 8 A100 on NVSwitch, 8 x 200 Gb/s HDR InfiniBand for the cluster fabric.
        # Achievable fractions (SIM-HW-5): HBM 0.9 — memory-bound kernels on an A100 80GB SXM
        # measure ~1.8 TB/s (88%) and the best ~90% (NVIDIA developer forums, "Trouble to reach
        # peak bandwidth of A100"); tensor-core ops 0.8 of peak is an estimate for large,
        # well-shaped cuBLAS GEMMs, not a measurement cited here.
        name="A100", gpu="NVIDIA A100 SXM4 80GB (DGX A100, 8 GPUs per NVSwitch domain)",
        sm_count=108, hbm_capacity=80 * GiB, hbm_bandwidth=2039 * GB, hbm_kind="HBM2e",
        peak_flops=(("f64", 19.5e12), ("f32", 19.5e12), ("tf32", 156e12), ("bf16", 312e12),
                    ("f16", 312e12), ("int8", 624e12)),
        l2_bytes=40 * MiB, smem_per_sm=164 * KiB, smem_per_block=163 * KiB, registers_per_sm=_REGS_PER_SM,
        nvlink=_NVLINK3, devices_per_domain=8, network=_HDR, in_switch_reduction=False,
        source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB) and architecture whitepaper; DGX A100 datasheet",
        estimates=("nvlink.latency", "network.latency", "efficiency"),
        efficiency=(("tensor_core", 0.8, 0.9), ("other", 1.0, 0.9)),
    ),
    "H100": Preset(
        name="H100", gpu="NVIDIA H100 SXM5 80GB (HGX H100, 8 GPUs per NVSwitch domain)",
        sm_count=132, hbm_capacity=80 * GiB, hbm_bandwidth=3.35 * TB, hbm_kind="HBM3",
        peak_flops=_HOPPER_PEAKS, l2_bytes=50 * MiB, smem_per_sm=_SMEM_PER_SM,
        smem_per_block=_SMEM_PER_BLOCK, registers_per_sm=_REGS_PER_SM, nvlink=_NVLINK4,
        devices_per_domain=8, network=_NETWORK,
        source="NVIDIA H100 Tensor Core GPU datasheet (SXM5); hardware.md",
        estimates=("nvlink.latency", "network.latency"),
    ),
    "H200": Preset(
        name="H200", gpu="NVIDIA H200 SXM 141GB (HGX H200, 8 GPUs per NVSwitch domain)",
        sm_count=132, hbm_capacity=141 * GiB, hbm_bandwidth=4.8 * TB, hbm_kind="HBM3e",
        peak_flops=_HOPPER_PEAKS, l2_bytes=50 * MiB, smem_per_sm=_SMEM_PER_SM,
        smem_per_block=_SMEM_PER_BLOCK, registers_per_sm=_REGS_PER_SM, nvlink=_NVLINK4,
        devices_per_domain=8, network=_NETWORK,
        source="NVIDIA H200 Tensor Core GPU datasheet (SXM); hardware.md",
        estimates=("nvlink.latency", "network.latency"),
    ),
    "B200": Preset(
        name="B200", gpu="NVIDIA B200 180GB (HGX B200, 8 GPUs per NVSwitch domain)",
        sm_count=148, hbm_capacity=180 * GiB, hbm_bandwidth=7.7 * TB, hbm_kind="HBM3e",
        peak_flops=(("f64", 37e12), ("f32", 75e12), ("tf32", 1.1e15), ("bf16", 2.25e15),
                    ("f16", 2.25e15), ("fp8", 4.5e15), ("fp6", 4.5e15), ("fp4", 9e15),
                    ("int8", 4.5e15)),
        l2_bytes=126 * MiB, smem_per_sm=_SMEM_PER_SM, smem_per_block=_SMEM_PER_BLOCK,
        registers_per_sm=_REGS_PER_SM, nvlink=_NVLINK5, devices_per_domain=8, network=_NETWORK,
        source="NVIDIA HGX B200 datasheet (per-GPU figures); hardware.md",
        estimates=("sm_count", "l2_bytes", "nvlink.latency", "network.latency"),
    ),
    "GB200-NVL72": Preset(
        name="GB200-NVL72", gpu="NVIDIA B200 in GB200 NVL72 (72 GPUs per NVLink Switch domain)",
        sm_count=148, hbm_capacity=186 * GiB, hbm_bandwidth=8 * TB, hbm_kind="HBM3e",
        peak_flops=(("f64", 40e12), ("f32", 80e12), ("tf32", 1.25e15), ("bf16", 2.5e15),
                    ("f16", 2.5e15), ("fp8", 5e15), ("fp6", 5e15), ("fp4", 10e15),
                    ("int8", 5e15)),
        l2_bytes=126 * MiB, smem_per_sm=_SMEM_PER_SM, smem_per_block=_SMEM_PER_BLOCK,
        registers_per_sm=_REGS_PER_SM, nvlink=_NVLINK5, devices_per_domain=72, network=_NETWORK,
        source="NVIDIA GB200 NVL72 datasheet (per-GPU figures); hardware.md",
        estimates=("sm_count", "l2_bytes", "nvlink.latency", "network.latency", "network.bandwidth"),
    ),
}

#: Other spellings of the preset names (matched after lower-casing and dropping ``-``, ``_``,
#: spaces).
ALIASES = {"a100sxm": "A100", "dgxa100": "A100", "h100sxm": "H100", "h200sxm": "H200", "hgxb200": "B200", "gb200": "GB200-NVL72",
           "nvl72": "GB200-NVL72"}


def _key(name: str) -> str:
    return "".join(c for c in name.lower() if c not in "-_ ")


_LOOKUP = {**{_key(n): n for n in PRESETS}, **ALIASES}


def get_preset(name) -> Preset:
    """The preset called ``name`` (case-insensitive; ``-``, ``_`` and spaces ignored; the
    aliases of :data:`ALIASES` accepted), or ``name`` itself when it is a :class:`Preset`
    (SIM-HW-3). An unknown name is a :class:`~tessera_ref.errors.SimError` listing the names."""
    if isinstance(name, Preset):
        return name
    if isinstance(name, str) and _key(name) in _LOOKUP:
        return PRESETS[_LOOKUP[_key(name)]]
    known = ", ".join(PRESETS)
    close = difflib.get_close_matches(_key(name), list(_LOOKUP), n=1) if isinstance(name, str) else []
    hint = f"did you mean {_LOOKUP[close[0]]!r}? " if close else ""
    raise SimError(f"unknown hardware preset {name!r}",
                   fix=f"{hint}use one of {known} (also: {', '.join(sorted(ALIASES))}); "
                       "`tessera-ref sim --presets` prints them")


def presets_table() -> str:
    """The presets as a text table (what ``tessera-ref sim --presets`` prints)."""
    headers = ["preset", "SMs", "HBM", "HBM BW", "TFLOP/s f32", "bf16", "fp8", "fp4", "L2",
               "NVLink (per dir)", "domain", "network (per dir)"]
    rows = []
    for p in PRESETS.values():
        peaks = p.peaks
        rows.append([
            p.name, _mark(p, "sm_count", str(p.sm_count)), f"{p.hbm_capacity / GiB:g} GiB {p.hbm_kind}",
            f"{p.hbm_bandwidth / TB:g} TB/s",
            *(f"{peaks[k] / 1e12:g}" if k in peaks else "-" for k in ("f32", "bf16", "fp8", "fp4")),
            _mark(p, "l2_bytes", f"{p.l2_bytes / MiB:g} MiB"),
            f"{p.nvlink.bandwidth / GB:g} GB/s, {p.nvlink.latency * 1e6:g} us*",
            str(p.devices_per_domain),
            _mark(p, "network.bandwidth", f"{p.network.bandwidth / GB:g} GB/s") + f", {p.network.latency * 1e6:g} us*",
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("-" * len(lines[0]))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("")
    lines += [f"{p.name}: {p.gpu}" for p in PRESETS.values()]
    lines.append("Peak FLOP/s are dense (no structured sparsity), per GPU; bandwidths are per GPU per direction;")
    lines.append("* = estimate, not a datasheet number.")
    lines.append("Sources and every number: docs/spec/sim.md (SIM-HW-2). "
                 "`tessera-ref sim --presets --preset NAME` prints one preset in full.")
    return "\n".join(lines)


def preset_card(preset) -> str:
    """Every number of one preset, with its memory tiers (``tessera-ref sim --presets --preset NAME``)."""
    p = get_preset(preset)

    def star(field: str) -> str:
        return _mark(p, field, "")

    lines = [f"{p.name}: {p.gpu}", f"  source: {p.source}",
             f"  SMs: {p.sm_count}{star('sm_count')}",
             f"  HBM: {p.hbm_capacity / GiB:g} GiB {p.hbm_kind} ({p.hbm_capacity:,} B), {p.hbm_bandwidth / TB:g} TB/s",
             "  dense peak FLOP/s: " + ", ".join(f"{k} {v / 1e12:g} T" for k, v in p.peak_flops),
             f"  L2: {p.l2_bytes / MiB:g} MiB{star('l2_bytes')}; shared memory {p.smem_per_sm // KiB} KiB per SM, "
             f"{p.smem_per_block // KiB} KiB per block; registers {p.registers_per_sm // KiB} KiB per SM",
             f"  {p.nvlink.name}: {p.nvlink.bandwidth / GB:g} GB/s per direction, "
             f"{p.nvlink.latency * 1e6:g} us{star('nvlink.latency')}; {p.devices_per_domain} GPUs per domain",
             f"  {p.network.name}: {p.network.bandwidth / GB:g} GB/s{star('network.bandwidth')} per direction, "
             f"{p.network.latency * 1e6:g} us{star('network.latency')}",
             "  achievable fractions of peak (FLOP/s, HBM): " + (", ".join(
                 f"{k} {c:g}, {m:g}" for k, c, m in p.efficiency) + star("efficiency") if p.efficiency
                 else "none stated (pure roofline)"),
             "", "  memory tiers (seed 000 §3.2, seed 001 §4.2):"]
    headers = ["level", "scope", "Tessera", "capacity", "bandwidth", "latency"]
    rows = [[t.level, t.scope, t.tessera, "-" if t.capacity is None else fmt_bytes(t.capacity),
             "-" if t.bandwidth is None else f"{t.bandwidth / GB:g} GB/s", t.latency] for t in p.memory_tiers]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines.append("    " + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    lines += ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("  * = estimate")
    return "\n".join(lines)



def _mark(p: Preset, field: str, text: str) -> str:
    """``text`` with a ``*`` when ``field`` of ``p`` is an estimate."""
    return text + ("*" if field in p.estimates else "")
