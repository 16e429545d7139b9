"""Roofline op times (SIM-ROOF-1, SIM-ROOF-2)."""
import pytest

from tessera_ref.errors import FormatError, SimError
from tessera_ref.numerics import Policy, fp6, fp8_e5m2
from tessera_ref.ops import Cost
from tessera_ref.sim import Machine, peak_key, roofline


def test_large_bf16_matmul_on_h100_is_compute_bound():
    flops, nbytes = 2 * 8192**3, 3 * 8192 * 8192 * 2
    r = roofline(Cost(flops, nbytes), "bf16", "H100")
    assert r.bound == "compute" and r.peak_key == "bf16"
    assert r.compute_time == pytest.approx(1099511627776 / 989.5e12)
    assert r.memory_time == pytest.approx(402653184 / 3.35e12)
    assert r.time == r.compute_time


def test_elementwise_add_is_memory_bound():
    n = 2**20  # f32 add: n flops, 3 n * 4 bytes
    r = roofline(Cost(n, 12 * n), "f32", "H100")
    assert r.bound == "memory"
    assert r.time == pytest.approx(12582912 / 3.35e12)


def test_launch_overhead_is_added_once():
    r = roofline((0, 0), "f32", "H100", launch_overhead=3e-6)
    assert r.time == 3e-6 and r.bound == "memory"


@pytest.mark.parametrize("preset,dtype,key", [
    ("H100", "fp4", "fp8"),           # no fp4 on Hopper: the next wider rate it has
    ("H100", "fp6_e3m2", "fp8"),
    ("B200", "fp4_e2m1", "fp4"),
    ("B200", fp6, "fp6"),
    ("H100", fp8_e5m2, "fp8"),
    ("H100", "tf32", "tf32"),
    ("H100", "int4", "int8"),
    ("GB200-NVL72", Policy(fp6, accum="f32"), "fp6"),
    ("H100", "float32", "f32"),
])
def test_which_peak(preset, dtype, key):
    assert peak_key(preset, dtype) == key


def test_fp4_on_h100_takes_the_fp8_time():
    assert roofline((1e15, 0), "fp4", "H100").time == pytest.approx(1e15 / 1979e12)
    assert roofline((1e15, 0), "fp4", "GB200-NVL72").time == pytest.approx(1e15 / 10e15)


def test_bad_inputs():
    with pytest.raises(SimError, match="scale format"):
        roofline((1, 1), "e8m0", "H100")
    with pytest.raises(FormatError):
        roofline((1, 1), "fp7", "H100")
    with pytest.raises(SimError):
        roofline((-1, 1), "f32", "H100")
    with pytest.raises(SimError):
        roofline((float("nan"), 1), "f32", "H100")
    with pytest.raises(SimError):
        roofline(5, "f32", "H100")
    with pytest.raises(SimError):
        roofline((1, 1), "f32", "H100", launch_overhead=-1)


def test_achievable_fractions_scale_peak_and_bandwidth_per_op_class():
    """SIM-ROOF-3 on the A100 (tensor-core ops 0.8 of peak, every op 0.9 of HBM): a bf16
    matmul of 312 GFLOP takes 1 ms at peak, 1.25 ms at 0.8; an add moving 2.039 GB takes 1 ms
    at the full bandwidth, 1/0.9 ms at 0.9."""
    gemm, add = Cost(312e9, 0), Cost(0, 2.039e9)
    assert roofline(gemm, "bf16", "A100").time == pytest.approx(1e-3)  # pure roofline: no op named
    assert roofline(gemm, "bf16", "A100", op="matmul").time == pytest.approx(1.25e-3)
    assert roofline(gemm, "bf16", "A100", op="flash_attention").peak_flops == pytest.approx(0.8 * 312e12)
    assert roofline(add, "bf16", "A100", op="add").time == pytest.approx(1e-3 / 0.9)
    assert roofline(gemm, "bf16", "A100", op="add").time == pytest.approx(1e-3)  # "other" keeps the full peak
    # a preset that states no fractions is pure roofline whatever the op
    assert roofline(Cost(989.5e9, 0), "bf16", "H100", op="matmul").time == pytest.approx(1e-3)


def test_the_machine_charges_fractions_unless_told_pure_roofline():
    gemm = Cost(312e9, 0)
    assert Machine("A100", 1).record_compute(0, "matmul", gemm, "bf16").time == pytest.approx(1.25e-3)
    assert Machine("A100", 1, efficiency=False).record_compute(0, "matmul", gemm, "bf16").time == pytest.approx(1e-3)
    with pytest.raises(SimError, match="efficiency must be True or False"):
        Machine("A100", 1, efficiency="yes")
