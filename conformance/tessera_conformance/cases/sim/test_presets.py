"""SIM-HW-1 … SIM-HW-4: the hardware presets, their numbers, names and memory tiers."""
import dataclasses

import pytest

from tessera_ref import sim
from tessera_ref.errors import SimError
from tessera_conformance import clause, oracle_only

from ._reference import GB, GiB, PRESETS, REGISTERS_PER_SM, SMEM_PER_BLOCK, SMEM_PER_SM

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the simulated machine's model (presets, costs, timelines, memory, reports) is the "
                      "library's; no backend computes it")

NAMES = list(PRESETS)


@LIBRARY
@clause("SIM-HW-1")
def test_presets_are_immutable_and_hold_dense_per_direction_numbers(backend):
    """The presets; frozen; peaks are half the sparsity figures; NVLink β is half the
    bidirectional datasheet figure; the network is one NIC per GPU (400 Gb/s; the DGX A100's
    200 Gb/s HDR); HBM is binary GiB."""
    assert sorted(sim.PRESETS) == sorted(NAMES)
    h100 = sim.get_preset("H100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        h100.sm_count = 1
    assert h100.peaks["bf16"] == 1979e12 / 2 and h100.peaks["fp8"] == 3958e12 / 2  # "with sparsity" halved
    assert h100.peaks["f64"] == 67e12  # the FP64 tensor-core rate, not the 34 TF vector rate
    assert 2 * h100.nvlink.bandwidth == 900 * GB and 2 * sim.get_preset("B200").nvlink.bandwidth == 1800 * GB
    for name in NAMES:
        p = sim.get_preset(name)
        assert p.network.bandwidth * 8 == (200e9 if name == "A100" else 400e9)
        assert p.hbm_capacity % GiB == 0
        assert set(p.peaks) <= {"f64", "f32", "tf32", "bf16", "f16", "fp8", "fp6", "fp4", "int8"}


@LIBRARY
@pytest.mark.parametrize("name", NAMES)
@clause("SIM-HW-2")
def test_the_numbers_of_the_table(backend, name):
    """Every number of SIM-HW-2's column for the preset."""
    want, p = PRESETS[name], sim.get_preset(name)
    assert p.sm_count == want["sms"] and p.hbm_capacity == want["hbm"] and p.hbm_bandwidth == want["hbm_bw"]
    assert p.peaks == pytest.approx(want["peaks"], rel=1e-12) and set(p.peaks) == set(want["peaks"])
    assert p.l2_bytes == want["l2"]
    assert (p.smem_per_sm, p.smem_per_block, p.registers_per_sm) == (*want.get("smem", (SMEM_PER_SM, SMEM_PER_BLOCK)),
                                                                     REGISTERS_PER_SM)
    assert (p.nvlink.bandwidth, p.nvlink.latency, p.devices_per_domain) == (want["nvlink"], want["nvlink_alpha"],
                                                                          want["domain"])
    assert (p.network.bandwidth, p.network.latency) == (want["network"], want["network_alpha"])


@LIBRARY
@pytest.mark.parametrize("name, estimates", [
    ("A100", {"nvlink.latency", "network.latency", "efficiency"}),
    ("H100", {"nvlink.latency", "network.latency"}),
    ("H200", {"nvlink.latency", "network.latency"}),
    ("B200", {"sm_count", "l2_bytes", "nvlink.latency", "network.latency"}),
    ("GB200-NVL72", {"sm_count", "l2_bytes", "nvlink.latency", "network.latency", "network.bandwidth"}),
])
@clause("SIM-HW-2")
def test_estimates_are_marked(backend, name, estimates):
    """The numbers the table marks *est.* are the preset's estimates (starred in the listing)."""
    p = sim.get_preset(name)
    assert set(p.estimates) == estimates
    assert "*" in sim.preset_card(name) and "estimate" in sim.presets_table()


@LIBRARY
@pytest.mark.parametrize("spelling, name", [
    ("h100", "H100"), ("H 200", "H200"), ("b_200", "B200"), ("gb200_nvl72", "GB200-NVL72"),
    ("GB200 NVL72", "GB200-NVL72"), ("gb200-nvl72", "GB200-NVL72"), ("nvl72", "GB200-NVL72"),
    ("gb200", "GB200-NVL72"), ("h100sxm", "H100"), ("H200-SXM", "H200"), ("hgxb200", "B200"),
])
@clause("SIM-HW-3")
def test_names_and_aliases(backend, spelling, name):
    """Lookup ignores case, ``-``, ``_`` and spaces; the aliases name their presets."""
    assert sim.get_preset(spelling).name == name
    assert sim.Machine(spelling, 1).preset.name == name


@LIBRARY
@clause("SIM-HW-3")
def test_an_unknown_name_lists_the_presets(backend):
    """An unknown name is an error listing the presets."""
    with pytest.raises(SimError) as info:
        sim.get_preset("H800")
    text = str(info.value) + (info.value.fix or "")
    assert all(name in text for name in NAMES)


@LIBRARY
@pytest.mark.parametrize("name", NAMES)
@clause("SIM-HW-4")
def test_memory_tiers(backend, name):
    """The seeds' table with the preset's own capacities, bandwidths and latencies."""
    want, tiers = PRESETS[name], sim.get_preset(name).memory_tiers
    assert len(tiers) == 6
    regs, smem, l2, hbm, nvlink, network = tiers
    assert "register" in regs.level and regs.capacity == REGISTERS_PER_SM and regs.bandwidth is None
    assert "shared" in smem.level and smem.capacity == want.get("smem", (SMEM_PER_SM,))[0] and smem.bandwidth is None
    assert "L2" in l2.level and l2.capacity == want["l2"] and l2.bandwidth is None
    assert hbm.level.startswith("HBM") and (hbm.capacity, hbm.bandwidth) == (want["hbm"], want["hbm_bw"])
    assert nvlink.capacity is None and nvlink.bandwidth == want["nvlink"] and str(want["domain"]) in nvlink.scope
    assert network.capacity is None and network.bandwidth == want["network"]
    assert "1-2" in regs.latency and "20" in smem.latency and "200" in l2.latency
    assert "200" in hbm.latency and "1000" in hbm.latency
    assert "1 us" in nvlink.latency.replace("µ", "u") and "5 us" in network.latency.replace("µ", "u")


@LIBRARY
@pytest.mark.parametrize("name", NAMES)
@clause("SIM-HW-5")
def test_achievable_fractions(backend, name):
    """Only a preset that states fractions has them (the A100: tensor-core ops 0.8 of peak,
    every op 0.9 of HBM); the others run every op class at the full peaks."""
    p = sim.get_preset(name)
    for op_class in ("tensor_core", "other"):
        assert p.fractions(op_class) == PRESETS[name].get("fractions", {}).get(op_class, (1.0, 1.0))
