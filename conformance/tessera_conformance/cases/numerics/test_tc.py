"""NUM-RED-5, NUM-TC-1 … NUM-TC-6: the tensor-core policies and their block-FMA model.

A backend that runs a matmul under ``accum="tc:…"`` must give the model's bits. The reference
below restates NUM-TC-2/3 in exact rationals, one output at a time: per block, the largest
exponent ``E`` (inputs clamped at their floor: the format's smallest normal exponent, fp8 on
sm_90 f16's), each term chopped toward zero to a multiple of ``2^(E − 23 − α)``, the exact sum
rounded toward zero to f32; for fp8 on sm_90, per 32 k, the blocks of the k with k mod 4 in
{0, 1} and of the rest from +0, then C plus that rounded to nearest even in f32. The operands
hold rows built so that the model and the fma chain of NUM-RED-1 round differently even after
the result is rounded into storage.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import numerics, op
from tessera_ref.errors import LoweringError, PolicyError
from tessera_conformance import assert_bits, clause, oracle_only, run

from . import _ref_convert as R
from ._common import fp8_structure_rows

# (model, storage) -> (products per block, extra alignment bits, the inputs' exponent floor)
_TABLE = {("tc:sm70", "f16"): (4, 0, -14), ("tc:sm80", "f16"): (8, 1, -14), ("tc:sm80", "bf16"): (8, 1, -126),
          ("tc:sm90", "f16"): (16, 2, -14), ("tc:sm90", "bf16"): (16, 2, -126),
          ("tc:sm90", "fp8_e4m3"): (16, 2, -14), ("tc:sm90", "fp8_e5m2"): (16, 2, -14)}
# the instructions that add C after their blocks, by one f32 addition (NUM-TC-1: fp8 on sm_90)
_FADD = {("tc:sm90", "fp8_e4m3"), ("tc:sm90", "fp8_e5m2")}


def _e(q: Fraction, lo: int) -> int:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    e = e if Fraction(2) ** e <= q else e - 1
    return max(e, lo)


def _ref_blocks(acc: float, groups, a_row, b_col, alpha: int, emin: int) -> float:
    """The blocks of k ``groups`` onto the f32 ``acc`` (NUM-TC-2/3, finite operands)."""
    bits = 24 + min(alpha, 0)
    for ks in groups:
        pairs = [(Fraction(a_row[k]), Fraction(b_col[k])) for k in ks if a_row[k] and b_col[k]]
        terms = [x * y for x, y in pairs] + ([Fraction(acc)] if acc else [])
        exps = [_e(abs(x), emin) + _e(abs(y), emin) for x, y in pairs] + ([_e(abs(Fraction(acc)), -126)] if acc else [])
        if not terms:
            acc = 0.0
            continue
        unit = Fraction(2) ** (max(exps) - 23 - alpha)
        s = sum(((abs(t) // unit) * unit * (1 if t > 0 else -1) for t in terms), Fraction(0))
        if s == 0:
            acc = 0.0
            continue
        quantum = Fraction(2) ** (max(_e(abs(s), -1000), -126) - bits + 1)
        acc = math.copysign(float((abs(s) // quantum) * quantum), s)
    return acc


def _ref_dot(a_row, b_col, model: str, storage: str, c: float = 0.0) -> float:
    """One f32 output of NUM-TC-3 (finite operands and results)."""
    n, alpha, emin = _TABLE[(model, storage)]
    K = len(a_row)
    if (model, storage) not in _FADD:
        return _ref_blocks(c, [range(k0, min(k0 + n, K)) for k0 in range(0, K, n)], a_row, b_col, alpha, emin)
    acc = c
    for i0 in range(0, K, 32):
        ks = range(i0, min(i0 + 32, K))
        part = _ref_blocks(0.0, [[k for k in ks if k % 4 < 2], [k for k in ks if k % 4 >= 2]], a_row, b_col,
                           alpha, emin)
        acc = R.add(acc, part, "f32")  # the f32 add: the exact sum rounded once to nearest even
    return acc


def _operands(model: str, storage: str, m: int, k: int, n: int, seed: int):
    """Random operands of ``storage``; row 0 · column 0 is six products 1.5·2^-(24+α), then
    half an ulp of 1 in storage, then 1. The model truncates the six (0.75 of its unit
    2^-(23+α)) and lands on a storage tie, rounded to even (down); the fma chain keeps
    9·2^-(25+α) ≥ 0.56 f32 ulp, rounds 1 + half ulp up in f32, and then up in storage."""
    rng = np.random.default_rng(seed)
    dtype = numerics.get_format(storage).dtype
    alpha = _TABLE[(model, storage)][1]
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    half_ulp = 2.0 ** -8 if storage == "bf16" else 2.0 ** -11
    a[0, :8] = [1.5 * 2.0 ** -14] * 6 + [half_ulp, 1.0]  # f16 normals; bf16 too
    b[:8, 0] = [2.0 ** -(10 + alpha)] * 6 + [1.0, 1.0]
    b[8:, 0] = 0.0
    return a, b


def _reference(a, b, model, storage, c=None):
    f = [[_ref_dot([float(x) for x in a[i]], [float(y) for y in b[:, j]], model, storage,
                   0.0 if c is None else float(c[i, j]))
          for j in range(b.shape[1])] for i in range(a.shape[0])]
    return R.codes_to_array([R.round_code(v, storage, "rne", "native") for row in f for v in row],
                            storage).reshape(a.shape[0], b.shape[1])


@clause("NUM-RED-5", "NUM-TC-2", "NUM-TC-3", "NUM-TC-6")
@pytest.mark.parametrize("model, storage", [("tc:sm80", "bf16"), ("tc:sm80", "f16"), ("tc:sm90", "bf16"),
                                            ("tc:sm70", "f16")])
def test_matmul_under_a_tc_policy_is_the_block_fma_model(backend, model, storage):
    """``matmul`` under ``accum=model``: the model's f32 result rounded once into storage;
    the canonical fma chain gives other bits on the adversarial row."""
    a, b = _operands(model, storage, 16, 64, 16, seed=len(storage) + int(model[-2:]))
    policy = numerics.Policy(storage, accum=model)
    want = _reference(a, b, model, storage)
    got = run(backend, lambda x, y: op.matmul(x, y), tr.asarray(a, policy=policy), tr.asarray(b, policy=policy))
    assert_bits(got, want, f"{model} {storage} matmul")
    chain = run(backend, lambda x, y: op.matmul(x, y), a, b)  # NUM-RED-1 rounds row 0 differently
    assert not np.array_equal(np.asarray(chain).view(np.uint8), want.view(np.uint8))


@clause("NUM-TC-1", "NUM-TC-3", "NUM-TC-6")
@pytest.mark.parametrize("storage", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_gemm_under_tc_sm90_is_two_f16_blocks_and_an_f32_add(backend, storage):
    """``gemm`` of fp8 under ``tc:sm90``: per 32 k, a block over k mod 4 in {0, 1} and one over
    the rest from +0, then C added in f32 to nearest even; rounded once into storage."""
    rng = np.random.default_rng(12)
    dtype = numerics.get_format(storage).dtype
    a = (rng.standard_normal((16, 96)) * 2.0 ** rng.integers(-4, 5, (16, 96))).astype(dtype)
    b, c = rng.standard_normal((96, 16)).astype(dtype), rng.standard_normal((16, 16)).astype(dtype)
    if storage == "fp8_e5m2":
        fp8_structure_rows(a, b, c)
    policy = numerics.Policy(storage, accum="tc:sm90")
    want = _reference(a, b, "tc:sm90", storage, c)
    got = run(backend, lambda x, y, z: op.gemm(x, y, z), *(tr.asarray(v, policy=policy) for v in (a, b, c)))
    assert_bits(got, want, f"tc:sm90 {storage} gemm")
    if storage == "fp8_e5m2":
        assert [float(want[i, i]) for i in range(3)] == [20480.0, 16384.0, 2.0 ** -16]


@clause("NUM-TC-3")
def test_special_values_decide_the_whole_output(backend):
    """A NaN or 0·inf product gives NaN, +inf with −inf NaN, one infinity that infinity."""
    policy = numerics.Policy("f16", accum="tc:sm80")
    a = np.ones((4, 16), np.float16)
    b = np.ones((16, 4), np.float16)
    a[0, 3], b[3, 0] = np.inf, 0.0            # (0, 0): inf·0 -> NaN
    a[1, 5] = np.inf                           # (1, *): +inf
    a[2, 1], a[2, 9] = np.inf, -np.inf         # (2, *): NaN
    a[3, 15] = np.nan                          # (3, *): NaN
    got = np.asarray(run(backend, lambda x, y: op.matmul(x, y), tr.asarray(a, policy=policy),
                         tr.asarray(b, policy=policy))).astype(np.float64)
    assert math.isnan(got[0, 0]) and got[1].tolist() == [math.inf] * 4
    assert np.isnan(got[2]).all() and np.isnan(got[3]).all() and got[0, 1:].tolist() == [math.inf] * 3


@oracle_only("the model table (numerics.tc) has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-TC-1", "NUM-TC-5")
def test_the_model_table(backend):
    """The library's models carry the spec's parameters; each instruction's K holds whole blocks."""
    from tessera_ref.numerics import tc

    for (name, storage), (n, alpha, emin) in _TABLE.items():
        blk = tc.model(name).block(storage)
        assert (blk.products, blk.align_bits, blk.floor(storage)) == (n, alpha, emin), (name, storage)
        assert blk.instruction_k % n == 0 and blk.fadd == ((name, storage) in _FADD)
        fp8 = storage.startswith("fp8")
        assert blk.k_order == (tuple(k for k in range(32) if k % 4 < 2) + tuple(k for k in range(32) if k % 4 > 1)
                               if fp8 else tuple(range(blk.instruction_k)))
    assert sorted(tc.MODELS) == ["tc:sm70", "tc:sm80", "tc:sm90"]


