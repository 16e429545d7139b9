"""The printed IR is MLIR that upstream tools read: ``mlir-opt --allow-unregistered-dialect``
parses printed modules (floats with a ``.``, non-finite floats in hexadecimal with their
type, ``loc("file":line:col)``). Skipped when ``mlir-opt`` is not installed (on PATH, or
named by ``TESSERA_MLIR_OPT``); modules use MLIR's builtin element types (f32, f16, bf16,
index, i1) since Tessera's own formats and ``#policy``/``#shard`` are not MLIR builtins."""
from __future__ import annotations

import math
import os
import shutil
import subprocess

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.ir import Module, TensorType, func_op, parse_module, return_op

MLIR_OPT = os.environ.get("TESSERA_MLIR_OPT") or shutil.which("mlir-opt")
pytestmark = pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt is not installed")


def _mlir_opt(text: str, tmp_path) -> str:
    path = tmp_path / "m.mlir"
    path.write_text(text)
    done = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect", "--mlir-print-debuginfo", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _traced_texts():
    def f(x, w):
        return op.layernorm_safe(op.matmul(x, w) * 2.0, axis=-1).sum(axis=0)

    g = tr.jit(f)
    g(np.ones((4, 8), np.float32), np.ones((8, 4), np.float32))
    return [g.inspect_ir(level) for level in ("graph", "tile")]


@pytest.mark.parametrize("level", [0, 1])
def test_mlir_opt_reads_a_traced_program(level, tmp_path):
    out = _mlir_opt(_traced_texts()[level], tmp_path)
    assert '"tessera.module"' in out


def test_mlir_opt_reads_non_finite_tiny_and_exponent_floats_and_locations(tmp_path):
    module = Module()
    func = module.body.append(func_op("f", (), (), location="model.py:58"))
    func.attributes["values"] = (1e-06, 5e-324, 1e300, -0.0, math.inf, -math.inf, math.nan)
    func.regions[0].entry.append(return_op(location="model.py:59"))
    text = str(module)
    assert parse_module(text).body.first_op.location == "model.py:58" and str(parse_module(text)) == text
    out = _mlir_opt(text, tmp_path)
    assert 'loc("model.py":58:0)' in out
    for hex_bits in ("0x7FF0000000000000", "0xFFF0000000000000", "0x7FF8000000000000"):
        assert hex_bits in out
