"""NUM-POL-1 … NUM-POL-3: policies, their spelling, tensor annotations.

On the backend a policy shows in the bits: the accumulation format of a sum, the rounding of
the conversion into storage, and — under the ``canonical`` and ``exact`` modes — the absence
of any rounding-changing rewrite. The objects themselves (defaults, validation, spelling,
annotations) are checked in the oracle's library.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tessera_ref import numerics, op
from tessera_ref.errors import TesseraError
from tessera_ref.numerics import Policy, Tensor, accum, bf16, f16, f32, f64, fp4, fp6, fp8
from tessera_conformance import assert_bits, clause, eager, oracle_only, run

from . import _ref_convert as R


def _lane_sum(values, acc):
    lanes = []
    for lane in range(32):
        s = -0.0
        for v in values[lane::32]:
            s = R.add(s, v, acc)
        lanes.append(s)
    for off in (16, 8, 4, 2, 1):
        lanes = [R.add(lanes[i], lanes[i ^ off], acc) for i in range(32)]
    return lanes[0]


def _values(storage: str, n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [R.round_value(float(v), storage) for v in rng.standard_normal(n) * 10.0 ** rng.uniform(-2, 2, n)]


def _array(values, storage):
    return R.codes_to_array([R.code_of(v, storage) for v in values], storage)


@clause("NUM-POL-1")
@pytest.mark.parametrize("storage,default_accum", [("f16", "f32"), ("bf16", "f32"), ("fp8_e4m3", "f32"),
                                                   ("f32", "f32"), ("f64", "f64")])
def test_default_accum_shows_in_a_sum(backend, storage, default_accum):
    """A sum accumulates in f32 for storage narrower than 32 bits and in the storage format
    otherwise; an explicit ``accum`` is followed (f16/bf16 accumulation, f64 for f32, f32 for
    f64 — where the bits show it)."""
    rows = [_values(storage, 300, 10 * r + len(storage)) for r in range(4)]
    x = _array([v for r in rows for v in r], storage).reshape(4, 300)
    want = R.codes_to_array([R.round_code(_lane_sum(r, default_accum), storage) for r in rows], storage)
    assert_bits(run(backend, lambda v: op.sum(v, axis=1), x), want, f"default accum of {storage}")
    other = {"f16": "f16", "bf16": "bf16", "fp8_e4m3": "f16", "f32": "f64", "f64": "f32"}[storage]
    policy = Policy(numerics.get_format(storage), accum=numerics.get_format(other))
    got = run(backend, lambda v: op.sum(op.cast(v, policy), axis=1), x)
    want2 = R.codes_to_array([R.round_code(_lane_sum([R.round_value(v, other) for v in r], other), storage)
                              for r in rows], storage)
    assert_bits(got, want2, f"{storage} with accum {other}")
    if storage != "fp8_e4m3":  # (e4m3's 3 mantissa bits hide the accum on these inputs)
        assert not np.array_equal(want.view(np.uint8), want2.view(np.uint8)), "the inputs do not show the accum"


@clause("NUM-POL-1", "NUM-POL-2")
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rup", "rdown"])
@pytest.mark.parametrize("overflow", ["native", "saturate"])
def test_policy_rounding_and_overflow_reach_the_storage(backend, rounding, overflow):
    """``fp8 @accum(f32, rounding=…, overflow=…)``: the result of an op in that policy is the
    f32 value converted with that rounding and overflow."""
    policy = fp8 @ accum(f32, rounding=rounding, overflow=overflow)
    a = [v for v in R.all_values("fp8_e4m3") if not math.isnan(v)]
    b = list(reversed(a))
    x, y = _array(a, "fp8_e4m3"), _array(b, "fp8_e4m3")
    got = run(backend, lambda u, v: op.mul(op.cast(u, policy), op.cast(v, policy)), x, y)
    want = R.codes_to_array([R.round_code(R.mul(u, v, "f32"), "fp8_e4m3", rounding, overflow) for u, v in zip(a, b)],
                            "fp8_e4m3")
    assert_bits(got, want, f"e4m3 mul {rounding}/{overflow}")


def _attention(q, k, v):
    return op.matmul(op.softmax(op.matmul(q, k, transpose_b=True), axis=-1), v)


@clause("NUM-POL-1")
@pytest.mark.parametrize("mode", ["canonical", "exact"])
def test_no_rounding_changing_rewrite_outside_reassociate(backend, mode):
    """Under ``canonical`` and ``exact`` a traced matmul–softmax–matmul has the bits of the
    three ops run one by one (no fusion into flash attention, no reassociation)."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 40, 16)).astype(np.float32) * 3 for _ in range(3))
    policy = Policy(f32, reduction=mode)

    def traced(a, b, c):
        return _attention(op.cast(a, policy), op.cast(b, policy), op.cast(c, policy))

    stepwise = eager(backend, traced, q, k, v)
    assert_bits(run(backend, traced, q, k, v), stepwise, f"attention under {mode}")