@oracle_only("tc.mma (numerics.tc) has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-TC-4")
def test_the_model_is_within_the_stated_bound(backend):
    """|D − exact| ≤ ((1+ε)^R − 1)·T + R(1+ε)^R·2^-126 on random sums of mixed magnitude (R
    rounding steps: blocks, and f32 adds where C is added after them)."""
    from tessera_ref.numerics import tc

    rng = np.random.default_rng(4)
    for (name, storage), (n, alpha, emin) in _TABLE.items():
        dtype = numerics.get_format(storage).dtype
        a = (rng.standard_normal((3, 80)) * 2.0 ** rng.integers(-4, 5, (3, 80))).astype(dtype)
        b = rng.standard_normal((80, 3)).astype(dtype)
        c = rng.standard_normal((3, 3)).astype(np.float32)
        d = tc.mma(a, b, c, name)
        eps = Fraction(n + 1, 2 ** (23 + alpha)) + Fraction(1, 2 ** (23 + min(alpha, 0)))
        # rounding steps: the blocks, and where C is added after them each add (80 = 32 + 32 + 16,
        # both blocks of each instruction holding products)
        blocks = 2 + 2 + 2 + 3 if (name, storage) in _FADD else -(-80 // n)
        for i in range(3):
            for j in range(3):
                lift = [max(abs(Fraction(float(x))), Fraction(2) ** emin) for x in a[i]]
                lift_b = [max(abs(Fraction(float(y))), Fraction(2) ** emin) for y in b[:, j]]
                total = abs(Fraction(float(c[i, j]))) + sum((x * y for x, y in zip(lift, lift_b)), Fraction(0))
                exact = Fraction(float(c[i, j])) + sum((Fraction(float(x)) * Fraction(float(y))
                                                        for x, y in zip(a[i], b[:, j])), Fraction(0))
                bound = ((1 + eps) ** blocks - 1) * total + blocks * (1 + eps) ** blocks * Fraction(2) ** -126
                assert abs(Fraction(float(d[i, j])) - exact) <= bound, (name, storage, i, j)


@oracle_only("the matmul kernel family's K-tile check has no backend entry point; the case checks the oracle's "
             "numerics library")
@clause("NUM-TC-5")
def test_lowering_refuses_a_k_tile_that_splits_blocks(backend):
    """A K tile that is not a multiple of the instruction's K is a LoweringError."""
    from tessera_ref.lowering import lower

    policy = numerics.Policy("fp8_e4m3", accum="tc:sm90")
    x = tr.asarray(np.ones((32, 64), numerics.get_format("fp8_e4m3").dtype), policy=policy)
    y = tr.asarray(np.ones((64, 32), numerics.get_format("fp8_e4m3").dtype), policy=policy)
    g = tr.jit(lambda p, q: op.matmul(p, q))
    with pytest.raises(LoweringError, match="splits the k = 32 instructions"):
        lower(g.trace(x, y), dict(tile=(16, 16, 16)))


@clause("NUM-TC-6")
def test_other_ops_compute_as_under_f32_accumulation(backend):
    """Under a tc policy a sum is the canonical f32 sum (NUM-RED-2), as under ``accum=f32``."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 100)).astype(numerics.get_format("bf16").dtype)
    tc_policy = numerics.Policy("bf16", accum="tc:sm80")
    got = run(backend, lambda v: op.sum(v, axis=-1), tr.asarray(x, policy=tc_policy))
    want = run(backend, lambda v: op.sum(v, axis=-1), x)
    assert_bits(got, want, "sum under tc:sm80 vs under accum=f32")


@oracle_only("Policy construction has no backend entry point; the case checks the oracle's numerics library")
@clause("NUM-TC-6")
@pytest.mark.parametrize("kwargs", [dict(storage="f32", accum="tc:sm80"), dict(storage="bf16", accum="tc:sm70"),
                                    dict(storage="bf16", accum="tc:sm80", reduction="exact"),
                                    dict(storage="bf16", accum="tc:sm42")])
def test_policy_refusals(backend, kwargs):
    """Unknown models, storage the instruction does not take and reduction='exact' are PolicyErrors."""
    with pytest.raises(PolicyError):
        numerics.Policy(**kwargs)
    assert str(numerics.Policy("bf16", accum="tc:sm80")) == "bf16 @accum(tc:sm80)"
