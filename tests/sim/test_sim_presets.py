"""Hardware presets against the numbers of ../shared/reference/hardware.md and the datasheets,
typed in by hand (SIM-HW-1 … SIM-HW-4)."""
import dataclasses

import pytest

from tessera_ref.errors import SimError
from tessera_ref.sim import PRESETS, Preset, get_preset

GiB, MiB, KiB = 2**30, 2**20, 2**10


def test_the_presets_exist():
    assert list(PRESETS) == ["A100", "H100", "H200", "B200", "GB200-NVL72"]


# hardware.md, "Typical hardware numbers": H100 SXM 132 SMs, 80 GB HBM3 ~3.35 TB/s, NVLink
# 900 GB/s per GPU, ~989 TFLOP/s dense bf16, 50 MB L2; 227 KB of shared memory per block (sm_90).
def test_h100_matches_hardware_md():
    p = get_preset("H100")
    assert p.sm_count == 132
    assert p.hbm_capacity == 80 * GiB
    assert p.hbm_bandwidth == 3.35e12
    assert 2 * p.nvlink.bandwidth == 900e9  # bidirectional datasheet figure = 2 x per direction
    assert p.peaks["bf16"] == pytest.approx(989e12, rel=1e-3)
    assert p.l2_bytes == 50 * MiB
    assert p.smem_per_block == 227 * KiB and p.smem_per_sm == 228 * KiB
    assert p.devices_per_domain == 8


def test_h100_dense_peaks_are_half_the_datasheet_sparsity_figures():
    # H100 SXM5 datasheet: TF32 989, BF16/FP16 1,979, FP8/INT8 3,958 TF "with sparsity";
    # FP32 67, FP64 Tensor Core 67 TF.
    p = get_preset("H100").peaks
    assert p["tf32"] == 989e12 / 2 and p["bf16"] == p["f16"] == 1979e12 / 2
    assert p["fp8"] == p["int8"] == 3958e12 / 2
    assert p["f32"] == 67e12 and p["f64"] == 67e12
    assert "fp4" not in p and "fp6" not in p


def test_h200_is_h100_with_more_and_faster_hbm():
    # hardware.md: "H200: 141 GB HBM3e ~4.8 TB/s, otherwise as H100".
    h100, h200 = get_preset("H100"), get_preset("H200")
    assert h200.hbm_capacity == 141 * GiB and h200.hbm_bandwidth == 4.8e12
    for field in ("sm_count", "peak_flops", "l2_bytes", "smem_per_sm", "nvlink", "devices_per_domain", "network"):
        assert getattr(h200, field) == getattr(h100, field), field


# hardware.md: "B200 / GB200 NVL72: 72 GPUs in one NVLink domain, NVLink 1.8 TB/s per GPU,
# HBM3e ~8 TB/s, 186-192 GB per GPU".
def test_gb200_matches_hardware_md():
    p = get_preset("GB200-NVL72")
    assert p.devices_per_domain == 72
    assert 2 * p.nvlink.bandwidth == 1.8e12
    assert p.hbm_bandwidth == 8e12
    assert 186 * GiB <= p.hbm_capacity <= 192 * GiB
    # GB200 NVL72 datasheet per GPU, "with sparsity": FP4 20, FP8/FP6 10, BF16 5, TF32 2.5 PF
    assert p.peaks["fp4"] == 20e15 / 2 and p.peaks["fp8"] == p.peaks["fp6"] == 10e15 / 2
    assert p.peaks["bf16"] == 5e15 / 2 and p.peaks["tf32"] == 2.5e15 / 2
    assert p.peaks["f32"] == 80e12 and p.peaks["f64"] == 40e12


def test_b200_matches_the_hgx_datasheet_and_hardware_md_roughly():
    p = get_preset("B200")
    assert 2 * p.nvlink.bandwidth == 1.8e12 and p.devices_per_domain == 8
    assert p.hbm_bandwidth == pytest.approx(8e12, rel=0.05)  # hardware.md "~8 TB/s"; datasheet 7.7
    assert p.hbm_capacity == 180 * GiB  # HGX B200 datasheet (hardware.md's 192 GB is the package)
    # HGX B200 datasheet per GPU, "with sparsity": FP4 18, FP8/FP6 9, BF16 4.5, TF32 2.2 PF
    assert p.peaks["fp4"] == 18e15 / 2 and p.peaks["fp6"] == 9e15 / 2 and p.peaks["bf16"] == 4.5e15 / 2
    assert p.peaks["tf32"] == 2.2e15 / 2 and p.peaks["f32"] == 75e12 and p.peaks["f64"] == 37e12