@oracle_only("numerics.Policy has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-POL-1")
def test_policy_fields_and_validation(backend):
    p = Policy(fp6)
    assert (p.storage, p.accum, p.rounding, p.overflow, p.scaling, p.reduction) == (
        numerics.get_format("fp6_e2m3"), f32, "rne", "native", "none", "canonical")
    assert Policy(f64).accum is f64 and Policy(f32).accum is f32 and Policy(bf16).accum is f32
    assert Policy(numerics.int8).accum is f32
    for accum_format in (f16, bf16, f32, f64):
        assert Policy(fp8, accum=accum_format).accum is accum_format
    for scaling, storage in (("mx", fp8), ("mx", fp6), ("mx", fp4), ("nvfp4", fp4), ("per_tensor", bf16),
                             ("delayed", fp8), ("none", f32)):
        assert Policy(storage, scaling=scaling).scaling == scaling
    for bad in (dict(storage=fp8, accum=fp8), dict(storage=fp8, accum=numerics.int8), dict(storage=bf16, scaling="mx"),
                dict(storage=fp8, scaling="nvfp4"), dict(storage=f32, reduction="fast"),
                dict(storage=f32, rounding="nearest"), dict(storage=f32, overflow="wrap"), dict(storage="fp7")):
        with pytest.raises(TesseraError):
            Policy(**bad)
    for mode in ("canonical", "exact", "reassociate"):
        assert Policy(f32, reduction=mode).reduction == mode


@oracle_only("numerics.accum has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-POL-2")
def test_spelling(backend):
    assert fp6 @ accum(numerics.fp32) == Policy(numerics.get_format("fp6_e2m3"), accum=f32)
    p = fp8 @ accum(f32, rounding="stochastic", overflow="saturate", reduction="exact")
    assert (p.storage.name, p.accum, p.rounding, p.overflow, p.reduction) == ("fp8_e4m3", f32, "stochastic",
                                                                              "saturate", "exact")
    assert numerics.get_format("bf16") @ accum(f64) == Policy(bf16, accum=f64)
    with pytest.raises(TesseraError):
        accum(f32, colour="red")


@oracle_only("numerics.Tensor has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-POL-3")
def test_annotations(backend):
    """``Tensor["B", "D", fp6 @accum(fp32)]``: dimensions (ints or identifiers bound on first
    use) and a policy, a format or a string naming one as the last item; ``f32[n]`` is the same
    annotation with the default policy."""
    t = Tensor["B", "D", fp6 @ accum(numerics.fp32)]
    assert t.dims == ("B", "D") and t.policy == Policy(fp6, accum=f32) and t.symbols == ("B", "D")
    assert Tensor["B", 128, "fp32"].policy == Policy(f32) and Tensor["B", 128, bf16].policy == Policy(bf16)
    assert Tensor["B", 64].policy is None and Tensor["B", 64].dims == ("B", 64)
    n = "n"
    assert f32[n] == Tensor[n, f32] and f32[n].policy == Policy(f32)
    env = t.bind((4, 7))
    assert env == {"B": 4, "D": 7}
    u = Tensor["B", "B"]
    assert u.bind((3, 3)) == {"B": 3}
    for shape in ((3, 4), (3,)):
        with pytest.raises(TesseraError):
            u.bind(shape)
    with pytest.raises(TesseraError):
        Tensor["B", "D", f32].bind((5, 7), {"B": 4})
    for bad in ("not an identifier", -1, 2.5):
        with pytest.raises(TesseraError):
            Tensor[bad, f32]
