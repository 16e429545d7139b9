"""CUDA-TUNE-1: the CUDA backend's autotuning rejects configurations over the register
budget or with spills, by ptxas's numbers; the others are ranked as the interpreter ranks them."""
import numpy as np
import pytest

from cuda_programs import needs_toolchain
from tessera_ref.backends.cuda.compile import build
from tessera_ref.backends.cuda.fake_cupy import FakeCupy
from tessera_ref.backends.cuda.runtime import CudaBackend
from tessera_ref.backends.cuda.source import render
from tessera_ref.backends.cuda.tune import register_screen
from tessera_ref.errors import AutotuneError
from tessera_ref.ir import tile as T
from tessera_ref.lowering.autotune import autotune_kernel

pytestmark = needs_toolchain


def _variant(fn):
    """A 32-lane kernel y = fn(x) (``copy``: y = x)."""
    kb = T.KernelBuilder("k", [("x", T.buffer((32,), "f32")), ("y", T.buffer((32,), "f32"), True)])
    x, y = kb.params
    v = kb.load(x, [kb.lane_id()])
    kb.store(y, [kb.lane_id()], v if fn == "copy" else kb.unary(fn, v))
    return kb.finish()


PROBLEM = dict(args=[np.ones(32, np.float32), np.zeros(32, np.float32)], grid=1, lanes=32)


def test_a_configuration_over_the_register_budget_is_rejected_with_ptxas_numbers():
    variants = [({"fn": "sin"}, _variant("sin")), ({"fn": "copy"}, _variant("copy"))]
    regs = {c["fn"]: build(render(m), "sm_90").kernels["k"].registers for c, m in variants}
    assert regs["copy"] < 16 < regs["sin"]  # the budget below lies between them
    result = CudaBackend(cupy=FakeCupy("90")).autotune(variants, PROBLEM, max_registers=16, progress=False,
                                                       cache=False)
    by_fn = {t.config["fn"]: t for t in result.trials}
    assert result.best == {"fn": "copy"} and by_fn["copy"].reason is None
    assert f"uses {regs['sin']} registers" in by_fn["sin"].reason and "budget of 16" in by_fn["sin"].reason


def test_every_configuration_rejected_is_an_autotune_error():
    with pytest.raises(AutotuneError, match="registers"):
        autotune_kernel([({"fn": "exp"}, _variant("exp"))], PROBLEM, screen=register_screen("sm_80", 8),
                        progress=False, cache=False)


def test_within_budget_the_ranking_is_the_interpreters():
    variants = [({"fn": "exp"}, _variant("exp")), ({"fn": "copy"}, _variant("copy"))]
    screened = autotune_kernel(variants, PROBLEM, screen=register_screen("sm_90", 255), progress=False, cache=False)
    plain = autotune_kernel(variants, PROBLEM, progress=False, cache=False)
    assert screened.best == plain.best and all(t.reason is None for t in screened.trials)
    assert [t.seconds for t in screened.trials] == [t.seconds for t in plain.trials]
