"""Validate the tensor-core model (NUM-TC-2/3) on a GPU: device ``mma.sync`` bits = ``tc.mma``.

A standalone kernel (one warp per 16×8 output tile), compiled by the pinned NVRTC with the
device header and launched by CuPy, feeds f16/bf16 operands through the header's wrappers of
``mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32`` with the PTX fragment
layout (g = lane >> 2, t = lane & 3: A a0,a1 = (g, 2t..2t+1), a2,a3 = (g+8, …), a4..a7 the
same at columns +8; B b0,b1 = (k = 2t..2t+1, n = g), b2,b3 = k + 8; C/D c0,c1 = (g, 2t..),
c2,c3 = (g+8, 2t..)), walking K in steps of 16 with the accumulator carried in registers,
and compares every output's bits with the model for the device's architecture (NaN: NaN).

The GPU tests carry the ``gpu`` marker and skip without CuPy or a device. The kernels are
also compiled without a GPU (the SASS must hold HMMA), so a typo shows up in CI. fp8 inputs go
through ``m16n8k32`` on sm_90. These kernels measured tests/cuda/data/h200_mma_2026-11-28.npz
on an H200 (test_tc_h200_data.py replays it without a GPU). Not covered yet: f16 accumulation,
sm_70's ``m8n8k4``.
"""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref.backends.cuda.compile import build
from tessera_ref.gpucheck import mma
from tessera_ref.gpucheck.device import Context
from tessera_ref.numerics import tc

from cuda_programs import needs_toolchain

DTYPES, FP8_KERNELS, KERNELS, MODELS = mma.DTYPES, mma.FP8_KERNELS, mma.KERNELS, mma.MODELS


@needs_toolchain
@pytest.mark.parametrize("arch, source", [("sm_80", KERNELS), ("sm_90", KERNELS + FP8_KERNELS)])
def test_the_validation_kernels_compile_to_hmma(arch, source):
    """The header's mma.sync wrappers, compiled by the pinned NVRTC (no GPU needed): one
    HMMA.16816.F32(.BF16) per m16n8k16 on both architectures; on sm_90 each fp8 m16n8k32 two
    f16 HMMA.16816.F32 and FADDs of C — the structure of NUM-TC-1's fp8 row."""
    b = build(source, arch)
    for fmt in ("bf16", "f16"):
        sass = b.kernels[f"tsr_tc_mma_{fmt}"].sass
        assert sum(n for o, n in sass.items() if o.startswith("HMMA.16816.F32")) >= 1, sass
    if arch == "sm_90":
        for fmt in ("e4m3", "e5m2"):
            sass = b.kernels[f"tsr_tc_mma_fp8_{fmt}"].sass
            hmma = sum(n for o, n in sass.items() if o.startswith("HMMA.16816.F32"))
            assert hmma >= 2 and sass.get("FADD", 0) >= 4, sass


def _device_model():
    cupy = pytest.importorskip("cupy")
    if not cupy.cuda.is_available():
        pytest.skip("no CUDA device")
    cc = cupy.cuda.Device().compute_capability
    key = (int(cc[:-1]), int(cc[-1]))
    if key not in MODELS:
        pytest.skip(f"no tensor-core model for sm_{cc} (NUM-TC-1 has sm_80 and sm_90)")
    return cupy, MODELS[key]


def _on_device(cupy, fmt: str, a, b, c, tmp_path):
    ctx = Context(dry_run=False, quick=False, out=str(tmp_path))
    return mma.on_device(ctx, mma.kernel_of(ctx, fmt), fmt, a, b, c)


def _assert_model_bits(got, want, what, bound=None):
    """NaN where the model has NaN; within twice NUM-TC-4's bound of the model (both are
    within it of the exact sum); then the same bits."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaN positions differ"
    if bound is not None:
        finite = np.isfinite(want)
        far = np.abs(got[finite].astype(np.float64) - want[finite]) > 2 * bound[finite]
        assert not far.any(), f"{what}: {far.sum()} outputs lie outside the NUM-TC-4 bound"
    g, w = got[~nan].view(np.uint32), want[~nan].view(np.uint32)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{what}: {bad.size} of {g.size} outputs differ from the model; first: device "
                           f"{g[bad[0]]:08x}, model {w[bad[0]]:08x}")


_targeted = mma.targeted


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", sorted(DTYPES))
def test_targeted_vectors_match_the_model(fmt, tmp_path):
    cupy, model = _device_model()
    if fmt.startswith("fp8") and model != "tc:sm90":
        pytest.skip(f"{model} has no fp8 model (NUM-TC-1)")
    for a, b in _targeted(fmt, 32):
        for c0 in mma.TARGET_C:
            c = np.full((16, 8), c0, np.float32)
            _assert_model_bits(_on_device(cupy, fmt, a, b, c, tmp_path), tc.mma(a, b, c, model), f"{model} {fmt} c={c0}")


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "f16"])
@pytest.mark.parametrize("K", [16, 64, 512])
def test_random_vectors_match_the_model(fmt, K, tmp_path):
    cupy, model = _device_model()
    rng = np.random.default_rng(K)
    for trial in range(4):
        spread = [0, 4, 8, 12][trial] if fmt == "bf16" else [0, 2, 4, 6][trial]
        a = (rng.standard_normal((64, K)) * 2.0 ** rng.integers(-spread, spread + 1, (64, K))).astype(DTYPES[fmt])
        b = (rng.standard_normal((K, 32)) * 2.0 ** rng.integers(-spread, spread + 1, (K, 32))).astype(DTYPES[fmt])
        c = rng.standard_normal((64, 32)).astype(np.float32)
        _assert_model_bits(_on_device(cupy, fmt, a, b, c, tmp_path), tc.mma(a, b, c, model), f"{model} {fmt} K={K} #{trial}",
                           bound=tc.error_bound(a, b, c, model))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("K", [32, 128])
def test_fp8_random_vectors_match_the_model(fmt, K, tmp_path):
    cupy, model = _device_model()
    if model != "tc:sm90":
        pytest.skip(f"{model} has no fp8 model (NUM-TC-1)")
    rng = np.random.default_rng(K + 8)
    for trial in range(4):
        a = (rng.standard_normal((32, K)) * 2.0 ** rng.integers(-3, 4, (32, K))).astype(DTYPES[fmt])
        b = (rng.standard_normal((K, 16)) * 2.0 ** rng.integers(-3, 4, (K, 16))).astype(DTYPES[fmt])
        c = (rng.standard_normal((32, 16)) if trial % 2 else np.zeros((32, 16))).astype(np.float32)
        _assert_model_bits(_on_device(cupy, fmt, a, b, c, tmp_path), tc.mma(a, b, c, model), f"{model} {fmt} K={K} #{trial}",
                           bound=tc.error_bound(a, b, c, model))
