"""Policies whose accum format is not the storage default (f32 storage with bf16 or f16
accum, bf16 with f16, f16 with f64): every operation rounds into that accum format, the
result once into storage (NUM-POL-1 with the op clauses)."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_conformance import clause

from . import _reference as R
from ._cases import check, operand, policy, values
from ._formats import round_values

POLICIES = [("f32", "bf16"), ("f32", "f16"), ("bf16", "f16"), ("f16", "f64"), ("bf16", "f64")]


def _operands(storage, accum, seed=0):
    g = np.random.default_rng(seed)
    x = values(operand(g.standard_normal((3, 100)) * 4, storage))
    w = values(operand(g.standard_normal(100), storage))
    pol = policy(storage, accum)
    return x, w, tuple(tr.asarray(round_values(v, storage), policy=pol) for v in (x, w))


@clause("GRAPH-EW-1", "GRAPH-MATH-1", "GRAPH-SQRT-1", "GRAPH-EXP-1")
@pytest.mark.parametrize("storage,accum", POLICIES)
def test_elementwise_and_math_in_accum(backend, storage, accum):
    """Operands rounded into accum (RNE), one operation there, the result into storage."""
    x, w, (X, W) = _operands(storage, accum)
    xa, wa = R.acc(x, accum), R.acc(w, accum)
    check(backend, lambda a, b: (op.add(a, b), op.div(a, b), op.exp(a), op.sqrt(op.abs(a))), (X, W),
          [round_values(R.add(accum, xa, wa), storage), round_values(R.div(accum, xa, wa), storage),
           round_values(R.math_op("exp", xa, accum), storage), round_values(R.sqrt(accum, np.abs(xa)), storage)])


@clause("GRAPH-SUM-1", "GRAPH-MEAN-1")
@pytest.mark.parametrize("storage,accum", POLICIES)
def test_reductions_in_accum(backend, storage, accum):
    """The 32 lanes and the butterfly add in accum; the mean divides there."""
    x, _, (X, _) = _operands(storage, accum, 1)
    xa = R.acc(x, accum)
    check(backend, lambda a: (op.sum(a, axis=1), op.mean(a, axis=-1)), (X,),
          [round_values(R.lane_sum(accum, xa), storage), round_values(R.lane_mean(accum, xa), storage)])


@clause("GRAPH-SOFTMAX-1", "GRAPH-LAYERNORMSAFE-1", "GRAPH-RMSNORMSAFE-1")
@pytest.mark.parametrize("storage,accum", POLICIES)
def test_normalizations_in_accum(backend, storage, accum):
    """softmax, layernorm and rmsnorm: every step in accum, eps rounded into accum."""
    x, w, (X, W) = _operands(storage, accum, 2)
    xa, wa = R.acc(x, accum), R.acc(w, accum)
    check(backend, lambda a, b: (op.softmax(a), op.layernorm_safe(a, b), op.rmsnorm_safe(a, b)), (X, W),
          [round_values(R.softmax(accum, xa), storage), round_values(R.layernorm(accum, xa, wa), storage),
           round_values(R.rmsnorm(accum, xa, wa), storage)])


@clause("GRAPH-MATMUL-1")
@pytest.mark.parametrize("storage", ["f16", "bf16"])
def test_matmul_with_f64_accum(backend, storage):
    """accum = f64: the canonical dot's fma in f64, one rounding into storage at the end."""
    x, _, (X, _) = _operands(storage, "f64", 3)
    k = values(operand(np.random.default_rng(4).standard_normal((100, 4)), storage))
    K = tr.asarray(round_values(k, storage), policy=policy(storage, "f64"))
    check(backend, op.matmul, (X, K), round_values(R.matmul("f64", x, k), storage))
