"""NUM-TC-1: the ``tc:sm90`` model against an H200's bits (no GPU needed).

``tests/cuda/data/h200_mma_2026-11-28.npz`` holds ``mma.sync`` results read back from an H200
(its README says how): m16n8k16 on bf16/f16 and m16n8k32 on e4m3/e5m2, random and hand-made
operands, ``C`` zero, random or special. Every case is replayed through ``tc.mma`` and must
give the device's bits (a NaN: a NaN, whatever its payload). The device is the independent
check here; the alternatives of the fp8 structure are replayed too, and each must disagree
with the device somewhere (the data tells them apart).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tessera_ref.numerics import tc

from cuda_programs import MMA_DTYPES, h200_cases


def _differing(model, fmt: str) -> tuple[int, int, int]:
    """``(outputs that differ, outputs, cases)`` of ``model`` against the device's ``fmt`` data."""
    bad = total = cases = 0
    for _, a, b, c, d in h200_cases(fmt):
        got = tc.mma(a, b, c, model)
        same = np.where(np.isnan(d), np.isnan(got), got.view(np.uint32) == d.view(np.uint32))
        bad, total, cases = bad + int((~same).sum()), total + d.size, cases + 1
    return bad, total, cases


@pytest.mark.parametrize("fmt", sorted(MMA_DTYPES))
def test_tc_sm90_gives_every_h200_output_bit_for_bit(fmt):
    bad, total, cases = _differing("tc:sm90", fmt)
    assert cases == 67 and total == 31616, (cases, total)  # 12 random, 55 hand-made cases of 16·8 .. 64·32
    assert bad == 0, f"{bad} of {total} {fmt} outputs differ from the H200's"
    assert fmt in tc.model("tc:sm90").validated


def _variant(**change):
    """``tc:sm90`` with its fp8 instruction changed."""
    base = tc.model("tc:sm90")
    fp8 = dataclasses.replace(base.block("fp8_e4m3"), **change)
    return dataclasses.replace(base, name="tc:sm90-variant",
                               formats=tuple((f, fp8 if f.startswith("fp8") else b) for f, b in base.formats))


@pytest.mark.parametrize("name, change", [
    ("first and second half of k instead of k mod 4", dict(order=())),
    ("C entering the first block instead of an f32 add after", dict(fadd=False)),
    ("the published model: one block of 32, 14 bits", dict(products=32, align_bits=-10, order=(), emin=None)),
])
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_the_h200_refutes_the_other_fp8_structures(fmt, name, change):
    bad, total, _ = _differing(_variant(**change), fmt)
    assert bad >= 500, (name, fmt, bad, total)  # 573 .. 23,436 of 31,616


def test_the_h200_data_cannot_tell_e4m3s_own_exponent_floor():
    """e4m3's own floor −6 gives the same bits as f16's −14 (the inputs are converted to f16),
    as it must: every product and every block result from +0 is a multiple of 2^−18, and the
    floor moves ``E`` only when a subnormal input is in the block's largest product, so
    ``E ≤ −6 + 8``, where sm_90's grid ``2^(E−25)`` cuts nothing (NUM-TC-1)."""
    assert _differing(_variant(emin=None), "fp8_e4m3")[0] == 0