def test_network_tier_is_400_gbit_per_gpu_and_slower_than_nvlink():
    for p in PRESETS.values():  # the DGX A100 has one 200 Gb/s HDR adapter per GPU
        assert p.network.bandwidth * 8 == (200e9 if p.name == "A100" else 400e9)
        assert p.network.bandwidth < p.nvlink.bandwidth and p.network.latency > p.nvlink.latency


@pytest.mark.parametrize("name,expected", [
    ("h100", "H100"), ("H200", "H200"), ("b200", "B200"), ("GB200-NVL72", "GB200-NVL72"),
    ("gb200_nvl72", "GB200-NVL72"), ("GB200 NVL72", "GB200-NVL72"), ("nvl72", "GB200-NVL72"),
    ("NVL72", "GB200-NVL72"), ("gb200", "GB200-NVL72"), ("h100-sxm", "H100"),
])
def test_lookup_by_name_and_alias(name, expected):
    assert get_preset(name).name == expected


def test_unknown_preset_lists_the_names():
    with pytest.raises(SimError) as info:
        get_preset("H800")
    text = str(info.value)
    assert "'H800'" in text
    for name in PRESETS:
        assert name in text
    assert __file__ in text  # the user's line


def test_presets_are_frozen_and_hashable():
    p = get_preset("H100")
    assert get_preset(p) is p
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.sm_count = 1
    assert len({p, get_preset("H200"), get_preset("h100")}) == 2


def test_estimates_name_real_fields():
    for p in PRESETS.values():
        for path in p.estimates:
            obj = p
            for part in path.split("."):
                obj = getattr(obj, part)  # raises if the estimate names no field


def test_memory_tiers_follow_the_seeds_table():
    p = get_preset("GB200-NVL72")
    tiers = p.memory_tiers
    assert [t.level for t in tiers][:3] == ["registers", "shared memory", "L2 cache"]
    assert tiers[0].capacity == 256 * KiB and tiers[1].capacity == 228 * KiB
    hbm = tiers[3]
    assert hbm.level.startswith("HBM") and hbm.capacity == p.hbm_capacity and hbm.bandwidth == p.hbm_bandwidth
    assert tiers[4].bandwidth == p.nvlink.bandwidth and "72" in tiers[4].scope
    assert tiers[5].bandwidth == p.network.bandwidth
    assert isinstance(p, Preset)


def test_a100_numbers_are_the_datasheets():
    """A100 SXM4 80GB in a DGX A100 (SIM-HW-2): dense peaks are the datasheet's sparsity
    figures halved, links per direction are half the bidirectional totals."""
    p = get_preset("a100-sxm")
    assert (p.name, p.sm_count, p.hbm_capacity, p.hbm_bandwidth) == ("A100", 108, 80 * 2**30, 2.039e12)
    assert p.peaks == {"f64": 19.5e12, "f32": 19.5e12, "tf32": 312e12 / 2, "bf16": 624e12 / 2,
                       "f16": 624e12 / 2, "int8": 1248e12 / 2}
    assert p.nvlink.bandwidth == 600e9 / 2 and p.devices_per_domain == 8
    assert p.network.bandwidth * 8 == 200e9  # 8 x 200 Gb/s HDR per 8-GPU node
    assert p.l2_bytes == 40 * 2**20 and p.smem_per_sm == 164 * KiB and p.smem_per_block == 163 * KiB
    assert get_preset("DGX A100") is p


def test_only_a_preset_that_opts_in_has_achievable_fractions():
    assert get_preset("A100").fractions("tensor_core") == (0.8, 0.9)
    assert get_preset("A100").fractions("other") == (1.0, 0.9)
    assert "efficiency" in get_preset("A100").estimates
    for name in ("H100", "H200", "B200", "GB200-NVL72"):
        assert get_preset(name).efficiency == ()
        assert get_preset(name).fractions("tensor_core") == (1.0, 1.0)
