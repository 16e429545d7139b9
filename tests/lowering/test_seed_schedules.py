"""The seeds' schedule forms, run as the seeds print them (SCHED-IR-1, SCHED-FE-1..3).

Seed 001's Schedule IR ``prefetch`` line and its ``with schedule.pipeline(double_buffer=True)``
example, seed 003's ``@op.kernel`` bodies (§3.2, §3.3) and its top-level FlashAttention
schedule (§3.6). The texts are in :mod:`schedule_helpers`; only the arrays and the calls are
supplied around them. Data are small integers, so every product and sum is exact in f32 and
float64 NumPy is an independent reference for the bits.
"""
import numpy as np
from lowering_helpers import assert_same_bits
from schedule_helpers import (SEED_001_PIPELINE, SEED_001_PREFETCH, SEED_003_FLASH, SEED_003_MATMUL,
                              SEED_003_VEC_ADD, as_kernel_body, run_snippets)

from tessera_ref.ir import parse_module, verify
from tessera_ref.lowering import schedule_to_tile


def _ints(rng, shape):
    return rng.integers(-8, 9, shape).astype(np.float32)


def _exact(*arrays):
    """The float64 value of an expression over integer-valued arrays, rounded to f32 (exact)."""
    return lambda f: f(*(a.astype(np.float64) for a in arrays)).astype(np.float32)


def test_seed_001_prefetch_text_parses_verifies_and_lowers():
    module = parse_module(SEED_001_PREFETCH)
    verify(module)
    text = str(module)
    assert 'double_buffer = true, scope = "shared"' in text
    assert str(parse_module(text)) == text  # printed form round-trips byte for byte
    rng = np.random.default_rng(1)
    a, b = _ints(rng, (128, 64)), _ints(rng, (64, 128))
    (got,), reports = schedule_to_tile(module).run(a, b, checks=True)
    assert_same_bits([got], [_exact(a, b)(np.matmul)])
    assert reports[0].findings == []
    assert reports[0].counters.smem_wavefronts == reports[0].counters.smem_ideal_wavefronts  # padding=1


CALL_GEMM = '''
A = rng.integers(-8, 9, (64, 32)).astype(np.float32)
B = rng.integers(-8, 9, (32, 64)).astype(np.float32)
C = gemm(A, B)
defaults_after = schedule.defaults()
'''


def test_seed_001_pipeline_runs_verbatim_in_an_op_kernel(tmp_path):
    body = as_kernel_body(SEED_001_PIPELINE, "@op.kernel\ndef gemm(A, B):", "return C_tile\n")
    out = run_snippets(tmp_path, body, CALL_GEMM)
    gemm, A, B = out["gemm"], out["A"], out["B"]
    assert_same_bits([np.asarray(out["C"].data)], [_exact(A, B)(np.matmul)])
    assert gemm.reports[0].findings == []
    sched = gemm.inspect_ir("schedule")
    assert sched.count('"tessera.schedule.prefetch"') == 2 and 'double_buffer = true, scope = "shared"' in sched
    assert "stages = 2" in sched and "async_copy = true" in sched and "shared = true" in sched
    assert '"tessera.tile.cp_async_wait"() {pending = 0}' in gemm.inspect_ir("tile")  # the 2-stage pipeline
    assert out["defaults_after"] == {}  # the kernel's directives stay in the kernel


def test_seed_001_pipeline_runs_verbatim_at_top_level(tmp_path):
    arrays = '''
A = rng.integers(-8, 9, (16, 8)).astype(np.float32)
B = rng.integers(-8, 9, (8, 4)).astype(np.float32)
'''
    inside = "with schedule.pipeline(double_buffer=True):\n    inside = schedule.defaults()\n"
    out = run_snippets(tmp_path, arrays, SEED_001_PIPELINE, inside, "defaults = schedule.defaults()\n")
    assert_same_bits([np.asarray(out["C_tile"].data)], [_exact(out["A"], out["B"])(np.matmul)])
    # at top level the directives are the defaults inside the block, restored after it (SCHED-FE-2)
    assert out["inside"] == {"shared": True, "async_copy": True, "stages": 2}
    assert out["defaults"] == {}


CALLS_003 = '''
A = rng.integers(-8, 9, (256, 256)).astype(np.float32)
B = rng.integers(-8, 9, (256, 256)).astype(np.float32)
C = rng.integers(-8, 9, (256, 256)).astype(np.float32)
D = np.zeros((256, 256), np.float32)
S = vec_add(A, B, D)
M = matmul(A, B, C)
schedule_text = matmul.inspect_ir("schedule")
target_text = matmul.inspect_ir("target")
defaults = schedule.defaults()
'''


def test_seed_003_snippets_run_as_written(tmp_path):
    out = run_snippets(tmp_path, SEED_003_VEC_ADD, SEED_003_MATMUL, SEED_003_FLASH, CALLS_003)
    A, B, C, D = out["A"], out["B"], out["C"], out["D"]
    assert_same_bits([D, np.asarray(out["S"].data)], [A + B, A + B])  # C[:] = A + B wrote the caller's array
    assert_same_bits([np.asarray(out["M"].data)], [_exact(A, B, C)(lambda a, b, c: a @ b + c)])
    vec_add, matmul = out["vec_add"], out["matmul"]
    assert vec_add.reports[0].grid == (128,)  # 65536 elements / (128 lanes x 4)
    assert 'vectorize = 4' in vec_add.inspect_ir("schedule")
    assert matmul.reports[0].counters.smem_conflict_wavefronts == 0  # padding=1
    assert "Compiled by NVRTC" in out["target_text"]
    # §3.6 ran after the kernels were defined; the kernels were traced at their first call,
    # with §3.6's defaults under their own directives
    text = out["schedule_text"]
    assert 'padding = 1' in text and 'tile = [128, 128, 32]' in text and 'stages = 3' in text
    assert out["defaults"] == {"tile": [128, 128, 64], "shared": True, "padding": 1, "async_copy": True,
                               "stages": 3}
